//! Telling people, end to end: a real Alertmanager (built from its Go module) receives the alert
//! when a policy fails over and its resolution when it fails back; a webhook receiver gets one
//! signed CloudEvent per transition, at least once, with the same id across a change of leader
//! made between the transition and the delivery; a sink the admin does not allow is never
//! contacted; a sink that never answers delays nobody else's failover or delivery; and the
//! history in the status, read by `kubectl failover history`, neither loses nor repeats an entry.

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use failover_core::api::{
    FailoverPolicy, HistoryEntry, NotificationsSpec, SecretKeyRef, WebhookSink,
    conditions::{NOTIFIED, notified},
};

use crate::support::{
    self, AlertmanagerServer, ControllerProcess, ON_EAST, ON_WEB, PolicyBuilder, Received, TestEnv,
    WAIT, WEB_BACKENDS, condition, election_args, kubectl_failover, test_env, wait_until,
};

/// The signing key the tests' Secrets hold.
const KEY: &str = "s3cret-signing-key";

/// The usual policy, its transitions sent to `url` signed with the Secret `hook-key`.
fn with_webhook(url: &str) -> PolicyBuilder {
    PolicyBuilder::web().spec(|s| {
        s.notifications = Some(NotificationsSpec {
            webhooks: vec![WebhookSink {
                url: url.to_string(),
                secret_ref: SecretKeyRef {
                    name: "hook-key".into(),
                    key: "key".into(),
                },
            }],
            ..NotificationsSpec::default()
        })
    })
}

fn signing_secret(env: &TestEnv) {
    let literal = format!("--from-literal=key={KEY}");
    support::ok(
        &env.kubectl(&["create", "secret", "generic", "hook-key", &literal]),
        "the signing key's Secret",
    );
    // The Secret lends its key to the policy `web`, as its owner consents.
    support::ok(
        &env.kubectl(&[
            "annotate",
            "secret",
            "hook-key",
            "failover.dev/policies=web",
        ]),
        "the Secret's consent",
    );
}

fn history(p: &FailoverPolicy) -> Vec<HistoryEntry> {
    p.status
        .as_ref()
        .map(|s| s.history.clone())
        .unwrap_or_default()
}

fn ids(p: &FailoverPolicy) -> Vec<u64> {
    history(p).iter().map(|e| e.id).collect()
}

/// Checks one event as a receiver would: the CloudEvents 1.0 binary-mode headers, and the
/// signature over the body under the key. Returns its id.
fn verified(event: &Received, ns: &str, uid: &str) -> String {
    let header = |name| {
        event
            .header(name)
            .unwrap_or_else(|| panic!("no {name} header in {:?}", event.headers))
    };
    assert_eq!(event.method, "POST");
    assert_eq!(header("ce-specversion"), "1.0");
    assert_eq!(
        header("ce-source"),
        format!("/apis/failover.dev/v1alpha1/namespaces/{ns}/failoverpolicies/web")
    );
    assert!(header("ce-type").starts_with("dev.failover.policy."));
    assert_eq!(header("content-type"), "application/json");
    let mut mac = Hmac::<Sha256>::new_from_slice(KEY.as_bytes()).expect("a key");
    mac.update(&event.body);
    let expected: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(header("x-failover-signature"), format!("sha256={expected}"));
    let body: serde_json::Value = serde_json::from_slice(&event.body).expect("a JSON body");
    assert_eq!(body["namespace"], ns);
    assert_eq!(body["policy"], "web");
    let id = header("ce-id").to_string();
    assert_eq!(id, format!("{uid}-{}", body["id"]));
    id
}

