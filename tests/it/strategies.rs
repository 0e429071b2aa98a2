//! Where traffic goes, end to end against the real control plane (the `failover-controller`
//! binary as a child process, one per test, watching the test's namespace): all of it to a ready
//! primary, to the first ready secondary in list order (Ordered), shared among the ready
//! secondaries (Equal), by their weights (Weighted) or spilled over by the primary's health
//! (Proportional), and back to the primary once it recovers.

use failover_core::{
    api::{
        Phase, Strategy,
        conditions::{READY, ready},
    },
    route::trafficsplit::TrafficSplit,
};
use kube::ResourceExt;

use crate::support::{
    ON_EAST, ON_WEB, ON_WEST, PolicyBuilder, WAIT, condition, condition_reason, phase,
    routing_to_web, started, test_env,
};

#[tokio::test]
async fn routes_all_traffic_to_ready_primary_and_owns_the_split() {
    let Some((env, _controller)) = routing_to_web("primary-ready", PolicyBuilder::web()).await
    else {
        return;
    };
    let policy = env
        .wait_policy("web", WAIT, "phase Primary", |p| {
            phase(p) == Some(Phase::Primary)
        })
        .await;
    let ts = env
        .api::<TrafficSplit>()
        .get("web")
        .await
        .expect("TrafficSplit");
    let owner = ts
        .owner_references()
        .first()
        .cloned()
        .expect("ownerReference");
    assert_eq!(owner.uid, policy.uid().expect("uid"));
    assert_eq!(owner.controller, Some(true));
    assert_eq!(owner.block_owner_deletion, Some(true));
    assert_eq!(ts.spec.service, "web");
    let status = policy.status.expect("status");
    assert_eq!(status.active_backends, vec!["web"]);
    assert_eq!(status.ready_summary.as_deref(), Some("3/3"));
    assert_eq!(status.traffic_split.as_deref(), Some("web"));
    assert_eq!(status.observed_generation, policy.metadata.generation);
    assert_eq!(
        condition_reason(&env.policy("web").await.expect("policy"), READY).as_deref(),
        Some(ready::PRIMARY_ACTIVE)
    );
}

#[tokio::test]
async fn fails_over_to_first_ready_secondary_and_kubectl_shows_it() {
    let Some((env, _controller)) = routing_to_web("ordered", PolicyBuilder::web()).await else {
        return;
    };
    env.set_endpoints("web", 0, 2).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let policy = env
        .wait_policy("web", WAIT, ready::FAILED_OVER, |p| {
            phase(p) == Some(Phase::FailedOver)
        })
        .await;
    let status = policy.status.expect("status");
    assert!(status.last_failover_time.is_some());
    assert_eq!(
        status.backends[0].message.as_deref(),
        Some("0 of 2 endpoints ready, 1 needed")
    );
    let out = env.kubectl(&["get", "failoverpolicies"]);
    let table = String::from_utf8_lossy(&out.stdout);
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        &row[..5],
        ["web", "web", "web-east", ready::FAILED_OVER, "2/3"],
        "{table}"
    );
    // An Event tells what happened, on the policy.
    let seen = env.wait_event("web", ready::FAILED_OVER, None, WAIT).await;
    assert!(seen, "a FailedOver Event is recorded");
}

#[tokio::test]
async fn equal_strategy_splits_among_ready_secondaries() {
    let Some((env, _controller)) =
        routing_to_web("equal", PolicyBuilder::web().strategy(Strategy::Equal)).await
    else {
        return;
    };
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &[("web", 0), ("web-east", 1), ("web-west", 1)], WAIT)
        .await;
}

#[tokio::test]
async fn weighted_strategy_follows_weights() {
    let Some(env) = test_env!() else { return };
    let _controller = env.with_controller(&[]).await;
    env.apply_policy(
        "apiVersion: failover.dev/v1alpha1\nkind: FailoverPolicy\nmetadata: {name: web}\nspec:\n  service: web\n  primary: web\n  strategy: Weighted\n  secondaries:\n    - {service: web-east, weight: 300}\n    - {service: web-west, weight: 700}\n",
    );
    env.wait_weights("web", &ON_WEB, WAIT).await;
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights(
        "web",
        &[("web", 0), ("web-east", 300), ("web-west", 700)],
        WAIT,
    )
    .await;
    env.set_endpoints("web-west", 0, 1).await;
    env.wait_weights(
        "web",
        &[("web", 0), ("web-east", 300), ("web-west", 0)],
        WAIT,
    )
    .await;
}

#[tokio::test]
async fn proportional_spills_traffic_over_by_health() {
    let Some((env, _c)) = started(
        "proportional",
        PolicyBuilder::web().strategy(Strategy::Proportional),
    )
    .await
    else {
        return;
    };
    env.set_endpoints("web", 10, 0).await;
    env.wait_weights(
        "web",
        &[("web", 10_000), ("web-east", 0), ("web-west", 0)],
        WAIT,
    )
    .await;
    // 5 of 10 ready: health 70 (factor 1.4); the primary keeps 70%, web-east takes the rest.
    env.set_endpoints("web", 5, 5).await;
    env.wait_weights(
        "web",
        &[("web", 7_000), ("web-east", 3_000), ("web-west", 0)],
        WAIT,
    )
    .await;
    let p = env
        .wait_policy("web", WAIT, ready::SPILLOVER, |p| {
            condition(p, READY).is_some_and(|c| c.1 == ready::SPILLOVER)
        })
        .await;
    let shares: Vec<_> = p
        .status
        .expect("status")
        .backends
        .iter()
        .map(|b| b.share.clone().unwrap_or_default())
        .collect();
    assert_eq!(shares, vec!["70%", "30%", "0%"]);
    // 8 of 10 ready: health 100, all traffic back on the primary.
    env.set_endpoints("web", 8, 2).await;
    env.wait_weights(
        "web",
        &[("web", 10_000), ("web-east", 0), ("web-west", 0)],
        WAIT,
    )
    .await;
}

#[tokio::test]
async fn secondary_readiness_change_during_failover_moves_traffic() {
    let Some((env, _controller)) = routing_to_web("secondary-change", PolicyBuilder::web()).await
    else {
        return;
    };
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    env.set_endpoints("web-east", 0, 1).await;
    env.wait_weights("web", &ON_WEST, WAIT).await;
    env.set_endpoints("web-east", 3, 0).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
}

#[tokio::test]
async fn fails_back_when_primary_recovers() {
    let Some((env, _controller)) = routing_to_web("failback", PolicyBuilder::web()).await else {
        return;
    };
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    env.set_endpoints("web", 2, 0).await;
    env.wait_weights("web", &ON_WEB, WAIT).await;
    let p = env
        .wait_policy("web", WAIT, "failback recorded", |p| {
            p.status
                .as_ref()
                .is_some_and(|s| s.last_failback_time.is_some() && s.phase == Some(Phase::Primary))
        })
        .await;
    let s = p.status.expect("status");
    assert!(s.last_failback_time >= s.last_failover_time);
}
