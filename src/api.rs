//! The `FailoverPolicy` custom resource (`failover.dev/v1alpha1`).
//!
//! Every doc comment on a field below becomes its `kubectl explain` description, and every
//! validation rule is expressed twice: once in the CRD schema (OpenAPI bounds, patterns and CEL
//! rules, enforced by the API server at `kubectl apply` time) and once in Rust
//! ([`FailoverPolicySpec::validate_spec`]), so that the controller can report anything that reached
//! it without passing the schema (for example a CRD installed from an older release).

// The `printcolumn(...)` entries of the derive repeat keys by design.
#![allow(clippy::duplicated_attributes)]

use std::{collections::BTreeSet, fmt, sync::LazyLock, time::Duration};

use chrono::{DateTime, SecondsFormat, Utc};
use garde::Validate;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of the `FailoverPolicy` resource.
pub const GROUP: &str = "failover.dev";
/// Maximum number of secondaries a policy may list.
pub const MAX_SECONDARIES: usize = 32;
/// Largest weight a secondary may carry under the `Weighted` strategy.
pub const MAX_WEIGHT: i32 = 1000;
/// Longest `failoverAfter` / `failbackAfter` accepted.
pub const MAX_HOLD: Duration = Duration::from_secs(24 * 3600);
/// Largest `readiness.minReadyEndpoints` accepted.
pub const MAX_MIN_READY_ENDPOINTS: i32 = 100_000;

/// A DNS-1035 label, the form every Service name takes.
pub const DNS1035_LABEL: &str = r"^[a-z]([-a-z0-9]*[a-z0-9])?$";
/// A DNS-1123 subdomain, the form most object names take.
pub const DNS1123_SUBDOMAIN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A Go-style duration (`time.ParseDuration`), non-negative: `0`, `90s`, `1m30s`, `1.5h`.
pub const GO_DURATION: &str = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$";

static DNS1035_RE: LazyLock<regex::Regex> = LazyLock::new(|| regex_or_never(DNS1035_LABEL));
static DNS1123_RE: LazyLock<regex::Regex> = LazyLock::new(|| regex_or_never(DNS1123_SUBDOMAIN));

fn regex_or_never(pattern: &str) -> regex::Regex {
    // The patterns are constants checked by unit tests; a failure here is a programming error
    // caught before release, and still must not crash the controller: fall back to a regex that
    // matches nothing so validation reports every name as invalid.
    regex::Regex::new(pattern)
        .unwrap_or_else(|_| regex::Regex::new(r"[^\s\S]").expect("static regex")) // ok: static
}