#[tokio::test]
async fn alertmanager_receives_the_alert_on_failover_and_its_resolution_on_failback() {
    let Some(env) = test_env!() else { return };
    let alertmanager = AlertmanagerServer::start(env.cp).await;
    let _c = env
        .with_controller(&[
            "--alertmanager-url",
            &alertmanager.url,
            "--alert-resend-interval",
            "2s",
        ])
        .await;
    env.apply(&PolicyBuilder::web());
    env.wait_weights("web", &ON_WEB, WAIT).await;
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let fired = wait_until(WAIT, || async {
        alertmanager
            .firing("FailoverPolicyFailedOver", "web")
            .is_some()
    })
    .await;
    assert!(
        fired,
        "no alert in Alertmanager: {:?}",
        alertmanager.alerts()
    );
    let alert = alertmanager
        .firing("FailoverPolicyFailedOver", "web")
        .expect("the alert");
    let labels = &alert["labels"];
    assert_eq!(labels["namespace"], env.ns.as_str());
    assert_eq!(labels["severity"], "warning");
    assert_eq!(labels["reason"], "FailedOver");
    let summary = alert["annotations"]["summary"].as_str().unwrap_or_default();
    assert!(
        summary.contains("goes to web-east") && !summary.contains('\n'),
        "{summary}"
    );

    env.set_endpoints("web", 1, 0).await;
    env.wait_weights("web", &ON_WEB, WAIT).await;
    let resolved = wait_until(WAIT, || async {
        alertmanager
            .firing("FailoverPolicyFailedOver", "web")
            .is_none()
    })
    .await;
    assert!(
        resolved,
        "the alert is still active: {:?}",
        alertmanager.alerts()
    );
}

