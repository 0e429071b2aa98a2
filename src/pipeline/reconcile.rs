//! One reconcile of one policy: the pipeline's steps as named calls, in order.
//!
//! ```text
//! validate → gather → decide → apply → status → write
//! ```
//!
//! Each step lives in its own module; this one only sequences them and chooses what happens
//! next (wait for a change, requeue when a hold falls due, or retry with backoff).

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::Utc;
use tracing::{debug, warn};

use crate::{
    pipeline::{
        apply::{self, Applied, ApplyError},
        deletion::{self, Finalized},
        gather, group, scale, write,
    },
    runtime::{retry::Retries, writer::NotLeader, written::StatusKey},
    sources::{
        Context,
        local::policies::{PolicyEntry, Spec},
    },
};
use failover_core::{
    intent::{self, Observed},
    last_status::LastStatus,
    observation::PolicyKey,
    policy::ValidPolicy,
    status::{self, Outcome, StatusInput},
};

/// How often every policy is reconciled even without a trigger, as a safety net (it writes
/// nothing when all is in place). One timer for all policies, not one per policy.
pub const RESYNC: Duration = Duration::from_secs(600);
/// What a reconcile wants next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Nothing until something changes.
    Wait,
    /// Run again after this long (a hold falls due, a retry).
    After(Duration),
}

/// Why a reconcile did not complete; each is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The readiness caches have not been filled yet.
    #[error("EndpointSlice and Service caches are not synced yet")]
    CachesNotSynced,
    /// Writing the generated route failed.
    #[error(transparent)]
    Route(Box<ApplyError>),
    /// This replica lost leadership before writing.
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
    /// The policy lacks its uid (never true of objects from the API server).
    #[error("policy object is missing metadata.uid")]
    MissingUid,
}

impl Error {
    /// Every value [`Error::kind`] can return.
    pub const KINDS: [&'static str; 6] = [
        "caches_not_synced",
        "route_write",
        "route_vanished",
        "status_write",
        "missing_metadata",
        "not_leader",
    ];

    /// A short, bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::CachesNotSynced => "caches_not_synced",
            Error::Route(e) => match **e {
                ApplyError::Vanished { .. } => "route_vanished",
                ApplyError::NotLeader(_) => "not_leader",
                ApplyError::Api { .. } | ApplyError::Contended { .. } => "route_write",
            },
            Error::NotLeader(_) => "not_leader",
            Error::MissingUid => "missing_metadata",
        }
    }

    fn not_leader(&self) -> bool {
        match self {
            Error::NotLeader(_) => true,
            Error::Route(e) => matches!(**e, ApplyError::NotLeader(_)),
            Error::CachesNotSynced | Error::MissingUid => false,
        }
    }

    /// The write was refused because the namespace is being deleted.
    fn namespace_terminating(&self) -> bool {
        matches!(self, Error::Route(e) if e.namespace_terminating())
    }
}

/// Reconciles one policy, as the policy table holds it (validated once per generation); a success
/// clears its backoff in `retries`, a deletion still restoring backs off there.
#[tracing::instrument(skip_all, fields(namespace = %entry.key.namespace, policy = %entry.key.name))]
pub async fn reconcile(
    entry: PolicyEntry,
    ctx: Arc<Context>,
    retries: &Retries,
) -> Result<Next, Error> {
    if !ctx.writer.is_leader() {
        // Standbys keep their caches warm and write nothing; leadership triggers a full pass.
        return Ok(Next::Wait);
    }
    if entry.identity.deleting {
        // Nothing more is routed; what the policy scaled is restored before it goes.
        if !entry.identity.finalizer {
            return Ok(Next::Wait);
        }
        return Ok(match deletion::finalize(&entry, &ctx).await {
            Finalized::Done => {
                retries.forget(&entry.key);
                Next::Wait
            }
            Finalized::Retry => Next::After(retries.next(&entry.key)),
        });
    }
    let started = Instant::now();
    debug!("reconcile started");
    let result = run(&entry, &ctx).await;
    ctx.metrics().observe_reconcile(started.elapsed());
    if result.is_ok() {
        retries.forget(&entry.key);
    }
    result
}

/// The stages after validation: gather → decide (in `intend`) → apply → status → write.
async fn run(policy: &PolicyEntry, ctx: &Context) -> Result<Next, Error> {
    let now = Utc::now();
    let previous = gather::previous_status(policy, &ctx.writer);
    let (outcome, failure) = match &policy.spec {
        Spec::Invalid(invalid) => (
            Outcome::Invalid {
                problems: invalid.problems.to_vec(),
                kept: gather::kept_status(policy, invalid, &ctx.writer),
            },
            None,
        ),
        Spec::Valid(valid) => act(policy, valid.clone(), previous.as_ref(), now, ctx).await?,
    };
    let target = policy.spec.target();
    let claims = ctx.caches.claims.read().summary(&policy.key);
    let status = status::build(&StatusInput {
        generation: policy.identity.generation,
        target,
        previous: previous.as_ref(),
        outcome: &outcome,
        claims: claims.as_ref(),
        now,
    });
    // Written in the background: the next reconcile of this policy does not wait for it.
    let key = StatusKey::new(&policy.key, &policy.identity.uid);
    let wrote = ctx
        .writer
        .statuses
        .queue(key, status.clone(), previous.as_ref());
    let written = write::Written {
        status: &status,
        previous: previous.as_ref(),
        wrote,
    };
    write::announce(
        &ctx.writer,
        &ctx.metrics().policies,
        policy,
        target,
        &outcome,
        &written,
    );
    next(outcome, failure)
}

