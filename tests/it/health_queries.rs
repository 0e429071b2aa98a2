//! Health beyond readiness, end to end: a real Prometheus (built from its Go module) scrapes an
//! exporter the test controls, and the controller fails over on a backend's error ratio although
//! all its endpoints are ready; Prometheus stopped keeps the last verdict and says so. An answer
//! that is not one number is a failed query, and a tenant asking for many queries a second is
//! held to the controller's budget while another namespace's queries are still answered.

use std::time::{Duration, Instant};

use failover_core::api::FailoverPolicy;
use failover_core::api::conditions::{HEALTH_QUERY_FAILED, health};

use crate::support::{
    self, ControllerProcess, Exporter, ON_EAST, ON_WEB, PolicyBuilder, PrometheusServer, Tenant,
    TestEnv, WAIT, WEB_BACKENDS, condition, metric_sum, test_env, wait_until, weights,
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

/// A condition's message as the tenant reads it with kubectl.
fn seen_by(tenant: &Tenant, type_: &str) -> String {
    let path = format!("jsonpath={{.status.conditions[?(@.type==\"{type_}\")].message}}");
    support::ok(
        &tenant.kubectl(&["get", "failoverpolicy", "web", "-o", &path]),
        "kubectl get as the tenant",
    )
}

/// The health queries the controller has sent, by its own count.
async fn queries_sent(controller: &ControllerProcess) -> f64 {
    let text = controller.admin_get("/metrics").await.1;
    metric_sum(&text, "failover_health_queries_total")
}

/// The instant queries Prometheus has answered, by its own count. Asked in HTTP/1.0, so the
/// answer is not chunked (a chunk's frame can split a line).
fn queries_answered(prometheus: &PrometheusServer) -> f64 {
    use std::io::{Read, Write};
    let address = prometheus.url.trim_start_matches("http://");
    let mut text = String::new();
    let mut stream = std::net::TcpStream::connect(address).expect("Prometheus answers");
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n").expect("request");
    stream
        .read_to_string(&mut text)
        .expect("Prometheus' metrics");
    text.lines()
        .filter(|l| {
            l.starts_with("prometheus_http_requests_total{")
                && l.contains("handler=\"/api/v1/query\"")
        })
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn a_matrix_answer_is_a_failed_query_named_in_the_condition_and_backs_off() {
    let Some(env) = test_env!() else { return };
    let exporter = Exporter::start();
    exporter.set(&[("web", 0.01), ("web-east", 0.0), ("web-west", 0.0)]);
    let prometheus = PrometheusServer::start(env.cp, &exporter, &env.ns).await;
    let controller = env
        .with_controller(&["--prometheus-address", &prometheus.url])
        .await;
    let tenant = env.tenant();
    // The longest range at the most evaluations allowed: 720 samples, once read as "no data".
    tenant.apply(&PolicyBuilder::web_with_health(None, "vector(1)[1h:5s]").yaml());
    env.wait_weights("web", &ON_WEB, WAIT).await;
    let p = env
        .wait_policy(
            "web",
            WAIT,
            "the matrix answer reported for every backend",
            |p| {
                // Each backend's query fails in its own round: wait until all three have.
                condition(p, HEALTH_QUERY_FAILED).is_some_and(|c| {
                    c.0 == "True" && c.2.contains("web, web-east, web-west: non-scalar answer")
                })
            },
        )
        .await;
    let (_, reason, message) = condition(&p, HEALTH_QUERY_FAILED).expect("condition");
    assert_eq!(reason, health::HEALTH_QUERY_FAILED);
    assert!(
        message.contains("web, web-east, web-west: non-scalar answer: a range vector (matrix)"),
        "{message}"
    );
    let backends = p
        .status
        .as_ref()
        .map(|s| s.backends.as_slice())
        .unwrap_or_default();
    assert!(
        !backends.is_empty() && backends.iter().all(|b| b.health.is_none()),
        "no verdict from an answer that is not one number: {backends:?}"
    );
    // Every query of the policy fails: the pause between rounds doubles to eight intervals.
    // Once it has, a window of sixteen seconds holds at most three rounds of three queries
    // (forty-eight queries at the interval).
    tokio::time::sleep(Duration::from_secs(8)).await;
    let before = queries_sent(&controller).await;
    let window = Duration::from_secs(16);
    tokio::time::sleep(window).await;
    let sent = queries_sent(&controller).await - before;
    support::figure(format!(
        "the tenant sees: HealthQueryFailed: {}; backed off: {sent} queries in {window:?} (48 at the interval)",
        seen_by(&tenant, HEALTH_QUERY_FAILED)
    ));
    assert!(sent <= 9.0, "{sent} queries in {window:?}: no backoff");
    assert_eq!(env.split_weights("web").await, Some(weights(&ON_WEB)));
}

/// The noisy tenant's policies: `count` of 33 backends each (a primary and the most
/// secondaries), their query every second.
fn wide_policies(count: usize, query: &str) -> String {
    (0..count)
        .map(|i| {
            let secondaries: Vec<String> = (1..=failover_core::api::rules::MAX_SECONDARIES)
                .map(|j| format!("b{i}-{j}"))
                .collect();
            let secondaries: Vec<&str> = secondaries.iter().map(String::as_str).collect();
            PolicyBuilder::named(&format!("wide-{i}"), &format!("b{i}-0"), &secondaries)
                .with_health(None, query)
                .yaml()
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

#[tokio::test]
async fn a_tenant_with_many_backends_at_1s_stays_within_the_budget_and_another_namespace_fails_over()
 {
    const BUDGET: f64 = 10.0;
    let Some(noisy) = TestEnv::dedicated("noisy-health-queries").await else {
        return;
    };
    let quiet = TestEnv::on(noisy.cp, "quiet-health-queries")
        .await
        .expect("a second namespace");
    quiet.ready_backends(&WEB_BACKENDS).await;
    let exporter = Exporter::start();
    exporter.set(&[("web", 0.01), ("web-east", 0.0), ("web-west", 0.0)]);
    let prometheus = PrometheusServer::start(noisy.cp, &exporter, &quiet.ns).await;
    let controller = ControllerProcess::start_cluster_wide(
        &noisy,
        &[
            "--prometheus-address",
            &prometheus.url,
            "--prometheus-queries-per-second",
            "10",
        ],
    );
    let query = "backend_error_ratio{service=\"{{service}}\"}";
    quiet
        .tenant()
        .apply(&PolicyBuilder::web_with_health(None, query).yaml());
    quiet.wait_weights("web", &ON_WEB, WAIT).await;
    let first_value =
        |p: &FailoverPolicy| p.status.as_ref()?.backends.first()?.health.as_ref()?.value;
    quiet
        .wait_policy("web", WAIT, "the primary's first reading", |p| {
            first_value(p) == Some(0.01)
        })
        .await;

    // Eight policies of 33 backends at 1 s: 264 queries a second asked for.
    let asked = 8 * (failover_core::api::rules::MAX_SECONDARIES + 1);
    noisy.tenant().apply(&wide_policies(8, query));
    let before = queries_sent(&controller).await;
    let flooding = wait_until(WAIT, || async {
        queries_sent(&controller).await > before + 3.0 * BUDGET
    })
    .await;
    assert!(flooding, "the noisy tenant's pollers never ran");

    // Meanwhile the quiet namespace's primary goes bad: its queries must still be answered.
    let (sent_before, answered_before) = (
        queries_sent(&controller).await,
        queries_answered(&prometheus),
    );
    let started = Instant::now();
    exporter.set(&[("web", 0.9), ("web-east", 0.0), ("web-west", 0.0)]);
    quiet.wait_weights("web", &ON_EAST, WAIT).await;
    let failover = started.elapsed();
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(started.elapsed())).await;
    let (sent, answered) = (
        queries_sent(&controller).await - sent_before,
        queries_answered(&prometheus) - answered_before,
    );
    let window = started.elapsed().as_secs_f64();
    let bound = BUDGET * (window + 1.0);
    support::figure(format!(
        "a tenant asking {asked} queries/s: the controller sent {sent} in {window:.1} s ({:.1}/s), Prometheus answered {answered} (budget 10/s, bound {bound:.0}); another namespace failed over on its error ratio in {failover:.1?}",
        sent / window
    ));
    assert!(
        sent <= bound && answered <= bound,
        "sent {sent}, answered {answered} in {window:.1} s: over the budget"
    );
    assert!(
        sent >= BUDGET * window / 2.0,
        "the budget is in use: {sent} in {window:.1} s"
    );
    assert!(
        failover <= Duration::from_secs(10),
        "the quiet namespace failed over {failover:.1?} after its ratio rose (about 3 s alone)"
    );
    let p = quiet.policy("web").await.expect("the quiet policy");
    assert!(
        condition(&p, HEALTH_QUERY_FAILED).is_some_and(|c| c.0 == "False"),
        "the quiet namespace's queries answer"
    );
}
