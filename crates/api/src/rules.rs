//! Every validation rule of a `FailoverPolicy`, stated once.
//!
//! Patterns, bounds and cross-field rules live here as named constants. The CRD schema reads them
//! (OpenAPI bounds and patterns, CEL rules checked by the API server at `kubectl apply` time) and
//! so does the controller's own validator (`failover_core::validate`), which reports whatever reached it
//! without passing them (for example through a CRD installed from an older release) with the same
//! message and field path.

use std::{sync::LazyLock, time::Duration};

mod gateway_routes;
pub use gateway_routes::*;

pub use crate::kind_rules::*;

/// Maximum number of secondaries a policy may list.
pub const MAX_SECONDARIES: usize = 32;
/// Highest priority tier a secondary may be in (one tier per secondary at most).
pub const MAX_TIER: i32 = 31;
/// Largest weight a secondary may carry under the `Weighted` strategy.
pub const MAX_WEIGHT: i32 = 1000;
/// Most requests per second one endpoint can be declared to serve.
pub const MAX_PER_ENDPOINT: i32 = 1_000_000;
/// Longest `failoverAfter` / `failbackAfter` accepted.
pub const MAX_HOLD: Duration = Duration::from_secs(24 * 3600);
/// Largest `readiness.minReadyEndpoints` accepted.
pub const MAX_MIN_READY_ENDPOINTS: i32 = 100_000;
/// Most steps a failback ramp may have.
pub const MAX_RAMP_STEPS: usize = 10;
/// Longest duration string accepted.
pub const MAX_DURATION_LENGTH: usize = 64;
/// Longest DNS label (a Service's, a namespace's or a cluster's name), and longest label value.
pub const MAX_LABEL: usize = 63;
/// Longest DNS subdomain (most object names) and the longest address accepted.
pub const MAX_SUBDOMAIN: usize = 253;
/// The `overprovisioningFactor` used when none is set.
pub const DEFAULT_OVERPROVISIONING_FACTOR: f64 = 1.4;

/// A DNS-1035 label, the form every Service name takes.
pub const DNS1035_LABEL: &str = r"^[a-z]([-a-z0-9]*[a-z0-9])?$";
/// A DNS-1123 label, the form a namespace's name takes.
pub const DNS1123_LABEL: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// A DNS-1123 subdomain, the form most object names take.
pub const DNS1123_SUBDOMAIN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A Go-style duration (`time.ParseDuration`), non-negative: `0`, `90s`, `1m30s`, `1.5h`.
pub const GO_DURATION: &str = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$";

/// A hostname an HTTPRoute serves, as the Gateway API states it (a leading `*.` allowed).
pub const HOSTNAME: &str =
    r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// An HTTPRoute path prefix: absolute, of the characters a path may hold unescaped.
pub const PATH_PREFIX: &str = r"^/[-A-Za-z0-9/._~!$&'()*+,;=:@%]*$";
/// Most Gateways a policy's HTTPRoute attaches to.
pub const MAX_GATEWAYS: usize = 16;
/// Most hostnames a policy's HTTPRoute serves (the Gateway API's own bound).
pub const MAX_HOSTNAMES: usize = 16;
/// Longest path prefix (the Gateway API's own bound).
pub const MAX_PATH: usize = 1024;

/// A Prometheus address: plain HTTP to a host and port.
pub const PROMETHEUS_ADDRESS: &str = r"^http://[A-Za-z0-9.\-\[\]:]+(/[A-Za-z0-9._~/\-]*)?$";

/// The message for a name that is not a DNS-1035 label.
pub const DNS1035_MESSAGE: &str = "must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter and ending with a letter or digit";
/// The message for a name that is not a DNS-1123 label.
pub const DNS1123_LABEL_MESSAGE: &str = "must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit";
/// The message for a name that is not a DNS-1123 subdomain.
pub const DNS1123_MESSAGE: &str =
    "must be a DNS-1123 subdomain: lowercase letters, digits, '-' and '.'";
