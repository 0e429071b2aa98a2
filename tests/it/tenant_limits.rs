//! What a tenant writes is read once, the way the part that acts on it reads it: a health query
//! by the parser's own lexer and on the parser's own thread (so nothing a check skips is
//! compiled, and no query can crash the controller or the plugin), and a policy's route by the
//! limits of the pinned Gateway API CRDs (so no policy is accepted whose route cannot be
//! written). Each refusal is what a namespace-scoped author (the chart's edit role) sees.

use failover_core::{
    api::{
        FailoverPolicy, GatewayRouteSpec, Output, SecondaryBackend,
        conditions::{READY, ready},
        rules::{MAX_ROUTE_BACKENDS, ROUTE_BACKENDS_FIT},
    },
    health_query,
};
use kube::CustomResourceExt;
use serde::Deserialize;
use serde_json::Value;

use crate::support::{
    self, PolicyBuilder, Tenant, TestEnv, WAIT, condition, kubectl_failover, test_env,
};

/// Waits until the policy is refused with a Ready message holding `says`; that message.
async fn refused_with(env: &TestEnv, says: &str) -> String {
    let p = env
        .wait_policy("web", WAIT, says, |p| {
            condition(p, READY).is_some_and(|c| c.1 == ready::INVALID_SPEC && c.2.contains(says))
        })
        .await;
    condition(&p, READY).map(|c| c.2).unwrap_or_default()
}

fn with_query(tenant: &Tenant, query: &str) {
    tenant.apply(&PolicyBuilder::web_with_health(None, query).yaml());
}

#[tokio::test]
async fn a_tenants_query_is_checked_as_the_parser_reads_it_and_no_query_stops_the_controller() {
    let Some(env) = test_env!() else { return };
    let controller = env
        .with_controller(&["--prometheus-address", "http://127.0.0.1:9"])
        .await;
    let tenant = env.tenant();
    let deep = format!("{}up{}", "(".repeat(2000), ")".repeat(2000));
    for (query, says) in [
        // Matchers after a comment ending with a carriage return: counted and compiled.
        (health_query::behind_a_comment(), "more than 256 KiB"),
        // About 2,000 levels within the length limit: refused before anything recurses.
        (deep, "nests 2000 deep"),
        (format!("{}1", "- ".repeat(2000)), "nests 2000 deep"),
        (format!("up{}", " + 1".repeat(1000)), "nests 1000 deep"),
        // A number no duration holds: the parser would panic on it.
        ("up[1e30]".to_string(), "which no duration holds"),
        // The controller's own marker, written by hand.
        (
            "sum(x) * on() group_left __failover_service__ y".to_string(),
            "holds __failover_",
        ),
    ] {
        with_query(&tenant, &query);
        let message = refused_with(&env, says).await;
        assert!(
            message.contains("spec.health.prometheus.query"),
            "{message}"
        );
        support::figure(format!(
            "{}…: the tenant reads Ready InvalidSpec: {message}",
            query.chars().take(40).collect::<String>()
        ));
        let (code, _) = controller.admin_get("/healthz").await;
        assert_eq!(code, 200, "the controller is up after {query:.40}");
    }
    // The deepest query of every form allowed is accepted, and the controller reads it.
    for query in health_query::deepest_at_limit() {
        with_query(&tenant, &query);
        env.wait_policy("web", WAIT, "the deepest query accepted", |p| {
            p.spec
                .health
                .as_ref()
                .and_then(|h| h.prometheus.as_ref())
                .is_some_and(|h| h.query == query)
                && p.status
                    .as_ref()
                    .is_some_and(|s| s.observed_generation == p.metadata.generation)
                && condition(p, READY).is_some_and(|c| c.1 != ready::INVALID_SPEC)
        })
        .await;
    }
    let logs = controller.logs();
    assert!(
        !logs.contains("panicked"),
        "no panic in the controller's log"
    );
}

