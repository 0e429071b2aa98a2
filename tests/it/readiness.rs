//! What counts as ready, and what happens when nothing is: a ready-ratio threshold, no ready
//! backend at all (fail static, or everything to the primary with `whenNoneReady: Primary`), and
//! missing Services and EndpointSlices reported in the status.

use std::time::Duration;

use failover_core::api::{
    Phase, WhenNoneReady,
    conditions::{READY, ready},
};

use crate::support::{
    ControllerProcess, LONG_WAIT, ON_EAST, ON_WEB, ON_WEST, PolicyBuilder, WAIT, condition_reason,
    metric_sum, phase, routing_to_web, started, test_env, weights,
};

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
async fn keeps_weights_when_nothing_is_ready() {
    let Some((env, _controller)) = routing_to_web("none-ready", PolicyBuilder::web()).await else {
        return;
    };
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    env.set_endpoints("web-east", 0, 1).await;
    env.wait_weights("web", &ON_WEST, WAIT).await;
    let before = env.split_weights("web").await;
    env.set_endpoints("web-west", 0, 1).await;
    let p = env
        .wait_policy("web", WAIT, ready::NO_READY_BACKEND, |p| {
            phase(p) == Some(Phase::NoReadyBackend)
        })
        .await;
    assert_eq!(
        condition_reason(&p, READY).as_deref(),
        Some(ready::NO_READY_BACKEND)
    );
    // Fail static: the route keeps exactly the weights it had before the last backend went
    // (the status is written after the route, so the route is as decided).
    assert_eq!(env.split_weights("web").await, before);
    assert_eq!(before, Some(weights(&ON_WEST)));
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
async fn missing_service_and_missing_slices_are_reported() {
    let Some(env) = test_env!() else { return };
    env.create_service("web-east").await;
    env.ready_backends(&["web-west"]).await;
    let _controller = ControllerProcess::start(&env, &[]);
    env.apply(&PolicyBuilder::web());
    env.wait_weights("web", &ON_WEST, WAIT).await;
    let p = env
        .wait_policy("web", WAIT, "status", |p| {
            phase(p) == Some(Phase::FailedOver)
        })
        .await;
    let backends = p.status.expect("status").backends;
    assert_eq!(backends[0].message.as_deref(), Some("Service not found"));
    assert_eq!(
        backends[1].message.as_deref(),
        Some("Service has no EndpointSlices")
    );
}

#[tokio::test]
async fn policy_whose_services_do_not_exist_reports_them() {
    let Some(env) = test_env!() else { return };
    let controller = ControllerProcess::start(&env, &[]);
    env.apply(&PolicyBuilder::web());
    let p = env
        .wait_policy("web", LONG_WAIT, ready::NO_READY_BACKEND, |p| {
            phase(p) == Some(Phase::NoReadyBackend)
        })
        .await;
    let status = p.status.expect("status");
    assert!(
        status
            .backends
            .iter()
            .all(|b| b.message.as_deref() == Some("Service not found"))
    );
    assert_eq!(
        env.split_weights("web").await,
        Some(vec![
            ("web".into(), 1),
            ("web-east".into(), 0),
            ("web-west".into(), 0)
        ])
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let text = controller.admin_get("/metrics").await.1;
    let errors = metric_sum(&text, "failover_reconcile_errors_total");
    assert_eq!(errors, 0.0, "no error storm");
}
