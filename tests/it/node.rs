//! The controller as users run it, on a real node: its image built from the project's
//! Dockerfile, the chart installed with helm, and backends that are real Deployments whose Pods
//! pass or fail real readiness probes; the EndpointSlices come from the real EndpointSlice
//! controller. Each scenario waits a bounded time and asserts the final state; the timings are
//! printed for the record.

use std::time::{Duration, Instant};

use failover_core::api::conditions::{READY, ready};

use crate::support::{
    self, CONTROLLER, ON_EAST, ON_WEB, PolicyBuilder, TestEnv, node_kubectl, ok, wait_until,
};

const WAIT: Duration = Duration::from_secs(90);

/// Backends on the node, the chart installed, and the usual policy routing to the primary.
async fn installed(
    test: &str,
    primary_replicas: u32,
    chart: &[&str],
    policy: PolicyBuilder,
) -> Option<TestEnv> {
    let env = TestEnv::on_node(test).await?;
    env.backend("web", primary_replicas);
    env.backend("web-east", 1);
    env.backend("web-west", 1);
    for (name, n) in [("web", primary_replicas), ("web-east", 1), ("web-west", 1)] {
        env.wait_ready_replicas(name, n, WAIT).await;
    }
    let started = Instant::now();
    env.install_controller(chart);
    support::figure(format!(
        "chart installed → controller Pod Ready in {:.1?}",
        started.elapsed()
    ));
    env.apply(&policy);
    env.wait_weights("web", &ON_WEB, WAIT).await;
    Some(env)
}

