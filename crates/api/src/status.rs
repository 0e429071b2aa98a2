//! The observed state of a policy, as the controller writes it into `status`. Only
//! `failover_core::status` builds one.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Output;

/// A timestamp written as RFC 3339 with millisecond precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub DateTime<Utc>);

impl Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        DateTime::parse_from_rfc3339(&raw)
            .map(|t| Timestamp(t.with_timezone(&Utc)))
            .map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Timestamp {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Timestamp".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "format": "date-time" })
    }
}

impl From<DateTime<Utc>> for Timestamp {
    fn from(t: DateTime<Utc>) -> Self {
        Timestamp(t)
    }
}

/// Where traffic goes now.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// The primary takes the traffic.
    Primary,
    /// One or more secondaries take the traffic.
    FailedOver,
    /// No backend is ready; the weights are kept as they were (fail static).
    NoReadyBackend,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Primary => "Primary",
            Phase::FailedOver => "FailedOver",
            Phase::NoReadyBackend => "NoReadyBackend",
        })
    }
}

/// The role a backend plays in a policy.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The preferred backend.
    Primary,
    /// A fallback backend.
    Secondary,
}

/// The observed state of a policy, written by the controller.
///
/// Until the controller writes one, the API server serves the schema's default,
/// `observedGeneration: 0`: a generation not yet observed, which GitOps tools (kstatus) read as
/// in progress rather than as a settled policy.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("default" = { "observedGeneration": 0 }))]
pub struct FailoverPolicyStatus {
    /// The `metadata.generation` of the spec this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Where traffic goes now: `Primary`, `FailedOver` or `NoReadyBackend`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,

    /// The backend Services receiving traffic now (weight above zero), in priority order.
    #[serde(default)]
    pub active_backends: Vec<String>,

    /// `activeBackends` joined by commas, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_summary: Option<String>,

    /// Ready backends out of all backends, e.g. `2/3`, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_summary: Option<String>,

    /// Readiness and weight of every backend, primary first.
    #[serde(default)]
    pub backends: Vec<BackendStatus>,

    /// When traffic last left the primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failover_time: Option<Timestamp>,

    /// When traffic last returned to the primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failback_time: Option<Timestamp>,

    /// While a `failoverAfter` or `failbackAfter` hold keeps traffic where it is: when it falls
    /// due and traffic moves (unless readiness changes back before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_until: Option<Timestamp>,

    /// Name of the TrafficSplit this policy owns (output `TrafficSplit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_split: Option<String>,

    /// Name of the HTTPRoute this policy owns (output `HTTPRoute`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_route: Option<String>,

    /// Name of the GRPCRoute this policy owns (output `GRPCRoute`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_route: Option<String>,

    /// Name of the TLSRoute this policy owns (output `TLSRoute`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_route: Option<String>,

    /// Name of the TCPRoute this policy owns (output `TCPRoute`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_route: Option<String>,

    /// With `spec.capacity`: the demand, and how much of it no ready backend can serve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityStatus>,

    /// With `spec.capacity.scale`: the workloads the controller raised for a failover, and what
    /// each had before (restored after the failback, unless someone changed it since).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scaled: Vec<ScaledWorkload>,

    /// Where the HTTPRoute attaches (output `HTTPRoute`), and whether each parent's controller
    /// accepted it: a route written but not attached shows here (and in the `Attached`
    /// condition).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub route_parents: Vec<RouteParentState>,

    /// What this policy routes (its apex Service; for a Gateway API route on Gateways, each
    /// hostname and path on each listener it may attach to), summarized: how many of these
    /// claims it holds, how many another policy holds, and when each was made. Of two policies
    /// claiming one thing, the one that claimed it first routes it. Only the controller writes
    /// status (the chart's roles grant no one else `failoverpolicies/status`, and the API server
    /// drops a status sent with the object), so an author cannot backdate a claim. Its size is
    /// bounded whatever the spec: at most 8 times, each listing the claims made then by a
    /// 16-hex-digit digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed: Option<ClaimsStatus>,

    /// Deprecated: each claim and when it was made, as releases before the bounded `claimed`
    /// wrote it. Read once when a policy is first seen, never written.
    #[serde(default, skip_serializing)]
    pub claims: Vec<ClaimRecord>,

    /// The last transitions, oldest first, as the controller decided them (at most
    /// `spec.notifications.history`, default 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<crate::HistoryEntry>,

    /// The id of the last history entry every webhook sink acknowledged (or that was recorded
    /// while the policy named none): later ones are delivered, after a restart too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notified_through: Option<u64>,

