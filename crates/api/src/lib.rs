//! The `FailoverPolicy` custom resource (`failover.dev/v1alpha1`).
//!
//! Every doc comment on a field below becomes its `kubectl explain` description. Every validation
//! rule comes from [`rules`], shared by the CRD schema (checked by the API server at
//! `kubectl apply` time) and the controller's validator (`failover_core::validate`). The status types
//! are in [`status`].

// The `printcolumn(...)` entries of the derive repeat keys by design.
#![allow(clippy::duplicated_attributes)]

mod backend;
mod capacity;
pub mod conditions;
mod controls;
mod gateway_route;
mod group;
mod health;
mod notifications;
mod route_kinds;
mod route_ref;
pub mod rules;
pub mod status;

pub use backend::*;
pub use capacity::*;
pub use controls::*;
pub use gateway_route::*;
pub use group::*;
pub use health::*;
pub use notifications::*;
pub use route_kinds::*;
pub use route_ref::*;
pub use status::*;

use std::fmt;

use garde::Validate;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use self::rules::{
    DNS1035_LABEL, DNS1123_SUBDOMAIN, GO_DURATION, MAX_DURATION_LENGTH, MAX_LABEL,
    MAX_MIN_READY_ENDPOINTS, MAX_SECONDARIES, MAX_SUBDOMAIN, dns1035_label, dns1123_subdomain,
};

/// API group of the `FailoverPolicy` resource.
pub const GROUP: &str = "failover.dev";

/// Declares which backend Services receive the traffic of one apex Service, and when traffic
/// fails over from the primary backend to the secondaries and back.
///
/// The controller owns a generated SMI TrafficSplit or Gateway API HTTPRoute for each policy and
/// sets its weights from the readiness of each backend, as reported by its EndpointSlices.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Validate)]
#[kube(
    group = "failover.dev",
    version = "v1alpha1",
    kind = "FailoverPolicy",
    plural = "failoverpolicies",
    singular = "failoverpolicy",
    shortname = "fp",
    category = "failover",
    namespaced,
    status = "FailoverPolicyStatus",
    derive = "PartialEq",
    validation = rules::policy_name_rule(),
    doc = "FailoverPolicy sends the traffic of an apex Service to a primary backend Service while it is ready, and to ordered secondary backends otherwise, by owning an SMI TrafficSplit or a Gateway API route (HTTPRoute, GRPCRoute, TLSRoute or TCPRoute), or by setting the weights of one rule of a route its users own.",
    printcolumn(
        name = "Primary",
        type_ = "string",
        json_path = ".spec.primary",
        description = "The backend that takes all traffic while ready"
    ),
    printcolumn(
        name = "Active",
        type_ = "string",
        json_path = ".status.activeSummary",
        description = "The backends receiving traffic now"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Primary, FailedOver or NoReadyBackend"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.readySummary",
        description = "Ready backends / all backends"
    ),
    printcolumn(
        name = "Pinned",
        type_ = "string",
        json_path = ".spec.pin",
        description = "The backend spec.pin sends all traffic to"
    ),
    printcolumn(
        name = "Drill",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Drill\")].reason",
        description = "Whether a drill (spec.drill) is running, paused, or ended"
    ),
    printcolumn(
        name = "Suspended",
        type_ = "boolean",
        json_path = ".spec.suspend",
        description = "Whether spec.suspend freezes the route"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Service",
        type_ = "string",
        json_path = ".spec.service",
        priority = 1,
        description = "The apex Service clients call"
    ),
    printcolumn(
        name = "Strategy",
        type_ = "string",
        json_path = ".spec.strategy",
        priority = 1,
        description = "How traffic is shared among ready secondaries"
    ),
    printcolumn(
        name = "TrafficSplit",
        type_ = "string",
        json_path = ".status.trafficSplit",
        priority = 1,
        description = "The owned TrafficSplit"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        priority = 1,
        description = "Reason of the Ready condition"
    ),
    printcolumn(
        name = "Last-Failover",
        type_ = "date",
        json_path = ".status.lastFailoverTime",
        priority = 1,
        description = "When traffic last left the primary"
    )
)]
#[x_kube(
    validation = rules::PRIMARY_NOT_SECONDARY.schema_rule(),
    validation = rules::WEIGHT_ONLY_WEIGHTED.schema_rule(),
    validation = rules::TIER_ONLY_SHARED.schema_rule(),
    validation = rules::TRAFFIC_SPLIT_NAME_FIXED.schema_rule(),
    validation = rules::FACTOR_ONLY_PROPORTIONAL.schema_rule(),
    validation = rules::NO_HOLDS_WITH_PROPORTIONAL.schema_rule(),
    validation = rules::PIN_NAMES_A_BACKEND.schema_rule(),
    validation = rules::DRILL_NAMES_A_BACKEND.schema_rule(),
    validation = rules::ROUTE_BACKENDS_FIT.schema_rule(),
    validation = rules::OUTPUT_FIXED.schema_rule(),
    validation = rules::ROUTE_REF_ALONE.schema_rule(),
    validation = rules::ROUTE_REF_FIXED.schema_rule(),
    validation = rules::NO_RAMP_WITH_PROPORTIONAL.schema_rule(),
    validation = rules::NO_CAPACITY_WITH_PROPORTIONAL.schema_rule(),
    validation = rules::SECONDARY_CAPACITY_NEEDS_CAPACITY.schema_rule(),
    validation = rules::DISTINCT_SCALE_TARGETS.schema_rule()
)]
#[schemars(transform = rules::gateway_route_schema_rules)]
#[serde(rename_all = "camelCase")]
pub struct FailoverPolicySpec {
    /// The apex Service that clients call. It becomes the TrafficSplit's root service
    /// (`spec.service`); the mesh sends its traffic to the backends by weight. It may also be the
    /// primary backend, as in a linkerd-failover setup.
    #[schemars(length(min = 1, max = MAX_LABEL), pattern(DNS1035_LABEL))]
    #[garde(length(min = 1, max = MAX_LABEL), custom(dns1035_label))]
    pub service: String,