/// The holder of the controller's Lease.
fn leader(env: &TestEnv) -> String {
    let out = env.kubectl(&[
        "get",
        "lease",
        CONTROLLER,
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn the_chart_runs_the_image_and_fails_over_on_real_readiness_probes() {
    let Some(env) = installed("node-chart", 2, &[], PolicyBuilder::web()).await else {
        return;
    };
    // The Pod runs the hardened spec, elected itself through its Lease, serves metrics on its
    // Service (reached from another Pod through kube-proxy).
    let pods = env.pods_of(CONTROLLER).await;
    assert_eq!(pods.len(), 1, "{pods:?}");
    assert_eq!(leader(&env), pods[0], "the controller Pod holds the Lease");
    let ip = ok(
        &env.kubectl(&[
            "get",
            "svc",
            &format!("{CONTROLLER}-metrics"),
            "-o",
            "jsonpath={.spec.clusterIP}",
        ]),
        "metrics Service",
    );
    let backend = env.pods("web-east").await.remove(0);
    let metrics = ok(
        &env.kubectl(&[
            "exec",
            &backend,
            "--",
            "wget",
            "-qO-",
            &format!("http://{ip}:8080/metrics"),
        ]),
        "scraping metrics",
    );
    assert!(metrics.contains("failover_leader 1"), "{metrics}");

    // Every primary Pod fails its probe: traffic leaves it; they pass again: it returns.
    let failed = Instant::now();
    env.set_backend_ready("web", false).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let failover = failed.elapsed();
    let passed = Instant::now();
    env.set_backend_ready("web", true).await;
    env.wait_weights("web", &ON_WEB, WAIT).await;
    support::figure(format!(
        "probe failure → TrafficSplit change {failover:.1?}; probe pass → failback {:.1?} (probe period 1 s)",
        passed.elapsed()
    ));
}

#[tokio::test]
async fn a_rolling_update_that_keeps_two_ready_endpoints_never_fails_over() {
    let policy = PolicyBuilder::web().spec(|s| s.readiness.min_ready_endpoints = 2);
    let Some(env) = installed("node-rollout", 3, &[], policy).await else {
        return;
    };
    ok(&env.kubectl(&["patch", "deployment", "web", "-p", r#"{"spec":{"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":1,"maxSurge":0}}}}"#]), "patching the strategy");
    ok(
        &env.kubectl(&["rollout", "restart", "deployment/web"]),
        "rollout restart",
    );
    // kubectl blocks: it waits on a thread while the weights are read every 50 ms.
    let (cp, ns) = (env.cp, env.ns.clone());
    let rollout = std::thread::spawn(move || {
        let args = [
            "-n",
            &ns,
            "rollout",
            "status",
            "deployment/web",
            "--timeout=120s",
        ];
        support::kubectl(cp, &args)
    });
    let mut seen = Vec::new();
    let started = Instant::now();
    while !rollout.is_finished() {
        seen.push(env.split_weights("web").await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ok(
        &rollout.join().expect("rollout thread"),
        "the primary's rollout",
    );
    let took = started.elapsed();
    let expected: Vec<(String, i64)> = ON_WEB.iter().map(|(s, w)| (s.to_string(), *w)).collect();
    assert!(
        seen.iter().all(|w| w.as_ref() == Some(&expected)),
        "the weights left the primary during its rolling update: {seen:?}"
    );
    assert!(
        seen.len() > 10,
        "the rollout was watched: {} reads",
        seen.len()
    );
    support::figure(format!(
        "rolling update of 3 Pods in {took:.1?}: {} reads of the weights, all on the primary",
        seen.len()
    ));
}

#[tokio::test]
async fn scaling_the_primary_to_zero_fails_over() {
    let Some(env) = installed("node-scale", 2, &[], PolicyBuilder::web()).await else {
        return;
    };
    ok(
        &env.kubectl(&["scale", "deployment/web", "--replicas=0"]),
        "scaling",
    );
    env.wait_weights("web", &ON_EAST, WAIT).await;
    ok(
        &env.kubectl(&["scale", "deployment/web", "--replicas=2"]),
        "scaling back",
    );
    env.wait_weights("web", &ON_WEB, WAIT).await;
}

/// Makes the primary's Pods fail their probes and waits until the policy holds the failover
/// (`failoverAfter`), so that the replica in charge now cannot be the one that completes it.
async fn failover_pending(env: &TestEnv) -> Instant {
    env.set_backend_ready("web", false).await;
    let pending = Instant::now();
    env.wait_policy("web", WAIT, ready::FAILOVER_PENDING, |p| {
        support::condition_reason(p, READY).as_deref() == Some(ready::FAILOVER_PENDING)
    })
    .await;
    pending
}

/// Waits for the failover, then checks which replica recorded it: `by`, not `not_by`.
async fn failed_over_by(env: &TestEnv, not_by: &str) -> String {
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let recorded = wait_until(WAIT, || async {
        !env.event_reporters("web", ready::FAILED_OVER)
            .await
            .is_empty()
    })
    .await;
    assert!(recorded, "a FailedOver Event");
    let mut reporters = env.event_reporters("web", ready::FAILED_OVER).await;
    assert!(
        !reporters.iter().any(|r| r == not_by),
        "the failover was completed by {reporters:?}, not by the replaced {not_by}"
    );
    reporters.remove(0)
}

#[tokio::test]
async fn a_replacement_controller_pod_completes_a_failover_its_predecessor_did_not() {
    // failoverAfter 10 s: the failover is pending when the Pod is deleted, and falls due only
    // after it is gone.
    let policy = PolicyBuilder::web().holds("10s", "0s");
    let Some(env) = installed("node-replace", 2, &[], policy).await else {
        return;
    };
    let old = env.pods_of(CONTROLLER).await;
    let pending = failover_pending(&env).await;
    ok(
        &env.kubectl(&["delete", "pod", &old[0], "--grace-period=0", "--force"]),
        "deleting the controller Pod",
    );
    let deleted = Instant::now();
    let by = failed_over_by(&env, &old[0]).await;
    let new = env.pods_of(CONTROLLER).await;
    assert!(new.contains(&by), "{by} is the replacement Pod: {new:?}");
    support::figure(format!(
        "failover completed by the replacement Pod {by} {:.1?} after the old one was deleted, {:.1?} after the failoverAfter hold (10 s) fell due",
        deleted.elapsed(),
        pending.elapsed().saturating_sub(Duration::from_secs(10))
    ));
}

#[tokio::test]
async fn killing_the_leader_pod_hands_over_to_the_standby() {
    let chart = [
        "replicaCount=2",
        "leaderElection.leaseDuration=4s",
        "leaderElection.renewDeadline=3s",
        "leaderElection.retryPeriod=500ms",
    ];
    let policy = PolicyBuilder::web().holds("6s", "0s");
    let Some(env) = installed("node-leader", 2, &chart, policy).await else {
        return;
    };
    let first = leader(&env);
    assert!(!first.is_empty(), "a replica leads");
    let pending = failover_pending(&env).await;
    ok(
        &env.kubectl(&["delete", "pod", &first, "--grace-period=0", "--force"]),
        "killing the leader Pod",
    );
    let killed = Instant::now();
    let by = failed_over_by(&env, &first).await;
    let took = killed.elapsed();
    let handed = wait_until(WAIT, || async {
        !leader(&env).is_empty() && leader(&env) != first
    })
    .await;
    assert!(handed, "the Lease moved to the standby");
    assert_eq!(leader(&env), by, "the new leader completed the failover");
    support::figure(format!(
        "leader Pod killed → failover completed by the standby {by} in {took:.1?}, {:.1?} after the failoverAfter hold (6 s) fell due (lease 4 s)",
        pending.elapsed().saturating_sub(Duration::from_secs(6))
    ));
    let _ = node_kubectl(env.cp, &["get", "nodes"]);
}
