//! Failover groups: two policies in one group route to one site; when one member's primary
//! fails, both move to the next site with one decision (the group's status names the member
//! that moved it), and both come back together. On the control plane, and through the real proxy
//! on the real node with two hostnames, the failed requests counted as the HTTP tests count them.

use std::time::{Duration, Instant};

use failover_core::api::{
    FailoverGroup, FailoverGroupSpec, FailoverPolicySpec,
    conditions::{PINNED, READY, group, pinned, ready},
};
use kube::api::PostParams;

use crate::support::{
    self, ControllerProcess, Load, ON_EAST, ON_WEB, PolicyBuilder, TestEnv, WAIT, condition,
    failovers::{LOST_IN_A_FAILOVER, RATE, failed, settled_on, stage},
    test_env, wait_until,
};

/// The longest any load runs.
const LOAD_LIMIT: Duration = Duration::from_secs(240);

/// `name`: primary `<name>-east` in site east, secondary `<name>-west` in site west.
pub(crate) fn member(name: &str) -> PolicyBuilder {
    PolicyBuilder::named(name, &format!("{name}-east"), &[&format!("{name}-west")]).spec(
        |s: &mut FailoverPolicySpec| {
            s.primary_site = Some("east".into());
            s.secondaries[0].site = Some("west".into());
        },
    )
}

pub(crate) async fn create_group(env: &TestEnv, name: &str, members: &[&str]) {
    let group = FailoverGroup::new(
        name,
        FailoverGroupSpec {
            sites: vec!["east".into(), "west".into()],
            members: members.iter().map(|m| m.to_string()).collect(),
        },
    );
    env.api::<FailoverGroup>()
        .create(&PostParams::default(), &group)
        .await
        .expect("creating the group");
}

/// Waits until the group's status names `site` with the `Ready` reason `reason`.
pub(crate) async fn wait_group(
    env: &TestEnv,
    name: &str,
    site: &str,
    reason: &str,
) -> FailoverGroup {
    let api = env.api::<FailoverGroup>();
    let mut last = None;
    let reached = wait_until(WAIT, || {
        let api = api.clone();
        async move {
            let got = api.get(name).await.ok();
            got.as_ref().is_some_and(|g| {
                g.status.as_ref().is_some_and(|s| {
                    s.site.as_deref() == Some(site)
                        && s.conditions
                            .iter()
                            .any(|c| c.type_ == READY && c.reason == reason)
                })
            })
        }
    })
    .await;
    if let Ok(got) = api.get(name).await {
        last = Some(got);
    }
    assert!(
        reached,
        "group {name} never reached site {site} ({reason}): {last:?}"
    );
    last.expect("the group")
}

fn east_west(east: i64, west: i64, name: &str) -> Vec<(String, i64)> {
    vec![
        (format!("{name}-east"), east),
        (format!("{name}-west"), west),
    ]
}

/// Waits until both members' routes send `east` and `west`.
async fn both_on(env: &TestEnv, east: i64, west: i64) {
    for name in ["cart", "payments"] {
        let w = east_west(east, west, name);
        let w: Vec<(&str, i64)> = w.iter().map(|(s, x)| (s.as_str(), *x)).collect();
        env.wait_weights(name, &w, WAIT).await;
    }
}

#[tokio::test]
async fn one_members_primary_failing_moves_every_member_to_the_next_site_and_back() {
    let Some(env) = test_env!() else { return };
    env.ready_backends(&["cart-east", "cart-west", "payments-east", "payments-west"])
        .await;
    let _c = ControllerProcess::start(&env, &[]);
    create_group(&env, "storefront", &["cart", "payments"]).await;
    env.apply(&member("cart"));
    env.apply(&member("payments"));
    both_on(&env, 1, 0).await;
    wait_group(&env, "storefront", "east", group::SITE_READY).await;

    // Only payments' primary fails: cart moves too.
    env.set_endpoints("payments-east", 0, 1).await;
    both_on(&env, 0, 1).await;
    let moved = wait_group(&env, "storefront", "west", group::FAILED_OVER).await;
    assert_eq!(
        moved.status.and_then(|s| s.last_trigger).as_deref(),
        Some("payments")
    );
    let cart = env
        .wait_policy("cart", WAIT, "following the group to west", |p| {
            condition(p, READY)
                .is_some_and(|c| c.1 == ready::FOLLOWING_GROUP && c.2.contains("site west"))
        })
        .await;
    assert!(condition(&cart, READY).is_some_and(|c| c.0 == "True"));

    // payments' primary recovers: both come back.
    env.set_endpoints("payments-east", 1, 0).await;
    both_on(&env, 1, 0).await;
    wait_group(&env, "storefront", "east", group::SITE_READY).await;
}