/// The message for a hold longer than [`MAX_HOLD`].
pub const MAX_HOLD_MESSAGE: &str = "must be at most 24h";

pub(crate) static DNS1035_RE: LazyLock<regex::Regex> = LazyLock::new(|| compiled(DNS1035_LABEL));
pub(crate) static DNS1123_LABEL_RE: LazyLock<regex::Regex> =
    LazyLock::new(|| compiled(DNS1123_LABEL));
pub(crate) static DNS1123_RE: LazyLock<regex::Regex> =
    LazyLock::new(|| compiled(DNS1123_SUBDOMAIN));
/// [`PROMETHEUS_ADDRESS`], compiled (the validator checks `spec.health.prometheus.address`).
pub static PROMETHEUS_ADDRESS_RE: LazyLock<regex::Regex> =
    LazyLock::new(|| compiled(PROMETHEUS_ADDRESS));
pub(crate) static GO_DURATION_RE: LazyLock<regex::Regex> = LazyLock::new(|| compiled(GO_DURATION));
pub(crate) static HOSTNAME_RE: LazyLock<regex::Regex> = LazyLock::new(|| compiled(HOSTNAME));
pub(crate) static PATH_PREFIX_RE: LazyLock<regex::Regex> = LazyLock::new(|| compiled(PATH_PREFIX));

fn compiled(pattern: &str) -> regex::Regex {
    // The patterns are constants checked by unit tests; a failure here is a programming error
    // caught before release, and still must not crash the controller: fall back to a regex that
    // matches nothing so validation reports every value as invalid.
    regex::Regex::new(pattern)
        .unwrap_or_else(|_| regex::Regex::new(r"[^\s\S]").expect("static regex")) // ok: static
}

/// A duration string that is not a non-negative Go duration (`time.ParseDuration`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid duration {input:?}: use a number with a unit (ns, us, ms, s, m, h), e.g. 30s or 1m30s"
)]
pub struct DurationError {
    input: String,
}

/// Parses a non-negative Go duration (`0`, `250ms`, `1m30s`, `1.5h`) with
/// [`kube::core::Duration`], after the schema's pattern and a bound on each number: the parser
/// multiplies without an overflow check, so a number of more than 9 digits is refused first.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let err = || DurationError {
        input: input.to_string(),
    };
    let numbers_bounded = input
        .split(|c: char| !c.is_ascii_digit())
        .all(|digits| digits.len() <= 9);
    if input.len() > MAX_DURATION_LENGTH || !GO_DURATION_RE.is_match(input) || !numbers_bounded {
        return Err(err());
    }
    input
        .parse::<kube::core::Duration>()
        .map(Duration::from)
        .map_err(|_| err())
}

/// `garde` rule: a DNS-1035 label.
pub fn dns1035_label(value: &str, _: &()) -> garde::Result {
    DNS1035_RE
        .is_match(value)
        .then_some(())
        .ok_or_else(|| garde::Error::new(DNS1035_MESSAGE))
}

/// `garde` rule: a DNS-1123 label.
pub fn dns1123_label(value: &str, _: &()) -> garde::Result {
    DNS1123_LABEL_RE
        .is_match(value)
        .then_some(())
        .ok_or_else(|| garde::Error::new(DNS1123_LABEL_MESSAGE))
}

/// `garde` rule: a DNS-1123 subdomain.
pub fn dns1123_subdomain(value: &str, _: &()) -> garde::Result {
    DNS1123_RE
        .is_match(value)
        .then_some(())
        .ok_or_else(|| garde::Error::new(DNS1123_MESSAGE))
}

/// `garde` rule: a hostname an HTTPRoute may serve.
pub fn http_hostname(value: &str, _: &()) -> garde::Result {
    HOSTNAME_RE
        .is_match(value)
        .then_some(())
        .ok_or_else(|| garde::Error::new(HOSTNAME_MESSAGE))
}

