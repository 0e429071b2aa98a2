//! Names, end to end against the real control plane: every name the API accepts works (the
//! longest and oddest ones), and a name that could not work is refused at apply time, naming the
//! field.

use failover_core::{
    api::{
        GatewayRouteSpec, Output,
        conditions::{READY, ready},
    },
    route::RouteKind,
};
use kube::{Api, api::DynamicObject};

use crate::support::{
    self, ControllerProcess, PolicyBuilder, TestEnv, WAIT, condition_reason, test_env, wait_until,
};

/// A DNS-1035 label of exactly `len` characters starting with `prefix`.
fn label(prefix: &str, len: usize) -> String {
    let mut name = prefix.to_string();
    while name.len() < len {
        name.push(if name.len().is_multiple_of(7) {
            '-'
        } else {
            'x'
        });
    }
    name.truncate(len);
    name.pop();
    name.push('z');
    name
}

/// A DNS-1123 subdomain of exactly 253 characters, with dots.
fn subdomain() -> String {
    let part = "r".repeat(62);
    format!("{part}.{part}.{part}.{}", "s".repeat(253 - 3 * 63))
}

struct Case {
    what: &'static str,
    kind: RouteKind,
    policy: PolicyBuilder,
    primary: String,
    secondary: String,
    route: String,
}

fn cases() -> Vec<Case> {
    let (p63, s63) = (label("p", 63), label("s", 63));
    let long = Case {
        what: "63-character policy and Service names, 253-character TrafficSplit name",
        kind: RouteKind::TrafficSplit,
        policy: PolicyBuilder::named(&label("policy", 63), &p63, &[&s63]).spec(|s| {
            s.service = "long".into();
            s.traffic_split.name = Some(subdomain());
        }),
        primary: p63,
        secondary: s63,
        route: subdomain(),
    };
    let odd = Case {
        what: "a name that starts with a digit and has dots; one-letter Services",
        kind: RouteKind::TrafficSplit,
        policy: PolicyBuilder::named("1.web-v2.prod", "a", &["b"])
            .spec(|s| s.service = "odd".into()),
        primary: "a".into(),
        secondary: "b".into(),
        route: "1.web-v2.prod".into(),
    };
    let route = Case {
        what: "a 253-character HTTPRoute name",
        kind: RouteKind::HttpRoute,
        policy: PolicyBuilder::named("hr", "hr-a", &["hr-b"]).spec(|s| {
            s.output = Output::HttpRoute;
            s.http_route = Some(GatewayRouteSpec {
                name: Some(subdomain()),
                ..GatewayRouteSpec::on_port(8080)
            });
        }),
        primary: "hr-a".into(),
        secondary: "hr-b".into(),
        route: subdomain(),
    };
    vec![long, odd, route]
}

/// The weights of a route of either kind, as (service, weight).
async fn route_weights(env: &TestEnv, case: &Case) -> Option<Vec<(String, i64)>> {
    let resource = match case.kind {
        RouteKind::TrafficSplit => failover_core::route::trafficsplit::resource(Default::default()),
        kind => kind.resource(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), &env.ns, &resource);
    let route = api.get_opt(&case.route).await.ok()??;
    support::route_backend_weights(&route)
}

async fn wait_route(env: &TestEnv, case: &Case, expected: [i64; 2]) {
    let want = vec![
        (case.primary.clone(), expected[0]),
        (case.secondary.clone(), expected[1]),
    ];
    let ok = wait_until(WAIT, || async {
        route_weights(env, case).await.as_ref() == Some(&want)
    })
    .await;
    assert!(
        ok,
        "{}: route never had {want:?}: {:?}",
        case.what,
        route_weights(env, case).await
    );
}

#[tokio::test]
async fn the_longest_and_oddest_accepted_names_work_end_to_end() {
    let Some(env) = test_env!() else { return };
    env.cp.install_gateway_api();
    let _controller = ControllerProcess::start(&env, &[]);
    for case in cases() {
        env.ready_backends(&[&case.primary, &case.secondary]).await;
        env.apply(&case.policy);
        wait_route(&env, &case, [1, 0]).await;
        env.set_endpoints(&case.primary, 0, 1).await;
        wait_route(&env, &case, [0, 1]).await;
        let name = case.policy.name();
        let p = env
            .wait_policy(&name, WAIT, ready::FAILED_OVER, |p| {
                condition_reason(p, READY).as_deref() == Some(ready::FAILED_OVER)
            })
            .await;
        assert!(p.status.is_some(), "{}", case.what);
        assert!(
            env.wait_event(&name, ready::FAILED_OVER, Some("Normal"), WAIT)
                .await,
            "{}: no FailedOver Event on the policy",
            case.what
        );
        support::figure(format!("works end to end: {}", case.what));
    }
}

#[tokio::test]
async fn a_name_too_long_for_its_label_is_refused_at_apply_naming_the_field() {
    let Some(env) = test_env!() else { return };
    let name = label("policy", 64);
    let out = env.kubectl_stdin(
        &["apply", "-f", "-"],
        &PolicyBuilder::named(&name, "a", &["b"])
            .spec(|s| s.service = "web".into())
            .yaml(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a 64-character name was accepted");
    assert!(
        stderr.contains("metadata.name must be at most 63 characters"),
        "{stderr}"
    );
}