/// Gather, intend and carry out the intent for a valid policy: the route, then the workloads.
async fn act(
    policy: &PolicyEntry,
    valid: Arc<ValidPolicy>,
    previous: Option<&LastStatus>,
    now: chrono::DateTime<Utc>,
    ctx: &Context,
) -> Result<(Outcome, Option<ApplyError>), Error> {
    if !ctx.caches.wait_for_inputs().await {
        return Err(Error::CachesNotSynced);
    }
    if policy.identity.uid.is_empty() {
        return Err(Error::MissingUid);
    }
    let following = group::follow(&policy.key, ctx, now);
    let inputs = gather::inputs(&valid, &ctx.caches);
    let observed = Observed {
        observations: &inputs.observations,
        previous,
        order: following.order.as_ref(),
        now,
    };
    let mut intent = intent::intend(valid, &policy.identity.uid, &ctx.gateways(), &observed);
    let held = ctx
        .caches
        .claims
        .read()
        .held_by_others(&policy.key, &intent.claims);
    let action = intent.action(held, ctx.caches.apis.state(intent.api));
    let (applied, failure) =
        match apply::carry_out(&ctx.writer, &intent, action, inputs.route.clone()).await {
            Ok(applied) => (applied, None),
            Err(ApplyError::NotLeader(e)) => return Err(Error::NotLeader(e)),
            // The API server does not serve the route's kind: its CRD is not installed.
            Err(e) if e.not_found() => {
                ctx.caches.apis.missing(intent.api);
                (Applied::ApiMissing(intent.api), None)
            }
            Err(e) => (Applied::Failed(e.to_string()), Some(e)),
        };
    if let Applied::ApiMissing(api) = applied {
        ctx.caches.apis.needed(api);
    }
    let raised = previous.map(|p| &*p.scaled).unwrap_or_default();
    let scaled = scale::scale(
        &ctx.writer,
        ctx.scope.scaling,
        policy,
        &intent.policy,
        &intent.plan.scale,
        raised,
    )
    .await;
    Ok((intent.outcome(applied, scaled, inputs.route), failure))
}

/// When a policy looks again at a workload it wants raised and could not raise (its owner has
/// not consented yet, the API server refused): workloads are not watched (a watch of every
/// Deployment and HPA of the cluster, for a rare case), so the consent given, or the workload
/// created, is seen within this.
const SCALE_RECHECK: Duration = Duration::from_secs(10);

/// What to do after a reconcile: retry a failed write, requeue when a hold falls due, or wait.
fn next(outcome: Outcome, failure: Option<ApplyError>) -> Result<Next, Error> {
    if let Some(e) = failure {
        return Err(Error::Route(Box::new(e)));
    }
    match outcome {
        Outcome::Invalid { .. } => Ok(Next::Wait),
        Outcome::Decided(d) => match d.applied {
            Applied::Failed(_) => Ok(Next::Wait),
            // A missing CRD that turns up queues every policy; a claim handed over wakes its
            // claimants.
            // So does a route the user owns (or its rule) that changes.
            Applied::Conflict
            | Applied::ApiMissing(_)
            | Applied::Yielded { .. }
            | Applied::RouteRefUnfit(_) => Ok(Next::Wait),
            Applied::Unchanged | Applied::Written | Applied::Suspended => {
                let recheck = (d.scaled.problem.is_some() && !d.plan.scale.is_empty())
                    .then_some(SCALE_RECHECK);
                let after = d.plan.requeue_after.into_iter().chain(recheck).min();
                Ok(after.map_or(Next::Wait, Next::After))
            }
        },
    }
}

/// Reconciles one policy and turns a failure into a retry, after the policy's backoff in
/// `retries` (the work queue's): what the work queue runs.
pub async fn reconcile_or_retry(
    entry: PolicyEntry,
    ctx: Arc<Context>,
    retries: Arc<Retries>,
) -> Next {
    let key = entry.key.clone();
    match reconcile(entry, ctx.clone(), &retries).await {
        Ok(next) => next,
        Err(e) => error_policy(&key, &e, &ctx, &retries),
    }
}

/// Requeues a failed policy with per-policy exponential backoff (`retries`).
pub fn error_policy(policy: &PolicyKey, error: &Error, ctx: &Context, retries: &Retries) -> Next {
    if error.not_leader() || error.namespace_terminating() {
        // A new leader takes over (and a regained leadership queues every policy); a namespace
        // going away with the policy in it cannot be written to.
        return Next::Wait;
    }
    ctx.metrics().error(error.kind());
    let delay = retries.next(policy);
    warn!(
        namespace = %policy.namespace,
        policy = %policy.name,
        error = %error,
        retry_in_ms = delay.as_millis() as u64,
        "reconcile failed"
    );
    Next::After(delay)
}