/// `garde` rule: a path prefix the Gateway API accepts.
pub fn http_path_prefix(value: &str, _: &()) -> garde::Result {
    (PATH_PREFIX_RE.is_match(value)
        && PATH_SEGMENTS_FORBIDDEN.iter().all(|f| !value.contains(f))
        && !value.ends_with("/..")
        && !value.ends_with("/."))
    .then_some(())
    .ok_or_else(|| garde::Error::new(PATH_PREFIX_MESSAGE))
}

/// What a path prefix must not contain (the Gateway API refuses them).
const PATH_SEGMENTS_FORBIDDEN: [&str; 5] = ["//", "/./", "/../", "%2f", "%2F"];
/// The message for a hostname that is not one.
pub const HOSTNAME_MESSAGE: &str =
    "must be a hostname: lowercase DNS labels separated by '.', optionally starting with '*.'";
/// The message for a path prefix the Gateway API refuses.
pub const PATH_PREFIX_MESSAGE: &str = "must be an absolute path of unescaped path characters without '//', '/./', '/../', '%2f' or a trailing '/.' or '/..'";

/// The CEL rule on a path prefix: what the pattern cannot say.
pub fn path_prefix_rule() -> kube::core::Rule {
    kube::core::Rule::new(
        "!self.contains('//') && !self.contains('/./') && !self.contains('/../') && !self.contains('%2f') && !self.contains('%2F') && !self.endsWith('/..') && !self.endsWith('/.')",
    )
    .message(PATH_PREFIX_MESSAGE)
}

/// A rule across fields: the CEL expression the API server evaluates, the message both it and
/// the controller report, and the field the message is about (relative to `spec`).
pub struct CrossFieldRule {
    /// The CEL expression, with `self` the spec (and `oldSelf` the previous spec).
    pub cel: &'static str,
    /// What is wrong when it does not hold.
    pub message: &'static str,
    /// The field named in the error, as a path below `spec` (e.g. `.primary`).
    pub field: &'static str,
}

impl CrossFieldRule {
    /// The rule as the CRD schema states it.
    pub fn schema_rule(&self) -> kube::core::Rule {
        kube::core::Rule::new(self.cel)
            .message(self.message)
            .field_path(self.field)
    }

    /// The rule on a list, about its elements (no field path).
    pub fn element_rule(&self) -> kube::core::Rule {
        kube::core::Rule::new(self.cel).message(self.message)
    }

    /// The field path as the controller reports it, e.g. `spec.primary`.
    pub fn spec_field(&self) -> String {
        format!("spec{}", self.field)
    }
}

