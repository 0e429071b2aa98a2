//! The route a policy owns, a TrafficSplit or an HTTPRoute (the Gateway API's CRDs from the
//! upstream module): owned through an ownerReference, kept as decided (a hand edit is reverted)
//! and collected with the policy; a route of someone else's never touched; two policies on one
//! apex Service give one route, and deleting the older hands it over.

use std::time::Duration;

use failover_core::{
    api::{
        FailoverPolicy, GatewayRouteSpec, Output,
        conditions::{READY, ready},
    },
    route::trafficsplit::TrafficSplit,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
};

use crate::support::{
    self, ControllerProcess, ON_WEB, PolicyBuilder, WAIT, WEB_BACKENDS, condition,
    condition_reason, route_backend_weights, routing_to_web, test_env, wait_until,
};

#[tokio::test]
async fn foreign_traffic_split_is_never_touched() {
    let Some(env) = test_env!() else { return };
    env.ready_backends(&WEB_BACKENDS).await;
    let foreign = serde_json::json!({
        "apiVersion": "split.smi-spec.io/v1alpha2", "kind": "TrafficSplit",
        "metadata": {"name": "web"},
        "spec": {"service": "web", "backends": [{"service": "other", "weight": 5}]}
    });
    let ts: TrafficSplit = serde_json::from_value(foreign).expect("ts");
    let created = env
        .api::<TrafficSplit>()
        .create(&PostParams::default(), &ts)
        .await
        .expect("create foreign split");
    let _controller = ControllerProcess::start(&env, &[]);
    env.apply(&PolicyBuilder::web());
    let p = env
        .wait_policy("web", WAIT, Output::TrafficSplit.reasons().conflict, |p| {
            condition_reason(p, READY).as_deref() == Some(Output::TrafficSplit.reasons().conflict)
        })
        .await;
    let ready = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == READY))
        .expect(READY);
    assert_eq!(ready.status, "False");
    assert!(
        ready.message.contains("so traffic to web is not written"),
        "the decision not written is in the condition: {}",
        ready.message
    );
    let status = p.status.as_ref().expect("status");
    assert!(
        status.active_backends.is_empty() && status.phase.is_none(),
        "no route of this policy is in place, and the status says so: {status:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = env
        .api::<TrafficSplit>()
        .get("web")
        .await
        .expect("foreign split");
    assert_eq!(
        after.resource_version(),
        created.resource_version(),
        "the foreign TrafficSplit was modified"
    );
    // Once the foreign split is gone, the policy takes its name.
    env.api::<TrafficSplit>()
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    env.wait_weights("web", &ON_WEB, WAIT).await;
}

