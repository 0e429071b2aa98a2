//! Step 3 of the pipeline (the first of a reconcile): turns a `FailoverPolicy` into a
//! [`ValidPolicy`], with every value parsed once, or into the list of problems the status reports
//! as `InvalidSpec`.
//!
//! The rules are the ones the CRD states ([`crate::api::rules`]): field bounds and patterns
//! through `garde`, the cross-field rules with the same messages and field paths as their CEL
//! form. The API server checks them first; this step catches what reached the controller anyway.

use std::{collections::BTreeSet, fmt, time::Duration};

use garde::Validate;
use kube::ResourceExt;

use crate::{
    api::{
        FailoverPolicy, FailoverPolicySpec, Strategy, WhenNoneReady,
        rules::{
            self, CrossFieldRule, DNS1035_MESSAGE, DNS1035_RE, DNS1123_MESSAGE, DNS1123_RE,
            GO_DURATION_RE, MAX_DURATION_LENGTH, MAX_HOLD, MAX_HOLD_MESSAGE,
        },
    },
    observe::readiness::RemoteService,
    route::RouteTarget,
};

/// One problem with a policy, named by its field path.
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

/// A backend of a valid policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Backend {
    /// Its Service, in the policy's namespace.
    pub service: String,
    /// Its weight under `Weighted` (1 when unset).
    pub weight: i32,
    /// Where its readiness is read from: its own Service, or one in another cluster.
    pub remote: Option<RemoteService>,
}

/// A hold (`failoverAfter` or `failbackAfter`): as parsed, and as written.
#[derive(Clone, Debug, PartialEq)]
pub struct Hold {
    /// The duration.
    pub after: Duration,
    /// The text the user wrote, for messages.
    pub written: String,
}

/// When a backend counts as ready.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReadinessRule {
    /// Ready endpoints needed (at least 1).
    pub min_ready_endpoints: i32,
    /// Share of endpoints that must be ready (0 when unset).
    pub min_ready_ratio: f64,
}

/// A policy that passed validation, every value parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidPolicy {
    /// Namespace of the policy.
    pub namespace: String,
    /// Name of the policy.
    pub name: String,
    /// The apex Service.
    pub service: String,
    /// The backends in priority order: the primary first, then the secondaries.
    pub backends: Vec<Backend>,
    /// How the secondaries share traffic.
    pub strategy: Strategy,
    /// With `Proportional`: the overprovisioning factor.
    pub overprovisioning_factor: f64,
    /// What happens when no backend is ready.
    pub when_none_ready: WhenNoneReady,
    /// The route is frozen.
    pub suspend: bool,
    /// Index (into `backends`) of the pinned backend.
    pub pin: Option<usize>,
    /// When a backend is ready.
    pub readiness: ReadinessRule,
    /// `failoverAfter`.
    pub failover_after: Hold,
    /// `failbackAfter`.
    pub failback_after: Hold,
    /// The route this policy owns.
    pub route: RouteTarget,
    /// A gradual failback, when set.
    pub ramp: Option<Ramp>,
    /// Health beyond readiness, when set.
    pub health: Option<Health>,
}

/// A metric that must stay within a threshold for a backend to count as ready.
#[derive(Clone, Debug, PartialEq)]
pub struct Health {
    /// Prometheus' address, when the policy sets one.
    pub address: Option<String>,
    /// The query, with `{{service}}` and `{{namespace}}` to fill in.
    pub query: String,
    /// The threshold.
    pub bound: Bound,
    /// How often the queries run.
    pub interval: Hold,
    /// What no data means.
    pub no_data: crate::api::NoData,
}

/// A health threshold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bound {
    /// Healthy while the value is at most this.
    Max(f64),
    /// Healthy while the value is at least this.
    Min(f64),
}

impl Health {
    /// The query for one backend.
    pub fn query_for(&self, namespace: &str, service: &str) -> String {
        self.query
            .replace("{{service}}", service)
            .replace("{{namespace}}", namespace)
    }