    /// The backend Service that takes all traffic while it is ready.
    #[schemars(length(min = 1, max = MAX_LABEL), pattern(DNS1035_LABEL))]
    #[garde(length(min = 1, max = MAX_LABEL), custom(dns1035_label))]
    pub primary: String,

    /// Where the primary's readiness is read, when not from its own EndpointSlices: a Service in
    /// another cluster, as for a secondary's `readinessFrom`. Traffic still goes to the local
    /// Service named by `primary` (a mirror).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub primary_readiness_from: Option<ReadinessFrom>,

    /// The site the primary runs in, as a `FailoverGroup` names its sites (default: the cluster
    /// `primaryReadinessFrom` names). Read only while the policy is a member of a group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_LABEL), pattern(DNS1035_LABEL))]
    #[garde(inner(length(min = 1, max = MAX_LABEL), custom(dns1035_label)))]
    pub primary_site: Option<String>,

    /// Backends that take traffic while the primary is not ready, in order of preference
    /// (1 to 32 entries, each naming a distinct Service). They may be local Services or Services
    /// mirrored from other clusters by a multi-cluster mesh (for example `web-east`).
    #[schemars(length(min = 1, max = MAX_SECONDARIES))]
    #[x_kube(validation = rules::DISTINCT_SECONDARIES.element_rule())]
    #[garde(length(min = 1, max = MAX_SECONDARIES), dive)]
    pub secondaries: Vec<SecondaryBackend>,

    /// How traffic is shared among the ready secondaries while the primary is not ready:
    /// `Ordered` (default) sends all of it to the first ready secondary in list order; `Equal`
    /// splits it equally among all ready secondaries; `Weighted` splits it in proportion to each
    /// ready secondary's `weight`. `Proportional` spills traffic over by health, as Envoy's
    /// priority levels do: the primary keeps a share that follows its share of ready endpoints
    /// (times `overprovisioningFactor`), and the secondaries, in list order, take the rest.
    #[serde(default)]
    #[garde(skip)]
    pub strategy: Strategy,

    /// With strategy `Proportional`: how much headroom a backend is assumed to have, as in
    /// Envoy's overprovisioning factor (default 1.4, from 1 to 5). A backend's health is
    /// `min(100, factor x 100 x readyEndpoints / totalEndpoints)`; with 1.4, a primary at least
    /// 72% ready keeps all traffic and one 50% ready keeps 70% of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1.0, max = 5.0))]
    #[garde(inner(range(min = 1.0, max = 5.0)))]
    pub overprovisioning_factor: Option<f64>,

    /// What happens when no backend is ready: `KeepLast` (default) keeps the weights as they are
    /// (fail static); `Primary` sends all traffic to the primary, so clients see its errors
    /// rather than a stale backend's.
    #[serde(default)]
    #[garde(skip)]
    pub when_none_ready: WhenNoneReady,

    /// Freezes the generated route as it is: the controller stops changing its weights. The
    /// status shows the route as it stands; the `Suspended` condition says where traffic would
    /// go. Default false.
    #[serde(default, skip_serializing_if = "is_false")]
    #[garde(skip)]
    pub suspend: bool,

