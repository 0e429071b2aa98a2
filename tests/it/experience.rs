//! Operator experience, end to end against the real control plane: every name the API accepts
//! works (the longest and oddest ones), a name that could not work is refused at apply time, and
//! each missing CRD is named (log, metric, the policy's condition; `/readyz` for the
//! FailoverPolicy CRD only, so no tenant's policy takes the controller out of readiness) and
//! picked up without a restart once installed.

use std::time::{Duration, Instant};

use failover::api::conditions::{READY, ready};
use failover::{
    api::{FailoverPolicy, HttpRouteSpec, Output},
    crd::failover_policy_crd,
    route::{RouteKind, trafficsplit::traffic_split_crd},
};
use kube::{Api, api::DynamicObject};

use crate::support::{
    self, ControllerProcess, ON_WEB, PolicyBuilder, TestEnv, WAIT, WEB_BACKENDS, apply_crd,
    condition, condition_reason, metric, test_env, wait_until,
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
            s.http_route = Some(HttpRouteSpec {
                name: Some(subdomain()),
                ..HttpRouteSpec::on_port(8080)
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
        RouteKind::TrafficSplit => failover::route::trafficsplit::resource(Default::default()),
        RouteKind::HttpRoute => failover::route::httproute::resource(),
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

/// Waits until the controller logs, at WARN or ERROR, that the CRD `crd` is missing and how to
/// install it; returns how long it took (for the record: how fast is the benchmark's business).
async fn logged(controller: &ControllerProcess, crd: &str) -> Duration {
    let started = Instant::now();
    let text = format!("the CRD {crd} is not installed; install");
    let named = || {
        controller
            .logs()
            .lines()
            .any(|l| l.contains(&text) && (l.contains("WARN") || l.contains("ERROR")))
    };
    let ok = wait_until(WAIT, || async { named() }).await;
    assert!(
        ok,
        "no WARN/ERROR line naming {crd} and how to install it:\n{}",
        controller.logs()
    );
    started.elapsed()
}

#[tokio::test]
async fn each_missing_crd_is_named_and_picked_up_once_installed() {
    let Some(env) = TestEnv::dedicated_without_crds("missing-crds").await else {
        return;
    };
    let first = ControllerProcess::start(&env, &[]);
    let took = logged(&first, "failoverpolicies.failover.dev").await;
    let (code, body) = first.admin_get("/readyz").await;
    assert_eq!(code, 503);
    assert!(
        body.contains("the CRD failoverpolicies.failover.dev is not installed"),
        "{body}"
    );
    assert!(
        !first.logs().contains("Failed to parse error data"),
        "{}",
        first.logs()
    );
    let metrics = first.admin_get("/metrics").await.1;
    let series = "failover_missing_api{crd=\"failoverpolicies.failover.dev\"}";
    assert_eq!(metric(&metrics, series), Some(1.0), "{metrics}");
    support::figure(format!(
        "missing FailoverPolicy CRD named after {took:?}: {body}"
    ));
    drop(first);

    apply_crd(&env.client, &failover_policy_crd()).await;
    let served = wait_until(WAIT, || async {
        env.kubectl(&["get", "failoverpolicies"]).status.success()
    })
    .await;
    assert!(served, "the FailoverPolicy CRD is never served");
    env.ready_backends(&WEB_BACKENDS).await;
    env.apply(&PolicyBuilder::web());
    env.apply(&PolicyBuilder::named("hr", "web", &["web-east"]).spec(|s| {
        s.output = Output::HttpRoute;
        s.http_route = Some(HttpRouteSpec::on_port(8080));
    }));
    let controller = ControllerProcess::start(&env, &[]);
    for crd in [
        "trafficsplits.split.smi-spec.io",
        "httproutes.gateway.networking.k8s.io",
    ] {
        let took = logged(&controller, crd).await;
        support::figure(format!("missing {crd} named after {took:?}"));
    }
    // A route CRD a policy needs is that policy's concern: the controller stays ready, for
    // every probe over 5 s (it turned 503 within 5 s when a tenant's policy could hold it).
    let synced = wait_until(WAIT, || async {
        controller.admin_get("/readyz").await.0 == 200
    })
    .await;
    assert!(synced, "{:?}", controller.admin_get("/readyz").await);
    let mut answers = Vec::new();
    for _ in 0..25 {
        answers.push(controller.admin_get("/readyz").await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let not_ready: Vec<_> = answers.iter().filter(|(code, _)| *code != 200).collect();
    assert!(not_ready.is_empty(), "/readyz: {not_ready:?}");
    support::figure(format!(
        "/readyz answered 200 to all {} probes",
        answers.len()
    ));
    let missing =
        |p: &FailoverPolicy| condition(p, READY).is_some_and(|(_, r, _)| r.ends_with("CRDMissing"));
    let p = env
        .wait_policy("web", WAIT, ready::TRAFFIC_SPLIT_CRD_MISSING, missing)
        .await;
    let (_, reason, message) = condition(&p, READY).unwrap_or_default();
    assert_eq!(reason, ready::TRAFFIC_SPLIT_CRD_MISSING);
    assert!(
        message.contains("trafficsplits.split.smi-spec.io"),
        "{message}"
    );
    env.wait_policy("hr", WAIT, ready::HTTP_ROUTE_CRD_MISSING, missing)
        .await;
    let metrics = controller.admin_get("/metrics").await.1;
    let series = "failover_missing_api{crd=\"trafficsplits.split.smi-spec.io\"}";
    assert_eq!(metric(&metrics, series), Some(1.0), "{metrics}");
    let routes = "failover_missing_api{crd=\"httproutes.gateway.networking.k8s.io\"}";
    assert_eq!(metric(&metrics, routes), Some(1.0), "{metrics}");

    // Installed later: picked up without a restart.
    apply_crd(&env.client, &traffic_split_crd()).await;
    env.wait_weights("web", &ON_WEB, WAIT).await;
    env.cp.install_gateway_api();
    env.wait_policy("hr", WAIT, ready::PRIMARY_ACTIVE, |p| {
        condition_reason(p, READY).as_deref() == Some(ready::PRIMARY_ACTIVE)
    })
    .await;
    let ready = wait_until(WAIT, || async {
        controller.admin_get("/readyz").await.0 == 200
    })
    .await;
    assert!(
        ready,
        "/readyz: {:?}",
        controller.admin_get("/readyz").await
    );
    let metrics = controller.admin_get("/metrics").await.1;
    assert_eq!(metric(&metrics, series), Some(0.0), "{metrics}");
}
