//! One reconcile of one policy: the core's driver ([`failover_core::reconcile`]) runs the
//! stages over this controller's implementation of its port ([`Cluster`]: the caches and the
//! leader-checked writer); this module queues the status it builds, applies what the caches
//! should learn in one place, and turns a failure into a retry with backoff. A deleted policy's
//! last restores are [`deletion`]'s.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tracing::{debug, warn};

use crate::{
    pipeline::{
        apply::{self, Applied, ApplyError},
        deletion::{self, Finalized},
        gather, group, scale, write,
    },
    runtime::{
        metrics::Metrics,
        retry::Retries,
        writer::{NotLeader, Writer},
        written::StatusKey,
    },
    sources::{
        Caches, Scope,
        local::policies::{Lifecycle, PolicyEntry, Spec},
        wake::Wake,
    },
};
use failover_core::{
    api::{ClaimsStatus, FailoverPolicyStatus, ScaledWorkload},
    apis::{ApiState, NeededApi},
    applied::Scaled,
    decide::{group::Order, plan::ScaleWant},
    intent::{Action, Intent},
    last_status::LastStatus,
    observation::PolicyKey,
    policy::ValidPolicy,
    reconcile::{
        self as driver, ApiEffect, Effects, Fault, Inputs, Next, Restored, Subject, World,
    },
    route::{Claim, RouteView},
    status::{Outcome, history::Notices},
    tenancy::Gateways,
};

/// How often every policy is reconciled even without a trigger, as a safety net (it writes
/// nothing when all is in place). One timer for all policies, not one per policy.
pub const RESYNC: Duration = Duration::from_secs(600);

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

/// What a reconcile reads and writes, each part its own: the caches the watches filled (written
/// only where the driver's effects and a group's recorded choice say), the one writer, what the
/// cluster admin set, the work queue's door (a group's move wakes the other members) and the
/// metrics.
#[derive(Clone, Copy)]
pub struct Reconciler<'a> {
    /// What the watches filled.
    pub caches: &'a Caches,
    /// The one way to write.
    pub writer: &'a Writer,
    /// What the cluster admin set.
    pub scope: &'a Scope,
    /// The work queue's door.
    pub wake: &'a Wake,
    /// The metrics registry.
    pub metrics: &'a Metrics,
}

/// Reconciles one policy, as the policy table holds it (validated once per generation); a success
/// clears its backoff in `retries`, a deletion still restoring backs off there.
#[tracing::instrument(skip_all, fields(namespace = %entry.key.namespace, policy = %entry.key.name))]
pub async fn reconcile(
    entry: PolicyEntry,
    parts: Reconciler<'_>,
    retries: &Retries,
) -> Result<Next, Error> {
    if !parts.writer.is_leader() {
        // Standbys keep their caches warm and write nothing; leadership triggers a full pass.
        return Ok(Next::Wait);
    }
    match entry.identity.lifecycle {
        Lifecycle::Live | Lifecycle::LiveHolding => {}
        // Nothing more is routed, and nothing is left to undo.
        Lifecycle::Leaving => return Ok(Next::Wait),
        // Nothing more is routed; what the policy scaled is restored before it goes.
        Lifecycle::Cleanup => {
            let world = Cluster {
                entry: &entry,
                parts,
            };
            return Ok(
                match deletion::finalize(&entry, parts.writer, &world).await {
                    Finalized::Done => {
                        retries.forget(&entry.key);
                        Next::Wait
                    }
                    Finalized::Retry => Next::After(retries.next(&entry.key)),
                },
            );
        }
    }
    let started = Instant::now();
    debug!("reconcile started");
    let result = run(&entry, parts).await;
    parts.metrics.observe_reconcile(started.elapsed());
    if result.is_ok() {
        retries.forget(&entry.key);
    }
    result
}

/// The stages after validation, run by the core's driver over this controller's [`Cluster`]; the
/// status is queued and announced whatever the route's write came to.
async fn run(entry: &PolicyEntry, parts: Reconciler<'_>) -> Result<Next, Error> {
    let spec = match &entry.spec {
        Spec::Invalid(invalid) => driver::Spec::Invalid(&invalid.problems),
        Spec::Valid(valid) => {
            if !parts.caches.wait_for_inputs().await {
                return Err(Error::CachesNotSynced);
            }
            if entry.identity.uid.is_empty() {
                return Err(Error::MissingUid);
            }
            driver::Spec::Valid(valid)
        }
    };
    let target = entry.spec.target();
    let subject = Subject {
        uid: &entry.identity.uid,
        generation: entry.identity.generation,
        target,
        spec,
    };
    let reconciled = driver::reconcile(&subject, &Cluster { entry, parts }, Utc::now()).await?;
    // Written in the background: the next reconcile of this policy does not wait for it.
    let key = StatusKey::new(&entry.key, &entry.identity.uid);
    let previous = reconciled.previous.as_ref();
    let wrote = parts
        .writer
        .statuses
        .queue(key, reconciled.status.clone(), previous);
    let written = write::Written {
        status: &reconciled.status,
        previous,
        wrote,
    };
    write::announce(
        parts.writer,
        &parts.metrics.policies,
        entry,
        target,
        &reconciled.outcome,
        &written,
    );
    if let Outcome::Decided(d) = &reconciled.outcome {
        let group = d.plan.following.as_ref().map(|o| o.group.as_str());
        let (key, uid) = (&entry.key, &entry.identity.uid);
        let notifier = &parts.writer.notifier;
        notifier.observe(
            key,
            uid,
            &d.policy,
            group,
            &reconciled.status,
            entry.last.as_ref(),
        );
    }
    reconciled.next
}