#[tokio::test]
async fn hand_edit_of_the_split_is_reverted() {
    let Some((env, _controller)) = routing_to_web("hand-edit", PolicyBuilder::web()).await else {
        return;
    };
    let edit = serde_json::json!({"spec": {"backends": [{"service": "web", "weight": 0}, {"service": "web-east", "weight": 9}, {"service": "web-west", "weight": 0}]}});
    env.api::<TrafficSplit>()
        .patch("web", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .expect("hand edit");
    env.wait_weights("web", &ON_WEB, WAIT).await;
}

#[tokio::test]
async fn deleting_the_policy_garbage_collects_its_split() {
    let Some((env, _controller)) = routing_to_web("gc-split", PolicyBuilder::web()).await else {
        return;
    };
    env.api::<FailoverPolicy>()
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete policy");
    let gone = wait_until(Duration::from_secs(60), || async {
        env.split_weights("web").await.is_none()
    })
    .await;
    assert!(gone, "the TrafficSplit was not garbage-collected");
}

#[tokio::test]
async fn two_policies_on_one_apex_give_one_route_and_deleting_the_older_hands_it_over() {
    let Some(env) = test_env!() else { return };
    env.ready_backends(&["api-a", "api-b", "api-c"]).await;
    let on_api = |name: &str, primary: &str| {
        PolicyBuilder::named(name, primary, &["api-b"]).spec(|s| s.service = "api".into())
    };
    env.apply(&on_api("api-first", "api-a"));
    // creationTimestamp counts seconds: the second policy is younger by at least one.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    env.apply(&on_api("api-second", "api-c"));
    // The younger one's route as an earlier release would have left it: owned by it, in place.
    let younger = env.policy("api-second").await.expect("the younger policy");
    let leftover: TrafficSplit = serde_json::from_value(serde_json::json!({
        "apiVersion": "split.smi-spec.io/v1alpha2", "kind": "TrafficSplit",
        "metadata": {"name": "api-second", "labels": {"failover.dev/policy": "api-second"},
            "ownerReferences": [{"apiVersion": "failover.dev/v1alpha1", "kind": "FailoverPolicy",
                "name": "api-second", "uid": younger.uid(), "controller": true}]},
        "spec": {"service": "api", "backends": [{"service": "api-c", "weight": 1}, {"service": "api-b", "weight": 0}]}
    }))
    .expect("split");
    let splits = env.api::<TrafficSplit>();
    splits
        .create(&PostParams::default(), &leftover)
        .await
        .expect("creating the leftover route");

    let _controller = ControllerProcess::start(&env, &[]);
    env.wait_weights("api-first", &[("api-a", 1), ("api-b", 0)], WAIT)
        .await;
    let p = env
        .wait_policy("api-second", WAIT, ready::APEX_CONFLICT, |p| {
            condition_reason(p, READY).as_deref() == Some(ready::APEX_CONFLICT)
        })
        .await;
    let (_, _, message) = support::condition(&p, READY).unwrap_or_default();
    assert!(
        message.contains(&format!(
            "apex Service api is routed by policy {}/api-first",
            env.ns
        )),
        "{message}"
    );
    let routes_of_api = || async {
        splits
            .list(&Default::default())
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .filter(|s| s.spec.service == "api")
                    .map(|s| s.name_any())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let one = wait_until(WAIT, || async { routes_of_api().await == ["api-first"] }).await;
    assert!(one, "routes of api: {:?}", routes_of_api().await);
    support::figure(format!("the younger policy says: {message}"));

    // Deleting the older policy hands the apex over.
    let out = env.kubectl(&["delete", "failoverpolicy", "api-first"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    env.wait_weights("api-second", &[("api-c", 1), ("api-b", 0)], WAIT)
        .await;
    env.wait_policy("api-second", WAIT, ready::PRIMARY_ACTIVE, |p| {
        condition_reason(p, READY).as_deref() == Some(ready::PRIMARY_ACTIVE)
    })
    .await;
    let handed = wait_until(WAIT, || async { routes_of_api().await == ["api-second"] }).await;
    assert!(handed, "routes of api: {:?}", routes_of_api().await);
}

/// The usual policy with output HTTPRoute to port 8080 of the backends.
fn http_route_policy(parent_port: Option<i32>) -> PolicyBuilder {
    PolicyBuilder::web().spec(|s| {
        s.output = Output::HttpRoute;
        s.http_route = Some(GatewayRouteSpec {
            parent_port,
            ..GatewayRouteSpec::on_port(8080)
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
        &failover_core::route::RouteKind::HttpRoute.resource(),
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
        &failover_core::route::RouteKind::HttpRoute.resource(),
    );
    let mut foreign = DynamicObject::new(
        "web",
        &failover_core::route::RouteKind::HttpRoute.resource(),
    );
    foreign.data = serde_json::json!({"spec": {"parentRefs": [{"group": "core", "kind": "Service", "name": "web"}], "rules": [{"backendRefs": [{"name": "other", "port": 80}]}]}});
    let created = routes
        .create(&PostParams::default(), &foreign)
        .await
        .expect("foreign route");
    let _c = ControllerProcess::start(&env, &[]);
    env.apply(&http_route_policy(None));
    env.wait_policy("web", WAIT, Output::HttpRoute.reasons().conflict, |p| {
        condition(p, READY).is_some_and(|c| c.1 == Output::HttpRoute.reasons().conflict)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = routes.get("web").await.expect("route");
    assert_eq!(
        after.metadata.resource_version,
        created.metadata.resource_version
    );
}
