//! Capacity-aware failover under real traffic: on the node, through the Gateway proxy, backends
//! whose Pods each answer 503 `<name> overloaded` above 10 requests in a second. The primary has
//! 3 Pods, the secondary 1, and the load (21 requests/s) needs 3: two serve 20.
//!
//! One test fails the primary twice under the same load, and counts what clients see in the
//! [`SPAN`] after each failure:
//!
//! - Without capacity, the failover sends the lone secondary Pod all of it: most answers are
//!   overload answers.
//! - With `capacity` (8 requests/s declared per Pod, below what a Pod serves) and `scale`, the
//!   secondary's HPA is raised to 3 the moment the primary fails and traffic moves as its Pods
//!   become ready: every failure a client sees (overloaded, failed otherwise, no answer) is at
//!   most 1/[`FRACTION_OF_WITHOUT`] of those without capacity, and overload answers stay within
//!   [`OVERLOAD_BOUND`]. The failback ramps as the primary's Pods come back one by one, within
//!   [`OVERLOAD_BOUND`], and the HPA is restored after it; a hand edit of the HPA made during
//!   the failover is kept instead.

use std::time::{Duration, Instant};

use failover_core::api::{CapacitySpec, ScaleKind, ScaleSpec, ScaleTarget};

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
pub const OVERLOAD_BOUND: f64 = 1.0;
/// With capacity, a failover fails at most one in this many of the requests the same failover
/// fails without capacity, over the same span: the failures left are those sent while the
/// secondary's new Pods start, which the node's speed sets, not the controller.
pub const FRACTION_OF_WITHOUT: usize = 5;
/// How long after a failure the requests are counted: the secondary's Pods start within it.
pub const SPAN: Duration = Duration::from_secs(20);

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
    let mut load = Load::new(&env.proxy_url(), RATE, Duration::from_secs(600));
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

/// The requests sent in a span: how many, how many answered overloaded (and when, after the
/// span began), how many failed otherwise.
struct Tally {
    sent: usize,
    overloaded: usize,
    overload_times: Vec<Duration>,
    failed: usize,
}

impl Tally {
    /// Every request a client saw fail: overloaded, failed otherwise, not answered.
    fn failures(&self) -> usize {
        self.overloaded + self.failed
    }

    fn percent(&self) -> f64 {
        percent(self.failures(), self.sent)
    }

    fn percent_overloaded(&self) -> f64 {
        percent(self.overloaded, self.sent)
    }
}

/// The requests sent in `span` from `since` on.
fn tally(answers: &[Answer], since: Instant, span: Duration) -> Tally {
    let sent: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.sent >= since && a.sent - since < span)
        .collect();
    Tally {
        sent: sent.len(),
        overloaded: sent.iter().filter(|a| a.overloaded).count(),
        overload_times: sent
            .iter()
            .filter(|a| a.overloaded)
            .map(|a| a.sent - since)
            .collect(),
        failed: sent.iter().filter(|a| a.failed() && !a.overloaded).count(),
    }
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

/// The requests sent in the [`SPAN`] from `failed_at` on, once the span is over.
async fn over_the_span(load: &crate::support::Running, failed_at: Instant) -> Tally {
    if let Some(rest) = SPAN.checked_sub(failed_at.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    tally(&load.answers(), failed_at, SPAN)
}

#[tokio::test]
async fn with_capacity_and_scaling_clients_see_a_fifth_of_the_failures_they_see_without() {
    const TEST: &str = "capacity";
    let Some(env) = scene(TEST, policy(TEST, false)).await else {
        return;
    };
    let load = flowing(&env, TEST).await;

    // Without capacity: the lone secondary Pod is sent all of it.
    let failed_at = Instant::now();
    env.set_backend_ready("web", false).await;
    let without = over_the_span(&load, failed_at).await;
    support::figure(format!(
        "without capacity, {RATE} requests/s to 1 secondary Pod serving {POD_RATE}: {} of {} requests ({:.1}%) in the {SPAN:?} after the primary failed failed as clients saw them, {} answered overloaded, {} failed otherwise",
        without.failures(),
        without.sent,
        without.percent(),
        without.overloaded,
        without.failed,
    ));
    assert!(
        without.percent_overloaded() >= 40.0,
        "a Pod serving {POD_RATE} of {RATE} requests/s answered only {} of {} overloaded",
        without.overloaded,
        without.sent
    );
    env.set_backend_ready("web", true).await;
    env.wait_http_route_weights("web", &crate::support::ON_WEB, WAIT)
        .await;
    all_served(&load).await;

    // With capacity and scaling: the HPA is raised to 3 (24 requests/s at 8 per Pod), and
    // traffic follows its Pods.
    env.apply(&policy(TEST, true));
    env.wait_policy("web", WAIT, "the policy with capacity observed", |p| {
        p.status.as_ref().and_then(|s| s.observed_generation) == p.metadata.generation
    })
    .await;
    let failed_at = Instant::now();
    env.set_backend_ready("web", false).await;
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
    let served = all_served(&load).await - failed_at;
    let with = over_the_span(&load, failed_at).await;
    support::figure(format!(
        "with capacity and scaling, failover: all traffic served {served:.1?} after the primary failed; {} of {} requests ({:.2}%) in the {SPAN:?} after the failure failed as clients saw them, {:.2}x of those without capacity: {} answered overloaded (sent at {:?} after the failure), {} failed otherwise (sent to the failed primary while the secondary grew)",
        with.failures(),
        with.sent,
        with.percent(),
        with.failures() as f64 / without.failures().max(1) as f64,
        with.overloaded,
        with.overload_times,
        with.failed,
    ));
    assert!(
        with.failures() * FRACTION_OF_WITHOUT <= without.failures(),
        "{} requests failed during the failover with capacity, more than a fifth of the {} without",
        with.failures(),
        without.failures()
    );
    assert!(
        with.percent_overloaded() <= OVERLOAD_BOUND,
        "{} of {} requests answered overloaded during the failover, sent at {:?} after the failure",
        with.overloaded,
        with.sent,
        with.overload_times
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
    let back = tally(&answers, back_at, back_at.elapsed());
    support::figure(format!(
        "with capacity, failback by the primary's ready Pods: {} of {} requests ({:.2}%) failed as clients saw them: {} answered overloaded (sent at {:?} after the first Pod was back), {} failed otherwise; HPA minReplicas restored to 1",
        back.failures(),
        back.sent,
        back.percent(),
        back.overloaded,
        back.overload_times,
        back.failed
    ));
    assert!(
        back.percent() <= OVERLOAD_BOUND,
        "{} of {} requests failed during the failback ({} overloaded, sent at {:?} after the first Pod was back)",
        back.failures(),
        back.sent,
        back.overloaded,
        back.overload_times
    );
    let policy = env.policy("web").await.expect("policy");
    assert!(
        condition(&policy, failover_core::api::conditions::SCALED_UP)
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
