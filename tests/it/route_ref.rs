//! A route the user owns (`spec.routeRef`): the controller writes the weights of the named rule
//! and nothing else of the route, reverts an edit of those weights only, leaves the route as it
//! last wrote it when the policy goes, and names what does not fit in a condition. The route
//! consents by naming the policy in its annotation `failover.dev/policies`: without it, an author
//! who may write only FailoverPolicies moves nothing of it, and what-if says so too. The GitOps
//! example's JSON pointers are those the controller writes.

use std::time::Duration;

use failover_core::{
    api::{
        FailoverPolicy, RouteRefKind, RouteRefSpec,
        conditions::{READY, ready},
    },
    consent,
    route::{RouteKind, referenced},
};
use kube::{
    Api,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::{
    self, ControllerProcess, PolicyBuilder, TestEnv, WAIT, WEB_BACKENDS, condition, repo_root,
    test_env, wait_until,
    what_if::{Predicted, what_if},
};

/// The user's HTTPRoute `shop`: rule `static` to `web-west`, rule `api` (with a header filter
/// and a timeout) to `api_backends`; consenting to the policies `consents` names (`None`: no
/// consent).
fn user_route(api_backends: &[(&str, i64)], consents: Option<&str>) -> DynamicObject {
    let mut route = DynamicObject::new("shop", &RouteKind::HttpRoute.resource());
    route.metadata.annotations = consents.map(|policies| {
        [(
            consent::POLICIES_ANNOTATION.to_string(),
            policies.to_string(),
        )]
        .into()
    });
    let backend_refs: Vec<Value> = api_backends
        .iter()
        .map(|(name, weight)| json!({"name": name, "port": 80, "weight": weight}))
        .collect();
    route.data = json!({"spec": {
        "parentRefs": [{"name": "edge", "sectionName": "http"}],
        "hostnames": ["shop.example.com"],
        "rules": [
            {"name": "static", "matches": [{"path": {"type": "PathPrefix", "value": "/static"}}],
             "backendRefs": [{"name": "web-west", "port": 80, "weight": 1}]},
            {"name": "api", "matches": [{"path": {"type": "PathPrefix", "value": "/api"}}],
             "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "x-served-by", "value": "shop"}]}}],
             "timeouts": {"request": "10s"},
             "backendRefs": backend_refs},
        ],
    }});
    route
}

/// The HTTPRoutes of the test's namespace, and the user's route `shop` created there,
/// consenting to the policy `web`.
async fn create_user_route(
    env: &TestEnv,
    api_backends: &[(&str, i64)],
) -> (Api<DynamicObject>, DynamicObject) {
    create_route(env, user_route(api_backends, Some("web"))).await
}

/// The HTTPRoutes of the test's namespace, and `route` created there.
async fn create_route(env: &TestEnv, route: DynamicObject) -> (Api<DynamicObject>, DynamicObject) {
    let routes: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.ns,
        &RouteKind::HttpRoute.resource(),
    );
    let created = routes
        .create(&PostParams::default(), &route)
        .await
        .expect("the user's route");
    (routes, created)
}

/// The policy `web` failing over rule `api` of the route `shop` from `web` to `web-east`.
fn policy() -> PolicyBuilder {
    PolicyBuilder::named("web", "web", &["web-east"]).spec(|s| {
        s.service = "web".into();
        s.route_ref = Some(RouteRefSpec {
            kind: RouteRefKind::HttpRoute,
            name: "shop".into(),
            rule: "api".into(),
        });
    })
}

/// The weights of rule `index` of a route, by backend name.
fn weights(route: &DynamicObject, index: usize) -> Vec<(String, i64)> {
    route.data["spec"]["rules"][index]["backendRefs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| {
            let name = b["name"].as_str().unwrap_or_default().to_string();
            (name, b["weight"].as_i64().unwrap_or(1))
        })
        .collect()
}

/// The route's spec without the weights of rule `api` (index 1).
fn all_but_the_weights(route: &DynamicObject) -> Value {
    let mut spec = route.data["spec"].clone();
    if let Some(refs) = spec["rules"][1]["backendRefs"].as_array_mut() {
        for backend in refs {
            backend.as_object_mut().map(|b| b.remove("weight"));
        }
    }
    spec
}

/// The message of the policy `web`'s `Ready` condition, once it has the reason `reason`.
async fn ready_message(env: &TestEnv, reason: &str) -> String {
    let policy = env
        .wait_policy("web", WAIT, reason, |p| {
            condition(p, READY).is_some_and(|c| c.1 == reason)
        })
        .await;
    condition(&policy, READY).map(|c| c.2).unwrap_or_default()
}

