//! Faults against a real control plane: API server and etcd outages, the controller's own crash,
//! denied writes, and the namespace deleted under the policies. Each test waits a bounded time
//! and asserts the final state; convergence times are printed for the record.

use std::time::{Duration, Instant};

use failover_core::api::{
    FailoverPolicy, Output, Phase,
    conditions::{READY, ready},
};

use crate::support::{
    self, ControllerProcess, LONG_WAIT, ON_EAST, ON_WEB, ON_WEST, PolicyBuilder, TestEnv,
    WEB_BACKENDS, condition_reason, metric, metric_sum, phase, test_env, wait_until, weights,
};

fn ready_reason(p: &FailoverPolicy) -> Option<String> {
    condition_reason(p, READY)
}

fn component_action(env: &TestEnv, action: &str, name: &str) {
    let dir = env.cp.dir.to_str().expect("dir");
    let out = env.cp.script(&[action, dir, name]);
    assert!(
        out.status.success(),
        "{action} {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits until the API server answers `/readyz` and serves the custom resources again (right
/// after a restart, CRD-backed resources can lag `/readyz` by several seconds).
async fn wait_api(env: &TestEnv) {
    let ok = wait_until(LONG_WAIT, || async {
        support::kubectl(env.cp, &["get", "--raw", "/readyz"])
            .status
            .success()
            && env
                .api::<failover_core::route::trafficsplit::TrafficSplit>()
                .list(&Default::default())
                .await
                .is_ok()
            && env
                .api::<FailoverPolicy>()
                .list(&Default::default())
                .await
                .is_ok()
    })
    .await;
    assert!(ok, "the API server did not come back");
}

/// A primary goes unready while the controller is frozen, a control-plane component stops
/// before the controller has written anything, and only then does the controller run again: its
/// failover meets the outage (the route is checked to be still on the primary when the fault
/// begins). The component restarts after five seconds; the failover completes, and a change made
/// afterwards is applied too (the watches reconnected).
async fn outage_loses_no_transition(test: &str, component: &str) {
    let Some(env) = TestEnv::dedicated(test).await else {
        return;
    };
    let controller = env.routing_to_web(&PolicyBuilder::web(), LONG_WAIT).await;
    controller.pause();
    env.set_endpoints("web", 0, 1).await;
    // The change reaches the frozen controller's watch (or its relist after the outage).
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        env.split_weights("web").await,
        Some(weights(&ON_WEB)),
        "the route must still be on the primary when the fault begins"
    );
    component_action(&env, "stop-component", component);
    controller.resume();
    tokio::time::sleep(Duration::from_secs(5)).await;
    component_action(&env, "start-component", component);
    let back = Instant::now();
    wait_api(&env).await;
    let serving = back.elapsed();
    env.wait_weights("web", &ON_EAST, LONG_WAIT).await;
    env.wait_policy("web", LONG_WAIT, ready::FAILED_OVER, |p| {
        phase(p) == Some(Phase::FailedOver)
    })
    .await;
    let converged = back.elapsed();
    let changed = Instant::now();
    env.set_endpoints("web", 1, 0).await;
    env.wait_weights("web", &ON_WEB, LONG_WAIT).await;
    support::figure(format!(
        "{component} down 5 s: API serving again {serving:?} after restart; converged {converged:?} after restart; a later change applied in {:?}",
        changed.elapsed()
    ));
}

#[tokio::test]
async fn api_server_outage_during_a_failover_loses_no_transition() {
    outage_loses_no_transition("apiserver-outage", "kube-apiserver").await;
}

#[tokio::test]
async fn etcd_restart_loses_no_transition() {
    outage_loses_no_transition("etcd-restart", "etcd").await;
}

#[tokio::test]
async fn controller_killed_before_its_write_converges_after_restart() {
    let Some(env) = test_env!() else { return };
    let mut controller = env.routing_to_web(&PolicyBuilder::web(), LONG_WAIT).await;
    controller.pause();
    env.set_endpoints("web", 0, 1).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        env.split_weights("web").await,
        Some(weights(&ON_WEB)),
        "the frozen controller must not have written the failover yet"
    );
    controller.signal("KILL");
    // It died with the change seen and nothing written: the restarted controller converges
    // from what it finds.
    env.set_endpoints("web-east", 0, 1).await;
    let restarted = Instant::now();
    let _controller = ControllerProcess::start(&env, &[]);
    env.wait_weights("web", &ON_WEST, LONG_WAIT).await;
    let p = env
        .wait_policy("web", LONG_WAIT, "FailedOver to web-west", |p| {
            // The killed controller recorded nothing of its failover to web-east.
            phase(p) == Some(Phase::FailedOver)
                && p.status
                    .as_ref()
                    .is_some_and(|s| s.active_backends == ["web-west"])
        })
        .await;
    assert_eq!(p.status.expect("status").active_backends, vec!["web-west"]);
    support::figure(format!(
        "controller SIGKILL: converged {:?} after restart",
        restarted.elapsed()
    ));
}