    /// Whether a value (`None`: no data) is healthy.
    pub fn healthy(&self, value: Option<f64>) -> bool {
        match (value, self.bound) {
            (None, _) => self.no_data == crate::api::NoData::Healthy,
            (Some(v), Bound::Max(max)) => v <= max,
            (Some(v), Bound::Min(min)) => v >= min,
        }
    }

    /// The threshold in words, e.g. `at most 0.05`.
    pub fn threshold(&self) -> String {
        match self.bound {
            Bound::Max(max) => format!("at most {max}"),
            Bound::Min(min) => format!("at least {min}"),
        }
    }
}

/// A gradual failback: the primary's share at each step, and how long each lasts.
#[derive(Clone, Debug, PartialEq)]
pub struct Ramp {
    /// The primary's share at each step, in percent, increasing, the last 100.
    pub steps: Vec<i32>,
    /// How long each step lasts.
    pub every: Hold,
}

impl ValidPolicy {
    /// The primary's Service name.
    pub fn primary(&self) -> &str {
        self.backends.first().map_or("", |b| b.service.as_str())
    }

    /// The backends' Service names, primary first.
    pub fn backend_names(&self) -> impl Iterator<Item = &str> {
        self.backends.iter().map(|b| b.service.as_str())
    }
}

/// Checks every rule of a spec, as the CRD states them; returns every problem found.
pub fn validate_spec(spec: &FailoverPolicySpec) -> Result<(), Vec<SpecProblem>> {
    let mut problems = Vec::new();
    let _ = holds(spec, &mut problems);
    let _ = ramp(spec, &mut problems);
    let _ = health(spec, &mut problems);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// The spec's problems, and its holds when they parse.
fn holds(spec: &FailoverPolicySpec, problems: &mut Vec<SpecProblem>) -> Option<(Hold, Hold)> {
    problems.extend(schema_problems(spec));
    problems.extend(cross_field_problems(spec));
    let failover_after = hold(&spec.failover_after, "spec.failoverAfter", problems);
    let failback_after = hold(&spec.failback_after, "spec.failbackAfter", problems);
    Some((failover_after?, failback_after?))
}

/// Validates a policy; every problem found is returned.
pub fn validate(policy: &FailoverPolicy) -> Result<ValidPolicy, Vec<SpecProblem>> {
    let spec = &policy.spec;
    let mut problems = Vec::new();
    let holds = holds(spec, &mut problems);
    if policy.name_any().chars().count() > rules::MAX_POLICY_NAME {
        problems.push(problem("metadata.name", rules::POLICY_NAME_MESSAGE));
    }
    let namespace = policy.namespace().unwrap_or_else(|| {
        problems.push(problem("metadata.namespace", "is missing"));
        String::new()
    });
    let ramp = ramp(spec, &mut problems);
    let health = health(spec, &mut problems);
    let (Some((failover_after, failback_after)), true) = (holds, problems.is_empty()) else {
        return Err(problems);
    };
    let remote = |service: &str, from: Option<&crate::api::ReadinessFrom>| {
        from.map(|r| RemoteService::of(r, &namespace, service))
    };
    let backends: Vec<Backend> = std::iter::once(Backend {
        service: spec.primary.clone(),
        weight: 1,
        remote: remote(&spec.primary, spec.primary_readiness_from.as_ref()),
    })
    .chain(spec.secondaries.iter().map(|s| Backend {
        service: s.service.clone(),
        weight: s.weight.unwrap_or(1),
        remote: remote(&s.service, s.readiness_from.as_ref()),
    }))
    .collect();
    let pin = spec
        .pin
        .as_deref()
        .and_then(|pin| backends.iter().position(|b| b.service == pin));
    Ok(ValidPolicy {
        namespace,
        name: policy.name_any(),
        service: spec.service.clone(),
        strategy: spec.strategy,
        overprovisioning_factor: spec
            .overprovisioning_factor
            .unwrap_or(rules::DEFAULT_OVERPROVISIONING_FACTOR),
        when_none_ready: spec.when_none_ready,
        suspend: spec.suspend,
        pin,
        readiness: ReadinessRule {
            min_ready_endpoints: spec.readiness.min_ready_endpoints.max(1),
            min_ready_ratio: spec.readiness.min_ready_ratio.unwrap_or(0.0),
        },
        failover_after,
        failback_after,
        route: RouteTarget::of(policy),
        ramp,
        health,
        backends,
    })
}

/// Bounds, lengths and patterns of single fields.
fn schema_problems(spec: &FailoverPolicySpec) -> Vec<SpecProblem> {
    match spec.validate() {
        Ok(()) => Vec::new(),
        Err(report) => report
            .iter()
            .map(|(path, error)| SpecProblem {
                field: spec_path(&path.to_string()),
                message: error.message().to_string(),
            })
            .collect(),
    }
}

/// The rules across fields, each as its CEL form in the CRD states it.
fn cross_field_problems(spec: &FailoverPolicySpec) -> Vec<SpecProblem> {
    let names =
        || std::iter::once(&spec.primary).chain(spec.secondaries.iter().map(|s| &s.service));
    let mut seen = BTreeSet::new();
    let checks: [(bool, &CrossFieldRule); 6] = [
        (
            !spec.secondaries.iter().any(|s| s.service == spec.primary),
            &rules::PRIMARY_NOT_SECONDARY,
        ),
        (
            spec.secondaries
                .iter()
                .all(|s| seen.insert(s.service.as_str())),
            &rules::DISTINCT_SECONDARIES,
        ),
        (
            spec.strategy == Strategy::Weighted
                || spec.secondaries.iter().all(|s| s.weight.is_none()),
            &rules::WEIGHT_ONLY_WEIGHTED,
        ),
        (
            spec.overprovisioning_factor.is_none() || spec.strategy == Strategy::Proportional,
            &rules::FACTOR_ONLY_PROPORTIONAL,
        ),
        (
            spec.pin
                .as_ref()
                .is_none_or(|pin| names().any(|n| n == pin)),
            &rules::PIN_NAMES_A_BACKEND,
        ),
        (
            spec.output != crate::api::Output::HttpRoute || spec.http_route.is_some(),
            &rules::HTTP_ROUTE_NEEDS_PORT,
        ),
    ];
    let mut problems: Vec<SpecProblem> = checks
        .into_iter()
        .filter(|(holds, _)| !holds)
        .map(|(_, rule)| problem(&rule.spec_field(), rule.message))
        .collect();
    let zero = |text: &str| parse_duration(text).is_ok_and(|d| d.is_zero());
    if spec.strategy == Strategy::Proportional
        && !(zero(&spec.failover_after) && zero(&spec.failback_after))
    {
        let rule = &rules::NO_HOLDS_WITH_PROPORTIONAL;
        problems.push(problem(&rule.spec_field(), rule.message));
    }
    problems
}

/// The Prometheus health check of `spec.health`, with its rules checked.
fn health(spec: &FailoverPolicySpec, problems: &mut Vec<SpecProblem>) -> Option<Health> {
    let p = spec.health.as_ref()?.prometheus.as_ref()?;
    let bound = match (p.max, p.min) {
        (Some(max), None) => Some(Bound::Max(max)),
        (None, Some(min)) => Some(Bound::Min(min)),
        _ => {
            let rule = &rules::ONE_THRESHOLD;
            problems.push(problem(&rule.spec_field(), rule.message));
            None
        }
    };
    let address_ok = p
        .address
        .as_deref()
        .is_none_or(|a| rules::PROMETHEUS_ADDRESS_RE.is_match(a));
    if !address_ok {
        problems.push(problem(
            "spec.health.prometheus.address",
            "must be http://host:port",
        ));
    }
    let interval = hold(&p.interval, "spec.health.prometheus.interval", problems)?;
    if interval.after < std::time::Duration::from_secs(1) {
        problems.push(problem(
            "spec.health.prometheus.interval",
            rules::HEALTH_INTERVAL_MESSAGE,
        ));
    }
    Some(Health {
        address: p.address.clone(),
        query: p.query.clone(),
        bound: bound?,
        interval,
        no_data: p.no_data,
    })
}

/// The ramp of `spec.failback`, with its rules checked.
fn ramp(spec: &FailoverPolicySpec, problems: &mut Vec<SpecProblem>) -> Option<Ramp> {
    let ramp = spec.failback.as_ref()?.ramp.as_ref()?;
    let increasing = ramp.steps.windows(2).all(|w| w[0] < w[1]);
    if !increasing {
        let rule = &rules::RAMP_STEPS_INCREASE;
        problems.push(problem(&rule.spec_field(), rule.message));
    }
    if ramp.steps.last() != Some(&100) {
        let rule = &rules::RAMP_ENDS_AT_100;
        problems.push(problem(&rule.spec_field(), rule.message));
    }
    if spec.strategy == Strategy::Proportional {
        let rule = &rules::NO_RAMP_WITH_PROPORTIONAL;
        problems.push(problem(&rule.spec_field(), rule.message));
    }
    let every = hold(&ramp.every, "spec.failback.ramp.every", problems)?;
    Some(Ramp {
        steps: ramp.steps.clone(),
        every,
    })
}

fn hold(text: &str, field: &str, problems: &mut Vec<SpecProblem>) -> Option<Hold> {
    match parse_duration(text) {
        Ok(after) if after <= MAX_HOLD => Some(Hold {
            after,
            written: text.to_string(),
        }),
        Ok(_) => {
            problems.push(problem(field, MAX_HOLD_MESSAGE));
            None
        }
        Err(e) => {
            problems.push(problem(field, &e.to_string()));
            None
        }
    }
}

fn problem(field: &str, message: &str) -> SpecProblem {
    SpecProblem {
        field: field.to_string(),
        message: message.to_string(),
    }
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
    rules::DNS1123_LABEL_RE
        .is_match(value)
        .then_some(())
        .ok_or_else(|| garde::Error::new(rules::DNS1123_LABEL_MESSAGE))
}

/// `garde` rule: a DNS-1123 subdomain.
pub fn dns1123_subdomain(value: &str, _: &()) -> garde::Result {
    DNS1123_RE
        .is_match(value)
        .then_some(())
        .ok_or_else(|| garde::Error::new(DNS1123_MESSAGE))
}

/// `secondaries.1.service` (garde's path) as `spec.secondaries[1].service`.
fn spec_path(garde_path: &str) -> String {
    let mut out = String::from("spec");
    for part in garde_path.split('.').filter(|p| !p.is_empty()) {
        if part.chars().all(|c| c.is_ascii_digit()) {
            out.push_str(&format!("[{part}]"));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::SecondaryBackend;

    fn policy(spec: FailoverPolicySpec) -> FailoverPolicy {
        let mut p = FailoverPolicy::new("web", spec);
        p.metadata.namespace = Some("ns".into());
        p
    }

    fn spec() -> FailoverPolicySpec {
        FailoverPolicySpec {
            service: "web".into(),
            primary: "web-primary".into(),
            secondaries: vec![SecondaryBackend::new("web-east")],
            ..Default::default()
        }
    }

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

    #[test]
    fn a_valid_policy_is_parsed_once() {
        let mut s = spec();
        s.failover_after = "1m30s".into();
        s.pin = Some("web-east".into());
        let valid = validate(&policy(s)).expect("valid");
        assert_eq!(valid.failover_after.after, Duration::from_secs(90));
        assert_eq!(valid.failover_after.written, "1m30s");
        assert_eq!(valid.pin, Some(1));
        assert_eq!(
            valid.backend_names().collect::<Vec<_>>(),
            ["web-primary", "web-east"]
        );
    }

    #[test]
    fn cross_field_rules_name_their_field() {
        let mut s = spec();
        s.secondaries.push(SecondaryBackend {
            weight: Some(2),
            ..SecondaryBackend::new("web-primary")
        });
        s.failback_after = "25h".into();
        let problems = validate(&policy(s)).expect_err("invalid");
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            ["spec.primary", "spec.secondaries", "spec.failbackAfter"]
        );
    }
}
