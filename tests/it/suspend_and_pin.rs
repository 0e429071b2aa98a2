//! The operator's controls in the spec: `suspend` freezes the route and the status shows it as it
//! stands; `pin` overrides readiness and warns while the pinned backend is not ready.

use failover_core::api::{
    Phase,
    conditions::{PINNED, READY, SUSPENDED, ready},
};

use crate::support::{ON_EAST, ON_WEB, ON_WEST, PolicyBuilder, WAIT, condition, started, weights};

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
