//! Beyond the peers, end to end against the real control plane: proportional spillover,
//! ready-ratio thresholds, whenNoneReady, suspend, pin, and HTTPRoute output (Gateway API CRDs
//! from the upstream module).

use std::time::Duration;

use failover::api::conditions::{PINNED, READY, SUSPENDED, ready};
use failover::api::{FailoverPolicy, HttpRouteSpec, Output, Phase, Strategy, WhenNoneReady};
use kube::{
    Api,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
};

use crate::support::{
    self, ControllerProcess, ON_EAST, ON_WEB, ON_WEST, PolicyBuilder, WAIT, WEB_BACKENDS,
    condition, route_backend_weights, started, test_env, wait_until, weights,
};

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
async fn min_ready_ratio_fails_over_a_thinned_primary() {
    let Some((env, _c)) = started(
        "ratio",
        PolicyBuilder::web().spec(|s| s.readiness.min_ready_ratio = Some(0.5)),
    )
    .await
    else {
        return;
    };
    env.set_endpoints("web", 6, 4).await;
    env.wait_weights("web", &ON_WEB, WAIT).await;
    env.set_endpoints("web", 4, 6).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
}

#[tokio::test]
async fn when_none_ready_primary_sends_everything_to_the_primary() {
    let Some((env, _c)) = started(
        "none-primary",
        PolicyBuilder::web().spec(|s| s.when_none_ready = WhenNoneReady::Primary),
    )
    .await
    else {
        return;
    };
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    env.set_endpoints("web-east", 0, 1).await;
    env.set_endpoints("web-west", 0, 1).await;
    env.wait_weights("web", &ON_WEB, WAIT).await;
    env.wait_policy("web", WAIT, ready::NO_READY_BACKEND, |p| {
        p.status.as_ref().and_then(|s| s.phase) == Some(Phase::NoReadyBackend)
    })
    .await;
}

#[tokio::test]
async fn suspend_freezes_the_split_and_the_status_shows_it_as_it_stands() {
    let Some((env, _c)) = started("suspend", PolicyBuilder::web()).await else {
        return;
    };
    env.wait_weights("web", &ON_WEB, WAIT).await;
    env.apply(&PolicyBuilder::web().spec(|s| s.suspend = true));
    env.set_endpoints("web", 0, 1).await;
    let p = env
        .wait_policy(
            "web",
            WAIT,
            "suspended with the primary seen not ready",
            |p| {
                condition(p, SUSPENDED).is_some_and(|c| c.0 == "True")
                    && p.status
                        .as_ref()
                        .is_some_and(|s| s.backends.first().is_some_and(|b| !b.ready))
            },
        )
        .await;
    let status = p.status.clone().expect("status");
    assert_eq!(
        status.phase,
        Some(Phase::Primary),
        "the route still sends to the primary"
    );
    assert_eq!(status.active_backends, ["web"]);
    let shown: Vec<(String, i64)> = status
        .backends
        .iter()
        .map(|b| (b.service.clone(), i64::from(b.weight)))
        .collect();
    assert_eq!(
        shown,
        weights(&ON_WEB),
        "the status shows the route's weights"
    );
    let message = condition(&p, SUSPENDED).map(|c| c.2).unwrap_or_default();
    assert!(
        message.contains("stays at web=1 web-east=0 web-west=0")
            && message.contains("would go to web-east"),
        "{message}"
    );
    assert_eq!(
        condition(&p, READY).map(|c| (c.0, c.1)),
        Some(("False".into(), ready::SUSPENDED.into()))
    );
    assert_eq!(
        env.split_weights("web").await.expect("split")[0],
        ("web".to_string(), 1),
        "frozen while suspended"
    );
    env.apply(&PolicyBuilder::web());
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let p = env
        .wait_policy("web", WAIT, "no Suspended condition", |p| {
            condition(p, SUSPENDED).is_none()
        })
        .await;
    assert_eq!(p.status.and_then(|s| s.phase), Some(Phase::FailedOver));
}

#[tokio::test]
async fn pin_overrides_readiness_and_warns_while_the_pinned_backend_is_down() {
    let Some((env, _c)) = started(
        "pin",
        PolicyBuilder::web().spec(|s| s.pin = Some("web-west".into())),
    )
    .await
    else {
        return;
    };
    env.wait_weights("web", &ON_WEST, WAIT).await;
    env.set_endpoints("web-west", 0, 1).await;
    let p = env
        .wait_policy("web", WAIT, ready::PINNED_BACKEND_NOT_READY, |p| {
            condition(p, PINNED).is_some_and(|c| c.1 == ready::PINNED_BACKEND_NOT_READY)
        })
        .await;
    assert_eq!(condition(&p, READY).map(|c| c.0), Some("False".to_string()));
    assert_eq!(
        env.split_weights("web").await.expect("split")[2].1,
        1,
        "still pinned"
    );
    let warned = env
        .wait_event(
            "web",
            ready::PINNED_BACKEND_NOT_READY,
            Some("Warning"),
            WAIT,
        )
        .await;
    assert!(
        warned,
        "a Warning Event while the pinned backend is not ready"
    );
    // Unpinning returns to the normal rules (the primary is ready).
    env.apply(&PolicyBuilder::web());
    env.wait_weights("web", &ON_WEB, WAIT).await;
}

