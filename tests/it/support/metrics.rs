//! Reading the controller's Prometheus text exposition.

use std::collections::HashMap;
use std::time::Duration;

use super::{ControllerProcess, wait_until};

/// The sum of every sample of a metric family (all label sets) in a Prometheus text exposition.
pub fn metric_sum(text: &str, family: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(family))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum()
}

/// The value of one sample in a Prometheus text exposition (`name{labels}` as written), if any.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The controller's API writes so far, for each of these kinds (`trafficsplit`, `status`, ...).
pub async fn api_writes(controller: &ControllerProcess, kinds: &[&str]) -> HashMap<String, f64> {
    let text = controller.admin_get("/metrics").await.1;
    kinds
        .iter()
        .map(|k| {
            (
                k.to_string(),
                metric(&text, &writes_series(k)).unwrap_or(0.0),
            )
        })
        .collect()
}

/// The controller's `kind` writes once it has counted at least `at_least` of them. A write is
/// visible in the cluster a moment before the controller counts it, so a count read right after
/// the cluster shows a write can miss that write. Panics when the count never gets there.
pub async fn counted_writes(
    controller: &ControllerProcess,
    kind: &str,
    at_least: f64,
    timeout: Duration,
) -> f64 {
    let series = writes_series(kind);
    let read =
        || async { metric(&controller.admin_get("/metrics").await.1, &series).unwrap_or(0.0) };
    let reached = wait_until(timeout, || async { read().await >= at_least }).await;
    assert!(
        reached,
        "the controller never counted {at_least} {kind} writes"
    );
    read().await
}

/// The series counting the controller's API writes of `kind`.
fn writes_series(kind: &str) -> String {
    format!("failover_api_writes_total{{kind=\"{kind}\"}}")
}
