//! Health beyond readiness: the `spec.health` types (a Prometheus query per backend).

use garde::Validate;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rules::{
    self, GO_DURATION, MAX_DURATION_LENGTH, MAX_QUERY_LENGTH, MAX_SUBDOMAIN, PROMETHEUS_ADDRESS,
};

/// Health beyond readiness.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct HealthSpec {
    /// A Prometheus query per backend, compared with a threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub prometheus: Option<PrometheusHealth>,
}

/// A backend is healthy while its Prometheus query's value is within the threshold. The hold
/// timers damp metric flaps as they damp readiness. Prometheus unreachable or a query error
/// keeps the last verdict (condition `HealthQueryFailed`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Validate)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = rules::ONE_THRESHOLD.element_rule())]
pub struct PrometheusHealth {
    /// Prometheus' address, `http://host:port` (default: the controller's `--prometheus-address`).
    /// Only an address the cluster admin allowed (`--prometheus-allowed-addresses`) is asked;
    /// any other is refused (`HealthQueryFailed`, reason `AddressNotAllowed`) and never sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN), pattern(PROMETHEUS_ADDRESS))]
    #[garde(inner(length(min = 1, max = MAX_SUBDOMAIN)))]
    pub address: Option<String>,

    /// The PromQL query for one backend, returning one number; `{{service}}` and
    /// `{{namespace}}` are replaced by the backend's Service and the policy's namespace (both
    /// DNS labels, so no escaping is needed), e.g.
    /// `sum(rate(errors_total{service="{{service}}"}[1m])) / sum(rate(requests_total{service="{{service}}"}[1m]))`.
    /// Every selector reads the policy's namespace only: `namespace="<it>"` (the controller's
    /// `--prometheus-namespace-label`) is added to each; one that names another namespace is
    /// refused (reason `QueryNotAllowed`). Its cost is bounded: at most 4096 characters, 8
    /// regex matchers (`=~`, `!~`), no counted repetition of three digits (`{100}`), each
    /// regex at most 256 characters that compiles as written (a literal `{` is `\{`) to at most
    /// 256 KiB, a depth of at most 64 (the deepest parenthesis, plus each operator and each
    /// range or subquery), every range (`[5m]`, a subquery's `[10m:30s]`) at most 1h, each
    /// subquery with its step written and at most 1000 evaluations by all subqueries (their
    /// steps multiplied where one is inside another); names starting `__failover_` are the
    /// controller's. Prometheus stops each query after 3s (its `timeout` parameter).
    #[schemars(length(min = 1, max = MAX_QUERY_LENGTH))]
    #[x_kube(validation = rules::regex_matchers_rule())]
    #[x_kube(validation = rules::repetition_rule())]
    #[garde(length(min = 1, max = MAX_QUERY_LENGTH))]
    pub query: String,

    /// The backend is unhealthy while the value is above this (an error ratio, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub max: Option<f64>,

    /// The backend is unhealthy while the value is below this (a success ratio, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub min: Option<f64>,

    /// How often the queries run, as a duration such as `10s` (default `10s`, at least `1s`).
    #[serde(default = "ten_seconds")]
    #[schemars(length(max = MAX_DURATION_LENGTH), pattern(GO_DURATION))]
    #[x_kube(validation = rules::hold_duration_rule())]
    #[x_kube(validation = rules::health_interval_rule())]
    #[garde(skip)]
    pub interval: String,

    /// What a query returning no data means: `Healthy` (default) or `Unhealthy`.
    #[serde(default)]
    #[garde(skip)]
    pub no_data: NoData,
}

fn ten_seconds() -> String {
    "10s".to_string()
}

/// What a health query returning no data means.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum NoData {
    /// No data is no news: healthy.
    #[default]
    Healthy,
    /// No data counts as unhealthy.
    Unhealthy,
}