#[tokio::test]
async fn what_if_refuses_a_query_the_parser_panics_on_and_exits_as_on_any_error() {
    let Some(env) = test_env!() else { return };
    let tenant = env.tenant();
    with_query(&tenant, "up[1e30]");
    let out = kubectl_failover(&env, &["what-if", "web", "--down", "web"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("spec.health.prometheus.query")
            && stderr.contains("which no duration holds"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    support::figure(format!(
        "kubectl failover what-if on up[1e30]: {}",
        stderr.trim()
    ));
}

#[tokio::test]
async fn a_route_output_with_more_backends_than_one_route_rule_holds_is_refused_at_apply() {
    let Some(env) = test_env!() else { return };
    let tenant = env.tenant();
    let too_many = PolicyBuilder::web().spec(|s| {
        s.output = Output::HttpRoute;
        s.http_route = Some(GatewayRouteSpec::on_port(80));
        s.secondaries = (0..MAX_ROUTE_BACKENDS)
            .map(|i| SecondaryBackend::new(format!("web-{i}")))
            .collect();
    });
    let said = tenant.apply_refused(&too_many.yaml());
    assert!(said.contains(ROUTE_BACKENDS_FIT.message), "{said}");
    support::figure(format!(
        "kubectl apply of an HTTPRoute output with 16 secondaries: {}",
        said.trim()
    ));
    let fits = too_many.spec(|s| {
        s.secondaries.pop();
    });
    tenant.apply(&fits.yaml());
}

/// A value at a path of a JSON schema (`properties` steps included).
fn at<'a>(schema: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(schema, |v, step| &v[*step])
}

fn number(schema: &Value, path: &[&str]) -> u64 {
    at(schema, path)
        .as_u64()
        .unwrap_or_else(|| panic!("no number at {path:?}"))
}

#[test]
fn every_limit_of_a_policys_route_is_within_what_the_pinned_gateway_api_crds_allow() {
    let Some(cp) = support::shared() else { return };
    let crds = cp.gateway_api_crds();
    let ours = serde_json::to_value(FailoverPolicy::crd()).expect("our CRD");
    let ours = &ours["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    let gateway_kinds = failover_core::route::KINDS
        .iter()
        .filter(|kind| kind.resource().group == "gateway.networking.k8s.io");
    for kind in gateway_kinds {
        let theirs = served_spec(&crds, kind.crd);
        let field = kind
            .name_field
            .trim_start_matches("spec.")
            .trim_end_matches(".name");
        for (ours, theirs, what) in limits(ours, &ours[field]["properties"], &theirs) {
            assert!(
                ours <= theirs,
                "{} {what}: a policy allows {ours}, the route {theirs}",
                kind.name
            );
        }
        let rules = number(&theirs, &["rules", "maxItems"]);
        assert!(rules >= 1, "{}: one rule", kind.name);
    }
    assert!(
        ROUTE_BACKENDS_FIT.cel.contains(&format!(
            "size(self.secondaries) <= {}",
            MAX_ROUTE_BACKENDS - 1
        )),
        "the CEL rule states the bound"
    );
}

/// The spec's properties of the `v1` a Gateway API CRD serves.
fn served_spec(crds: &str, crd: &str) -> Value {
    let route: Value = serde_yaml::Deserializer::from_str(crds)
        .filter_map(|doc| Value::deserialize(doc).ok())
        .find(|doc| doc["metadata"]["name"] == crd)
        .unwrap_or_else(|| panic!("the CRD {crd}"));
    let served = route["spec"]["versions"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "v1" && v["served"] == true))
        .unwrap_or_else(|| panic!("{crd} serves v1"));
    served["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].clone()
}

/// Each limit of a route field (`route_spec`) and of the policy (`ours`) beside the route's own
/// (`theirs`), as (ours, theirs, what): a policy's limit may not exceed the written object's.
/// Hostnames and paths only where the kind has them.
fn limits(ours: &Value, route_spec: &Value, theirs: &Value) -> Vec<(u64, u64, &'static str)> {
    let gateway = &route_spec["gateways"]["items"]["properties"];
    let parent = &theirs["parentRefs"]["items"]["properties"];
    let backend = &theirs["rules"]["items"]["properties"]["backendRefs"];
    let path = &theirs["rules"]["items"]["properties"]["matches"]["items"]["properties"]["path"]["properties"];
    let mut limits = vec![
        (
            number(route_spec, &["gateways", "maxItems"]) + 1,
            number(theirs, &["parentRefs", "maxItems"]),
            "parentRefs: the Gateways and the apex Service",
        ),
        (
            number(gateway, &["name", "maxLength"]),
            number(parent, &["name", "maxLength"]),
            "a Gateway's name",
        ),
        (
            number(gateway, &["namespace", "maxLength"]),
            number(parent, &["namespace", "maxLength"]),
            "a Gateway's namespace",
        ),
        (
            number(gateway, &["sectionName", "maxLength"]),
            number(parent, &["sectionName", "maxLength"]),
            "a listener's name",
        ),
        (
            number(
                ours,
                &["secondaries", "items", "properties", "service", "maxLength"],
            ),
            number(backend, &["items", "properties", "name", "maxLength"]),
            "a backend's name",
        ),
        (
            MAX_ROUTE_BACKENDS as u64,
            number(backend, &["maxItems"]),
            "backendRefs of the one rule (the CEL rule's bound, with the primary)",
        ),
        (
            failover_core::decide::PROPORTIONAL_TOTAL as u64,
            number(backend, &["items", "properties", "weight", "maximum"]),
            "a backend's weight",
        ),
    ];
    if !theirs["hostnames"].is_null() {
        limits.push((
            number(route_spec, &["hostnames", "maxItems"]),
            number(theirs, &["hostnames", "maxItems"]),
            "hostnames",
        ));
        limits.push((
            number(route_spec, &["hostnames", "items", "maxLength"]),
            number(theirs, &["hostnames", "items", "maxLength"]),
            "a hostname's length",
        ));
    }
    if !path.is_null() {
        limits.push((
            number(route_spec, &["pathPrefix", "maxLength"]),
            number(path, &["value", "maxLength"]),
            "the path prefix",
        ));
    }
    limits
}