/// The world a policy's reconcile runs in: the caches, read as they are, and the leader-checked
/// writer.
struct Cluster<'a> {
    entry: &'a PolicyEntry,
    parts: Reconciler<'a>,
}

impl World for Cluster<'_> {
    type Error = Error;

    fn previous(&self) -> Option<LastStatus> {
        gather::previous_status(self.entry, self.parts.writer)
    }

    fn kept(&self) -> Option<Box<FailoverPolicyStatus>> {
        match &self.entry.spec {
            Spec::Invalid(invalid) => gather::kept_status(self.entry, invalid, self.parts.writer),
            Spec::Valid(_) => None,
        }
    }

    fn group_order(&self, now: DateTime<Utc>) -> Option<Order> {
        let Reconciler {
            caches,
            writer,
            wake,
            ..
        } = self.parts;
        group::follow(&self.entry.key, caches, writer, wake, now).order
    }

    fn observe(&self, policy: &ValidPolicy) -> Inputs {
        gather::inputs(policy, self.parts.caches, self.parts.writer)
    }

    fn gateways(&self) -> Gateways {
        self.parts.caches.gateways(self.parts.scope)
    }

    fn held_by_others(&self, claims: &[Claim]) -> Vec<(Claim, PolicyKey)> {
        let table = self.parts.caches.claims.read();
        table.held_by_others(&self.entry.key, claims)
    }

    fn claims_summary(&self) -> Option<ClaimsStatus> {
        self.parts.caches.claims.read().summary(&self.entry.key)
    }

    fn notices(&self, policy: &ValidPolicy) -> Notices {
        let (key, uid) = (&self.entry.key, &self.entry.identity.uid);
        self.parts.writer.notifier.notices(key, uid, policy)
    }

    fn api(&self, api: NeededApi) -> ApiState {
        self.parts.caches.apis.state(api)
    }

    /// The caches learn what a write found: the one place a reconcile's findings reach them.
    fn learn(&self, effects: Effects) {
        let caches = self.parts.caches;
        match effects.api {
            Some(ApiEffect::FoundMissing(api)) => {
                caches.apis.missing(api);
                caches.apis.needed(api);
            }
            Some(ApiEffect::StillMissing(api)) => caches.apis.needed(api),
            None => {}
        }
    }

    async fn apply_route(
        &self,
        intent: &Intent,
        action: Action,
        current: Option<RouteView>,
    ) -> Result<Applied, Fault<Error>> {
        match apply::carry_out(self.parts.writer, intent, action, current).await {
            Ok(applied) => Ok(applied),
            Err(ApplyError::NotLeader(e)) => Err(Fault::Abort(Error::NotLeader(e))),
            // The API server does not serve the route's kind: its CRD is not installed.
            Err(e) if e.not_found() => Ok(Applied::ApiMissing(intent.api)),
            Err(e) => Err(Fault::Failed(Error::Route(Box::new(e)))),
        }
    }

    async fn scale(
        &self,
        policy: &ValidPolicy,
        wants: &[ScaleWant],
        raised: &[ScaledWorkload],
    ) -> Scaled {
        let parts = self.parts;
        scale::scale(
            parts.writer,
            parts.scope.scaling,
            self.entry,
            policy,
            wants,
            raised,
        )
        .await
    }

    async fn restore(&self, raised: &[ScaledWorkload]) -> Restored {
        deletion::restore(
            self.parts.writer,
            self.parts.scope.scaling,
            self.entry,
            raised,
        )
        .await
    }

    async fn deletion_overdue(&self) -> bool {
        deletion::overdue(self.parts.writer, self.entry).await
    }

    async fn release(&self) -> Result<(), String> {
        deletion::release(self.parts.writer, self.entry).await
    }
}

/// Reconciles one policy and turns a failure into a retry, after the policy's backoff in
/// `retries` (the work queue's): what the work queue runs.
pub async fn reconcile_or_retry(
    entry: PolicyEntry,
    parts: Reconciler<'_>,
    retries: &Retries,
) -> Next {
    let key = entry.key.clone();
    match reconcile(entry, parts, retries).await {
        Ok(next) => next,
        Err(e) => error_policy(&key, &e, parts.metrics, retries),
    }
}

/// Requeues a failed policy with per-policy exponential backoff (`retries`).
pub fn error_policy(
    policy: &PolicyKey,
    error: &Error,
    metrics: &Metrics,
    retries: &Retries,
) -> Next {
    if error.not_leader() || error.namespace_terminating() {
        // A new leader takes over (and a regained leadership queues every policy); a namespace
        // going away with the policy in it cannot be written to.
        return Next::Wait;
    }
    metrics.error(error.kind());
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
