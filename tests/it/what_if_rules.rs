//! `kubectl failover what-if` runs the controller's own reconcile driver (`failover_core::reconcile`
//! over an imagined world), so for every rule what it prints is what the controller then writes: for
//! each rule below, what-if is asked first, the same change is then made for real, and the route
//! and the conditions the controller writes must equal the printed ones (the route compared as
//! the controller compares routes, normalized; a condition by type, status, reason and message,
//! its timestamps left out, since the real change happens a little later than the imagined one).
//! Where what-if prints no route, the route must keep the version it had before the real change.

use failover_core::{
    api::{
        CapacitySpec, Strategy,
        conditions::{ATTACHED, READY, SUSPENDED, attached, group, ready},
    },
    route::RouteKind,
};
use serde_json::Value;

use crate::groups::{create_group, member, wait_group};
use crate::support::{
    self, ControllerProcess, Exporter, ON_EAST, ON_WEB, ON_WEST, PolicyBuilder, TestEnv, WAIT,
    WEB_BACKENDS, kubectl_failover, routing_to_web, started, test_env,
    what_if::{Predicted, reading_health, rules, what_if},
};

/// The usual policy with capacity (10 requests/s per endpoint) and `strategy`.
fn sized(strategy: Strategy) -> PolicyBuilder {
    PolicyBuilder::web().strategy(strategy).spec(|s| {
        s.capacity = Some(CapacitySpec {
            unserved: Default::default(),
            per_endpoint: 10,
            primary_per_endpoint: None,
            scale: None,
        });
        if strategy == Strategy::Weighted {
            s.secondaries[0].weight = Some(3);
            s.secondaries[1].weight = Some(1);
        }
    })
}

/// The primary fails for real as what-if's `--down web` imagines it: its endpoints stay, not
/// ready.
async fn primary_fails(env: &TestEnv) {
    env.set_endpoints("web", 0, 3).await;
}

#[tokio::test]
async fn capacity_under_each_strategy_is_what_what_if_printed() {
    for (strategy, name) in [
        (Strategy::Ordered, "ordered"),
        (Strategy::Equal, "equal"),
        (Strategy::Weighted, "weighted"),
    ] {
        let Some(env) = TestEnv::new(&format!("what-if-capacity-{name}")).await else {
            return;
        };
        let _c = env.routing_to_web(&sized(strategy), WAIT).await;
        // The primary serves 30 requests/s: more than either secondary alone.
        env.set_endpoints("web", 3, 0).await;
        env.wait_policy("web", WAIT, "the primary's 3 endpoints", |p| {
            p.status
                .as_ref()
                .is_some_and(|s| s.backends.first().is_some_and(|b| b.ready_endpoints == 3))
        })
        .await;
        let report = what_if(&env, "web", &["--down", "web"]);
        primary_fails(&env).await;
        Predicted::of(&env, &report, 0, "web", RouteKind::TrafficSplit)
            .await
            .written_as_printed(&env, &format!("capacity, {name}"))
            .await;
    }
}

#[tokio::test]
async fn a_pin_and_a_suspend_are_what_what_if_printed() {
    let pinned = PolicyBuilder::web().spec(|s| s.pin = Some("web-west".into()));
    let Some((env, _c)) = started("what-if-pin", pinned).await else {
        return;
    };
    env.wait_weights("web", &ON_WEST, WAIT).await;
    let report = what_if(&env, "web", &["--down", "web-west"]);
    env.set_endpoints("web-west", 0, 1).await;
    Predicted::of(&env, &report, 0, "web", RouteKind::TrafficSplit)
        .await
        .written_as_printed(&env, "pinned to a backend that fails")
        .await;

    let Some((env, _c)) = routing_to_web("what-if-suspend", PolicyBuilder::web()).await else {
        return;
    };
    support::ok(
        &kubectl_failover(&env, &["suspend", "web"]),
        "kubectl failover suspend",
    );
    env.wait_policy("web", WAIT, "suspended", |p| {
        support::condition(p, SUSPENDED).is_some_and(|c| c.0 == "True")
    })
    .await;
    let report = what_if(&env, "web", &["--down", "web"]);
    assert!(report["steps"][0]["route"].is_null(), "{report:#}");
    let predicted = Predicted::of(&env, &report, 0, "web", RouteKind::TrafficSplit).await;
    env.set_endpoints("web", 0, 1).await;
    predicted
        .written_as_printed(&env, "suspended, the primary down")
        .await;
    env.wait_weights("web", &ON_WEB, WAIT).await;
}