    /// Sends all traffic to this backend (the primary or a secondary), whatever its readiness,
    /// until unset (condition `Pinned`; a Warning Event while the pinned backend is not ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_LABEL), pattern(DNS1035_LABEL))]
    #[garde(inner(length(min = 1, max = MAX_LABEL), custom(dns1035_label)))]
    pub pin: Option<String>,

    /// A failover drill: sends all traffic to one backend until a given time, then the controller
    /// lifts it by itself (also after a restart or a change of leader). While the backend is not
    /// ready the drill moves nothing, unless `force` is set. `pin` and `suspend` take precedence.
    /// Condition `Drill`; Events `DrillStarted` and `DrillEnded`. Written by
    /// `kubectl failover drill`; the field may stay after the drill ended, as its record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub drill: Option<DrillSpec>,

    /// What the controller generates and owns: `TrafficSplit` (default, SMI), or a Gateway API
    /// route (`gateway.networking.k8s.io/v1`): `HTTPRoute`, `GRPCRoute`, `TLSRoute` (TLS
    /// passthrough, by SNI hostname) or `TCPRoute`, attached to Gateways, to the apex Service as
    /// its parent (the mesh pattern Linkerd reads), or both. Cannot be changed later.
    #[serde(default)]
    #[garde(skip)]
    pub output: Output,

    /// The generated HTTPRoute, with output `HTTPRoute`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub http_route: Option<GatewayRouteSpec>,

    /// The generated GRPCRoute, with output `GRPCRoute` (no `pathPrefix`: it takes every call
    /// to its hostnames).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub grpc_route: Option<GatewayRouteSpec>,

    /// The generated TLSRoute, with output `TLSRoute`: TLS passthrough connections routed by
    /// their SNI hostname (at least one `hostnames`; no `pathPrefix`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub tls_route: Option<GatewayRouteSpec>,

    /// The generated TCPRoute, with output `TCPRoute`: every connection of the listeners it
    /// attaches to (name one with `gateways[].sectionName` or `port`; no `hostnames` or
    /// `pathPrefix`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub tcp_route: Option<GatewayRouteSpec>,

    /// A route the user owns, instead of a generated one: one named rule of an existing
    /// HTTPRoute or GRPCRoute in the policy's namespace, whose backendRefs' weights the
    /// controller sets (and nothing else of the route), once the route consents: its
    /// annotation `failover.dev/policies` names this policy. Leave `output` and the generated
    /// route's fields unset. Deleting the policy leaves the route in place, with the weights last
    /// written. Cannot be added, removed or pointed elsewhere later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub route_ref: Option<RouteRefSpec>,

    /// When a backend counts as ready.
    #[serde(default)]
    #[garde(dive)]
    pub readiness: ReadinessSpec,

    /// How long the primary must stay continuously not ready before traffic leaves it, as a
    /// duration such as `30s` or `2m` (default `0s`: at once; at most `24h`). Damps failover on
    /// short blips.
    #[serde(default = "zero_duration")]
    #[schemars(length(max = MAX_DURATION_LENGTH), pattern(GO_DURATION))]
    #[x_kube(validation = rules::hold_duration_rule())]
    #[garde(skip)]
    pub failover_after: String,

    /// How long the primary must stay continuously ready before traffic returns to it after a
    /// failover, as a duration such as `1m` (default `0s`: at once; at most `24h`). Damps
    /// flapping between primary and secondaries.
    #[serde(default = "zero_duration")]
    #[schemars(length(max = MAX_DURATION_LENGTH), pattern(GO_DURATION))]
    #[x_kube(validation = rules::hold_duration_rule())]
    #[garde(skip)]
    pub failback_after: String,

    /// The TrafficSplit the controller generates and owns for this policy.
    #[serde(default)]
    #[garde(dive)]
    pub traffic_split: TrafficSplitSpec,

    /// Health beyond readiness: a backend counts as ready only while its endpoints are ready AND
    /// a metric about it is within a threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub health: Option<HealthSpec>,

    /// How traffic returns to the primary after a failover (once `failbackAfter` has passed).
    /// Default: all at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub failback: Option<FailbackSpec>,

    /// What each backend can serve: traffic goes to a backend only up to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub capacity: Option<CapacitySpec>,

    /// Who is told of the policy's transitions (an alert, CloudEvents webhooks), and how many
    /// `status.history` keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub notifications: Option<NotificationsSpec>,
}

fn zero_duration() -> String {
    "0s".to_string()
}

