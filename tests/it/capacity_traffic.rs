//! Capacity-aware failover under real traffic: on the node, through the Gateway proxy, backends
//! whose Pods each answer 503 `<name> overloaded` above 10 requests in a second. The primary has
//! 3 Pods, the secondary 1, and the load (21 requests/s) needs 3: two serve 20.
//!
//! - Without capacity, a failover sends the lone secondary Pod all of it: most answers are
//!   overload answers.
//! - With `capacity` (8 requests/s declared per Pod, below what a Pod serves) and `scale`, the
//!   secondary's HPA is raised to 3 the moment the primary fails, traffic moves as its Pods
//!   become ready, a failback ramps as the primary's Pods come back one by one, overload answers
//!   stay within [`OVERLOAD_BOUND`] (1%), every failure a client sees (overloaded, failed
//!   otherwise, no answer) within [`CLIENT_FAILURE_BOUND`], and the HPA is restored after the
//!   failback; a hand edit of the HPA made during the failover is kept instead.

use std::time::{Duration, Instant};

use failover::api::{CapacitySpec, ScaleKind, ScaleSpec, ScaleTarget};

use crate::support::{self, Answer, Load, PolicyBuilder, TestEnv, condition, hpa, ok, wait_until};

const WAIT: Duration = Duration::from_secs(120);
/// Requests per second through the proxy: more than two secondary Pods serve, at most three.
/// Three Pods take 7 each, 70% of what one serves: a Pod counts its requests per second of its
/// clock, so one that gets 9 in a second where 8 were due is not overloaded by the jitter of the
/// proxy's balancing.
const RATE: u32 = 21;
/// What one Pod serves: above it, it answers 503 overloaded.
const POD_RATE: u32 = 10;
/// What the policy declares one Pod serves: a margin below [`POD_RATE`].
const DECLARED: i32 = 8;
/// The most overload answers a move may cause, in percent of its requests.
const OVERLOAD_BOUND: f64 = 1.0;
/// The most requests a failover with capacity may fail, every kind a client sees, in percent:
/// a fifth of the half that fails without capacity (the demand the lone secondary Pod cannot
/// serve). The failback, which never leaves the ready Pods, may fail [`OVERLOAD_BOUND`].
const CLIENT_FAILURE_BOUND: f64 = 10.0;

fn host(test: &str) -> String {
    format!("{test}.failover.test")
}

/// The usual policy on the Gateway `default/edge` for the test's hostname, with capacity and
/// `web-east` scaled through its HPA when `sized`.
fn policy(test: &str, sized: bool) -> PolicyBuilder {
    let host = host(test);
    PolicyBuilder::web()
        .on_gateway("default", "edge")
        .spec(move |s| {
            if let Some(route) = s.http_route.as_mut() {
                route.hostnames = vec![host];
            }
            if sized {
                s.capacity = Some(CapacitySpec {
                    unserved: Default::default(),
                    per_endpoint: DECLARED,
                    primary_per_endpoint: None,
                    scale: Some(ScaleSpec {
                        deadline: "2m".into(),
                        max_replicas: 5,
                    }),
                });
                s.secondaries[0].scale_target = Some(ScaleTarget {
                    kind: ScaleKind::HorizontalPodAutoscaler,
                    name: "web-east".into(),
                });
            }
        })
}

/// The backends (web 3 Pods, web-east 1, web-west 1, each serving [`POD_RATE`]), an HPA of
/// web-east (min 1, max 5), the chart with `scaling.enabled`, `policy` routing to web.
async fn scene(test: &str, policy: PolicyBuilder) -> Option<TestEnv> {
    let env = TestEnv::on_node_alone(test).await?;
    for (name, replicas) in [("web", 3), ("web-east", 1), ("web-west", 1)] {
        env.backend_at_rate(name, replicas, POD_RATE);
    }
    for (name, replicas) in [("web", 3), ("web-east", 1), ("web-west", 1)] {
        env.wait_ready_replicas(name, replicas, WAIT).await;
    }
    hpa(&env, "web-east", 5);
    env.install_controller(&["scaling.enabled=true"]);
    env.apply(&policy);
    env.wait_http_route_weights("web", &crate::support::ON_WEB, WAIT)
        .await;
    Some(env)
}

