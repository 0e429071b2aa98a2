//! Failures raise a Warning Event on the policy as they start (an invalid spec, a failing health
//! query, a failed route write, a missing route CRD, a refused parent), once, not at every
//! reconcile while they last.

use failover_core::api::conditions::{HEALTH_QUERY_FAILED, READY, health, ready};
use k8s_openapi::api::events::v1::Event;
use kube::Api;

use crate::support::{
    ControllerProcess, PolicyBuilder, TestEnv, WAIT, WEB_BACKENDS, condition, test_env, wait_until,
};

/// Warning Events on the policy `web` with this reason, each with how often it was seen.
async fn warnings(env: &TestEnv, reason: &str) -> Vec<i32> {
    let events: Api<Event> = env.api();
    events
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.type_.as_deref() == Some("Warning")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("web")
        })
        .map(|e| e.series.map_or(1, |s| s.count))
        .collect()
}

#[tokio::test]
async fn an_invalid_spec_and_a_failing_health_query_each_raise_one_warning_event() {
    let Some(env) = test_env!() else { return };
    env.ready_backends(&WEB_BACKENDS).await;
    // Nothing listens on port 9: every health query fails.
    let _controller =
        ControllerProcess::start(&env, &["--prometheus-address", "http://127.0.0.1:9"]);

    env.apply(&PolicyBuilder::web_with_health(None, "sum(("));
    env.wait_policy("web", WAIT, ready::INVALID_SPEC, |p| {
        condition(p, READY).is_some_and(|c| c.1 == ready::INVALID_SPEC)
    })
    .await;
    assert!(
        env.wait_event("web", ready::INVALID_SPEC, Some("Warning"), WAIT)
            .await
    );
    assert_eq!(warnings(&env, ready::INVALID_SPEC).await, [1]);

    env.apply(&PolicyBuilder::web_with_health(None, "vector(0)"));
    env.wait_policy("web", WAIT, "HealthQueryFailed=True", |p| {
        condition(p, HEALTH_QUERY_FAILED).is_some_and(|c| c.0 == "True")
    })
    .await;
    assert!(
        env.wait_event("web", health::HEALTH_QUERY_FAILED, Some("Warning"), WAIT)
            .await
    );
    // While it lasts, the status changes (a secondary's endpoints): written again, and no more
    // Warnings.
    env.set_endpoints("web-east", 3, 0).await;
    env.wait_policy("web", WAIT, "web-east seen with 3 endpoints", |p| {
        p.status.as_ref().is_some_and(|s| {
            s.backends
                .iter()
                .any(|b| b.service == "web-east" && b.ready_endpoints == 3)
        })
    })
    .await;
    assert!(
        condition(
            &env.policy("web").await.expect("policy"),
            HEALTH_QUERY_FAILED
        )
        .is_some_and(|c| c.0 == "True")
    );
    assert_eq!(warnings(&env, health::HEALTH_QUERY_FAILED).await, [1]);
}

#[tokio::test]
async fn a_failure_raised_again_within_six_minutes_is_the_second_of_its_series() {
    let Some(env) = test_env!() else { return };
    env.ready_backends(&WEB_BACKENDS).await;
    let _controller = ControllerProcess::start(&env, &[]);

    env.apply(&PolicyBuilder::web_with_health(None, "sum(("));
    wait_invalid(&env).await;
    assert!(
        wait_until(WAIT, || async {
            warnings(&env, ready::INVALID_SPEC).await == [1]
        })
        .await
    );
    env.apply(&PolicyBuilder::web());
    env.wait_policy("web", WAIT, "a valid spec", |p| {
        condition(p, READY).is_some_and(|c| c.1 != ready::INVALID_SPEC)
    })
    .await;
    env.apply(&PolicyBuilder::web_with_health(None, "sum(("));
    wait_invalid(&env).await;
    // The same Event again: its series counts two, no second Event.
    assert!(
        wait_until(WAIT, || async {
            warnings(&env, ready::INVALID_SPEC).await == [2]
        })
        .await,
        "Warnings seen: {:?}",
        warnings(&env, ready::INVALID_SPEC).await
    );
}

async fn wait_invalid(env: &TestEnv) {
    env.wait_policy("web", WAIT, ready::INVALID_SPEC, |p| {
        condition(p, READY).is_some_and(|c| c.1 == ready::INVALID_SPEC)
    })
    .await;
}
