//! Production operation against the real control plane: metrics and health endpoints, readiness
//! gated on synced caches, leader election with takeover after SIGKILL and SIGTERM.

use std::time::{Duration, Instant};

use crate::support::{
    self, ControllerProcess, ON_EAST, ON_WEB, PolicyBuilder, TestEnv, WAIT, WEB_BACKENDS,
    api_writes, metric, test_env, wait_until,
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
    assert_eq!(
        metric(&text, &format!("failover_policy_phase{labels}")),
        Some(1.0)
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

fn election_args(ns: &str) -> Vec<String> {
    [
        "--leader-elect",
        "--lease-namespace",
        ns,
        "--lease-duration",
        "4s",
        "--renew-deadline",
        "3s",
        "--retry-period",
        "250ms",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Every holder the controllers' Lease has had since the watch started (`None`: released).
struct LeaseHolders {
    seen: std::sync::Arc<tokio::sync::Mutex<Vec<Option<String>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl LeaseHolders {
    async fn watch(env: &TestEnv) -> Self {
        use futures::StreamExt;
        use k8s_openapi::api::coordination::v1::Lease;
        use kube::runtime::{WatchStreamExt, watcher};
        let seen = std::sync::Arc::new(tokio::sync::Mutex::new(Vec::new()));
        let leases: kube::Api<Lease> = env.api();
        let record = seen.clone();
        let task = tokio::spawn(async move {
            let mut stream = watcher(leases, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(lease)) = stream.next().await {
                let holder = lease.spec.and_then(|s| s.holder_identity);
                let mut seen = record.lock().await;
                if seen.last() != Some(&holder) {
                    seen.push(holder);
                }
            }
        });
        let ready = wait_until(WAIT, || async { !seen.lock().await.is_empty() }).await;
        assert!(ready, "the Lease is never listed");
        Self { seen, task }
    }

    /// The holder now.
    async fn last(&self) -> Option<String> {
        self.seen.lock().await.last().cloned().flatten()
    }

    /// Every holder seen, the first as the watch found it.
    async fn since_start(&self) -> Vec<Option<String>> {
        self.seen.lock().await.clone()
    }
}

impl Drop for LeaseHolders {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn is_leader(c: &ControllerProcess) -> bool {
    metric(&c.admin_get("/metrics").await.1, "failover_leader") == Some(1.0)
}

async fn writes(c: &ControllerProcess) -> f64 {
    api_writes(c, &["trafficsplit", "status", "event"])
        .await
        .values()
        .sum()
}

#[tokio::test]
async fn one_leader_writes_and_a_standby_takes_over_after_sigkill_and_sigterm() {
    let Some(env) = test_env!() else { return };
    env.ready_backends(&WEB_BACKENDS).await;
    let args = election_args(&env.ns);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut a = ControllerProcess::start(&env, &args);
    let mut b = ControllerProcess::start(&env, &args);
    env.apply(&PolicyBuilder::web());
    env.wait_weights("web", &ON_WEB, WAIT).await;
    assert!(
        wait_until(WAIT, || async {
            is_leader(&a).await != is_leader(&b).await
        })
        .await,
        "exactly one leader"
    );
    if is_leader(&b).await {
        std::mem::swap(&mut a, &mut b);
    }
    // Exactly one writes.
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(writes(&a).await >= 2.0, "the leader wrote");
    assert_eq!(writes(&b).await, 0.0, "the standby wrote nothing");
    assert!(
        wait_until(WAIT, || async {
            b.admin_get("/readyz").await == (200, "ok (standby)".to_string())
        })
        .await
    );

    // SIGKILL the leader, then change readiness: the standby takes over once the Lease expires
    // (nothing released it) and completes the change.
    let holders = LeaseHolders::watch(&env).await;
    let before = holders.last().await;
    a.signal("KILL");
    let killed = Instant::now();
    env.set_endpoints("web", 1, 0).await;
    env.wait_weights("web", &ON_WEB, WAIT).await;
    let sigkill_takeover = killed.elapsed();
    assert!(is_leader(&b).await, "the standby leads");
    let seen = holders.since_start().await;
    assert!(
        seen.iter().all(Option::is_some) && seen.last() != Some(&before),
        "after SIGKILL the Lease passes to the standby without being released: {seen:?}"
    );

    // A new standby joins; SIGTERM the leader: the lease is released and the standby takes
    // over within a couple of seconds.
    let c = ControllerProcess::start(&env, &args);
    assert!(
        wait_until(WAIT, || async {
            c.admin_get("/readyz").await == (200, "ok (standby)".to_string())
        })
        .await
    );
    let holders = LeaseHolders::watch(&env).await;
    b.signal("TERM");
    let terminated = Instant::now();
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let sigterm_takeover = terminated.elapsed();
    assert!(
        b.logs().contains("released the leader Lease"),
        "{}",
        b.logs()
    );
    assert!(is_leader(&c).await, "the new standby leads");
    let seen = holders.since_start().await;
    let released = seen.iter().position(Option::is_none);
    assert!(
        released.is_some_and(|at| seen[at + 1..].iter().any(Option::is_some)),
        "after SIGTERM the Lease is released, then taken by the standby: {seen:?}"
    );
    support::figure(format!(
        "takeover: after SIGKILL {sigkill_takeover:?} (lease 4s), after SIGTERM {sigterm_takeover:?}"
    ));
}