/// The primary is not also a secondary.
pub const PRIMARY_NOT_SECONDARY: CrossFieldRule = CrossFieldRule {
    cel: "!self.secondaries.exists(s, s.service == self.primary)",
    message: "the primary must not also be listed as a secondary",
    field: ".primary",
};
/// Secondaries name distinct Services (a rule on the list itself).
pub const DISTINCT_SECONDARIES: CrossFieldRule = CrossFieldRule {
    cel: "self.all(x, self.exists_one(y, y.service == x.service))",
    message: "secondaries must name distinct Services",
    field: ".secondaries",
};
/// Weights only with `Weighted`.
pub const WEIGHT_ONLY_WEIGHTED: CrossFieldRule = CrossFieldRule {
    cel: "self.strategy == 'Weighted' || self.secondaries.all(s, !has(s.weight))",
    message: "secondaries[].weight is only meaningful with strategy Weighted",
    field: ".secondaries",
};
/// Tiers only with `Equal` or `Weighted` (under `Ordered` each secondary is its own tier).
pub const TIER_ONLY_SHARED: CrossFieldRule = CrossFieldRule {
    cel: "self.strategy == 'Equal' || self.strategy == 'Weighted' || self.secondaries.all(s, !has(s.tier))",
    message: "secondaries[].tier is only meaningful with strategy Equal or Weighted (under Ordered each secondary is a tier of its own)",
    field: ".secondaries",
};
/// `trafficSplit.name` never changes.
pub const TRAFFIC_SPLIT_NAME_FIXED: CrossFieldRule = CrossFieldRule {
    cel: "(has(self.trafficSplit) && has(self.trafficSplit.name) ? self.trafficSplit.name : '') == (has(oldSelf.trafficSplit) && has(oldSelf.trafficSplit.name) ? oldSelf.trafficSplit.name : '')",
    message: "trafficSplit.name cannot be changed; create a new policy instead",
    field: ".trafficSplit.name",
};
/// `overprovisioningFactor` only with `Proportional`.
pub const FACTOR_ONLY_PROPORTIONAL: CrossFieldRule = CrossFieldRule {
    cel: "!has(self.overprovisioningFactor) || self.strategy == 'Proportional'",
    message: "overprovisioningFactor is only meaningful with strategy Proportional",
    field: ".overprovisioningFactor",
};
/// No holds with `Proportional`.
pub const NO_HOLDS_WITH_PROPORTIONAL: CrossFieldRule = CrossFieldRule {
    cel: "self.strategy != 'Proportional' || ((self.failoverAfter == '0s' || self.failoverAfter == '0') && (self.failbackAfter == '0s' || self.failbackAfter == '0'))",
    message: "failoverAfter and failbackAfter are not supported with strategy Proportional, which follows health continuously",
    field: ".strategy",
};
/// `pin` names a backend.
pub const PIN_NAMES_A_BACKEND: CrossFieldRule = CrossFieldRule {
    cel: "!has(self.pin) || self.pin == self.primary || self.secondaries.exists(s, s.service == self.pin)",
    message: "pin must name the primary or one of the secondaries",
    field: ".pin",
};
/// `drill.to` names a backend.
pub const DRILL_NAMES_A_BACKEND: CrossFieldRule = CrossFieldRule {
    cel: "!has(self.drill) || self.drill.to == self.primary || self.secondaries.exists(s, s.service == self.drill.to)",
    message: "drill.to must name the primary or one of the secondaries",
    field: ".drill.to",
};
/// No capacity with `Proportional`.
pub const NO_CAPACITY_WITH_PROPORTIONAL: CrossFieldRule = CrossFieldRule {
    cel: "self.strategy != 'Proportional' || !has(self.capacity)",
    message: "capacity is not supported with strategy Proportional, which shares by health",
    field: ".capacity",
};
/// A secondary's `perEndpoint` and `scaleTarget` need `spec.capacity`, and `scaleTarget` its
/// `scale`.
pub const SECONDARY_CAPACITY_NEEDS_CAPACITY: CrossFieldRule = CrossFieldRule {
    cel: "self.secondaries.all(s, (!has(s.perEndpoint) || has(self.capacity)) && (!has(s.scaleTarget) || (has(self.capacity) && has(self.capacity.scale))))",
    message: "secondaries[].perEndpoint needs spec.capacity, and secondaries[].scaleTarget needs spec.capacity.scale",
    field: ".secondaries",
};
/// Each secondary's `scaleTarget` names a workload no other secondary names: the controller
/// records what it raised once per workload, and could not restore one raised for two.
pub const DISTINCT_SCALE_TARGETS: CrossFieldRule = CrossFieldRule {
    cel: "self.secondaries.all(s, !has(s.scaleTarget) || self.secondaries.exists_one(t, has(t.scaleTarget) && t.scaleTarget.kind == s.scaleTarget.kind && t.scaleTarget.name == s.scaleTarget.name))",
    message: "secondaries[].scaleTarget must name a different workload on each secondary",
    field: ".secondaries",
};
/// Exactly one threshold (a rule on the health query).
pub const ONE_THRESHOLD: CrossFieldRule = CrossFieldRule {
    cel: "has(self.max) != has(self.min)",
    message: "health.prometheus needs exactly one of max and min",
    field: ".health.prometheus",
};
/// No failback ramp with `Proportional`.
pub const NO_RAMP_WITH_PROPORTIONAL: CrossFieldRule = CrossFieldRule {
    cel: "self.strategy != 'Proportional' || !has(self.failback) || !has(self.failback.ramp)",
    message: "failback.ramp is not supported with strategy Proportional, which follows health continuously",
    field: ".failback.ramp",
};
/// The ramp's steps increase (a rule on the ramp).
pub const RAMP_STEPS_INCREASE: CrossFieldRule = CrossFieldRule {
    cel: "self.steps.all(x, self.steps.exists_one(y, y == x)) && self.steps.isSorted()",
    message: "failback.ramp.steps must increase",
    field: ".failback.ramp.steps",
};
/// The ramp ends with all traffic on the primary (a rule on the ramp).
pub const RAMP_ENDS_AT_100: CrossFieldRule = CrossFieldRule {
    cel: "size(self.steps) == 0 || self.steps[size(self.steps) - 1] == 100",
    message: "failback.ramp.steps must end at 100",
    field: ".failback.ramp.steps",
};
/// `routeRef` is neither added, removed nor pointed at another route.
pub const ROUTE_REF_FIXED: CrossFieldRule = CrossFieldRule {
    cel: "has(self.routeRef) == has(oldSelf.routeRef) && (!has(self.routeRef) || (self.routeRef.kind == oldSelf.routeRef.kind && self.routeRef.name == oldSelf.routeRef.name))",
    message: "routeRef cannot be added, removed or pointed at another route; create a new policy instead",
    field: ".routeRef",
};
/// `output` never changes.
pub const OUTPUT_FIXED: CrossFieldRule = CrossFieldRule {
    cel: "self.output == oldSelf.output",
    message: "output cannot be changed; create a new policy instead",
    field: ".output",
};