const CONTROLLER_RULES: &str = r#"
- apiGroups: [failover.dev]
  resources: [failoverpolicies]
  verbs: [get, list, watch]
- apiGroups: [failover.dev]
  resources: [failoverpolicies/status]
  verbs: [patch]
- apiGroups: [split.smi-spec.io]
  resources: [trafficsplits]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [services]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
"#;

const SPLIT_WRITES: &str =
    "- apiGroups: [split.smi-spec.io]\n  resources: [trafficsplits]\n  verbs: [create, patch]\n";

/// The behaviour linkerd-failover loses: a write denied for a while. The status says why, and
/// once writes are allowed again the failover completes.
#[tokio::test]
async fn denied_writes_are_reported_then_retried_until_they_land() {
    let Some(env) = test_env!() else { return };
    let kubeconfig = env.service_account_kubeconfig("controller");
    env.grant("base", "controller", CONTROLLER_RULES);
    env.grant("split-writes", "controller", SPLIT_WRITES);
    env.ready_backends(&WEB_BACKENDS).await;
    let controller = ControllerProcess::start_with_kubeconfig(&env, &kubeconfig, &[]);
    env.apply(&PolicyBuilder::web());
    env.wait_weights("web", &ON_WEB, LONG_WAIT).await;

    // Revoke the TrafficSplit writes, then lose the primary.
    assert!(
        env.kubectl(&["delete", "rolebinding", "split-writes"])
            .status
            .success()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.set_endpoints("web", 0, 1).await;
    let p = env
        .wait_policy(
            "web",
            LONG_WAIT,
            Output::TrafficSplit.reasons().write_failed,
            |p| ready_reason(p).as_deref() == Some(Output::TrafficSplit.reasons().write_failed),
        )
        .await;
    let message = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == READY))
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("forbidden"),
        "the status says why: {message}"
    );
    assert!(
        !message.contains("ApiError") && !message.contains("Status {"),
        "a sentence from the API server, not a client dump: {message}"
    );
    assert!(
        !controller.logs().contains("Status {"),
        "logs carry the API server's message, not a client dump:\n{}",
        controller.logs()
    );
    support::figure(format!("a denied write, as the status says it: {message}"));
    assert_eq!(
        phase(&p),
        Some(Phase::Primary),
        "the status keeps what is really in place"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(env.split_weights("web").await.expect("split")[0].1, 1);

    // Restore the permission: the pending failover lands without any other change.
    env.bind("split-writes", "controller");
    let restored = Instant::now();
    env.wait_weights("web", &ON_EAST, LONG_WAIT).await;
    env.wait_policy("web", LONG_WAIT, ready::FAILED_OVER, |p| {
        phase(p) == Some(Phase::FailedOver)
            && ready_reason(p).as_deref() == Some(ready::FAILED_OVER)
    })
    .await;
    let errors = metric(
        &controller.admin_get("/metrics").await.1,
        "failover_reconcile_errors_total{kind=\"route_write\"}",
    )
    .unwrap_or(0.0);
    support::figure(format!(
        "denied writes: converged {:?} after the permission returned ({errors} failed attempts, backoff capped at 10s)",
        restored.elapsed()
    ));
    assert!(
        (1.0..30.0).contains(&errors),
        "retries are backed off: {errors}"
    );
}

#[tokio::test]
async fn deleting_the_namespace_under_the_policies_is_harmless() {
    let Some(env) = test_env!() else { return };
    let mut controller = env.routing_to_web(&PolicyBuilder::web(), LONG_WAIT).await;
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(env.client.clone());
    namespaces
        .delete(&env.ns, &Default::default())
        .await
        .expect("delete namespace");
    let gone = wait_until(LONG_WAIT, || async {
        namespaces.get_opt(&env.ns).await.ok().flatten().is_none()
    })
    .await;
    assert!(gone, "namespace not deleted");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        controller.admin_get("/healthz").await.0,
        200,
        "the controller is still alive"
    );
    let text = controller.admin_get("/metrics").await.1;
    let errors = metric_sum(&text, "failover_reconcile_errors_total");
    // Writes racing the deletion fail once each; writes into a terminating namespace are not
    // retried, so the count stays at a handful, never a storm.
    assert!(errors < 12.0, "no error storm: {errors}");
    assert!(!controller.logs().contains("panicked"));
    controller.signal("TERM");
}
