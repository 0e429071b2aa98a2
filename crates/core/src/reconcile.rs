//! The reconcile's one driver: the stages of one policy's reconcile, in order, over a [`World`]
//! port. The controller implements the port with its caches and its leader-checked writer;
//! `kubectl failover what-if` implements it with live reads and imagined writes. Neither
//! assembles the stages itself, so what-if runs the controller's reconcile, not a copy of it.
//!
//! ```text
//! previous status → group → observe → intend → claims → action → apply route → scale → outcome
//!                 → status::build → next
//! ```
//!
//! An invalid policy skips from the previous status to its outcome (nothing is decided or
//! written). A deleted policy that holds the finalizer is in the [`cleanup`] state instead.
//! What a write finds that the world's caches should learn (an API found missing) is told as
//! [`Effects`] through [`World::learn`], right after the write.

use std::{future::Future, sync::Arc, time::Duration};

use chrono::{DateTime, Utc};

use crate::{
    api::{ClaimsStatus, FailoverPolicyStatus, ScaledWorkload},
    apis::{ApiState, NeededApi},
    applied::{Applied, Scaled},
    decide::{before::Before, group::Order, plan::ScaleWant},
    intent::{self, Action, Intent, Observed},
    last_status::LastStatus,
    observation::{BackendObservation, PolicyKey},
    policy::{SpecProblem, ValidPolicy},
    route::{Claim, RouteTarget, RouteView},
    status::{self, Outcome, StatusInput, history::Notices},
    tenancy::Gateways,
};

/// What a decision reads of the world, besides the previous status.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Inputs {
    /// One observation per backend, primary first.
    pub observations: Vec<BackendObservation>,
    /// The route as the cluster has it, if it exists.
    pub route: Option<RouteView>,
}

/// Why a route could not be written.
#[derive(Debug)]
pub enum Fault<E> {
    /// The reconcile stops here and writes nothing more (this replica lost leadership).
    Abort(E),
    /// The write failed: the status says so, and the reconcile is retried with backoff.
    Failed(E),
}

/// What one policy's reconcile reads and writes: the port the controller and what-if implement.
pub trait World: Sync {
    /// Why a write failed.
    type Error: std::fmt::Display + Send;

    /// The status a valid policy has, in the form the next reconcile reads.
    fn previous(&self) -> Option<LastStatus>;
    /// The status an invalid policy has and keeps, whole (asked instead of [`Self::previous`]
    /// for an invalid policy, so the two are one reading).
    fn kept(&self) -> Option<Box<FailoverPolicyStatus>>;
    /// The site the policy's failover group routes it to, if it follows one now.
    fn group_order(&self, now: DateTime<Utc>) -> Option<Order>;
    /// What a decision reads: each backend's observation and the route.
    fn observe(&self, policy: &ValidPolicy) -> Inputs;
    /// The Gateways the policy's route may attach to, with what their listeners admit.
    fn gateways(&self) -> Gateways;
    /// The claims among `claims` that other policies hold, each with its holder.
    fn held_by_others(&self, claims: &[Claim]) -> Vec<(Claim, PolicyKey)>;
    /// What the policy claims, summarized for its status.
    fn claims_summary(&self) -> Option<ClaimsStatus>;
    /// What the notifier says of the policy's webhook sinks.
    fn notices(&self, policy: &ValidPolicy) -> Notices;
    /// Whether an API is served, as far as the world knows.
    fn api(&self, api: NeededApi) -> ApiState;
    /// What the world's caches learn from the route's write, told as soon as it is known (so
    /// that other policies' reconciles read it); applied in this one place.
    fn learn(&self, effects: Effects);
    /// Carries out the intent's action on the route; an API found missing is
    /// `Ok(Applied::ApiMissing)`.
    fn apply_route(
        &self,
        intent: &Intent,
        action: Action,
        current: Option<RouteView>,
    ) -> impl Future<Output = Result<Applied, Fault<Self::Error>>> + Send;
    /// Raises and restores the policy's workloads as `wants` says, from what `raised` recorded.
    fn scale(
        &self,
        policy: &ValidPolicy,
        wants: &[ScaleWant],
        raised: &[ScaledWorkload],
    ) -> impl Future<Output = Scaled> + Send;
    /// Cleanup: restores every workload `raised` records, as the policy goes.
    fn restore(&self, raised: &[ScaledWorkload]) -> impl Future<Output = Restored> + Send;
    /// Cleanup: whether the deletion was asked long enough ago that restores are given up.
    fn deletion_overdue(&self) -> impl Future<Output = bool> + Send;
    /// Cleanup: removes the policy's finalizer, so that it goes.
    fn release(&self) -> impl Future<Output = Result<(), String>> + Send;
}