    /// Standard conditions, one of each type: `Ready` (traffic is routed to a ready backend
    /// through the owned route) and `Degraded` (some backend, the primary above all, is not
    /// ready); `Suspended` and `Pinned` while `spec.suspend` or `spec.pin` is set;
    /// `HealthQueryFailed` with a health query; `ClustersReachable` with readiness read from other
    /// clusters; `Attached` for an HTTPRoute; `Stalled` while the policy cannot make progress
    /// until someone changes it or the cluster (the `Ready` reason says why).
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

impl FailoverPolicyStatus {
    /// The route this policy owns, by kind (as the API names it) and name.
    pub fn route(&self) -> Option<(&'static str, &str)> {
        Output::ALL
            .into_iter()
            .find_map(|output| Some((output.kind(), output.status_name_of(self)?)))
    }
}

/// A parent of the generated HTTPRoute, and what its controller said of the route.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RouteParentState {
    /// `Gateway` or `Service`.
    pub kind: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The listener of a Gateway, when the policy names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    /// The port, when the policy names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// The parent's `Accepted` condition on the route: `True`, `False`, or absent while no
    /// controller has answered for this parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<String>,
    /// Its reason, e.g. `Accepted` or `NotAllowedByListeners`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Its message, one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Readiness and weight of one backend.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackendStatus {
    /// Name of the backend Service.
    pub service: String,
    /// `Primary` or `Secondary`.
    pub role: Role,
    /// Whether the backend counts as ready under `spec.readiness`.
    pub ready: bool,
    /// Ready endpoints, summed over the Service's EndpointSlices.
    pub ready_endpoints: i32,
    /// All endpoints, summed over the Service's EndpointSlices.
    pub total_endpoints: i32,
    /// The weight this backend has in the generated route.
    pub weight: i32,
    /// This backend's share of the traffic, e.g. `70%` or `33.33%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<String>,
    /// When this backend's readiness last changed (or was first observed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Timestamp>,
    /// Why the backend is not ready, when it is not: e.g. the Service does not exist, or has no
    /// EndpointSlices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Where the readiness is read, when not from the local Service: a Service in another cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_from: Option<ReadinessSource>,
    /// When the readiness was last confirmed, while its source does not answer: the age of the
    /// data is the time since (absent while the data is current).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_as_of: Option<Timestamp>,
    /// The reading of the policy's health query for this backend that decided its health.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthReading>,
    /// With `spec.capacity`: the requests per second its ready endpoints serve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<i64>,
}

/// What a policy routes, summarized: its claims held and lost, and when each was made.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimsStatus {
    /// How many of its claims the policy holds.
    pub held: u32,
    /// How many of its claims another policy holds (the first is named in the `Ready`
    /// condition): its route routes none of these.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lost: u32,
    /// When its claims were made, oldest first, at most 8 times: claims made at more times count
    /// from the later of the two oldest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub made: Vec<ClaimsMade>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Claims a policy made at one time.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimsMade {
    /// When the policy made them, as the controller saw it.
    pub since: Timestamp,
    /// Each claim by its digest: the first 8 bytes of the SHA-256 of the claim as conditions
    /// name it (`apex Service api`), in hex; space-separated.
    pub claims: String,
}

/// Something a policy routes, and since when.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRecord {
    /// What is claimed, as conditions name it: `apex Service api`, or `hostname
    /// shop.example.com path / on Gateway shop/gw`.
    pub claim: String,
    /// When this policy first claimed it, as the controller saw it.
    pub since: Timestamp,
}

/// A workload the controller raised for a failover.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScaledWorkload {
    /// `HorizontalPodAutoscaler` or `Deployment`.
    pub kind: crate::ScaleKind,
    /// Its name.
    pub name: String,
    /// The replicas it had (an HPA's `minReplicas`), restored after the failback.
    pub original_replicas: i32,
    /// The replicas the controller set.
    pub replicas: i32,
    /// Someone changed it after the controller did: theirs is kept, and nothing is restored.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub released: bool,
}

/// The demand of a policy with `spec.capacity`, and what is served of it.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CapacityStatus {
    /// Requests per second to serve: the primary's capacity with all its endpoints (kept while
    /// it has none).
    pub demand: i64,
    /// The share of the demand no ready backend can serve, e.g. `67%` (it stays on the
    /// primary).
    pub unserved: String,
}

/// A health query's reading.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HealthReading {
    /// The value (absent: the query returned no data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// The threshold, e.g. `at most 0.05`.
    pub threshold: String,
    /// Whether the value is within it.
    pub healthy: bool,
    /// When the value was read.
    pub read_at: Timestamp,
}

/// A remote Service whose readiness stands for a backend's.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReadinessSource {
    /// The cluster.
    pub cluster: String,
    /// The namespace there.
    pub namespace: String,
    /// The Service there.
    pub service: String,
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::Millis, true))
    }
}

/// A `metav1.Time` for a condition, to the second as the API server keeps it.
pub fn time(t: DateTime<Utc>) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(t.timestamp())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}