#[tokio::test]
async fn a_drill_and_its_end_are_what_what_if_printed() {
    let Some((env, _c)) = routing_to_web("what-if-drill", PolicyBuilder::web()).await else {
        return;
    };
    support::ok(
        &kubectl_failover(&env, &["drill", "web", "--to", "web-east", "--for", "8s"]),
        "kubectl failover drill",
    );
    let report = wait_for_drill(&env).await;
    assert_eq!(
        rules(&report).last().map(String::as_str),
        Some(ready::PRIMARY_ACTIVE),
        "{report:#}"
    );
    Predicted::of(&env, &report, 0, "web", RouteKind::TrafficSplit)
        .await
        .written_as_printed(&env, "a drill running")
        .await;
    let last = rules(&report).len() - 1;
    Predicted::of(&env, &report, last, "web", RouteKind::TrafficSplit)
        .await
        .written_as_printed(&env, "a drill ended")
        .await;
}

/// What-if with no change, once the controller has started the drill.
async fn wait_for_drill(env: &TestEnv) -> Value {
    env.wait_policy("web", WAIT, "the drill running", |p| {
        support::condition_reason(p, READY).as_deref() == Some(ready::DRILL)
    })
    .await;
    what_if(env, "web", &[])
}

#[tokio::test]
async fn proportional_weights_from_health_are_what_what_if_printed() {
    let Some(env) = test_env!() else { return };
    let exporter = Exporter::start();
    exporter.set(&[("web", 0.0), ("web-east", 0.0), ("web-west", 0.0)]);
    let _running = reading_health(&env, &exporter, |p| p.strategy(Strategy::Proportional)).await;
    let report = what_if(&env, "web", &["--health", "web=0.9"]);
    exporter.set(&[("web", 0.9), ("web-east", 0.0), ("web-west", 0.0)]);
    Predicted::of(&env, &report, 0, "web", RouteKind::TrafficSplit)
        .await
        .written_as_printed(&env, "proportional, the primary unhealthy")
        .await;
}

#[tokio::test]
async fn a_gateway_the_admin_refused_is_what_what_if_printed() {
    let Some(env) = test_env!() else { return };
    env.cp.install_gateway_api();
    env.ready_backends(&WEB_BACKENDS).await;
    let _c = env.with_controller(&[]).await;
    env.apply(&PolicyBuilder::web().on_gateway("infra", "public"));
    env.wait_policy("web", WAIT, attached::GATEWAY_NOT_ALLOWED, |p| {
        support::condition(p, ATTACHED).is_some_and(|c| c.1 == attached::GATEWAY_NOT_ALLOWED)
    })
    .await;
    let report = what_if(&env, "web", &["--down", "web"]);
    env.set_endpoints("web", 0, 1).await;
    Predicted::of(&env, &report, 0, "web", RouteKind::HttpRoute)
        .await
        .written_as_printed(&env, "a Gateway the admin does not allow")
        .await;
}

#[tokio::test]
async fn an_apex_another_policy_holds_is_what_what_if_printed() {
    let Some((env, _c)) = routing_to_web("what-if-apex", PolicyBuilder::web()).await else {
        return;
    };
    // A second policy on the same apex, made later: the first holds it.
    let second = PolicyBuilder::named("web-b", "web", &["web-east", "web-west"])
        .spec(|s| s.service = "web".into());
    env.apply(&second);
    env.wait_policy("web-b", WAIT, ready::APEX_CONFLICT, |p| {
        support::condition_reason(p, READY).as_deref() == Some(ready::APEX_CONFLICT)
    })
    .await;
    let conflict = what_if(&env, "web-b", &["--down", "web-east"]);
    assert_eq!(rules(&conflict), vec![ready::APEX_CONFLICT], "{conflict:#}");
    assert!(conflict["steps"][0]["route"].is_null(), "{conflict:#}");
    let predicted = Predicted::of(&env, &conflict, 0, "web-b", RouteKind::TrafficSplit).await;
    env.set_endpoints("web-east", 0, 1).await;
    predicted
        .written_as_printed(&env, "an apex another policy holds")
        .await;
}

#[tokio::test]
async fn no_ready_backend_is_what_what_if_printed() {
    let Some((env, _c)) = routing_to_web("what-if-none-ready", PolicyBuilder::web()).await else {
        return;
    };
    let report = what_if(&env, "web", &["--down", "web,web-east,web-west"]);
    assert_eq!(rules(&report), vec![ready::NO_READY_BACKEND], "{report:#}");
    let predicted = Predicted::of(&env, &report, 0, "web", RouteKind::TrafficSplit).await;
    // The secondaries first: the primary, still ready, keeps the traffic meanwhile, so the
    // controller sees no other move on the way to what what-if imagined at once.
    for backend in ["web-east", "web-west", "web"] {
        env.set_endpoints(backend, 0, 1).await;
    }
    predicted.written_as_printed(&env, "no backend ready").await;
}

#[tokio::test]
async fn a_failback_hold_is_what_what_if_printed() {
    let held = PolicyBuilder::web().holds("1s", "10m");
    let Some((env, _c)) = routing_to_web("what-if-failback-hold", held).await else {
        return;
    };
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let report = what_if(&env, "web", &["--up", "web"]);
    assert_eq!(rules(&report)[0], ready::FAILBACK_PENDING, "{report:#}");
    let predicted = Predicted::of(&env, &report, 0, "web", RouteKind::TrafficSplit).await;
    env.set_endpoints("web", 1, 0).await;
    predicted
        .written_as_printed(&env, "the primary back, failbackAfter holding")
        .await;
}