/// What restoring a deleted policy's workloads came to.
#[derive(Debug)]
pub enum Restored {
    /// Each was tried: what could not be restored stays in `workloads`, with the first problem.
    Tried(Scaled),
    /// Nothing may be scaled (the cluster admin's choice): every record stays, and no retry can
    /// change that.
    Forbidden(Scaled),
}

/// What the cleanup of a deleted policy came to.
#[derive(Debug)]
pub enum Cleaned {
    /// The finalizer is removed and the policy goes; `scaled` says what was restored and what
    /// stays raised.
    Done(Scaled),
    /// A restore failed while the deletion is young, or the finalizer could not be removed: try
    /// again with backoff.
    Retry {
        /// What was restored meanwhile (its problem said apart).
        scaled: Scaled,
        /// Why it is tried again.
        problem: String,
    },
}

/// The policy as its reconcile reads it.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    /// The policy's uid.
    pub uid: &'a str,
    /// The policy's `metadata.generation`.
    pub generation: Option<i64>,
    /// The route the policy's spec names (an invalid policy's too).
    pub target: &'a RouteTarget,
    /// The spec, validated, or why it is not valid.
    pub spec: Spec<'a>,
}

/// A policy's spec, as validation left it.
#[derive(Clone, Copy, Debug)]
pub enum Spec<'a> {
    /// Every value parsed.
    Valid(&'a Arc<ValidPolicy>),
    /// The rules it breaks.
    Invalid(&'a [SpecProblem]),
}

/// What a reconcile wants next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Nothing until something changes.
    Wait,
    /// Run again after this long (a hold falls due, a recheck).
    After(Duration),
}

/// What the world's caches should learn from a reconcile, told through [`World::learn`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct Effects {
    /// The route's API is missing.
    pub api: Option<ApiEffect>,
}

/// What the reconcile found of the route's API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiEffect {
    /// The world thought it served; writing the route found it missing.
    FoundMissing(NeededApi),
    /// The world knew it missing.
    StillMissing(NeededApi),
}

/// What one reconcile came to.
#[derive(Debug)]
pub struct Reconciled<E> {
    /// The status the policy had.
    pub previous: Option<LastStatus>,
    /// What the reconcile came to.
    pub outcome: Outcome,
    /// The status that says so.
    pub status: FailoverPolicyStatus,
    /// What happens next, or the failed write to retry with backoff.
    pub next: Result<Next, E>,
}

/// When a policy looks again at a workload it wants raised and could not raise (its owner has
/// not consented yet, the API server refused), or raised and could not restore: workloads are
/// not watched (a watch of every Deployment and HPA of the cluster, for a rare case), so the
/// consent given, the workload created or the API server answering again is seen within this.
pub const SCALE_RECHECK: Duration = Duration::from_secs(10);

/// One reconcile of one policy at `now`; `Err` only when the world aborts it (nothing more is
/// written then, not even the status).
pub async fn reconcile<W: World>(
    subject: &Subject<'_>,
    world: &W,
    now: DateTime<Utc>,
) -> Result<Reconciled<W::Error>, W::Error> {
    let (previous, outcome, failure) = match subject.spec {
        Spec::Invalid(problems) => {
            // One reading: the status an invalid policy keeps is the one it has.
            let kept = world.kept();
            let previous = kept.as_deref().map(LastStatus::of);
            let outcome = Outcome::Invalid {
                problems: problems.to_vec(),
                kept,
            };
            (previous, outcome, None)
        }
        Spec::Valid(valid) => {
            let previous = world.previous();
            let (outcome, failure) =
                apply(subject.uid, valid, previous.as_ref(), world, now).await?;
            (previous, outcome, failure)
        }
    };
    let claims = world.claims_summary();
    let notices = match subject.spec {
        Spec::Valid(valid) => world.notices(valid),
        Spec::Invalid(_) => Notices::default(),
    };
    let status = status::build(&StatusInput {
        notices: &notices,
        generation: subject.generation,
        target: subject.target,
        previous: previous.as_ref(),
        outcome: &outcome,
        claims: claims.as_ref(),
        now,
    });
    let next = match failure {
        Some(e) => Err(e),
        None => Ok(again_if_unsettled(
            next(&outcome),
            subject.spec,
            previous.as_ref(),
            &status,
        )),
    };
    Ok(Reconciled {
        previous,
        outcome,
        status,
        next,
    })
}

