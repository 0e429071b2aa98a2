//! The controller's admin server against the real control plane: the metrics and health
//! endpoints after a failover, and readiness gated on synced caches.

use std::time::Duration;

use crate::support::{
    ControllerProcess, ON_EAST, ON_WEB, PolicyBuilder, WAIT, metric, test_env, wait_until,
};

#[tokio::test]
async fn metrics_and_health_endpoints_report_a_failover() {
    let Some(env) = test_env!() else { return };
    let controller = env.with_controller(&[]).await;
    assert_eq!(
        controller.admin_get("/healthz").await,
        (200, "ok".to_string())
    );
    let ready = wait_until(WAIT, || async {
        controller.admin_get("/readyz").await.0 == 200
    })
    .await;
    assert!(ready, "/readyz never turned ready");
    env.apply(&PolicyBuilder::web());
    env.wait_weights("web", &ON_WEB, WAIT).await;
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let labels = format!("{{namespace=\"{}\",policy=\"web\"}}", env.ns);
    // The status and the Event are written in the background, just after the route: wait for
    // their counters too before reading the rest.
    let seen = wait_until(WAIT, || async {
        let text = controller.admin_get("/metrics").await.1;
        metric(&text, &format!("failover_failovers_total{labels}")) == Some(1.0)
            && metric(&text, "failover_api_writes_total{kind=\"status\"}") == Some(2.0)
            && metric(&text, "failover_api_writes_total{kind=\"event\"}") == Some(1.0)
    })
    .await;
    let text = controller.admin_get("/metrics").await.1;
    assert!(
        seen,
        "failovers_total not 1, or the status and Event not written:\n{text}"
    );
    assert_eq!(
        metric(&text, &format!("failover_ready_backends{labels}")),
        Some(2.0)
    );
    // The phase is a state set: one series per phase, 1 for the one the policy is in.
    let phase = |p: &str| {
        let labels = format!("{{namespace=\"{}\",policy=\"web\",phase=\"{p}\"}}", env.ns);
        metric(&text, &format!("failover_policy_phase{labels}"))
    };
    assert_eq!(
        [
            phase("Primary"),
            phase("FailedOver"),
            phase("NoReadyBackend")
        ],
        [Some(0.0), Some(1.0), Some(0.0)]
    );
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        metric(
            &text,
            &format!("failover_build_info{{version=\"{version}\"}}")
        ),
        Some(1.0)
    );
    assert_eq!(metric(&text, "failover_workqueue_depth"), Some(0.0));
    assert!(
        metric(&text, "failover_workqueue_queue_duration_seconds_count").is_some_and(|n| n >= 2.0),
        "{text}"
    );
    assert!(metric(&text, "failover_heap_allocations_total").is_some_and(|n| n > 0.0));
    assert_eq!(
        metric(&text, "failover_health_query_errors_total"),
        Some(0.0)
    );
    assert!(
        metric(
            &text,
            &format!("failover_seconds_since_last_transition{labels}")
        )
        .is_some_and(|s| (0.0..60.0).contains(&s)),
        "{text}"
    );
    assert!(metric(&text, "failover_reconciles_total").is_some_and(|n| n >= 2.0));
    assert!(metric(&text, "failover_reconcile_duration_seconds_count").is_some_and(|n| n >= 2.0));
    assert_eq!(
        metric(&text, "failover_api_writes_total{kind=\"trafficsplit\"}"),
        Some(2.0),
        "create + one failover apply"
    );
    assert_eq!(
        metric(&text, "failover_api_writes_total{kind=\"status\"}"),
        Some(2.0)
    );
    assert_eq!(
        metric(&text, "failover_api_writes_total{kind=\"event\"}"),
        Some(1.0)
    );
    assert_eq!(metric(&text, "failover_leader"), Some(1.0));
    for family in [
        "failover_reconcile_errors",
        "failover_failbacks",
        "failover_watch_restarts",
    ] {
        assert!(
            text.contains(&format!("# TYPE {family} counter")),
            "{family} missing:\n{text}"
        );
    }
}

#[tokio::test]
async fn readyz_turns_ready_only_after_caches_synced() {
    let Some(env) = test_env!() else { return };
    // A service account that may do everything but list EndpointSlices: caches cannot sync.
    let kubeconfig = env.service_account_kubeconfig("controller");
    let rules = r#"
- apiGroups: [failover.dev]
  resources: [failoverpolicies]
  verbs: [get, list, watch]
- apiGroups: [failover.dev]
  resources: [failoverpolicies/status]
  verbs: [patch]
- apiGroups: [split.smi-spec.io]
  resources: [trafficsplits]
  verbs: [get, list, watch, create, patch]
- apiGroups: [""]
  resources: [services]
  verbs: [list, watch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
"#;
    env.grant("most", "controller", rules);
    let controller = ControllerProcess::start_with_kubeconfig(&env, &kubeconfig, &[]);
    assert_eq!(controller.admin_get("/healthz").await.0, 200);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (code, body) = controller.admin_get("/readyz").await;
    assert_eq!(
        (code, body.as_str()),
        (503, "caches not synced (not listed yet: endpointslice)")
    );
    // Granting the missing permission lets the watch start; readiness follows.
    env.grant(
        "slices",
        "controller",
        "- apiGroups: [discovery.k8s.io]\n  resources: [endpointslices]\n  verbs: [list, watch]\n",
    );
    let ready = wait_until(WAIT, || async {
        controller.admin_get("/readyz").await.0 == 200
    })
    .await;
    assert!(
        ready,
        "/readyz did not turn ready after the caches could sync:\n{}",
        controller.logs()
    );
}

#[tokio::test]
async fn a_failover_runs_one_reconcile_and_the_writes_it_makes_echo_back_without_one() {
    let Some(env) = test_env!() else { return };
    let controller = env.with_controller(&[]).await;
    env.apply(&PolicyBuilder::web());
    env.wait_weights("web", &ON_WEB, WAIT).await;
    let read = || async { controller.admin_get("/metrics").await.1 };
    let echoes = |text: &str, kind: &str| {
        metric(text, &format!("failover_echoes_total{{kind=\"{kind}\"}}")).unwrap_or(0.0)
    };
    // The first status, written and delivered back: the start is over.
    let settled = wait_until(WAIT, || async { echoes(&read().await, "status") == 1.0 }).await;
    assert!(
        settled,
        "the first status never echoed:\n{}\n{}",
        read().await,
        controller.logs()
    );
    let before = metric(&read().await, "failover_reconciles_total");

    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let echoed = wait_until(WAIT, || async {
        let text = read().await;
        echoes(&text, "status") == 2.0 && echoes(&text, "trafficsplit") == 1.0
    })
    .await;
    let text = read().await;
    assert!(
        echoed,
        "the failover's route and status never echoed:\n{text}"
    );
    assert_eq!(
        metric(&text, "failover_reconciles_total")
            .zip(before)
            .map(|(n, b)| n - b),
        Some(1.0),
        "one reconcile for the readiness change, none for the echoes of its writes:\n{text}\n{}",
        controller.logs()
    );
}
