//! `kubectl failover what-if` against the controller itself: for each scenario, the route and the
//! conditions the plugin prints (it runs the controller's own reconcile core, and writes
//! nothing) are what the controller then writes when the same change is made for real:
//! the primary down, two backends down, a health reading over its threshold, a failover hold,
//! and a failure in the middle of a failback ramp.

use failover_core::{
    api::conditions::{READY, ready},
    route::{RouteKind, trafficsplit::TrafficSplit},
};
use serde_json::Value;

use crate::support::{
    self, Exporter, ON_EAST, ON_WEB, ON_WEST, PolicyBuilder, TestEnv, WAIT, condition_reason,
    kubectl_failover, routing_to_web, test_env,
    what_if::{Predicted, reading_health},
};

/// The plugin's report of `what-if web ARGS`, as JSON.
fn what_if(env: &TestEnv, args: &[&str]) -> Value {
    let mut all = vec!["what-if", "web", "-o", "json"];
    all.extend_from_slice(args);
    let out = support::ok(&kubectl_failover(env, &all), "kubectl failover what-if");
    serde_json::from_str(&out).expect("what-if prints JSON")
}

/// Each step's rule (the `Ready` reason it would write).
fn rules(report: &Value) -> Vec<String> {
    report["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| s["rule"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The route step `i` of the report says the controller would write.
fn predicted(report: &Value, i: usize) -> TrafficSplit {
    serde_json::from_value(report["steps"][i]["route"].clone()).expect("a TrafficSplit")
}

/// Waits until the policy's `Ready` reason is `reason`.
async fn wait_rule(env: &TestEnv, reason: &str) {
    env.wait_policy("web", WAIT, reason, |p| {
        condition_reason(p, READY).as_deref() == Some(reason)
    })
    .await;
}

#[tokio::test]
async fn what_if_prints_the_route_the_controller_writes_when_the_primary_then_two_backends_fail() {
    let Some((env, _c)) = routing_to_web("what-if-down", PolicyBuilder::web()).await else {
        return;
    };
    let primary_down = what_if(&env, &["--down", "web"]);
    let two_down = what_if(&env, &["--down", "web,web-east"]);
    assert_eq!(primary_down["settled"], true);
    assert_eq!(rules(&primary_down), vec![ready::FAILED_OVER]);
    assert_eq!(rules(&two_down), vec![ready::FAILED_OVER]);
    // Nothing was written: the route still sends everything to the primary.
    env.wait_weights("web", &ON_WEB, WAIT).await;

    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    Predicted::of(&env, &primary_down, 0, "web", RouteKind::TrafficSplit)
        .await
        .written_as_printed(&env, "primary down")
        .await;
    env.set_endpoints("web-east", 0, 1).await;
    env.wait_weights("web", &ON_WEST, WAIT).await;
    Predicted::of(&env, &two_down, 0, "web", RouteKind::TrafficSplit)
        .await
        .written_as_printed(&env, "two down")
        .await;
    support::figure(format!(
        "what-if --down web: {:?}; --down web,web-east: {:?}; both as the controller wrote",
        predicted(&primary_down, 0).spec.backends,
        predicted(&two_down, 0).spec.backends
    ));
}

#[tokio::test]
async fn what_if_steps_through_a_failover_hold_as_the_controller_does() {
    let policy = PolicyBuilder::web().holds("4s", "0s");
    let Some((env, _c)) = routing_to_web("what-if-hold", policy).await else {
        return;
    };
    let report = what_if(&env, &["--down", "web"]);
    assert_eq!(
        rules(&report),
        vec![ready::FAILOVER_PENDING, ready::FAILED_OVER]
    );
    assert_eq!(report["steps"][1]["afterSeconds"], 4, "{report:#}");

    env.set_endpoints("web", 0, 1).await;
    wait_rule(&env, ready::FAILOVER_PENDING).await;
    Predicted::of(&env, &report, 0, "web", RouteKind::TrafficSplit)
        .await
        .written_as_printed(&env, "during the hold")
        .await;
    wait_rule(&env, ready::FAILED_OVER).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    Predicted::of(&env, &report, 1, "web", RouteKind::TrafficSplit)
        .await
        .written_as_printed(&env, "after the hold")
        .await;
}

#[tokio::test]
async fn what_if_predicts_each_ramp_step_and_a_failure_in_the_middle_of_the_ramp() {
    let policy = PolicyBuilder::web().spec(|s| {
        s.failback = Some(failover_core::api::FailbackSpec {
            ramp: Some(failover_core::api::RampSpec {
                steps: vec![25, 50, 100],
                every: "5s".into(),
            }),
        });
    });
    let Some((env, _c)) = routing_to_web("what-if-ramp", policy).await else {
        return;
    };
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    wait_rule(&env, ready::FAILED_OVER).await;

    let back = what_if(&env, &["--up", "web"]);
    assert_eq!(
        rules(&back),
        vec![
            ready::FAILBACK_RAMP,
            ready::FAILBACK_RAMP,
            ready::PRIMARY_ACTIVE
        ]
    );
    env.set_endpoints("web", 1, 0).await;
    wait_rule(&env, ready::FAILBACK_RAMP).await;
    Predicted::of(&env, &back, 0, "web", RouteKind::TrafficSplit)
        .await
        .written_as_printed(&env, "the ramp's first step")
        .await;

    // Mid-ramp: what if the primary fails now? Traffic leaves it at once.
    let failing = what_if(&env, &["--down", "web"]);
    assert_eq!(rules(&failing), vec![ready::FAILED_OVER]);
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    Predicted::of(&env, &failing, 0, "web", RouteKind::TrafficSplit)
        .await
        .written_as_printed(&env, "a failure mid-ramp")
        .await;
}

#[tokio::test]
async fn what_if_a_health_reading_crosses_its_threshold_is_what_the_controller_does() {
    let Some(env) = test_env!() else { return };
    let exporter = Exporter::start();
    exporter.set(&[("web", 0.01), ("web-east", 0.0), ("web-west", 0.0)]);
    let _running = reading_health(&env, &exporter, |p| p).await;
    env.wait_weights("web", &ON_WEB, WAIT).await;
    let report = what_if(&env, &["--health", "web=0.9"]);
    assert_eq!(rules(&report), vec![ready::FAILED_OVER]);
    exporter.set(&[("web", 0.9), ("web-east", 0.0), ("web-west", 0.0)]);
    env.wait_weights("web", &ON_EAST, WAIT).await;
    Predicted::of(&env, &report, 0, "web", RouteKind::TrafficSplit)
        .await
        .written_as_printed(&env, "health over the threshold")
        .await;
}

#[tokio::test]
async fn what_if_writes_nothing_and_names_a_backend_the_policy_does_not_have() {
    let Some((env, _c)) = routing_to_web("what-if-text", PolicyBuilder::web()).await else {
        return;
    };
    let version = |env: &TestEnv| {
        support::ok(
            &env.kubectl(&[
                "get",
                "trafficsplit",
                "web",
                "-o",
                "jsonpath={.metadata.resourceVersion}",
            ]),
            "the route's version",
        )
    };
    let before = version(&env);
    let text = support::ok(
        &kubectl_failover(&env, &["what-if", "web", "--down", "web"]),
        "what-if",
    );
    support::figure(format!("kubectl failover what-if web --down web:\n{text}"));
    assert!(text.contains("Nothing was written"), "{text}");
    assert!(text.contains("web-east 100%"), "{text}");
    assert_eq!(version(&env), before, "what-if changed the route");
    let out = kubectl_failover(&env, &["what-if", "web", "--down", "web-north"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("web-north is not a backend of web"), "{err}");
}
