//! Health beyond readiness, end to end: a real Prometheus (built from its Go module) scrapes an
//! exporter the test controls, and the controller fails over on a backend's error ratio although
//! all its endpoints are ready; Prometheus stopped keeps the last verdict and says so.

use std::time::{Duration, Instant};

use failover::api::FailoverPolicy;
use failover::api::conditions::{HEALTH_QUERY_FAILED, health};

use crate::support::{
    self, Exporter, ON_EAST, ON_WEB, PolicyBuilder, PrometheusServer, WAIT, condition, test_env,
    weights,
};

fn query_failed(p: &FailoverPolicy) -> bool {
    condition(p, HEALTH_QUERY_FAILED).is_some_and(|c| c.0 == "True")
}

#[tokio::test]
async fn an_error_ratio_over_the_threshold_fails_over_and_prometheus_down_keeps_the_verdict() {
    let Some(env) = test_env!() else { return };
    let exporter = Exporter::start();
    exporter.set(&[("web", 0.01), ("web-east", 0.0), ("web-west", 0.0)]);
    let mut prometheus = PrometheusServer::start(env.cp, &exporter, &env.ns).await;
    let url = prometheus.url.clone();
    let _c = env
        .with_controller(&["--prometheus-allowed-addresses", &url])
        .await;
    // A missed scrape makes the series stale at once; the window rides it out.
    env.apply(&PolicyBuilder::web_with_health(
        Some(url),
        "last_over_time(backend_error_ratio{service=\"{{service}}\"}[5s])",
    ));
    env.wait_weights("web", &ON_WEB, WAIT).await;
    // The failover is timed from a poller that reads Prometheus: wait for its first reading, so a
    // poller still pausing after queries that failed before Prometheus answered (the pause doubles
    // up to eight intervals) is not part of the figure.
    let reading = |p: &FailoverPolicy| {
        p.status
            .as_ref()
            .and_then(|s| s.backends.first())
            .and_then(|b| b.health.clone())
    };
    env.wait_policy("web", WAIT, "the primary's first reading", |p| {
        reading(p).is_some_and(|r| r.value == Some(0.01) && r.healthy)
    })
    .await;

    // All endpoints ready, but 90% of the primary's requests fail: fail over.
    let bad = Instant::now();
    exporter.set(&[("web", 0.9), ("web-east", 0.0), ("web-west", 0.0)]);
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let failover = bad.elapsed();
    // The next scrape (every 1 s) brings the value in, the next query (every 1 s) reads it:
    // within two of each, with a second to spare for the write and the route read.
    let bound = Duration::from_secs(2 * (1 + 1) + 1);
    assert!(
        failover <= bound,
        "failed over {failover:.1?} after the ratio rose, more than {bound:?}"
    );
    // The status follows the route (it is written in the background): wait for the reading.
    let p = env
        .wait_policy("web", WAIT, "the primary's reading", |p| {
            reading(p).is_some_and(|r| !r.healthy)
        })
        .await;
    let r = reading(&p).expect("reading");
    assert_eq!((r.value, r.healthy), (Some(0.9), false));

    // Prometheus stopped while the last verdict is "unhealthy": it stands, although the primary
    // recovered meanwhile (which no query can see). A controller that took a failed query for
    // "no data" (healthy, by this policy's noData) would fail back now.
    prometheus.stop();
    exporter.set(&[("web", 0.01), ("web-east", 0.0), ("web-west", 0.0)]);
    env.wait_policy("web", WAIT, health::HEALTH_QUERY_FAILED, query_failed)
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        env.split_weights("web").await,
        Some(weights(&ON_EAST)),
        "fail static while Prometheus is down: the unhealthy verdict stands"
    );
    let p = env.policy("web").await.expect("policy");
    assert_eq!(
        reading(&p).map(|r| (r.value, r.healthy)),
        Some((Some(0.9), false)),
        "the status keeps the last reading"
    );
    // Back: the good ratio it now sees brings traffic back, and the condition clears.
    let good = Instant::now();
    prometheus.resume().await;
    env.wait_weights("web", &ON_WEB, WAIT).await;
    env.wait_policy("web", WAIT, "queries answer again", |p| !query_failed(p))
        .await;
    support::figure(format!(
        "error ratio over the threshold → failover {failover:.1?} (bound 5 s); Prometheus back with the ratio under → failback {:.1?} (scrape and query every 1 s)",
        good.elapsed()
    ));
}

#[tokio::test]
async fn a_health_check_with_no_prometheus_to_ask_says_so_and_routes_on_readiness() {
    let Some(env) = test_env!() else { return };
    let _c = env.with_controller(&[]).await;
    env.apply(&PolicyBuilder::web_with_health(
        None,
        "backend_error_ratio{service=\"{{service}}\"}",
    ));
    env.wait_weights("web", &ON_WEB, WAIT).await;
    let p = env
        .wait_policy("web", WAIT, health::HEALTH_QUERY_FAILED, query_failed)
        .await;
    let message = condition(&p, HEALTH_QUERY_FAILED)
        .map(|c| c.2)
        .unwrap_or_default();
    assert!(
        message.contains("spec.health.prometheus.address"),
        "the condition names the field to set: {message}"
    );
}

#[tokio::test]
async fn a_prometheus_answering_html_or_ten_megabytes_is_reported_in_one_line() {
    let Some(env) = test_env!() else { return };
    let not_prometheus = Exporter::start();
    not_prometheus.serve("<html>\n<body>\n<h1>Sign in</h1>\n</body>\n</html>\n".into());
    let address = format!("http://{}", not_prometheus.address);
    let _c = env
        .with_controller(&["--prometheus-allowed-addresses", &address])
        .await;
    env.apply(&PolicyBuilder::web_with_health(
        Some(address),
        "backend_error_ratio{service=\"{{service}}\"}",
    ));
    env.wait_weights("web", &ON_WEB, WAIT).await;
    let html = env
        .wait_policy("web", WAIT, "the HTML answer reported", |p| {
            condition(p, HEALTH_QUERY_FAILED)
                .is_some_and(|c| c.0 == "True" && c.2.contains("without JSON"))
        })
        .await;
    let said = condition(&html, HEALTH_QUERY_FAILED).expect("condition").2;
    assert!(
        !said.contains("<html>") && !said.contains("Sign in"),
        "{said}"
    );
    // Ten megabytes: refused unread, the controller unharmed.
    not_prometheus.serve(format!(
        "{{\"status\":\"success\",\"data\":\"{}\"}}",
        "x".repeat(10 << 20)
    ));
    let big = env
        .wait_policy("web", WAIT, "the huge answer reported", |p| {
            condition(p, HEALTH_QUERY_FAILED).is_some_and(|c| c.2.contains("more than 1 MiB"))
        })
        .await;
    support::figure(format!(
        "HTML: {said}\n10 MB: {}",
        condition(&big, HEALTH_QUERY_FAILED).expect("condition").2
    ));
    env.wait_weights("web", &ON_WEB, WAIT).await;
}
