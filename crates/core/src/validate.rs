//! The validate stage of the pipeline (the first of a reconcile): turns a `FailoverPolicy` into a
//! [`ValidPolicy`], with every value parsed once, or into the list of problems the status reports
//! as `InvalidSpec`.
//!
//! The rules are the ones the CRD states ([`crate::api::rules`]): field bounds and patterns
//! through `garde`, the cross-field rules with the same messages and field paths as their CEL
//! form. The API server checks them first; this step catches what reached the controller anyway.

use std::{collections::BTreeSet, sync::Arc};

use compact_str::CompactString;
use garde::Validate;
use kube::ResourceExt;

use crate::{
    api::{
        FailoverPolicy, FailoverPolicySpec, Strategy,
        rules::{self, CrossFieldRule, MAX_HOLD, MAX_HOLD_MESSAGE, MAX_TIER, parse_duration},
        site_of,
    },
    backend::BackendRef,
    health_query::HealthQuery,
    observation::RemoteService,
    policy::{
        Backend, Bound, Capacity, Drill, Health, Hold, Ramp, ReadinessRule, Scale, SpecProblem,
        ValidPolicy, Validated,
    },
    route::{KINDS, RouteTarget},
};

/// Checks every rule of a spec, as the CRD states them; returns every problem found.
pub fn validate_spec(spec: &FailoverPolicySpec) -> Result<(), Vec<SpecProblem>> {
    let mut problems = Vec::new();
    let _ = holds(spec, &mut problems);
    let _ = ramp(spec, &mut problems);
    let _ = capacity(spec, &mut problems);
    // The namespace only sorts which matchers scoping refuses; validity does not depend on it.
    let _ = health(spec, "namespace", None, &mut problems);
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

/// A policy as validated, in the form the pipeline holds it.
pub fn validated(policy: &FailoverPolicy) -> Validated {
    validated_after(policy, None)
}

/// A policy as validated, taking over the health query `previous` (the same policy's last valid
/// generation) parsed, when its text is the same: a query already checked is not parsed again.
pub fn validated_after(policy: &FailoverPolicy, previous: Option<&ValidPolicy>) -> Validated {
    let parsed = previous.and_then(|v| v.health.as_ref()).map(|h| &h.query);
    validate_with(policy, parsed)
        .map(Arc::new)
        .map_err(Arc::from)
}

/// Whether validating `policy` parses a health query (what `previous` parsed is taken over).
pub fn parses_query(policy: &FailoverPolicy, previous: Option<&ValidPolicy>) -> bool {
    let Some(query) = policy
        .spec
        .health
        .as_ref()
        .and_then(|h| h.prometheus.as_ref())
        .map(|p| &p.query)
    else {
        return false;
    };
    let held = previous
        .and_then(|v| v.health.as_ref())
        .map(|h| h.query.written());
    held != Some(query.as_str())
}

/// Validates a policy; every problem found is returned.
pub fn validate(policy: &FailoverPolicy) -> Result<ValidPolicy, Vec<SpecProblem>> {
    validate_with(policy, None)
}

/// Validates a policy, taking over `parsed` (a query of the same policy) when its text is the
/// query's.
fn validate_with(
    policy: &FailoverPolicy,
    parsed: Option<&Arc<HealthQuery>>,
) -> Result<ValidPolicy, Vec<SpecProblem>> {
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
    let health = health(spec, &namespace, parsed, &mut problems);
    let capacity = capacity(spec, &mut problems);
    let (Some((failover_after, failback_after)), true) = (holds, problems.is_empty()) else {
        return Err(problems);
    };
    let backends = backends(spec, &namespace);
    let position = |name: &str| backends.iter().position(|b| b.reference.name == name);
    let pin = spec.pin.as_deref().and_then(position);
    let drill = spec.drill.as_ref().and_then(|d| {
        Some(Drill {
            to: position(&d.to)?,
            until: d.until.0,
            force: d.force,
        })
    });
    Ok(ValidPolicy {
        namespace: namespace.into(),
        name: policy.name_any().into(),
        service: spec.service.as_str().into(),
        strategy: spec.strategy,
        overprovisioning_factor: spec
            .overprovisioning_factor
            .unwrap_or(rules::DEFAULT_OVERPROVISIONING_FACTOR),
        when_none_ready: spec.when_none_ready,
        suspend: spec.suspend,
        pin,
        drill,
        readiness: ReadinessRule {
            min_ready_endpoints: spec.readiness.min_ready_endpoints.max(1),
            min_ready_ratio: spec.readiness.min_ready_ratio.unwrap_or(0.0),
        },
        failover_after,
        failback_after,
        route: RouteTarget::of(policy),
        ramp: ramp.map(Box::new),
        health: health.map(Box::new),
        capacity: capacity.map(Box::new),
        notifications: spec.notifications.clone().map(Box::new),
        backends,
    })
}

/// `spec.capacity`, parsed: the scaling deadline (each backend's rate per endpoint and workload
/// are its own, see [`backends`]).
fn capacity(spec: &FailoverPolicySpec, problems: &mut Vec<SpecProblem>) -> Option<Capacity> {
    let c = spec.capacity.as_ref()?;
    let scale = match &c.scale {
        None => None,
        Some(s) => Some(Scale {
            deadline: hold(&s.deadline, "spec.capacity.scale.deadline", problems)?,
            max_replicas: s.max_replicas,
        }),
    };
    Some(Capacity {
        scale,
        unserved: c.unserved,
    })
}

/// The backends in priority order, each with where its readiness is read and its own settings:
/// its weight, and with `spec.capacity` its rate per endpoint (the capacity's unless it sets
/// its own) and, with `scale`, its workload.
fn backends(spec: &FailoverPolicySpec, namespace: &str) -> Box<[Backend]> {
    let remote = |service: &str, from: Option<&crate::api::ReadinessFrom>| {
        from.map(|r| Box::new(RemoteService::of(r, namespace, service)))
    };
    let capacity = spec.capacity.as_ref();
    let per_endpoint = |own: Option<i32>| capacity.map(|c| own.unwrap_or(c.per_endpoint));
    let scaled = capacity.is_some_and(|c| c.scale.is_some());
    std::iter::once(Backend {
        reference: BackendRef::service(&spec.primary),
        weight: 1,
        tier: 0,
        remote: remote(&spec.primary, spec.primary_readiness_from.as_ref()),
        site: site_of(
            spec.primary_site.as_deref(),
            spec.primary_readiness_from.as_ref(),
        )
        .map(CompactString::from),
        per_endpoint: per_endpoint(capacity.and_then(|c| c.primary_per_endpoint)),
        scale_target: None,
    })
    .chain(spec.secondaries.iter().enumerate().map(|(i, s)| Backend {
        reference: BackendRef::service(&s.service),
        weight: s.weight.unwrap_or(1),
        tier: tier(spec.strategy, i, s.tier),
        remote: remote(&s.service, s.readiness_from.as_ref()),
        site: s.site().map(CompactString::from),
        per_endpoint: per_endpoint(s.per_endpoint),
        scale_target: s.scale_target.clone().filter(|_| scaled).map(Box::new),
    }))
    .collect()
}

/// The tier of the secondary at place `i` of the list: its own under `Ordered` (its place), the
/// one it names otherwise (0 when unset).
fn tier(strategy: Strategy, i: usize, named: Option<i32>) -> u8 {
    let tier = match strategy {
        Strategy::Ordered => i32::try_from(i).unwrap_or(MAX_TIER),
        _ => named.unwrap_or(0),
    };
    u8::try_from(tier.clamp(0, MAX_TIER)).unwrap_or(0)
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
    let checks: [(bool, &CrossFieldRule); 7] = [
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
            matches!(spec.strategy, Strategy::Equal | Strategy::Weighted)
                || spec.secondaries.iter().all(|s| s.tier.is_none()),
            &rules::TIER_ONLY_SHARED,
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
            spec.drill
                .as_ref()
                .is_none_or(|drill| names().any(|n| *n == drill.to)),
            &rules::DRILL_NAMES_A_BACKEND,
        ),
    ];
    let mut problems: Vec<SpecProblem> = checks
        .into_iter()
        .chain(KINDS.iter().flat_map(|kind| kind.checks(spec)))
        .chain(crate::route::referenced::checks(spec, KINDS))
        .chain(capacity_checks(spec))
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

/// The rules on `spec.capacity`, with whether each holds.
fn capacity_checks(spec: &FailoverPolicySpec) -> [(bool, &'static CrossFieldRule); 3] {
    let capacity = spec.capacity.as_ref();
    let mut named = std::collections::HashSet::new();
    let targets = spec
        .secondaries
        .iter()
        .filter_map(|s| s.scale_target.as_ref());
    let distinct = targets
        .map(|t| (t.kind, t.name.as_str()))
        .all(|workload| named.insert(workload));
    [
        (
            spec.strategy != Strategy::Proportional || capacity.is_none(),
            &rules::NO_CAPACITY_WITH_PROPORTIONAL,
        ),
        (
            spec.secondaries.iter().all(|s| {
                (s.per_endpoint.is_none() || capacity.is_some())
                    && (s.scale_target.is_none() || capacity.is_some_and(|c| c.scale.is_some()))
            }),
            &rules::SECONDARY_CAPACITY_NEEDS_CAPACITY,
        ),
        (distinct, &rules::DISTINCT_SCALE_TARGETS),
    ]
}

/// The Prometheus health check of `spec.health`, with its rules checked.
fn health(
    spec: &FailoverPolicySpec,
    namespace: &str,
    parsed: Option<&Arc<HealthQuery>>,
    problems: &mut Vec<SpecProblem>,
) -> Option<Health> {
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
    // A query that cannot run within its cost limits, or cannot parse, could never run.
    let query = match parsed.filter(|q| q.written() == p.query) {
        Some(parsed) => Some(parsed.clone()),
        None => HealthQuery::parse(&p.query, namespace)
            .map(Arc::new)
            .map_err(|why| {
                let why = crate::message::line(&why);
                problems.push(problem("spec.health.prometheus.query", &why));
            })
            .ok(),
    };
    let interval = hold(&p.interval, "spec.health.prometheus.interval", problems)?;
    if interval.after < std::time::Duration::from_secs(1) {
        problems.push(problem(
            "spec.health.prometheus.interval",
            rules::HEALTH_INTERVAL_MESSAGE,
        ));
    }
    Some(Health {
        address: p.address.clone(),
        query: query?,
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
        steps: ramp.steps.as_slice().into(),
        every,
    })
}

fn hold(text: &str, field: &str, problems: &mut Vec<SpecProblem>) -> Option<Hold> {
    match parse_duration(text) {
        Ok(after) if after <= MAX_HOLD => Some(Hold {
            after,
            written: text.into(),
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
    use std::time::Duration;

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

    #[test]
    fn one_workload_named_on_two_secondaries_is_refused_naming_the_field() {
        use crate::api::{CapacitySpec, ScaleKind, ScaleSpec, ScaleTarget};
        let target = |kind, name: &str| {
            Some(ScaleTarget {
                kind,
                name: name.into(),
            })
        };
        let mut s = spec();
        s.capacity = Some(CapacitySpec {
            unserved: Default::default(),
            per_endpoint: 10,
            primary_per_endpoint: None,
            scale: Some(ScaleSpec {
                deadline: "5m".into(),
                max_replicas: 10,
            }),
        });
        s.secondaries = vec![
            SecondaryBackend::new("web-east"),
            SecondaryBackend::new("web-west"),
        ];
        s.secondaries[0].scale_target = target(ScaleKind::Deployment, "web");
        s.secondaries[1].scale_target = target(ScaleKind::HorizontalPodAutoscaler, "web");
        assert!(
            validate(&policy(s.clone())).is_ok(),
            "two kinds, two workloads"
        );

        s.secondaries[1].scale_target = target(ScaleKind::Deployment, "web");
        let problems = validate(&policy(s)).expect_err("one workload twice");
        let rule = &rules::DISTINCT_SCALE_TARGETS;
        assert_eq!(
            problems
                .iter()
                .map(|p| (p.field.as_str(), p.message.as_str()))
                .collect::<Vec<_>>(),
            [("spec.secondaries", rule.message)]
        );
    }
}
