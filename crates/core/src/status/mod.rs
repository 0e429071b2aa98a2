//! The status stage of the pipeline: the status, built in this one place for every outcome of a reconcile
//! (a pure function: same input, same status, no clock read here).
//!
//! - a decision whose route is in place (or suspended): the full picture of the [`Plan`];
//! - a conflict: the backends as observed, `Ready=False` `<Kind>Conflict`, the rest as before;
//! - a failed write: the previous status (what is really in place), `Ready=False`
//!   `<Kind>WriteFailed` with the API server's message;
//! - an invalid spec: the previous status, `Ready=False` `InvalidSpec` naming the fields;
//! - the route's CRD not installed: the backends as observed, `Ready=False` `<Kind>CRDMissing`
//!   naming the CRD and how to install it;
//! - another policy routing the same apex, having claimed it first: the backends as observed,
//!   `Ready=False` `ApexConflict` naming the claim and the policy that holds it (only when of the
//!   same namespace: else "a policy in another namespace").
//!
//! Conditions keep their `lastTransitionTime` while their status does not change.
//!
//! A failover group's status is built here too ([`group`]).

pub mod group;
pub mod history;
mod in_place;
mod parents;

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::{
    api::{
        BackendStatus, ClaimsStatus, Condition, FailoverPolicyStatus, HealthReading,
        ReadinessSource, Role, Timestamp,
        conditions::{READY, SCALED_UP, STALLED, ready, scaling},
    },
    applied::{Applied, Scaled},
    decide::{Plan, Rule, conditions, verdict::Verdict},
    last_status::LastStatus,
    message,
    observation::PolicyKey,
    policy::{SpecProblem, ValidPolicy},
    route::{Claim, RouteKind, RouteTarget, RouteView, claim::holder_seen_from},
    tenancy::RefusedParent,
};

/// What a reconcile came to.
#[derive(Debug)]
pub enum Outcome {
    /// The spec breaks a rule; nothing was decided or written.
    Invalid {
        /// Why the spec is invalid.
        problems: Vec<SpecProblem>,
        /// The status as last written, whole: what an invalid policy's status keeps (the route
        /// in place).
        kept: Option<Box<FailoverPolicyStatus>>,
    },
    /// A decision was made and the apply step ran.
    Decided(Box<Decided>),
}

/// A decision and what the apply step did with it.
#[derive(Debug)]
pub struct Decided {
    /// The validated policy.
    pub policy: Arc<ValidPolicy>,
    /// The decision.
    pub plan: Plan,
    /// What the apply step did.
    pub applied: Applied,
    /// The route as the cluster had it when the decision was made (what gather read).
    pub route: Option<RouteView>,
    /// The parents the policy asks for that the cluster admin (Gateways of other namespaces
    /// not in `--allowed-gateways`) or the Gateway's listeners do not allow, with why: left out
    /// of the route.
    pub refused_parents: Vec<RefusedParent>,
    /// The hostnames other policies hold, each claim with its holder: left out of the route.
    pub held_hostnames: Vec<(Claim, PolicyKey)>,
    /// What the scale step did.
    pub scaled: Scaled,
}

/// Everything the status is built from.
pub struct StatusInput<'a> {
    /// The policy's `metadata.generation`.
    pub generation: Option<i64>,
    /// The route the policy owns.
    pub target: &'a RouteTarget,
    /// The status as last written.
    pub previous: Option<&'a LastStatus>,
    /// What the reconcile came to.
    pub outcome: &'a Outcome,
    /// Now, for conditions that change.
    pub now: DateTime<Utc>,
    /// What the policy claims, summarized (as the claims table holds it).
    pub claims: Option<&'a ClaimsStatus>,
    /// What the notifier says of the policy's webhook sinks.
    pub notices: &'a history::Notices,
}

/// The status of a policy after a reconcile.
pub fn build(input: &StatusInput) -> FailoverPolicyStatus {
    let d = match input.outcome {
        Outcome::Decided(d) => d,
        Outcome::Invalid { problems, kept } => {
            let mut status = kept.as_deref().cloned().unwrap_or_default();
            let mut conditions = std::mem::take(&mut status.conditions);
            conditions.retain(|c| c.type_ != READY);
            conditions.insert(0, condition(input.previous, &invalid(problems), input.now));
            return finish(status, conditions, input);
        }
    };
    let (status, verdicts) = decided_or_in_place(d, input);
    let conditions = verdicts
        .iter()
        .map(|v| condition(input.previous, v, input.now))
        .collect();
    finish(status, conditions, input)
}