/// Most sites a `FailoverGroup` names.
pub const MAX_GROUP_SITES: usize = 8;
/// Most members a `FailoverGroup` names.
pub const MAX_GROUP_MEMBERS: usize = 32;
/// A group's sites are distinct (a rule on the list).
pub const DISTINCT_GROUP_SITES: CrossFieldRule = CrossFieldRule {
    cel: "self.all(x, self.exists_one(y, y == x))",
    message: "sites must be distinct",
    field: ".sites",
};
/// A group's members are distinct (a rule on the list).
pub const DISTINCT_GROUP_MEMBERS: CrossFieldRule = CrossFieldRule {
    cel: "self.all(x, self.exists_one(y, y == x))",
    message: "members must be distinct",
    field: ".members",
};

/// Label put on every generated route, naming its policy.
pub const POLICY_LABEL: &str = "failover.dev/policy";

/// Longest policy name: the name is the value of the [`POLICY_LABEL`] label on
/// the generated route, and label values hold at most 63 characters.
pub const MAX_POLICY_NAME: usize = MAX_LABEL;
/// What is wrong with a longer name.
pub const POLICY_NAME_MESSAGE: &str = "metadata.name must be at most 63 characters: it is the value of the failover.dev/policy label on the generated route";

/// The CEL rule on the policy's name (on the whole object: CEL can read `metadata.name`).
pub fn policy_name_rule() -> kube::core::Rule {
    kube::core::Rule::new(format!("size(self.metadata.name) <= {MAX_POLICY_NAME}"))
        .message(POLICY_NAME_MESSAGE)
}

/// The CEL rule on a hold duration: at most [`MAX_HOLD`] (the pattern is checked by the schema).
pub fn hold_duration_rule() -> kube::core::Rule {
    let pattern = GO_DURATION.replace('\\', "\\\\");
    kube::core::Rule::new(format!(
        "!self.matches('{pattern}') || duration(self) <= duration('24h')"
    ))
    .message(MAX_HOLD_MESSAGE)
}

/// The CEL rule on the health query interval: at least one second, so Prometheus is not flooded.
pub fn health_interval_rule() -> kube::core::Rule {
    let pattern = GO_DURATION.replace('\\', "\\\\");
    kube::core::Rule::new(format!(
        "!self.matches('{pattern}') || duration(self) >= duration('1s')"
    ))
    .message(HEALTH_INTERVAL_MESSAGE)
}