/// The writes a restart must not repeat.
const WRITES: [&str; 3] = ["trafficsplit", "status", "group_status"];

/// Waits until `controller`'s writes stay the same for a second.
async fn at_rest(controller: &ControllerProcess) {
    let deadline = Instant::now() + WAIT;
    let mut last = support::api_writes(controller, &WRITES).await;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = support::api_writes(controller, &WRITES).await;
        assert!(Instant::now() < deadline, "never at rest: {now:?}");
        if now == last {
            return;
        }
        last = now;
    }
}

#[tokio::test]
async fn a_restarted_controller_keeps_a_failed_over_group_where_it_is_and_writes_nothing() {
    let Some(env) = test_env!() else { return };
    env.ready_backends(&["cart-east", "cart-west", "payments-east", "payments-west"])
        .await;
    let mut first = ControllerProcess::start(&env, &[]);
    create_group(&env, "storefront", &["cart", "payments"]).await;
    env.apply(&member("cart"));
    env.apply(&member("payments"));
    both_on(&env, 1, 0).await;
    env.set_endpoints("payments-east", 0, 1).await;
    both_on(&env, 0, 1).await;
    wait_group(&env, "storefront", "west", group::FAILED_OVER).await;

    // The first controller at rest (its last member and group statuses written), then
    // restarted. cart's own primary is ready: deciding alone, before its group is known, the
    // restarted controller would send cart back east.
    at_rest(&first).await;
    first.signal("TERM");
    drop(first);
    let second = ControllerProcess::start(&env, &[]);
    let reconciled = wait_until(WAIT, || async {
        let text = second.admin_get("/metrics").await.1;
        support::metric(&text, "failover_reconciles_total").is_some_and(|n| n >= 2.0)
    })
    .await;
    assert!(
        reconciled,
        "the restarted controller never reconciled both members"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes = support::api_writes(&second, &WRITES).await;
    assert_eq!(
        writes.values().sum::<f64>(),
        0.0,
        "writes after the restart: {writes:?}"
    );
    both_on(&env, 0, 1).await;
}

#[tokio::test]
async fn a_pinned_member_is_named_by_the_group_and_moves_nothing() {
    let Some(env) = test_env!() else { return };
    env.ready_backends(&["cart-east", "cart-west", "payments-east", "payments-west"])
        .await;
    let _c = ControllerProcess::start(&env, &[]);
    create_group(&env, "storefront", &["cart", "payments"]).await;
    env.apply(&member("cart"));
    env.apply(&member("payments").spec(|s: &mut FailoverPolicySpec| {
        s.pin = Some("payments-east".into());
    }));
    let held = wait_group(&env, "storefront", "east", group::SITE_READY).await;
    let status = held.status.expect("status");
    assert!(
        status
            .members
            .iter()
            .any(|m| m.name == "payments" && !m.following),
        "{:?}",
        status.members
    );
    // The pinned member's primary failing moves nobody: once the controller has read it (the
    // pinned member says its pinned backend is not ready), both members' routes are where they
    // were and the group stays east.
    env.set_endpoints("payments-east", 0, 1).await;
    env.wait_policy("payments", WAIT, "the pinned backend not ready", |p| {
        condition(p, PINNED).is_some_and(|c| c.1 == pinned::PINNED_BACKEND_NOT_READY)
    })
    .await;
    for name in ["cart", "payments"] {
        let stay = east_west(1, 0, name);
        let stay: Vec<(String, i64)> = stay.iter().map(|(s, x)| (s.to_string(), *x)).collect();
        assert_eq!(env.split_weights(name).await, Some(stay), "{name}");
    }
    let group = env
        .api::<FailoverGroup>()
        .get("storefront")
        .await
        .expect("the group");
    let status = group.status.expect("its status");
    let ready = status.conditions.iter().find(|c| c.type_ == READY);
    assert_eq!(
        (status.site.as_deref(), ready.map(|c| c.reason.as_str())),
        (Some("east"), Some(group::SITE_READY))
    );
}

/// How far apart the two members' routes may move in a group failover: the trigger's reconcile
/// records the move and wakes the other member at once, so its route follows within one
/// reconcile. The kept runs measured 8 to 50 ms; ten times the most.
pub const ROUTES_APART: Duration = Duration::from_millis(500);

/// `policy` in sites `one` (its primary) and `two` (its secondaries), on the Gateway
/// `default/edge` for `host`.
fn on_sites(policy: PolicyBuilder, host: String) -> PolicyBuilder {
    policy.on_gateway("default", "edge").spec(move |s| {
        s.primary_site = Some("one".into());
        for secondary in &mut s.secondaries {
            secondary.site = Some("two".into());
        }
        if let Some(route) = s.http_route.as_mut() {
            route.hostnames = vec![host];
        }
    })
}

/// How long the node's routes may take.
const NODE_WAIT: Duration = Duration::from_secs(90);

/// Polls both routes every 20 ms until each has `expected`; returns when each first did.
async fn moved_at(env: &TestEnv, expected: [(&str, Vec<(String, i64)>); 2]) -> [Instant; 2] {
    let mut at: [Option<Instant>; 2] = [None, None];
    let deadline = Instant::now() + NODE_WAIT;
    while at.iter().any(Option::is_none) && Instant::now() < deadline {
        for (i, (name, weights)) in expected.iter().enumerate() {
            if at[i].is_none() && env.http_route_weights(name).await.as_ref() == Some(weights) {
                at[i] = Some(Instant::now());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    at.map(|t| t.expect("both routes moved"))
}

fn pairs(weights: &[(&str, i64)]) -> Vec<(String, i64)> {
    weights.iter().map(|(s, w)| (s.to_string(), *w)).collect()
}

#[tokio::test]
async fn through_the_proxy_one_members_failure_moves_both_hostnames_to_the_next_site_and_back() {
    let test = "traffic-group";
    let Some(env) = stage(test).await else { return };
    for name in ["api", "api-east"] {
        env.backend(name, 1);
    }
    for name in ["api", "api-east"] {
        env.wait_ready_replicas(name, 1, NODE_WAIT).await;
    }
    env.install_controller(&[]);
    let (web_host, api_host) = (
        format!("{test}-web.failover.test"),
        format!("{test}-api.failover.test"),
    );
    env.apply(&on_sites(PolicyBuilder::web(), web_host.clone()));
    env.apply(&on_sites(
        PolicyBuilder::named("api", "api", &["api-east"]),
        api_host.clone(),
    ));
    let group = FailoverGroup::new(
        "edge-apps",
        FailoverGroupSpec {
            sites: vec!["one".into(), "two".into()],
            members: vec!["web".into(), "api".into()],
        },
    );
    env.api::<FailoverGroup>()
        .create(&PostParams::default(), &group)
        .await
        .expect("creating the group");
    let (api_on_one, api_on_two) = (
        pairs(&[("api", 1), ("api-east", 0)]),
        pairs(&[("api", 0), ("api-east", 1)]),
    );
    moved_at(&env, [("web", pairs(&ON_WEB)), ("api", api_on_one.clone())]).await;
    wait_group(&env, "edge-apps", "one", group::SITE_READY).await;
    let load = |host: &String| {
        let mut load = Load::new(&env.proxy_url(), RATE, LOAD_LIMIT);
        load.host = Some(host.clone());
        load.start().expect("load")
    };
    let (web_load, api_load) = (load(&web_host), load(&api_host));
    settled_on(&web_load, "web").await;
    settled_on(&api_load, "api").await;

    // Only web's Pods fail their probe: api, whose primary stays ready, moves with it.
    let broken = Instant::now();
    env.set_backend_ready("web", false).await;
    let [web_moved, api_moved] = moved_at(
        &env,
        [("web", pairs(&ON_EAST)), ("api", api_on_two.clone())],
    )
    .await;
    settled_on(&web_load, "web-east").await;
    settled_on(&api_load, "api-east").await;
    let apart = if web_moved > api_moved {
        web_moved - api_moved
    } else {
        api_moved - web_moved
    };
    let moved = wait_group(&env, "edge-apps", "two", group::FAILED_OVER).await;
    assert_eq!(
        moved.status.and_then(|s| s.last_trigger).as_deref(),
        Some("web")
    );

    // web recovers: both come back.
    env.set_backend_ready("web", true).await;
    moved_at(&env, [("web", pairs(&ON_WEB)), ("api", api_on_one)]).await;
    settled_on(&web_load, "web").await;
    settled_on(&api_load, "api").await;
    let (web_answers, api_answers) = (web_load.stop().await, api_load.stop().await);
    let (web_lost, api_lost) = (
        failed(&web_answers, broken).len(),
        failed(&api_answers, broken).len(),
    );
    support::figure(format!(
        "group failover at {RATE} req/s per hostname: routes moved {apart:.0?} apart (bound {ROUTES_APART:?}); failed: web {web_lost} of {}, api {api_lost} of {} (bounds {LOST_IN_A_FAILOVER} and 0), failover and failback",
        web_answers.len(),
        api_answers.len()
    ));
    assert!(apart <= ROUTES_APART, "the routes moved {apart:?} apart");
    // The trigger's requests sent between its Pods failing and the proxy moving them fail; the
    // member moved from one ready backend to another loses none, as a pin loses none.
    assert!(
        web_lost <= LOST_IN_A_FAILOVER,
        "web lost {web_lost} of its requests"
    );
    assert_eq!(
        api_lost, 0,
        "api, moved between two ready backends, lost requests"
    );
}
