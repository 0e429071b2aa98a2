//! Time in the decisions: `failoverAfter` and `failbackAfter` hold traffic until due, a failback
//! ramp moves the primary's share through its steps (and aborts on a failure), and readiness
//! flapping within the holds moves nothing (without holds, it ends right with bounded writes).

use std::time::{Duration, Instant};

use failover_core::api::{
    Phase,
    conditions::{READY, ready},
};

use crate::support::{
    self, LONG_WAIT, ON_EAST, ON_WEB, PolicyBuilder, TestEnv, WAIT, condition, condition_reason,
    counted_writes, metric, phase, routing_to_web, started, test_env,
};

#[tokio::test]
async fn failover_after_holds_traffic_until_due() {
    let Some((env, _controller)) =
        routing_to_web("hold", PolicyBuilder::web().holds("3s", "2s")).await
    else {
        return;
    };
    let lost = Instant::now();
    env.set_endpoints("web", 0, 1).await;
    env.wait_policy("web", WAIT, ready::FAILOVER_PENDING, |p| {
        condition_reason(p, READY).as_deref() == Some(ready::FAILOVER_PENDING)
    })
    .await;
    assert_eq!(
        env.split_weights("web").await.expect("split")[0].1,
        1,
        "still on the primary during the hold"
    );
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let held = lost.elapsed();
    assert!(
        held >= Duration::from_millis(2900),
        "failover happened after {held:?}, before failoverAfter"
    );
    let back = Instant::now();
    env.set_endpoints("web", 1, 0).await;
    env.wait_policy("web", WAIT, ready::FAILBACK_PENDING, |p| {
        condition_reason(p, READY).as_deref() == Some(ready::FAILBACK_PENDING)
    })
    .await;
    env.wait_weights("web", &ON_WEB, WAIT).await;
    assert!(
        back.elapsed() >= Duration::from_millis(1900),
        "failback after {:?}",
        back.elapsed()
    );
    support::figure(format!(
        "failoverAfter 3s took {held:?}; failbackAfter 2s took {:?}",
        back.elapsed()
    ));
}

/// The usual policy with a failback ramp of 25%, 50%, 100%, each step 2 s.
fn ramped(failover_after: &str) -> PolicyBuilder {
    PolicyBuilder::web().spec(|s| {
        s.failover_after = failover_after.into();
        s.failback = Some(failover_core::api::FailbackSpec {
            ramp: Some(failover_core::api::RampSpec {
                steps: vec![25, 50, 100],
                every: "2s".into(),
            }),
        });
    })
}

#[tokio::test]
async fn a_failback_ramp_moves_the_primary_share_through_its_steps_and_aborts_on_a_failure() {
    let Some((env, _c)) = started("ramp", ramped("0s")).await else {
        return;
    };
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    // From now on a failure waits 30 s before traffic leaves the primary; not during a ramp.
    env.apply(&ramped("30s"));
    let back = std::time::Instant::now();
    env.set_endpoints("web", 1, 0).await;
    env.wait_weights(
        "web",
        &[("web", 2500), ("web-east", 7500), ("web-west", 0)],
        WAIT,
    )
    .await;
    let first = back.elapsed();
    env.wait_weights(
        "web",
        &[("web", 5000), ("web-east", 5000), ("web-west", 0)],
        WAIT,
    )
    .await;
    let second = back.elapsed();
    env.wait_weights("web", &ON_WEB, WAIT).await;
    let done = back.elapsed();
    assert!(
        second >= Duration::from_millis(1900),
        "step 2 after {second:?}"
    );
    assert!(
        done >= Duration::from_millis(3900),
        "the ramp ended after {done:?}"
    );
    support::figure(format!(
        "ramp 25% at {first:?}, 50% at {second:?}, 100% at {done:?} (every 2 s)"
    ));

    // A second failover and failback, and the primary fails during the ramp.
    env.apply(&ramped("0s"));
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    env.apply(&ramped("30s"));
    env.set_endpoints("web", 1, 0).await;
    env.wait_weights(
        "web",
        &[("web", 2500), ("web-east", 7500), ("web-west", 0)],
        WAIT,
    )
    .await;
    let p = env
        .wait_policy("web", WAIT, ready::FAILBACK_RAMP, |p| {
            condition(p, READY).is_some_and(|c| c.1 == ready::FAILBACK_RAMP)
        })
        .await;
    assert!(
        p.status.and_then(|s| s.hold_until).is_some(),
        "the next step's time is shown"
    );
    let failed = std::time::Instant::now();
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, Duration::from_secs(10))
        .await;
    support::figure(format!(
        "a failure during the ramp sent traffic back in {:?}",
        failed.elapsed()
    ));
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
    env.wait_weights("web", &ON_WEB, LONG_WAIT).await;
    let writes_before = counted_writes(&controller, "trafficsplit", 1.0, LONG_WAIT).await;
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
    let controller = env.routing_to_web(&PolicyBuilder::web(), LONG_WAIT).await;
    let writes_before = counted_writes(&controller, "trafficsplit", 1.0, LONG_WAIT).await;
    let changes = toggle(&env, "web", 41, Duration::from_millis(50)).await;
    // 41 changes end with the primary not ready.
    env.wait_weights("web", &ON_EAST, LONG_WAIT).await;
    env.wait_policy("web", LONG_WAIT, ready::FAILED_OVER, |p| {
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