/// An empty spec (not valid until service, primary and secondaries are set), with every
/// optional field at its default.
impl Default for FailoverPolicySpec {
    fn default() -> Self {
        Self {
            service: String::new(),
            primary: String::new(),
            primary_readiness_from: None,
            primary_site: None,
            secondaries: Vec::new(),
            strategy: Strategy::default(),
            overprovisioning_factor: None,
            when_none_ready: WhenNoneReady::default(),
            suspend: false,
            pin: None,
            drill: None,
            output: Output::default(),
            http_route: None,
            grpc_route: None,
            tls_route: None,
            tcp_route: None,
            route_ref: None,
            readiness: ReadinessSpec::default(),
            failover_after: zero_duration(),
            failback_after: zero_duration(),
            traffic_split: TrafficSplitSpec::default(),
            failback: None,
            health: None,
            capacity: None,
            notifications: None,
        }
    }
}

impl FailoverPolicySpec {
    /// The backends whose readiness is read from another cluster, primary first: each backend's
    /// Service and where its readiness comes from.
    pub fn remote_backends(&self) -> impl Iterator<Item = (&str, &ReadinessFrom)> {
        let primary = self
            .primary_readiness_from
            .as_ref()
            .map(|from| (self.primary.as_str(), from));
        let secondaries = self
            .secondaries
            .iter()
            .filter_map(|s| Some((s.service.as_str(), s.readiness_from.as_ref()?)));
        primary.into_iter().chain(secondaries)
    }
}

/// How traffic is shared among ready secondaries.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// All traffic to the first ready secondary in list order.
    #[default]
    Ordered,
    /// Traffic split equally among all ready secondaries.
    Equal,
    /// Traffic split among ready secondaries in proportion to their `weight`.
    Weighted,
    /// Traffic spills over by health, primary first, then the secondaries in list order.
    Proportional,
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Strategy::Ordered => "Ordered",
            Strategy::Equal => "Equal",
            Strategy::Weighted => "Weighted",
            Strategy::Proportional => "Proportional",
        })
    }
}

/// When a backend counts as ready.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct ReadinessSpec {
    /// A backend is ready when at least this many of its endpoints are ready, summed over all of
    /// its EndpointSlices (default 1, at most 100000). An endpoint is ready when its `ready`
    /// condition is true or unset.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = MAX_MIN_READY_ENDPOINTS))]
    #[garde(range(min = 1, max = MAX_MIN_READY_ENDPOINTS))]
    pub min_ready_endpoints: i32,

    /// A backend is also not ready when fewer than this share of its endpoints are ready, from 0
    /// to 1 (e.g. 0.5: at least half). Both this and `minReadyEndpoints` must hold. Default: no
    /// ratio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    #[garde(inner(range(min = 0.0, max = 1.0)))]
    pub min_ready_ratio: Option<f64>,
}

fn one() -> i32 {
    1
}

impl Default for ReadinessSpec {
    fn default() -> Self {
        Self {
            min_ready_endpoints: 1,
            min_ready_ratio: None,
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// What happens when no backend is ready.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WhenNoneReady {
    /// Keep the weights as they are (fail static).
    #[default]
    KeepLast,
    /// Send all traffic to the primary.
    Primary,
}

/// The generated TrafficSplit.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct TrafficSplitSpec {
    /// Name of the TrafficSplit (default: the policy's name). It cannot be changed later. A
    /// TrafficSplit of this name that the policy does not own is never touched; the policy then
    /// reports `Ready=False` with reason `TrafficSplitConflict`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN), pattern(DNS1123_SUBDOMAIN))]
    #[garde(inner(length(min = 1, max = MAX_SUBDOMAIN), custom(dns1123_subdomain)))]
    pub name: Option<String>,

    /// API version the TrafficSplit is written in: `split.smi-spec.io/v1alpha2` (default) or
    /// `split.smi-spec.io/v1alpha1` (also served by Linkerd's SMI extension).
    #[serde(default)]
    #[garde(skip)]
    pub api_version: TrafficSplitApiVersion,
}

/// The SMI TrafficSplit API versions the controller can write.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TrafficSplitApiVersion {
    /// `split.smi-spec.io/v1alpha2`.
    #[default]
    #[serde(rename = "split.smi-spec.io/v1alpha2")]
    V1Alpha2,
    /// `split.smi-spec.io/v1alpha1`.
    #[serde(rename = "split.smi-spec.io/v1alpha1")]
    V1Alpha1,
}

impl TrafficSplitApiVersion {
    /// The `apiVersion` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V1Alpha2 => "split.smi-spec.io/v1alpha2",
            Self::V1Alpha1 => "split.smi-spec.io/v1alpha1",
        }
    }
}