/// Declares which backend Services receive the traffic of one apex Service, and when traffic
/// fails over from the primary backend to the secondaries and back.
///
/// The controller owns a generated SMI TrafficSplit for each policy and sets its weights from
/// the readiness of each backend, as reported by its EndpointSlices.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Validate)]
#[kube(
    group = "failover.dev",
    version = "v1alpha1",
    kind = "FailoverPolicy",
    plural = "failoverpolicies",
    singular = "failoverpolicy",
    shortname = "fp",
    namespaced,
    status = "FailoverPolicyStatus",
    derive = "PartialEq",
    doc = "FailoverPolicy sends the traffic of an apex Service to a primary backend Service while it is ready, and to ordered secondary backends otherwise, by owning an SMI TrafficSplit.",
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
    validation = Rule::new("!self.secondaries.exists(s, s.service == self.primary)").message("the primary must not also be listed as a secondary").field_path(".primary"),
    validation = Rule::new("self.strategy == 'Weighted' || self.secondaries.all(s, !has(s.weight))").message("secondaries[].weight is only meaningful with strategy Weighted").field_path(".secondaries"),
    validation = Rule::new("(has(self.trafficSplit) && has(self.trafficSplit.name) ? self.trafficSplit.name : '') == (has(oldSelf.trafficSplit) && has(oldSelf.trafficSplit.name) ? oldSelf.trafficSplit.name : '')").message("trafficSplit.name cannot be changed; create a new policy instead").field_path(".trafficSplit.name"),
    validation = Rule::new("!has(self.overprovisioningFactor) || self.strategy == 'Proportional'").message("overprovisioningFactor is only meaningful with strategy Proportional").field_path(".overprovisioningFactor"),
    validation = Rule::new("self.strategy != 'Proportional' || ((self.failoverAfter == '0s' || self.failoverAfter == '0') && (self.failbackAfter == '0s' || self.failbackAfter == '0'))").message("failoverAfter and failbackAfter are not supported with strategy Proportional, which follows health continuously").field_path(".strategy"),
    validation = Rule::new("!has(self.pin) || self.pin == self.primary || self.secondaries.exists(s, s.service == self.pin)").message("pin must name the primary or one of the secondaries").field_path(".pin"),
    validation = Rule::new("self.output != 'HTTPRoute' || has(self.httpRoute)").message("httpRoute (with the backends' port) is required with output HTTPRoute").field_path(".httpRoute"),
    validation = Rule::new("(has(self.httpRoute) && has(self.httpRoute.name) ? self.httpRoute.name : '') == (has(oldSelf.httpRoute) && has(oldSelf.httpRoute.name) ? oldSelf.httpRoute.name : '')").message("httpRoute.name cannot be changed; create a new policy instead").field_path(".httpRoute.name"),
    validation = Rule::new("self.output == oldSelf.output").message("output cannot be changed; create a new policy instead").field_path(".output")
)]
#[serde(rename_all = "camelCase")]
pub struct FailoverPolicySpec {
    /// The apex Service that clients call. It becomes the TrafficSplit's root service
    /// (`spec.service`); the mesh sends its traffic to the backends by weight. It may also be the
    /// primary backend, as in a linkerd-failover setup.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    )]
    #[garde(length(min = 1, max = 63), custom(dns1035_label))]
    pub service: String,

    /// The backend Service that takes all traffic while it is ready.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    )]
    #[garde(length(min = 1, max = 63), custom(dns1035_label))]
    pub primary: String,

    /// Backends that take traffic while the primary is not ready, in order of preference
    /// (1 to 32 entries, each naming a distinct Service). They may be local Services or Services
    /// mirrored from other clusters by a multi-cluster mesh (for example `web-east`).
    #[schemars(length(min = 1, max = 32))]
    #[x_kube(validation = Rule::new("self.all(x, self.exists_one(y, y.service == x.service))").message("secondaries must name distinct Services"))]
    #[garde(length(min = 1, max = 32), dive)]
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

    /// Freezes the generated route as it is: the controller stops changing its weights, while the
    /// status keeps showing what it would do (condition `Suspended`). Default false.
    #[serde(default, skip_serializing_if = "is_false")]
    #[garde(skip)]
    pub suspend: bool,

    /// Sends all traffic to this backend (the primary or a secondary), whatever its readiness,
    /// until unset (condition `Pinned`; a Warning Event while the pinned backend is not ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    )]
    #[garde(inner(length(min = 1, max = 63), custom(dns1035_label)))]
    pub pin: Option<String>,

    /// What the controller generates and owns: `TrafficSplit` (default, SMI) or `HTTPRoute`
    /// (Gateway API `gateway.networking.k8s.io/v1`, attached to the apex Service as its parent,
    /// the mesh pattern Linkerd 2.14+ reads). Cannot be changed later.
    #[serde(default)]
    #[garde(skip)]
    pub output: Output,

    /// The generated HTTPRoute, with output `HTTPRoute`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub http_route: Option<HttpRouteSpec>,

    /// When a backend counts as ready.
    #[serde(default)]
    #[garde(dive)]
    pub readiness: ReadinessSpec,

