//! Capacity-aware failover: the `spec.capacity` types (what each backend can serve, and scaling
//! a secondary before traffic moves to it).

use garde::Validate;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rules::{
    self, DNS1123_SUBDOMAIN, GO_DURATION, MAX_DURATION_LENGTH, MAX_PER_ENDPOINT, MAX_SUBDOMAIN,
    dns1123_subdomain,
};

/// What each backend can serve. A backend's capacity is its ready endpoints times the requests
/// per second one endpoint serves; the demand is the primary's capacity with all its endpoints
/// ready (the traffic it was sized for; kept while some are not). Traffic leaving a primary that
/// is not ready goes to the secondaries up to their capacity; what they cannot take goes where
/// `unserved` says, and the status says how much is unserved. A primary short of ready endpoints, and a
/// failback, give the primary the share its ready endpoints serve and the secondaries the rest.
/// Not with strategy `Proportional`, which shares by health.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct CapacitySpec {
    /// Requests per second one ready endpoint serves, for every backend that does not set its
    /// own (1 to 1000000).
    #[schemars(range(min = 1, max = MAX_PER_ENDPOINT))]
    #[garde(range(min = 1, max = MAX_PER_ENDPOINT))]
    pub per_endpoint: i32,

    /// Requests per second one ready endpoint of the primary serves, when not `perEndpoint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_PER_ENDPOINT))]
    #[garde(inner(range(min = 1, max = MAX_PER_ENDPOINT)))]
    pub primary_per_endpoint: Option<i32>,

    /// Scale the secondaries up before traffic moves to them (opt-in, and only where the
    /// cluster admin let the controller scale: the chart's `scaling.enabled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub scale: Option<ScaleSpec>,

    /// Where the demand the ready secondaries cannot take goes while the primary is not ready:
    /// `Primary` (the default: no secondary is sent more than it is declared to serve) or
    /// `Secondaries` (spread over the ready secondaries by their capacity, for backends that
    /// shed what they cannot serve and answer the rest).
    #[serde(default, skip_serializing_if = "Unserved::is_primary")]
    #[garde(skip)]
    pub unserved: Unserved,
}

/// Where the unserved share of a failover goes (`spec.capacity.unserved`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Unserved {
    /// It stays on the primary, which is not ready: those requests fail there, and no secondary
    /// is sent more than its capacity.
    #[default]
    Primary,
    /// It is spread over the ready secondaries in proportion to their capacity: each is sent
    /// more than it is declared to serve, and what it cannot serve fails there.
    Secondaries,
}

impl Unserved {
    /// The default (`Primary`), left out when written.
    pub fn is_primary(&self) -> bool {
        *self == Self::Primary
    }
}

/// Scaling before shifting: when the primary turns not ready (the `failoverAfter` hold begins),
/// each secondary with a `scaleTarget` is raised to the replicas the demand needs (an
/// HorizontalPodAutoscaler's `minReplicas`, or a Deployment's replicas through its scale
/// subresource); traffic moves as its endpoints become ready, never more than they serve, until
/// `deadline`, after which the capacity no longer holds traffic back. After the failback the
/// controller restores the value it changed, unless someone changed it since.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct ScaleSpec {
    /// How long traffic waits for the scaled secondaries after the primary turned not ready, as
    /// a duration such as `2m` (default `5m`, at most `24h`).
    #[serde(default = "five_minutes")]
    #[schemars(length(max = MAX_DURATION_LENGTH), pattern(GO_DURATION))]
    #[x_kube(validation = rules::hold_duration_rule())]
    #[garde(skip)]
    pub deadline: String,

    /// The most replicas the controller sets on any one workload (default 10, at most 100): a
    /// policy's own bound on what it can cost.
    #[serde(default = "ten")]
    #[schemars(range(min = 1, max = 100))]
    #[garde(range(min = 1, max = 100))]
    pub max_replicas: i32,
}

/// The finalizer a policy holds while a workload it raised is not restored: deleting the policy
/// waits until the controller has restored (or let go of) every workload in `status.scaled`.
pub const SCALE_FINALIZER: &str = "failover.dev/restore-scaled";

fn five_minutes() -> String {
    "5m".to_string()
}

fn ten() -> i32 {
    10
}

/// The workload that backs a secondary's Service, named, never guessed.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct ScaleTarget {
    /// `HorizontalPodAutoscaler` (its `minReplicas` is raised) or `Deployment` (its replicas,
    /// through the scale subresource).
    #[garde(skip)]
    pub kind: ScaleKind,

    /// Its name, in the policy's namespace.
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN), pattern(DNS1123_SUBDOMAIN))]
    #[garde(length(min = 1, max = MAX_SUBDOMAIN), custom(dns1123_subdomain))]
    pub name: String,
}

/// The kinds of workload the controller scales.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScaleKind {
    /// An `autoscaling/v2` HorizontalPodAutoscaler.
    HorizontalPodAutoscaler,
    /// An `apps/v1` Deployment.
    Deployment,
}