/// Starts the load and waits until a second of it was all answered by `web`.
async fn flowing(env: &TestEnv, test: &str) -> crate::support::Running {
    let mut load = Load::new(&env.proxy_url(), RATE, Duration::from_secs(300));
    load.host = Some(host(test));
    let load = load.start().expect("load");
    let on = wait_until(WAIT, || async {
        let answers = load.answers();
        let last: Vec<&Answer> = answers.iter().rev().take(RATE as usize).collect();
        last.len() == RATE as usize && last.iter().all(|a| a.backend.as_deref() == Some("web"))
    })
    .await;
    assert!(on, "requests never settled on web");
    load
}

/// Requests sent from `since` on: how many, how many answered overloaded, how many failed
/// otherwise.
fn tally(answers: &[Answer], since: Instant) -> (usize, usize, usize) {
    let sent: Vec<&Answer> = answers.iter().filter(|a| a.sent >= since).collect();
    let overloaded = sent.iter().filter(|a| a.overloaded).count();
    let failed = sent.iter().filter(|a| a.failed() && !a.overloaded).count();
    (sent.len(), overloaded, failed)
}

/// When each overloaded request was sent, after `since`.
fn overload_times(answers: &[Answer], since: Instant) -> Vec<Duration> {
    answers
        .iter()
        .filter(|a| a.sent >= since && a.overloaded)
        .map(|a| a.sent - since)
        .collect()
}

fn percent(part: usize, whole: usize) -> f64 {
    part as f64 * 100.0 / whole.max(1) as f64
}

/// The HPA's `minReplicas`.
fn min_replicas(env: &TestEnv) -> String {
    ok(
        &env.kubectl(&[
            "get",
            "hpa",
            "web-east",
            "-o",
            "jsonpath={.spec.minReplicas}",
        ]),
        "the HPA",
    )
}

/// Waits until the last second of answers was all served (no failure).
async fn all_served(load: &crate::support::Running) -> Instant {
    let served = wait_until(WAIT, || async {
        let answers = load.answers();
        let last: Vec<&Answer> = answers.iter().rev().take(RATE as usize).collect();
        last.len() == RATE as usize && last.iter().all(|a| !a.failed())
    })
    .await;
    assert!(served, "the requests were never all served again");
    Instant::now()
}

#[tokio::test]
async fn without_capacity_a_failover_overloads_the_lone_secondary_pod() {
    const TEST: &str = "capacity-none";
    let Some(env) = scene(TEST, policy(TEST, false)).await else {
        return;
    };
    let load = flowing(&env, TEST).await;
    env.set_backend_ready("web", false).await;
    env.wait_http_route_weights("web", &crate::support::ON_EAST, WAIT)
        .await;
    let moved = Instant::now();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let answers = load.stop().await;
    let (sent, overloaded, failed) = tally(&answers, moved);
    support::figure(format!(
        "without capacity, {RATE} requests/s to 1 secondary Pod serving {POD_RATE}: {} of {sent} requests ({:.1}%) failed as clients saw them, {overloaded} answered overloaded, {failed} failed otherwise",
        overloaded + failed,
        percent(overloaded + failed, sent)
    ));
    assert!(
        percent(overloaded, sent) >= 40.0,
        "a Pod serving {POD_RATE} of {RATE} requests/s answered only {overloaded} of {sent} overloaded"
    );
}