/// A decision with `spec.capacity` reads where the one before it left traffic (on the primary,
/// a failback under way): when this one moved it, the next one decides otherwise (a failback by
/// capacity ends, and what it raised is restored, once a decision has read it recorded), so it
/// runs at once, from the status this one built. Every other decision reads its inputs and the
/// time only: taken again from its own status, it decides the same, and nothing runs it again.
fn again_if_unsettled(
    next: Next,
    spec: Spec<'_>,
    previous: Option<&LastStatus>,
    status: &FailoverPolicyStatus,
) -> Next {
    let Spec::Valid(valid) = spec else {
        return next;
    };
    if valid.capacity.is_none() {
        return next;
    }
    let left = |status: Option<&LastStatus>| {
        let before = Before::of(valid, status);
        (before.on_primary, before.ramping, before.demand)
    };
    if left(previous) == left(Some(&LastStatus::of(status))) {
        next
    } else {
        Next::After(Duration::ZERO)
    }
}

/// The cleanup state, for a deleted policy that holds the finalizer (as kube-runtime's
/// `finalizer()` has it): every workload the last status records as raised is restored, then
/// the finalizer is removed. The finalizer is removed only once the restores succeeded, or
/// nothing may be scaled, or the deletion is overdue; otherwise the cleanup is retried.
pub async fn cleanup<W: World>(world: &W) -> Cleaned {
    let raised = world
        .previous()
        .map(|last| last.scaled.to_vec())
        .unwrap_or_default();
    let (scaled, retry) = match world.restore(&raised).await {
        Restored::Forbidden(scaled) => (scaled, false),
        Restored::Tried(scaled) => {
            let retry = !scaled.workloads.is_empty() && !world.deletion_overdue().await;
            (scaled, retry)
        }
    };
    let released = if retry { Ok(()) } else { world.release().await };
    match (retry, released) {
        (false, Ok(())) => Cleaned::Done(scaled),
        (_, released) => Cleaned::Retry {
            problem: released
                .err()
                .or(scaled.problem.as_ref().map(ToString::to_string))
                .unwrap_or_default(),
            scaled: Scaled {
                problem: None,
                ..scaled
            },
        },
    }
}

/// A valid policy's stages: group, observe, intend, the route, then the workloads.
async fn apply<W: World>(
    uid: &str,
    valid: &Arc<ValidPolicy>,
    previous: Option<&LastStatus>,
    world: &W,
    now: DateTime<Utc>,
) -> Result<(Outcome, Option<W::Error>), W::Error> {
    let order = world.group_order(now);
    let inputs = world.observe(valid);
    let observed = Observed {
        observations: &inputs.observations,
        previous,
        order: order.as_ref(),
        now,
    };
    let mut intent = intent::intend(valid.clone(), uid, &world.gateways(), &observed);
    let held = world.held_by_others(&intent.claims);
    let api = world.api(intent.api);
    let action = intent.action(held, api);
    let (applied, failure) = match world
        .apply_route(&intent, action, inputs.route.clone())
        .await
    {
        Ok(applied) => (applied, None),
        Err(Fault::Abort(e)) => return Err(e),
        Err(Fault::Failed(e)) => (Applied::Failed(e.to_string()), Some(e)),
    };
    world.learn(Effects {
        api: match applied {
            Applied::ApiMissing(missing) if api == ApiState::Served => {
                Some(ApiEffect::FoundMissing(missing))
            }
            Applied::ApiMissing(missing) => Some(ApiEffect::StillMissing(missing)),
            _ => None,
        },
    });
    let raised = previous.map(|p| &*p.scaled).unwrap_or_default();
    let scaled = world
        .scale(&intent.policy, &intent.plan.scale, raised)
        .await;
    let outcome = intent.outcome(applied, scaled, inputs.route);
    Ok((outcome, failure))
}

/// What to do after a reconcile that wrote what it meant to: requeue when a hold falls due or
/// a workload must be looked at again, else wait for a change.
pub fn next(outcome: &Outcome) -> Next {
    match outcome {
        Outcome::Invalid { .. } => Next::Wait,
        Outcome::Decided(d) => match d.applied {
            Applied::Failed(_) => Next::Wait,
            // A missing CRD that turns up queues every policy; a claim handed over wakes its
            // claimants; so does a route the user owns (or its rule) that changes.
            Applied::Conflict
            | Applied::ApiMissing(_)
            | Applied::Yielded { .. }
            | Applied::RouteRefUnfit(_) => Next::Wait,
            Applied::Unchanged | Applied::Written | Applied::Suspended => {
                let held = !d.plan.scale.is_empty() || !d.scaled.workloads.is_empty();
                let recheck = (d.scaled.problem.is_some() && held).then_some(SCALE_RECHECK);
                let after = d.plan.requeue_after.into_iter().chain(recheck).min();
                after.map_or(Next::Wait, Next::After)
            }
        },
    }
}