/// The status and conditions of a decision: the route as decided when it is in place, else the
/// route as it stands with the condition that says why the decision is not (`in_place`).
fn decided_or_in_place(d: &Decided, input: &StatusInput) -> (FailoverPolicyStatus, Vec<Verdict>) {
    let kind = input.target.kind();
    let mut status = decided(d);
    let mut verdicts = conditions::verdicts(&d.policy, &d.plan);
    let decided_active = status.active_backends.clone();
    let own = match &d.applied {
        Applied::Conflict | Applied::ApiMissing(_) | Applied::Yielded { .. } => None,
        _ => d.route.as_ref(),
    };
    status.route_parents = parents::states(&d.policy, own, &d.refused_parents);
    let ready = match &d.applied {
        Applied::Unchanged | Applied::Written | Applied::Suspended => None,
        Applied::Failed(error) => Some(failed(kind, error, &decided_active)),
        Applied::Conflict => Some(conflict(kind, input.target, &decided_active)),
        Applied::RouteRefUnfit(mismatch) => {
            let rule = input.target.referenced().map_or("", |r| r.rule.as_str());
            let (reason, message) = mismatch.verdict(kind, &input.target.name, rule);
            Some(Verdict::new(READY, false, reason, message))
        }
        Applied::ApiMissing(api) => Some(Verdict::new(
            READY,
            false,
            kind.crd_missing_reason(),
            api.missing_message(),
        )),
        Applied::Yielded { claim, holder } => Some(Verdict::new(
            READY,
            false,
            ready::APEX_CONFLICT,
            format!(
                "{claim} is routed by {}, which claimed it first, so this policy writes no route; delete one of the two, or give this one its own apex",
                holder_seen_from(holder, &d.policy.namespace)
            ),
        )),
    };
    if !matches!(d.applied, Applied::Unchanged | Applied::Written) {
        let weights = in_place::weights(&d.policy, own);
        status = in_place::status(status, input.previous, weights.as_deref());
    }
    if d.policy.suspend {
        let [suspended_ready, suspended] =
            in_place::suspended(&status, &decided_active, kind.as_str());
        if matches!(d.applied, Applied::Suspended) {
            verdicts[0] = suspended_ready;
        }
        verdicts.push(suspended);
    }
    if let Some(ready) = ready {
        verdicts[0] = ready;
    }
    verdicts.extend(parents::verdict(
        &status.route_parents,
        &d.held_hostnames,
        &d.policy.namespace,
    ));
    verdicts.extend(scaled_up(&d.policy, &d.scaled));
    verdicts.extend(history::verdict(&d.policy, input.notices));
    record_history(&mut status, d, input);
    (status, verdicts)
}

/// The history: a decision in place records its transition; any other keeps the previous one.
fn record_history(status: &mut FailoverPolicyStatus, d: &Decided, input: &StatusInput) {
    status.history = match d.applied {
        Applied::Unchanged | Applied::Written | Applied::Suspended => {
            history::record(&d.policy, &d.plan, input.previous)
        }
        _ => input
            .previous
            .map(|p| p.history().to_vec())
            .unwrap_or_default(),
    };
    status.notified_through =
        history::notified_through(&d.policy, &status.history, input.previous, input.notices);
}

/// `ScaledUp`, with `spec.capacity.scale`: which workloads are raised, or why one could not be.
fn scaled_up(policy: &ValidPolicy, scaled: &Scaled) -> Option<Verdict> {
    policy.capacity.as_ref()?.scale.as_ref()?;
    let raised: Vec<String> = scaled
        .workloads
        .iter()
        .filter(|w| !w.released)
        .map(|w| {
            format!(
                "{:?} {} at {} (was {})",
                w.kind, w.name, w.replicas, w.original_replicas
            )
        })
        .collect();
    Some(match (&scaled.problem, raised.is_empty()) {
        (Some(problem), _) => Verdict::new(
            SCALED_UP,
            !raised.is_empty(),
            problem.reason,
            problem.message.clone(),
        ),
        (None, false) => Verdict::new(
            SCALED_UP,
            true,
            scaling::SCALED_UP,
            format!("raised for the failover: {}", raised.join(", ")),
        ),
        (None, true) => Verdict::new(
            SCALED_UP,
            false,
            scaling::NOT_SCALED,
            "no workload is raised".to_string(),
        ),
    })
}

/// Names the route, sets the generation everywhere, and bounds every message.
fn finish(
    mut status: FailoverPolicyStatus,
    mut conditions: Vec<Condition>,
    input: &StatusInput,
) -> FailoverPolicyStatus {
    *input.target.kind().spec().status_name(&mut status) = Some(input.target.name.to_string());
    status.observed_generation = input.generation;
    status.claimed = input.claims.cloned();
    for b in &mut status.backends {
        b.message = b.message.as_deref().map(message::line);
    }
    conditions.retain(|c| c.type_ != STALLED);
    if let Some(stalled) = stalled(&conditions) {
        conditions.push(condition(input.previous, &stalled, input.now));
    }
    for c in &mut conditions {
        c.observed_generation = input.generation;
        c.message = message::line(&c.message);
    }
    status.conditions = conditions;
    status
}

/// `Stalled`, while the `Ready` condition's reason means nothing moves until someone acts.
fn stalled(conditions: &[Condition]) -> Option<Verdict> {
    conditions
        .iter()
        .find(|c| c.type_ == READY && c.status == "False")
        .filter(|c| ready::is_stalling(&c.reason))
        .map(|c| Verdict::new(STALLED, true, &c.reason, c.message.clone()))
}