// The cost limits of a health query (see `failover_core::health_query`, which checks them all).

/// Longest query, in characters (the CRD's bound too).
pub const MAX_QUERY_LENGTH: usize = 4096;
/// Most regex matchers (`=~`, `!~`) a query may hold.
pub const MAX_REGEX_MATCHERS: usize = 8;
/// Deepest a query may nest: the deepest parenthesis, plus each operator and each `[` (read on
/// the parser's tokens, before it parses; the controller refuses a deeper one as InvalidSpec).
pub const MAX_QUERY_DEPTH: usize = 64;
/// Longest regex value, in characters.
pub const MAX_REGEX_LENGTH: usize = 256;
/// Most bytes one regex may compile to (the regex crate's default is 10 MiB).
pub const REGEX_SIZE_LIMIT: usize = 256 * 1024;
/// Longest range a query may read (`[1h]`, a subquery's `[1h:1m]`): what one evaluation reads
/// grows with it.
pub const MAX_QUERY_RANGE: std::time::Duration = std::time::Duration::from_secs(3600);
/// Most evaluations a query's subqueries may make: each subquery states its step, and the steps
/// of subqueries inside each other multiply (`max_over_time(x[10m:30s])` makes 20).
pub const MAX_SUBQUERY_STEPS: u64 = 1000;
/// A counted repetition of three digits or more (`{100}`, `{1,100}`): refused anywhere in the
/// query, by the CRD's CEL rule and by the controller's check (`health_query`) alike.
pub const LONG_REPETITION: &str = r"[{]([0-9]+,)?[0-9]{3}";

/// The message for too many regex matchers.
pub const REGEX_MATCHERS_MESSAGE: &str =
    "may hold at most 8 regex matchers (=~ or !~): each is compiled as a regular expression";
/// The message for a long counted repetition.
pub const REPETITION_MESSAGE: &str =
    "may not hold a counted repetition of three digits or more, such as {100}";

/// The CEL rule on the query: at most [`MAX_REGEX_MATCHERS`] regex matchers.
pub fn regex_matchers_rule() -> kube::core::Rule {
    kube::core::Rule::new(format!(
        "self.split('=~').size() + self.split('!~').size() - 2 <= {MAX_REGEX_MATCHERS}"
    ))
    .message(REGEX_MATCHERS_MESSAGE)
}

/// The CEL rule on the query: no counted repetition of three digits.
pub fn repetition_rule() -> kube::core::Rule {
    kube::core::Rule::new(format!("!self.matches('{LONG_REPETITION}')")).message(REPETITION_MESSAGE)
}

/// The message for a health query interval under one second.
pub const HEALTH_INTERVAL_MESSAGE: &str = "must be at least 1s";

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
    fn huge_durations_are_refused_not_a_panic() {
        assert!(parse_duration("99999999999999999999999h").is_err());
        assert!(parse_duration("999999999h").is_ok());
    }

    #[test]
    fn patterns_compile_and_match_what_they_name() {
        assert!(DNS1035_RE.is_match("web-east"));
        assert!(!DNS1035_RE.is_match("1web"));
        assert!(DNS1123_RE.is_match("web.split-1"));
        assert!(GO_DURATION_RE.is_match("1m30s"));
        assert!(!GO_DURATION_RE.is_match("-1s"));
    }

    #[test]
    fn the_policy_name_message_states_the_bound_it_checks() {
        assert!(POLICY_NAME_MESSAGE.contains(&format!("at most {MAX_POLICY_NAME} characters")));
        assert!(POLICY_NAME_MESSAGE.contains(POLICY_LABEL));
    }

    #[test]
    fn the_hold_rule_embeds_the_duration_pattern() {
        let rule = serde_json::to_value(hold_duration_rule()).expect("rule serializes");
        let cel = rule["rule"].as_str().unwrap_or_default();
        assert!(cel.contains("(\\\\.[0-9]+)"), "{cel}");
    }
}
