//! A secondary backend and where a backend's readiness is read.

use garde::Validate;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::{
    ScaleTarget,
    rules::{
        DNS1035_LABEL, DNS1123_LABEL, MAX_LABEL, MAX_PER_ENDPOINT, MAX_TIER, MAX_WEIGHT,
        dns1035_label, dns1123_label,
    },
};

/// One secondary backend.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct SecondaryBackend {
    /// Name of the backend Service, in the policy's namespace (a mirrored Service for a backend
    /// in another cluster).
    #[schemars(length(min = 1, max = MAX_LABEL), pattern(DNS1035_LABEL))]
    #[garde(length(min = 1, max = MAX_LABEL), custom(dns1035_label))]
    pub service: String,

    /// Relative share of traffic this backend takes among the ready secondaries, 1 to 1000.
    /// Only allowed with strategy `Weighted`, where it defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_WEIGHT))]
    #[garde(range(min = 1, max = MAX_WEIGHT))]
    pub weight: Option<i32>,

    /// The priority tier of this backend, 0 to 31 (default 0): traffic leaving the primary goes
    /// to the lowest tier with a ready backend, shared inside it equally (`Equal`) or by
    /// `weight` (`Weighted`); with `spec.capacity`, what a tier cannot serve spills into the
    /// next. Only with strategy `Equal` or `Weighted` (under `Ordered` each secondary is a tier
    /// of its own, in list order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_TIER))]
    #[garde(inner(range(min = 0, max = MAX_TIER)))]
    pub tier: Option<i32>,

    /// The site this backend runs in, as a `FailoverGroup` names its sites (default: the cluster
    /// `readinessFrom` names). Read only while the policy is a member of a group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_LABEL), pattern(DNS1035_LABEL))]
    #[garde(inner(length(min = 1, max = MAX_LABEL), custom(dns1035_label)))]
    pub site: Option<String>,

    /// Where this backend's readiness is read, when not from its own EndpointSlices: a Service in
    /// another cluster (declared to the controller by a Secret labelled
    /// `failover.dev/cluster: <name>`). Traffic still goes to the local Service named by
    /// `service` (a mirror); readiness is the remote Service's EndpointSlices, counted with the
    /// same rules. A cluster unreachable for longer than its Secret's `failover.dev/stale-after`
    /// annotation (default 30 s) counts as not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub readiness_from: Option<ReadinessFrom>,

    /// With `spec.capacity`: requests per second one ready endpoint of this backend serves, when
    /// not `capacity.perEndpoint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_PER_ENDPOINT))]
    #[garde(inner(range(min = 1, max = MAX_PER_ENDPOINT)))]
    pub per_endpoint: Option<i32>,

    /// With `spec.capacity.scale`: the workload behind this backend's Service, which the
    /// controller scales up before traffic moves to it, once the workload consents: its
    /// annotation `failover.dev/policies` names this policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub scale_target: Option<ScaleTarget>,
}

impl SecondaryBackend {
    /// The site this backend runs in: its `site`, else the cluster of its `readinessFrom`.
    pub fn site(&self) -> Option<&str> {
        site_of(self.site.as_deref(), self.readiness_from.as_ref())
    }

    /// The secondary `service`, with no weight and its own readiness.
    pub fn new(service: impl Into<String>) -> Self {
        Self {
            service: service.into(),
            weight: None,
            tier: None,
            site: None,
            readiness_from: None,
            per_endpoint: None,
            scale_target: None,
        }
    }
}

/// A remote Service whose readiness stands for a backend's.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct ReadinessFrom {
    /// The cluster, as named by the `failover.dev/cluster` label of its Secret.
    #[schemars(length(min = 1, max = MAX_LABEL), pattern(DNS1035_LABEL))]
    #[garde(length(min = 1, max = MAX_LABEL), custom(dns1035_label))]
    pub cluster: String,

    /// The remote Service's namespace (default: the policy's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_LABEL), pattern(DNS1123_LABEL))]
    #[garde(inner(length(min = 1, max = MAX_LABEL), custom(dns1123_label)))]
    pub namespace: Option<String>,

    /// The remote Service (default: the backend's own `service`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_LABEL), pattern(DNS1035_LABEL))]
    #[garde(inner(length(min = 1, max = MAX_LABEL), custom(dns1035_label)))]
    pub service: Option<String>,
}

/// A backend's site: the one it names, else the cluster its readiness is read from.
pub fn site_of<'a>(site: Option<&'a str>, from: Option<&'a ReadinessFrom>) -> Option<&'a str> {
    site.or(from.map(|f| f.cluster.as_str()))
}