#[tokio::test]
async fn each_transition_reaches_the_webhook_signed_once_per_id_across_a_change_of_leader() {
    let Some(env) = test_env!() else { return };
    env.ready_backends(&WEB_BACKENDS).await;
    signing_secret(&env);
    // The receiver refuses at first: the first transition is not delivered before the leader
    // goes.
    let receiver = support::WebhookReceiver::answering(503);
    let mut args = election_args(&env.ns);
    args.extend([
        "--notification-allowed-urls".to_string(),
        receiver.url.clone(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let first = ControllerProcess::start(&env, &args);
    env.apply(&with_webhook(&receiver.url));
    env.wait_weights("web", &ON_WEB, WAIT).await;
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let policy = env
        .wait_policy("web", WAIT, "one history entry", |p| ids(p) == [1])
        .await;
    let uid = policy.metadata.uid.clone().expect("a uid");
    let entry = &history(&policy)[0];
    assert_eq!(
        (entry.transition.as_str(), entry.trigger.as_str()),
        ("FailedOver", "readiness of web (not ready)")
    );
    assert_eq!(entry.from, "web=1,web-east=0,web-west=0");
    assert_eq!(entry.to, "web=0,web-east=1,web-west=0");
    let tried = wait_until(WAIT, || async { receiver.count() >= 1 }).await;
    assert!(tried, "the sink was never tried");
    assert_eq!(
        policy.status.as_ref().and_then(|s| s.notified_through),
        None,
        "nothing is acknowledged yet"
    );

    // A change of leader between the transition and its delivery.
    let second = ControllerProcess::start(&env, &args);
    drop(first);
    receiver.set_status(200);
    env.wait_policy("web", WAIT, "entry 1 acknowledged", |p| {
        p.status.as_ref().and_then(|s| s.notified_through) == Some(1)
    })
    .await;
    env.set_endpoints("web", 1, 0).await;
    env.wait_weights("web", &ON_WEB, WAIT).await;
    let settled = env
        .wait_policy("web", WAIT, "entry 2 acknowledged", |p| {
            p.status.as_ref().and_then(|s| s.notified_through) == Some(2)
        })
        .await;
    assert_eq!(ids(&settled), [1, 2], "no entry lost or repeated");
    assert_eq!(history(&settled)[0], *entry, "the first entry as recorded");

    let events = receiver.received();
    let unique: BTreeSet<String> = events.iter().map(|e| verified(e, &env.ns, &uid)).collect();
    let expected: BTreeSet<String> = [format!("{uid}-1"), format!("{uid}-2")].into();
    assert_eq!(unique, expected, "one id per transition");
    let types: Vec<&str> = events.iter().filter_map(|e| e.header("ce-type")).collect();
    assert!(
        types.contains(&"dev.failover.policy.failedback"),
        "{types:?}"
    );
    support::figure(format!(
        "webhook: {} posts for 2 transitions across a change of leader, 2 distinct ids",
        events.len()
    ));

    // `kubectl failover history`, as a table and as JSON.
    let table = kubectl_failover(&env, &["history", "web"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(table.status.success(), "{text}");
    assert!(
        text.contains("FailedOver") && text.contains("FailedBack") && text.contains("TRIGGER"),
        "{text}"
    );
    let json = kubectl_failover(&env, &["history", "web", "-o", "json"]);
    let read: Vec<HistoryEntry> = serde_json::from_slice(&json.stdout).expect("the history");
    assert_eq!(read, history(&settled));
    drop(second);
}

#[tokio::test]
async fn a_sink_the_admin_does_not_allow_is_never_contacted_and_the_policy_says_so() {
    let Some(env) = test_env!() else { return };
    signing_secret(&env);
    let receiver = support::WebhookReceiver::answering(200);
    let _c = env
        .with_controller(&[
            "--notification-allowed-urls",
            "http://127.0.0.1:1/only-this",
        ])
        .await;
    env.apply(&with_webhook(&receiver.url));
    env.wait_weights("web", &ON_WEB, WAIT).await;
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let policy = env
        .wait_policy(
            "web",
            WAIT,
            "Notified=False and the failover recorded",
            |p| condition(p, NOTIFIED).is_some_and(|c| c.0 == "False") && ids(p) == [1],
        )
        .await;
    let (_, reason, message) = condition(&policy, NOTIFIED).expect("the condition");
    assert_eq!(reason, notified::WEBHOOK_NOT_ALLOWED);
    assert!(
        message.contains("spec.notifications.webhooks[0].url") && !message.contains("only-this"),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(receiver.count(), 0, "a refused sink was contacted");
}

/// The quiet namespace's primary fails: how long until its route moved, and until its sink
/// had the entry `id`; then it fails back, its two entries acknowledged.
async fn quiet_failover(
    quiet: &TestEnv,
    sink: &support::WebhookReceiver,
    id: u64,
) -> [Duration; 2] {
    let received = sink.count();
    let started = Instant::now();
    quiet.set_endpoints("web", 0, 1).await;
    quiet.wait_weights("web", &ON_EAST, WAIT).await;
    let failover = started.elapsed();
    let delivered = wait_until(WAIT, || async { sink.count() > received }).await;
    let delivery = started.elapsed();
    assert!(delivered, "the quiet namespace's entry {id} never arrived");
    quiet.set_endpoints("web", 1, 0).await;
    quiet.wait_weights("web", &ON_WEB, WAIT).await;
    quiet
        .wait_policy("web", WAIT, "its entries acknowledged", |p| {
            p.status.as_ref().and_then(|s| s.notified_through) == Some(id + 1)
        })
        .await;
    [failover, delivery]
}

#[tokio::test]
async fn a_sink_that_never_answers_delays_no_other_namespaces_failover_or_delivery() {
    let Some(stuck) = TestEnv::dedicated("stuck-webhook").await else {
        return;
    };
    let quiet = TestEnv::on(stuck.cp, "quiet-webhook")
        .await
        .expect("a second namespace");
    let silent = support::WebhookReceiver::silent();
    let answering = support::WebhookReceiver::answering(200);
    for env in [&stuck, &quiet] {
        env.ready_backends(&WEB_BACKENDS).await;
        signing_secret(env);
    }
    let allowed = format!("{},{}", silent.url, answering.url);
    let _c =
        ControllerProcess::start_cluster_wide(&stuck, &["--notification-allowed-urls", &allowed]);
    stuck.tenant().apply(&with_webhook(&silent.url).yaml());
    quiet.tenant().apply(&with_webhook(&answering.url).yaml());
    for env in [&stuck, &quiet] {
        env.wait_weights("web", &ON_WEB, WAIT).await;
    }
    // The quiet namespace alone first: its figures without a sink that never answers.
    let [failover_alone, delivery_alone] = quiet_failover(&quiet, &answering, 1).await;

    stuck.set_endpoints("web", 0, 1).await;
    stuck.wait_weights("web", &ON_EAST, WAIT).await;
    let holding = wait_until(WAIT, || async { silent.count() >= 1 }).await;
    assert!(holding, "the silent sink was never tried");
    let [failover, delivery] = quiet_failover(&quiet, &answering, 3).await;
    assert!(
        silent.count() >= 1,
        "the silent sink still holds its namespace's sender"
    );
    support::figure(format!(
        "another namespace's failover and its event's arrival after the readiness change: {failover_alone:.1?} and {delivery_alone:.1?} alone, {failover:.1?} and {delivery:.1?} while a sink of one namespace never answers"
    ));
}