#[tokio::test]
async fn a_tier_is_what_what_if_printed() {
    let Some(env) = test_env!() else { return };
    let backends = ["web", "web-b1", "web-b2", "web-c"];
    env.ready_backends(&backends).await;
    let _c = env.with_controller(&[]).await;
    env.apply(
        &PolicyBuilder::named("web", "web", &["web-b1", "web-b2", "web-c"]).spec(|s| {
            s.strategy = Strategy::Weighted;
            s.secondaries[0].weight = Some(3);
            s.secondaries[1].weight = Some(1);
            s.secondaries[2].tier = Some(1);
        }),
    );
    let on_web: Vec<(&str, i64)> = backends.iter().copied().zip([1, 0, 0, 0]).collect();
    env.wait_weights("web", &on_web, WAIT).await;
    let report = what_if(&env, "web", &["--down", "web,web-b1,web-b2"]);
    let predicted = Predicted::of(&env, &report, 0, "web", RouteKind::TrafficSplit).await;
    for backend in ["web", "web-b1", "web-b2"] {
        env.set_endpoints(backend, 0, 1).await;
    }
    predicted
        .written_as_printed(&env, "the first tier down, tier 1 taking it")
        .await;
}

#[tokio::test]
async fn a_spillover_by_capacity_is_what_what_if_printed() {
    let Some((env, _c)) = sized_on_three_ready("what-if-spillover").await else {
        return;
    };
    two_of_three_ready(
        &env,
        ready::SPILLOVER_BY_CAPACITY,
        "the primary short of endpoints",
    )
    .await;
}

#[tokio::test]
async fn a_failback_by_capacity_is_what_what_if_printed() {
    let Some((env, _c)) = sized_on_three_ready("what-if-capacity-failback").await else {
        return;
    };
    primary_fails(&env).await;
    env.wait_policy("web", WAIT, ready::FAILED_OVER, |p| {
        support::condition_reason(p, READY).as_deref() == Some(ready::FAILED_OVER)
    })
    .await;
    let scenario = "the primary back with 2 of its 3 endpoints";
    two_of_three_ready(&env, ready::FAILBACK_BY_CAPACITY, scenario).await;
}

/// The usual policy with capacity, routing to a primary of 3 ready endpoints.
async fn sized_on_three_ready(test: &str) -> Option<(TestEnv, ControllerProcess)> {
    let env = TestEnv::new(test).await?;
    let controller = env.routing_to_web(&sized(Strategy::Ordered), WAIT).await;
    env.set_endpoints("web", 3, 0).await;
    wait_ready_endpoints(&env, 3).await;
    Some((env, controller))
}

/// What-if `--ready web=2` first decides by `rule`, and the controller writes what it printed
/// once 2 of the primary's 3 endpoints are ready for real.
async fn two_of_three_ready(env: &TestEnv, rule: &str, scenario: &str) {
    let report = what_if(env, "web", &["--ready", "web=2"]);
    assert_eq!(rules(&report)[0], rule, "{report:#}");
    let predicted = Predicted::of(env, &report, 0, "web", RouteKind::TrafficSplit).await;
    env.set_endpoints("web", 2, 1).await;
    predicted.written_as_printed(env, scenario).await;
}

/// Waits until the status counts `ready` endpoints of the primary.
async fn wait_ready_endpoints(env: &TestEnv, ready: i32) {
    env.wait_policy("web", WAIT, "the primary's endpoints counted", |p| {
        p.status.as_ref().is_some_and(|s| {
            s.backends
                .first()
                .is_some_and(|b| b.ready_endpoints == ready)
        })
    })
    .await;
}

#[tokio::test]
async fn following_a_group_is_what_what_if_printed() {
    let Some(env) = test_env!() else { return };
    env.ready_backends(&["cart-east", "cart-west", "payments-east", "payments-west"])
        .await;
    let _c = env.with_controller(&[]).await;
    create_group(&env, "storefront", &["cart", "payments"]).await;
    env.apply(&member("cart"));
    env.apply(&member("payments"));
    wait_group(&env, "storefront", "east", group::SITE_READY).await;
    // payments' primary fails: the group, and cart with it, move to west.
    env.set_endpoints("payments-east", 0, 1).await;
    wait_group(&env, "storefront", "west", group::FAILED_OVER).await;
    let report = what_if(&env, "cart", &["--down", "cart-east"]);
    assert_eq!(rules(&report), vec![ready::FOLLOWING_GROUP], "{report:#}");
    let predicted = Predicted::of(&env, &report, 0, "cart", RouteKind::TrafficSplit).await;
    env.set_endpoints("cart-east", 0, 1).await;
    predicted
        .written_as_printed(&env, "a member following its group's site")
        .await;
}