    /// How long the primary must stay continuously not ready before traffic leaves it, as a
    /// duration such as `30s` or `2m` (default `0s`: at once; at most `24h`). Damps failover on
    /// short blips.
    #[serde(default = "zero_duration")]
    #[schemars(
        length(max = 64),
        regex(pattern = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$")
    )]
    #[x_kube(validation = Rule::new("!self.matches('^(0|([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$') || duration(self) <= duration('24h')").message("must be at most 24h"))]
    #[garde(custom(hold_duration))]
    pub failover_after: String,

    /// How long the primary must stay continuously ready before traffic returns to it after a
    /// failover, as a duration such as `1m` (default `0s`: at once; at most `24h`). Damps
    /// flapping between primary and secondaries.
    #[serde(default = "zero_duration")]
    #[schemars(
        length(max = 64),
        regex(pattern = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$")
    )]
    #[x_kube(validation = Rule::new("!self.matches('^(0|([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$') || duration(self) <= duration('24h')").message("must be at most 24h"))]
    #[garde(custom(hold_duration))]
    pub failback_after: String,

    /// The TrafficSplit the controller generates and owns for this policy.
    #[serde(default)]
    #[garde(dive)]
    pub traffic_split: TrafficSplitSpec,
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
            secondaries: Vec::new(),
            strategy: Strategy::default(),
            overprovisioning_factor: None,
            when_none_ready: WhenNoneReady::default(),
            suspend: false,
            pin: None,
            output: Output::default(),
            http_route: None,
            readiness: ReadinessSpec::default(),
            failover_after: zero_duration(),
            failback_after: zero_duration(),
            traffic_split: TrafficSplitSpec::default(),
        }
    }
}

/// One secondary backend.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct SecondaryBackend {
    /// Name of the backend Service, in the policy's namespace (a mirrored Service for a backend
    /// in another cluster).
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    )]
    #[garde(length(min = 1, max = 63), custom(dns1035_label))]
    pub service: String,

    /// Relative share of traffic this backend takes among the ready secondaries, 1 to 1000.
    /// Only allowed with strategy `Weighted`, where it defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    #[garde(range(min = 1, max = MAX_WEIGHT))]
    pub weight: Option<i32>,
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
    #[schemars(range(min = 1, max = 100000))]
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

/// The kind of object the controller generates.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Output {
    /// An SMI TrafficSplit (`split.smi-spec.io`).
    #[default]
    TrafficSplit,
    /// A Gateway API HTTPRoute (`gateway.networking.k8s.io/v1`) whose parent is the apex Service.
    #[serde(rename = "HTTPRoute")]
    HttpRoute,
}

impl Output {
    /// The kind's name, as in the API.
    pub fn kind(self) -> &'static str {
        match self {
            Output::TrafficSplit => "TrafficSplit",
            Output::HttpRoute => "HTTPRoute",
        }
    }
}

/// The generated HTTPRoute.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteSpec {
    /// Name of the HTTPRoute (default: the policy's name). It cannot be changed later. An
    /// HTTPRoute of this name that the policy does not own is never touched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    #[garde(inner(length(min = 1, max = 253), custom(dns1123_subdomain)))]
    pub name: Option<String>,

    /// The port of the apex Service the route attaches to (parentRef port); default: every port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    #[garde(inner(range(min = 1, max = 65535)))]
    pub parent_port: Option<i32>,

    /// The port of the backend Services that traffic goes to (backendRef port, required by the
    /// Gateway API for Service backends).
    #[schemars(range(min = 1, max = 65535))]
    #[garde(range(min = 1, max = 65535))]
    pub port: i32,
}

/// The generated TrafficSplit.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct TrafficSplitSpec {
    /// Name of the TrafficSplit (default: the policy's name). It cannot be changed later. A
    /// TrafficSplit of this name that the policy does not own is never touched; the policy then
    /// reports `Ready=False` with reason `TrafficSplitConflict`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    #[garde(inner(length(min = 1, max = 253), custom(dns1123_subdomain)))]
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

fn dns1035_label(value: &str, _: &()) -> garde::Result {
    if DNS1035_RE.is_match(value) {
        Ok(())
    } else {
        Err(garde::Error::new(
            "must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter and ending with a letter or digit",
        ))
    }
}

