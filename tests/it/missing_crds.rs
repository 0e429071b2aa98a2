//! Each missing CRD named (in the log, a metric and the policy's condition; in `/readyz` for the
//! FailoverPolicy CRD only, so that no tenant's policy takes the controller out of readiness)
//! and picked up without a restart once installed, on a control plane of the test's own.

use std::time::{Duration, Instant};

use failover_core::{
    api::{
        FailoverPolicy, GatewayRouteSpec, Output,
        conditions::{READY, ready},
    },
    crd::failover_policy_crd,
    route::trafficsplit::traffic_split_crd,
};

use crate::support::{
    self, ControllerProcess, ON_WEB, PolicyBuilder, TestEnv, WAIT, WEB_BACKENDS, apply_crd,
    condition, condition_reason, metric, wait_until,
};

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
        s.http_route = Some(GatewayRouteSpec::on_port(8080));
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
        .wait_policy(
            "web",
            WAIT,
            Output::TrafficSplit.reasons().crd_missing,
            missing,
        )
        .await;
    let (_, reason, message) = condition(&p, READY).unwrap_or_default();
    assert_eq!(reason, Output::TrafficSplit.reasons().crd_missing);
    assert!(
        message.contains("trafficsplits.split.smi-spec.io"),
        "{message}"
    );
    env.wait_policy("hr", WAIT, Output::HttpRoute.reasons().crd_missing, missing)
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