#[tokio::test]
async fn with_capacity_and_scaling_clients_see_a_fifth_of_the_failures_and_no_overload() {
    const TEST: &str = "capacity-scaled";
    let Some(env) = scene(TEST, policy(TEST, true)).await else {
        return;
    };
    let load = flowing(&env, TEST).await;
    let failed_at = Instant::now();
    env.set_backend_ready("web", false).await;
    // The HPA is raised to 3 (24 requests/s at 8 per Pod), and traffic follows its Pods.
    let raised = wait_until(WAIT, || async { min_replicas(&env) == "3" }).await;
    assert!(
        raised,
        "the HPA was not raised: minReplicas {}",
        min_replicas(&env)
    );
    env.wait_policy("web", WAIT, "web-east takes all", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.backends.get(1))
            .and_then(|b| b.share.clone())
            .as_deref()
            == Some("100%")
    })
    .await;
    let served = all_served(&load).await;
    // The move: from the primary's failure to 5 s after all traffic is served again.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let answers = load.answers();
    let (sent, overloaded, failed) = tally(&answers, failed_at);
    support::figure(format!(
        "with capacity and scaling, failover: all traffic served {:.1?} after the primary failed; {} of {sent} requests ({:.2}%) failed as clients saw them: {overloaded} answered overloaded (sent at {:?} after the failure), {failed} failed otherwise (sent to the failed primary while the secondary grew)",
        served - failed_at,
        overloaded + failed,
        percent(overloaded + failed, sent),
        overload_times(&answers, failed_at)
    ));
    assert!(
        percent(overloaded + failed, sent) <= CLIENT_FAILURE_BOUND,
        "{} of {sent} requests failed during the failover ({overloaded} overloaded)",
        overloaded + failed
    );
    assert!(
        percent(overloaded, sent) <= OVERLOAD_BOUND,
        "{overloaded} of {sent} requests answered overloaded during the failover, sent at {:?} after the failure",
        overload_times(&answers, failed_at)
    );

    // The primary's Pods come back one by one: its share follows them.
    let back_at = Instant::now();
    let pods = env.pods("web").await;
    for (i, pod) in pods.iter().enumerate() {
        env.set_pod_ready(pod, true);
        if i + 1 < pods.len() {
            let share = format!("{}%", [33.33, 66.67][i]);
            env.wait_policy("web", WAIT, "the primary's share", |p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.backends.first())
                    .and_then(|b| b.share.clone())
                    == Some(share.clone())
            })
            .await;
        }
    }
    env.wait_http_route_weights("web", &crate::support::ON_WEB, WAIT)
        .await;
    let restored = wait_until(WAIT, || async { min_replicas(&env) == "1" }).await;
    assert!(
        restored,
        "the HPA was not restored: minReplicas {}",
        min_replicas(&env)
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let answers = load.stop().await;
    let (sent, overloaded, failed) = tally(&answers, back_at);
    support::figure(format!(
        "with capacity, failback by the primary's ready Pods: {} of {sent} requests ({:.2}%) failed as clients saw them: {overloaded} answered overloaded (sent at {:?} after the first Pod was back), {failed} failed otherwise; HPA minReplicas restored to 1",
        overloaded + failed,
        percent(overloaded + failed, sent),
        overload_times(&answers, back_at)
    ));
    assert!(
        percent(overloaded + failed, sent) <= OVERLOAD_BOUND,
        "{overloaded} of {sent} requests answered overloaded during the failback, sent at {:?} after the first Pod was back",
        overload_times(&answers, back_at)
    );
    let policy = env.policy("web").await.expect("policy");
    assert!(
        condition(&policy, failover::api::conditions::SCALED_UP)
            .is_some_and(|(s, ..)| s == "False")
    );
}

#[tokio::test]
async fn a_hand_edit_of_the_hpa_during_a_failover_is_kept_after_the_failback() {
    const TEST: &str = "capacity-hand-edit";
    let Some(env) = scene(TEST, policy(TEST, true)).await else {
        return;
    };
    env.set_backend_ready("web", false).await;
    let raised = wait_until(WAIT, || async { min_replicas(&env) == "3" }).await;
    assert!(
        raised,
        "the HPA was not raised: minReplicas {}",
        min_replicas(&env)
    );
    ok(
        &env.kubectl(&[
            "patch",
            "hpa",
            "web-east",
            "--type=merge",
            "-p",
            r#"{"spec":{"minReplicas":4}}"#,
        ]),
        "a hand edit of the HPA",
    );
    env.set_backend_ready("web", true).await;
    env.wait_http_route_weights("web", &crate::support::ON_WEB, WAIT)
        .await;
    env.wait_policy(
        "web",
        WAIT,
        "no workload recorded after the failback",
        |p| p.status.as_ref().is_some_and(|s| s.scaled.is_empty()),
    )
    .await;
    assert_eq!(min_replicas(&env), "4", "the hand edit is kept");
    support::figure(format!(
        "a hand edit of the HPA during a failover (minReplicas 3 → 4) kept after the failback: minReplicas {}",
        min_replicas(&env)
    ));
}