fn dns1123_subdomain(value: &str, _: &()) -> garde::Result {
    if DNS1123_RE.is_match(value) {
        Ok(())
    } else {
        Err(garde::Error::new(
            "must be a DNS-1123 subdomain: lowercase letters, digits, '-' and '.'",
        ))
    }
}

fn hold_duration(value: &str, _: &()) -> garde::Result {
    let parsed = parse_duration(value).map_err(|e| garde::Error::new(e.to_string()))?;
    if parsed > MAX_HOLD {
        return Err(garde::Error::new("must be at most 24h"));
    }
    Ok(())
}

/// A duration string that is not in Go's `time.ParseDuration` form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid duration {input:?}: use a number with a unit (ns, us, ms, s, m, h), e.g. 30s or 1m30s"
)]
pub struct DurationError {
    input: String,
}

/// Parses a non-negative Go-style duration (`0`, `250ms`, `1m30s`, `1.5h`).
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let err = || DurationError {
        input: input.to_string(),
    };
    if input == "0" {
        return Ok(Duration::ZERO);
    }
    if input.is_empty() || input.len() > 64 {
        return Err(err());
    }
    let mut rest = input;
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        let (number, tail) = rest.split_at(number_len);
        if number.is_empty() || number.starts_with('.') || number.ends_with('.') {
            return Err(err());
        }
        let value: f64 = number.parse().map_err(|_| err())?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let seconds_per_unit = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(err()),
        };
        total += value * seconds_per_unit;
        rest = tail;
    }
    if !total.is_finite() || total > 1e12 {
        return Err(err());
    }
    Ok(Duration::from_secs_f64(total))
}

/// One problem with a policy's spec, named by its field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecProblem {
    /// Path of the offending field, e.g. `spec.secondaries[1].service`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for SpecProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl FailoverPolicySpec {
    /// Checks every rule the CRD schema enforces, so that a spec that reached the controller
    /// without passing them is reported rather than acted on. Returns every problem found.
    pub fn validate_spec(&self) -> Result<(), Vec<SpecProblem>> {
        let mut problems: Vec<SpecProblem> = match self.validate() {
            Ok(()) => Vec::new(),
            Err(report) => report
                .iter()
                .map(|(path, error)| SpecProblem {
                    field: spec_path(&path.to_string()),
                    message: error.message().to_string(),
                })
                .collect(),
        };
        if self.secondaries.iter().any(|s| s.service == self.primary) {
            problems.push(SpecProblem {
                field: "spec.primary".into(),
                message: "the primary must not also be listed as a secondary".into(),
            });
        }
        let mut seen = BTreeSet::new();
        if self
            .secondaries
            .iter()
            .any(|s| !seen.insert(s.service.as_str()))
        {
            problems.push(SpecProblem {
                field: "spec.secondaries".into(),
                message: "secondaries must name distinct Services".into(),
            });
        }
        if self.strategy != Strategy::Weighted
            && self.secondaries.iter().any(|s| s.weight.is_some())
        {
            problems.push(SpecProblem {
                field: "spec.secondaries".into(),
                message: "secondaries[].weight is only meaningful with strategy Weighted".into(),
            });
        }
        let mut check = |ok: bool, field: &str, message: &str| {
            if !ok {
                problems.push(SpecProblem {
                    field: field.into(),
                    message: message.into(),
                });
            }
        };
        check(
            self.overprovisioning_factor.is_none() || self.strategy == Strategy::Proportional,
            "spec.overprovisioningFactor",
            "overprovisioningFactor is only meaningful with strategy Proportional",
        );
        check(
            self.strategy != Strategy::Proportional
                || (self.failover_after().is_zero() && self.failback_after().is_zero()),
            "spec.strategy",
            "failoverAfter and failbackAfter are not supported with strategy Proportional, which follows health continuously",
        );
        check(
            self.pin
                .as_deref()
                .is_none_or(|pin| self.backend_services().any(|b| b == pin)),
            "spec.pin",
            "pin must name the primary or one of the secondaries",
        );
        check(
            self.output != Output::HttpRoute || self.http_route.is_some(),
            "spec.httpRoute",
            "httpRoute (with the backends' port) is required with output HTTPRoute",
        );
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// The overprovisioning factor for `Proportional` (1.4 unless set).
    pub fn overprovisioning_factor(&self) -> f64 {
        self.overprovisioning_factor.unwrap_or(1.4)
    }

    /// `failoverAfter` as a duration (zero when unparseable; [`Self::validate_spec`] reports it).
    pub fn failover_after(&self) -> Duration {
        parse_duration(&self.failover_after).unwrap_or_default()
    }

    /// `failbackAfter` as a duration (zero when unparseable; [`Self::validate_spec`] reports it).
    pub fn failback_after(&self) -> Duration {
        parse_duration(&self.failback_after).unwrap_or_default()
    }

    /// Every backend Service in priority order: the primary, then the secondaries.
    pub fn backend_services(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.primary.as_str())
            .chain(self.secondaries.iter().map(|s| s.service.as_str()))
    }
}