async fn wait_weights(routes: &Api<DynamicObject>, index: usize, expected: &[(&str, i64)]) {
    let expected: Vec<(String, i64)> = expected.iter().map(|(n, w)| (n.to_string(), *w)).collect();
    let reached = wait_until(WAIT, || async {
        routes
            .get("shop")
            .await
            .is_ok_and(|r| weights(&r, index) == expected)
    })
    .await;
    let seen = routes.get("shop").await.map(|r| weights(&r, index));
    assert!(reached, "rule {index}: wanted {expected:?}, saw {seen:?}");
}

#[tokio::test]
async fn a_rule_of_a_route_the_user_owns_fails_over_and_back_and_nothing_else_of_it_changes() {
    let Some(env) = test_env!() else { return };
    env.cp.install_gateway_api();
    env.ready_backends(&WEB_BACKENDS).await;
    let (routes, created) = create_user_route(&env, &[("web", 1), ("web-east", 0)]).await;
    let before = all_but_the_weights(&created);
    let _c = ControllerProcess::start(&env, &[]);
    env.apply(&policy());
    env.wait_policy("web", WAIT, ready::PRIMARY_ACTIVE, |p| {
        condition(p, READY).is_some_and(|c| c.1 == ready::PRIMARY_ACTIVE)
    })
    .await;

    // what-if prints the rule's weights the controller then writes.
    let report = what_if(&env, "web", &["--down", "web"]);
    let printed = &report["steps"][0]["route"]["spec"]["rules"][0];
    assert_eq!(printed["name"], "api", "{report:#}");
    let printed: Vec<(String, i64)> = printed["backendRefs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| {
            (
                b["name"].as_str().unwrap_or_default().to_string(),
                b["weight"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    let expected = vec![("web".to_string(), 0), ("web-east".to_string(), 1)];
    assert_eq!(printed, expected, "{report:#}");
    env.set_endpoints("web", 0, 1).await;
    wait_weights(&routes, 1, &[("web", 0), ("web-east", 1)]).await;
    let failed_over = routes.get("shop").await.expect("route");
    assert_eq!(
        all_but_the_weights(&failed_over),
        before,
        "only the weights changed"
    );
    assert!(
        failed_over
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty(),
        "the route stays the user's"
    );

    // The user edits a weight of the named rule, and one of the other rule.
    let mut edited = routes.get("shop").await.expect("route");
    edited.data["spec"]["rules"][1]["backendRefs"][0]["weight"] = json!(5);
    edited.data["spec"]["rules"][0]["backendRefs"][0]["weight"] = json!(3);
    routes
        .replace("shop", &PostParams::default(), &edited)
        .await
        .expect("the user's edit");
    wait_weights(&routes, 1, &[("web", 0), ("web-east", 1)]).await;
    wait_weights(&routes, 0, &[("web-west", 3)]).await;
    // From here on, the route as the user left it.
    let before = all_but_the_weights(&routes.get("shop").await.expect("route"));

    env.set_endpoints("web", 1, 0).await;
    wait_weights(&routes, 1, &[("web", 1), ("web-east", 0)]).await;

    // Deleted, the policy leaves the route with the weights it last wrote.
    env.set_endpoints("web", 0, 1).await;
    wait_weights(&routes, 1, &[("web", 0), ("web-east", 1)]).await;
    env.api::<FailoverPolicy>()
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    let gone = wait_until(WAIT, || async { env.policy("web").await.is_none() }).await;
    assert!(gone, "the policy went");
    env.set_endpoints("web", 1, 0).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = routes.get("shop").await.expect("the route stays");
    assert_eq!(
        weights(&after, 1),
        [("web".to_string(), 0), ("web-east".to_string(), 1)]
    );
    assert_eq!(all_but_the_weights(&after), before);
}

#[tokio::test]
async fn a_route_ref_to_a_missing_route_or_other_backends_is_a_condition_naming_it() {
    let Some(env) = test_env!() else { return };
    env.cp.install_gateway_api();
    env.ready_backends(&WEB_BACKENDS).await;
    let _c = ControllerProcess::start(&env, &[]);
    env.apply(&policy());
    let message = ready_message(&env, ready::ROUTE_REF_NOT_FOUND).await;
    assert!(
        message.contains("HTTPRoute shop does not exist"),
        "{message}"
    );

    let (routes, created) = create_user_route(&env, &[("web", 1), ("web-west", 0)]).await;
    let message = ready_message(&env, ready::ROUTE_REF_BACKENDS_DIFFER).await;
    assert!(
        message.contains("missing: web-east; not the policy's: web-west"),
        "{message}"
    );
    let unchanged = routes.get("shop").await.expect("route");
    assert_eq!(
        unchanged.data["spec"], created.data["spec"],
        "left as it is"
    );

    // Fixed by the user, the rule is failed over.
    let fix = json!({"spec": {"rules": [
        created.data["spec"]["rules"][0].clone(),
        {"name": "api", "backendRefs": [{"name": "web", "port": 80, "weight": 1}, {"name": "web-east", "port": 80, "weight": 0}]},
    ]}});
    routes
        .patch("shop", &PatchParams::default(), &Patch::Merge(&fix))
        .await
        .expect("the user's fix");
    env.set_endpoints("web", 0, 1).await;
    wait_weights(&routes, 1, &[("web", 0), ("web-east", 1)]).await;
}

#[tokio::test]
async fn an_author_who_may_edit_only_policies_cannot_move_a_route_that_does_not_consent() {
    let Some(env) = test_env!() else { return };
    env.cp.install_gateway_api();
    env.ready_backends(&WEB_BACKENDS).await;
    let platform_route = user_route(&[("web", 1), ("web-east", 0)], None);
    let (routes, created) = create_route(&env, platform_route).await;
    let _c = ControllerProcess::start(&env, &[]);
    let tenant = env.tenant();
    let annotate = ["annotate", "httproute", "shop", "failover.dev/policies=web"];
    assert!(
        !tenant.kubectl(&annotate).status.success(),
        "the author gave itself the route's consent"
    );
    let pinned = policy().spec(|s| s.pin = Some("web-east".into()));
    tenant.apply(&pinned.yaml());
    let message = ready_message(&env, ready::ROUTE_REF_NOT_CONSENTED).await;
    assert!(
        message.contains("HTTPRoute shop does not consent")
            && message.contains(consent::POLICIES_ANNOTATION),
        "{message}"
    );
    // what-if says what the controller wrote, and the route is as its owner left it.
    let report = what_if(&env, "web", &[]);
    Predicted::of(&env, &report, 0, "web", RouteKind::HttpRoute)
        .await
        .written_as_printed(&env, "a route that does not consent")
        .await;
    let untouched = routes.get("shop").await.expect("route");
    assert_eq!(
        untouched.metadata.resource_version, created.metadata.resource_version,
        "the route was written"
    );

    // Its owner consents: the pin moves the rule's traffic.
    let consents =
        json!({"metadata": {"annotations": {consent::POLICIES_ANNOTATION: "other, web"}}});
    routes
        .patch("shop", &PatchParams::default(), &Patch::Merge(&consents))
        .await
        .expect("the owner's consent");
    wait_weights(&routes, 1, &[("web", 0), ("web-east", 1)]).await;
    support::figure(
        "routeRef: a pin moved no weight of a route without consent, and both weights once it consented"
            .to_string(),
    );
}

#[test]
fn the_gitops_examples_pointers_are_the_weights_the_controller_writes() {
    let read = |path: &str| -> Vec<Value> {
        let text = std::fs::read_to_string(repo_root().join(path)).expect(path);
        serde_yaml::Deserializer::from_str(&text)
            .map(|doc| Value::deserialize(doc).expect("a YAML document"))
            .collect()
    };
    let sample = read("samples/routeref.yaml");
    let policy = sample
        .iter()
        .find(|d| d["kind"] == "FailoverPolicy")
        .expect("policy");
    let route = sample
        .iter()
        .find(|d| d["kind"] == "HTTPRoute")
        .expect("route");
    let rule = policy["spec"]["routeRef"]["rule"].as_str().expect("rule");
    let written = referenced::weight_pointers(&route["spec"], rule).expect("the rule");
    let application = &read("examples/gitops/argocd-application.yaml")[0];
    let ignored: Vec<String> = application["spec"]["ignoreDifferences"][0]["jsonPointers"]
        .as_array()
        .expect("pointers")
        .iter()
        .filter_map(|p| p.as_str().map(str::to_string))
        .collect();
    assert_eq!(ignored, written);
    assert_eq!(
        application["spec"]["ignoreDifferences"][0]["name"],
        policy["spec"]["routeRef"]["name"]
    );
}