/// The usual policy with output HTTPRoute to port 8080 of the backends.
fn http_route_policy(parent_port: Option<i32>) -> PolicyBuilder {
    PolicyBuilder::web().spec(|s| {
        s.output = Output::HttpRoute;
        s.http_route = Some(HttpRouteSpec {
            parent_port,
            ..HttpRouteSpec::on_port(8080)
        });
    })
}

#[tokio::test]
async fn http_route_output_is_owned_kept_and_collected_like_a_traffic_split() {
    let Some(env) = test_env!() else { return };
    env.cp.install_gateway_api();
    env.ready_backends(&WEB_BACKENDS).await;
    // Started after the CRDs exist: the controller discovers the Gateway API at start.
    let _c = ControllerProcess::start(&env, &[]);
    env.apply(&http_route_policy(Some(80)));
    let routes: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.ns,
        &failover::route::httproute::resource(),
    );
    let wait_route = |expected: Vec<(&'static str, i64)>| {
        let routes = routes.clone();
        async move {
            let expected: Vec<(String, i64)> = expected
                .into_iter()
                .map(|(s, w)| (s.to_string(), w))
                .collect();
            let ok = wait_until(WAIT, || async {
                routes
                    .get_opt("web")
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|r| route_backend_weights(&r).as_ref() == Some(&expected))
            })
            .await;
            assert!(
                ok,
                "HTTPRoute never had {expected:?}: {:?}",
                routes.get_opt("web").await.ok().flatten().map(|r| r.data)
            );
        }
    };
    wait_route(vec![("web", 1), ("web-east", 0), ("web-west", 0)]).await;
    let route = routes.get("web").await.expect("route");
    let parent = &route.data["spec"]["parentRefs"][0];
    assert_eq!(
        (
            parent["kind"].as_str(),
            parent["name"].as_str(),
            parent["port"].as_i64()
        ),
        (Some("Service"), Some("web"), Some(80))
    );
    assert_eq!(
        route.data["spec"]["rules"][0]["backendRefs"][0]["port"].as_i64(),
        Some(8080)
    );
    let policy = env
        .wait_policy("web", WAIT, "status.httpRoute", |p| {
            p.status.as_ref().and_then(|s| s.http_route.as_deref()) == Some("web")
        })
        .await;
    let owner = route.metadata.owner_references.clone().unwrap_or_default();
    assert!(
        owner
            .iter()
            .any(|o| o.controller == Some(true) && Some(&o.uid) == policy.metadata.uid.as_ref())
    );

    // Failover moves the weights.
    env.set_endpoints("web", 0, 1).await;
    wait_route(vec![("web", 0), ("web-east", 1), ("web-west", 0)]).await;
    // A hand edit is reverted.
    let edit = serde_json::json!({"spec": {"rules": [{"backendRefs": [{"name": "web", "port": 8080, "weight": 5}]}]}});
    routes
        .patch("web", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .expect("hand edit");
    wait_route(vec![("web", 0), ("web-east", 1), ("web-west", 0)]).await;
    // Deleting the policy garbage-collects the route.
    env.api::<FailoverPolicy>()
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(
        wait_until(Duration::from_secs(60), || async {
            routes.get_opt("web").await.ok().flatten().is_none()
        })
        .await,
        "HTTPRoute not collected"
    );
}

#[tokio::test]
async fn foreign_http_route_is_never_touched() {
    let Some(env) = test_env!() else { return };
    env.cp.install_gateway_api();
    env.ready_backends(&WEB_BACKENDS).await;
    let routes: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.ns,
        &failover::route::httproute::resource(),
    );
    let mut foreign = DynamicObject::new("web", &failover::route::httproute::resource());
    foreign.data = serde_json::json!({"spec": {"parentRefs": [{"group": "core", "kind": "Service", "name": "web"}], "rules": [{"backendRefs": [{"name": "other", "port": 80}]}]}});
    let created = routes
        .create(&PostParams::default(), &foreign)
        .await
        .expect("foreign route");
    let _c = ControllerProcess::start(&env, &[]);
    env.apply(&http_route_policy(None));
    env.wait_policy("web", WAIT, ready::HTTP_ROUTE_CONFLICT, |p| {
        condition(p, READY).is_some_and(|c| c.1 == ready::HTTP_ROUTE_CONFLICT)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = routes.get("web").await.expect("route");
    assert_eq!(
        after.metadata.resource_version,
        created.metadata.resource_version
    );
}

/// The usual policy with a failback ramp of 25%, 50%, 100%, each step 2 s.
fn ramped(failover_after: &str) -> PolicyBuilder {
    PolicyBuilder::web().spec(|s| {
        s.failover_after = failover_after.into();
        s.failback = Some(failover::api::FailbackSpec {
            ramp: Some(failover::api::RampSpec {
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