fn spec_path(garde_path: &str) -> String {
    let mut out = String::from("spec");
    for part in garde_path.split('.').filter(|p| !p.is_empty()) {
        if part.chars().all(|c| c.is_ascii_digit()) {
            out.push('[');
            out.push_str(part);
            out.push(']');
        } else {
            out.push('.');
            out.push_str(&snake_to_camel(part));
        }
    }
    out
}

fn snake_to_camel(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut upper = false;
    for c in s.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

impl FailoverPolicy {
    /// Name of the TrafficSplit this policy owns.
    pub fn traffic_split_name(&self) -> String {
        self.spec
            .traffic_split
            .name
            .clone()
            .or_else(|| self.metadata.name.clone())
            .unwrap_or_default()
    }

    /// Name of the object this policy generates and owns (TrafficSplit or HTTPRoute).
    pub fn route_name(&self) -> String {
        match self.spec.output {
            Output::TrafficSplit => self.traffic_split_name(),
            Output::HttpRoute => self
                .spec
                .http_route
                .as_ref()
                .and_then(|h| h.name.clone())
                .or_else(|| self.metadata.name.clone())
                .unwrap_or_default(),
        }
    }
}

/// A timestamp written as RFC 3339 with millisecond precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub DateTime<Utc>);

impl Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0.to_rfc3339_opts(SecondsFormat::Millis, true))
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
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
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

    /// Name of the TrafficSplit this policy owns (output `TrafficSplit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_split: Option<String>,

    /// Name of the HTTPRoute this policy owns (output `HTTPRoute`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_route: Option<String>,

    /// Standard conditions: `Ready` (traffic is routed to a ready backend through the owned
    /// route) and `Degraded` (some backend, the primary above all, is not ready); `Suspended` and
    /// `Pinned` while `spec.suspend` or `spec.pin` is set.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// Readiness and weight of one backend.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
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
}

/// A standard Kubernetes condition (`metav1.Condition`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of the condition: `Ready` or `Degraded`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// The `metadata.generation` the condition was set from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the condition last changed status.
    pub last_transition_time: Timestamp,
    /// A CamelCase reason for the condition's last transition.
    pub reason: String,
    /// A human-readable message with details.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["", "5", "s", "1x", "-1s", "1.s", ".5s", "1s2", "abc"] {
            assert!(parse_duration(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn regexes_compile() {
        assert!(DNS1035_RE.is_match("web-east"));
        assert!(!DNS1035_RE.is_match("1web"));
        assert!(DNS1123_RE.is_match("web.split-1"));
        assert!(regex::Regex::new(GO_DURATION).is_ok());
    }

    #[test]
    fn spec_paths_are_camel_case_with_indices() {
        assert_eq!(
            spec_path("secondaries.1.service"),
            "spec.secondaries[1].service"
        );
        assert_eq!(
            spec_path("readiness.min_ready_endpoints"),
            "spec.readiness.minReadyEndpoints"
        );
    }
}