/// The full status of a decision whose route is in place.
fn decided(d: &Decided) -> FailoverPolicyStatus {
    let (policy, plan) = (&d.policy, &d.plan);
    let active = plan.active(policy);
    let shares = plan.shares();
    FailoverPolicyStatus {
        observed_generation: None,
        phase: Some(plan.routing.phase),
        active_summary: Some(active.join(",")),
        active_backends: active,
        ready_summary: Some(ready_summary(plan)),
        backends: backends(policy, plan, Some(&shares)),
        last_failover_time: plan.last_failover_time,
        last_failback_time: plan.last_failback_time,
        hold_until: match plan.routing.rule {
            Rule::FailoverPending { due }
            | Rule::FailbackPending { due }
            | Rule::FailbackRamp { due, .. } => Some(Timestamp(due)),
            _ => None,
        },
        scaled: d.scaled.workloads.clone(),
        capacity: plan.load.as_ref().map(|l| crate::api::CapacityStatus {
            demand: l.demand,
            unserved: crate::decide::plan::share(l.unserved_basis_points, 10_000),
        }),
        // The route's name is the caller's, in its kind's field; no parent, claim or condition
        // yet.
        ..FailoverPolicyStatus::default()
    }
}

fn backends(policy: &ValidPolicy, plan: &Plan, shares: Option<&[String]>) -> Vec<BackendStatus> {
    plan.backends
        .iter()
        .enumerate()
        .map(|(i, b)| BackendStatus {
            readiness_from: policy
                .backends
                .get(i)
                .and_then(|p| p.remote.as_ref())
                .map(|r| ReadinessSource {
                    cluster: r.cluster.clone(),
                    namespace: r.namespace.clone(),
                    service: r.service.clone(),
                }),
            readiness_as_of: b.observation.availability.as_of().map(Timestamp),
            health: policy
                .health
                .as_ref()
                .zip(
                    b.observation
                        .health
                        .as_ref()
                        .and_then(|r| r.sample.as_ref()),
                )
                .map(|(h, r)| HealthReading {
                    value: r.value,
                    threshold: h.threshold(),
                    healthy: h.healthy(r.value),
                    read_at: Timestamp(r.read_at),
                }),
            service: b.backend.name.to_string(),
            role: if i == 0 {
                Role::Primary
            } else {
                Role::Secondary
            },
            ready: b.ready,
            ready_endpoints: b.observation.ready_endpoints,
            total_endpoints: b.observation.total_endpoints,
            weight: plan.routing.weights.get(i).copied().unwrap_or(0),
            share: shares.and_then(|s| s.get(i).cloned()),
            last_transition_time: Some(Timestamp(b.since)),
            message: b.not_ready.clone(),
            capacity: plan.load.as_ref().and_then(|l| l.capacity.get(i).copied()),
        })
        .collect()
}

fn ready_summary(plan: &Plan) -> String {
    let ready = plan.backends.iter().filter(|b| b.ready).count();
    format!("{ready}/{}", plan.backends.len())
}

fn invalid(problems: &[SpecProblem]) -> Verdict {
    let message = problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    Verdict::new(
        READY,
        false,
        ready::INVALID_SPEC,
        format!("the spec is invalid and is not acted on: {message}"),
    )
}

fn conflict(kind: RouteKind, target: &RouteTarget, decided: &[String]) -> Verdict {
    Verdict::new(
        READY,
        false,
        kind.conflict_reason(),
        format!(
            "{} {} is not owned by this policy and is left untouched, so {} is not written; delete it, or set {} on a new policy",
            kind.as_str(),
            target.name,
            traffic_to(decided),
            kind.name_field()
        ),
    )
}

fn failed(kind: RouteKind, error: &str, decided: &[String]) -> Verdict {
    Verdict::new(
        READY,
        false,
        kind.write_failed_reason(),
        format!("{} is not written: {error}", traffic_to(decided)),
    )
}

/// The decision in a few words: `traffic to a, b`, or `no traffic` when nothing is active.
fn traffic_to(decided: &[String]) -> String {
    if decided.is_empty() {
        "no traffic".to_string()
    } else {
        format!("traffic to {}", decided.join(", "))
    }
}

/// A condition from a verdict, keeping the previous `lastTransitionTime` while the status holds.
fn condition(previous: Option<&LastStatus>, verdict: &Verdict, now: DateTime<Utc>) -> Condition {
    let held = previous
        .and_then(|p| p.condition(verdict.type_))
        .filter(|c| c.status == verdict.status)
        .map(|c| c.last_transition_time.clone());
    condition_since(held, verdict, now)
}

/// A condition from a verdict, its `lastTransitionTime` the one `held` (the previous one of the
/// same status), else now.
pub(crate) fn condition_since(
    held: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    verdict: &Verdict,
    now: DateTime<Utc>,
) -> Condition {
    let last_transition_time = held.unwrap_or_else(|| crate::api::time(now));
    Condition {
        type_: verdict.type_.to_string(),
        status: if verdict.status { "True" } else { "False" }.to_string(),
        observed_generation: None,
        last_transition_time,
        reason: verdict.reason.clone(),
        message: verdict.message.clone(),
    }
}
