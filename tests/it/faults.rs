//! Faults against a real control plane: API server and etcd outages, the controller's own crash,
//! failing writes, odd and large inputs, and flapping readiness. Each test waits a bounded time
//! and asserts the final state; convergence times are printed for the record.

use std::time::{Duration, Instant};

use failover::api::conditions::{READY, ready};
use failover::api::{FailoverPolicy, Phase};
use kube::api::PostParams;

use crate::support::{
    self, ControllerProcess, ON_EAST, ON_WEB, ON_WEST, PolicyBuilder, TestEnv, WEB_BACKENDS,
    condition_reason, counted_writes, metric, metric_sum, phase, test_env, wait_until, weights,
};

const WAIT: Duration = Duration::from_secs(60);

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
    let ok = wait_until(WAIT, || async {
        support::kubectl(env.cp, &["get", "--raw", "/readyz"])
            .status
            .success()
            && env
                .api::<failover::route::trafficsplit::TrafficSplit>()
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
    let controller = env.routing_to_web(&PolicyBuilder::web(), WAIT).await;
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
    env.wait_weights("web", &ON_EAST, WAIT).await;
    env.wait_policy("web", WAIT, ready::FAILED_OVER, |p| {
        phase(p) == Some(Phase::FailedOver)
    })
    .await;
    let converged = back.elapsed();
    let changed = Instant::now();
    env.set_endpoints("web", 1, 0).await;
    env.wait_weights("web", &ON_WEB, WAIT).await;
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
    let mut controller = env.routing_to_web(&PolicyBuilder::web(), WAIT).await;
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
    env.wait_weights("web", &ON_WEST, WAIT).await;
    let p = env
        .wait_policy("web", WAIT, "FailedOver to web-west", |p| {
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
    env.wait_weights("web", &ON_WEB, WAIT).await;

    // Revoke the TrafficSplit writes, then lose the primary.
    assert!(
        env.kubectl(&["delete", "rolebinding", "split-writes"])
            .status
            .success()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.set_endpoints("web", 0, 1).await;
    let p = env
        .wait_policy("web", WAIT, ready::TRAFFIC_SPLIT_WRITE_FAILED, |p| {
            ready_reason(p).as_deref() == Some(ready::TRAFFIC_SPLIT_WRITE_FAILED)
        })
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
    env.wait_weights("web", &ON_EAST, WAIT).await;
    env.wait_policy("web", WAIT, ready::FAILED_OVER, |p| {
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
async fn policy_whose_services_do_not_exist_reports_them() {
    let Some(env) = test_env!() else { return };
    let controller = ControllerProcess::start(&env, &[]);
    env.apply(&PolicyBuilder::web());
    let p = env
        .wait_policy("web", WAIT, ready::NO_READY_BACKEND, |p| {
            phase(p) == Some(Phase::NoReadyBackend)
        })
        .await;
    let status = p.status.expect("status");
    assert!(
        status
            .backends
            .iter()
            .all(|b| b.message.as_deref() == Some("Service not found"))
    );
    assert_eq!(
        env.split_weights("web").await,
        Some(vec![
            ("web".into(), 1),
            ("web-east".into(), 0),
            ("web-west".into(), 0)
        ])
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let text = controller.admin_get("/metrics").await.1;
    let errors = metric_sum(&text, "failover_reconcile_errors_total");
    assert_eq!(errors, 0.0, "no error storm");
}

#[tokio::test]
async fn deleting_the_namespace_under_the_policies_is_harmless() {
    let Some(env) = test_env!() else { return };
    let mut controller = env.routing_to_web(&PolicyBuilder::web(), WAIT).await;
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(env.client.clone());
    namespaces
        .delete(&env.ns, &Default::default())
        .await
        .expect("delete namespace");
    let gone = wait_until(WAIT, || async {
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

#[tokio::test]
async fn five_hundred_policies_sharing_one_primary_all_fail_over() {
    let Some(env) = test_env!() else { return };
    env.ready_backends(&["shared", "east", "west"]).await;
    let controller = ControllerProcess::start(&env, &["--log-level", "warn"]);
    let api: kube::Api<FailoverPolicy> = env.api();
    for i in 0..500 {
        let p: FailoverPolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "failover.dev/v1alpha1", "kind": "FailoverPolicy", "metadata": {"name": format!("p{i}")},
            "spec": {"service": format!("apex{i}"), "primary": "shared", "secondaries": [{"service": "east"}, {"service": "west"}]}
        }))
        .expect("policy");
        api.create(&PostParams::default(), &p)
            .await
            .expect("create policy");
    }
    let splits: kube::Api<failover::route::trafficsplit::TrafficSplit> = env.api();
    let count = |weights: [i64; 3]| {
        let splits = splits.clone();
        async move {
            splits
                .list(&Default::default())
                .await
                .map(|l| {
                    l.items
                        .iter()
                        .filter(|t| t.spec.backends.iter().map(|b| b.weight).eq(weights))
                        .count()
                })
                .unwrap_or(0)
        }
    };
    assert!(
        wait_until(WAIT, || async { count([1, 0, 0]).await == 500 }).await,
        "500 TrafficSplits on the primary"
    );
    let flipped = Instant::now();
    env.set_endpoints("shared", 0, 1).await;
    assert!(
        wait_until(WAIT, || async { count([0, 1, 0]).await == 500 }).await,
        "500 TrafficSplits failed over"
    );
    let took = flipped.elapsed();
    let all = wait_until(WAIT, || async {
        api.list(&Default::default()).await.is_ok_and(|l| {
            l.items
                .iter()
                .filter(|p| phase(p) == Some(Phase::FailedOver))
                .count()
                == 500
        })
    })
    .await;
    assert!(all, "every status says FailedOver");
    let text = controller.admin_get("/metrics").await.1;
    let errors = metric_sum(&text, "failover_reconcile_errors_total");
    assert_eq!(errors, 0.0);
    support::figure(format!(
        "500 policies sharing one primary: all TrafficSplits failed over in {took:?}"
    ));
    // A thousand objects to delete: gone before this test ends, not while the next ones run.
    env.cleanup_and_wait(WAIT).await;
}

async fn toggle(env: &TestEnv, service: &str, times: usize, every: Duration) -> usize {
    for i in 0..times {
        env.set_endpoints(service, usize::from(i % 2 == 1), usize::from(i % 2 == 0))
            .await;
        tokio::time::sleep(every).await;
    }
    times
}

#[tokio::test]
async fn flapping_within_the_holds_never_moves_traffic() {
    let Some(env) = test_env!() else { return };
    let controller = env.with_controller(&[]).await;
    env.apply(&PolicyBuilder::web().holds("2s", "2s"));
    env.wait_weights("web", &ON_WEB, WAIT).await;
    let writes_before = counted_writes(&controller, "trafficsplit", 1.0, WAIT).await;
    // Ten changes a second for four seconds; the primary is never down for 2s in a row. Ends ready.
    toggle(&env, "web", 40, Duration::from_millis(100)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes_after = metric(
        &controller.admin_get("/metrics").await.1,
        "failover_api_writes_total{kind=\"trafficsplit\"}",
    )
    .unwrap_or(0.0);
    assert_eq!(writes_after, writes_before, "the TrafficSplit did not flap");
    assert_eq!(env.split_weights("web").await.map(|w| w[0].1), Some(1));
}

#[tokio::test]
async fn flapping_without_holds_ends_right_with_bounded_writes() {
    let Some(env) = test_env!() else { return };
    let controller = env.routing_to_web(&PolicyBuilder::web(), WAIT).await;
    let writes_before = counted_writes(&controller, "trafficsplit", 1.0, WAIT).await;
    let changes = toggle(&env, "web", 41, Duration::from_millis(50)).await;
    // 41 changes end with the primary not ready.
    env.wait_weights("web", &ON_EAST, WAIT).await;
    env.wait_policy("web", WAIT, ready::FAILED_OVER, |p| {
        phase(p) == Some(Phase::FailedOver)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes = metric(
        &controller.admin_get("/metrics").await.1,
        "failover_api_writes_total{kind=\"trafficsplit\"}",
    )
    .unwrap_or(0.0)
        - writes_before;
    assert!(
        writes >= 1.0 && writes <= changes as f64,
        "{writes} TrafficSplit writes for {changes} readiness changes"
    );
    support::figure(format!(
        "flapping without holds: {changes} readiness changes, {writes} TrafficSplit writes"
    ));
}
