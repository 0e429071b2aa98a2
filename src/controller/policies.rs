//! The policy watch: every FailoverPolicy into the policy table and the index, and what each
//! policy asks of the sources (the remote namespaces it reads, its health queries, as the
//! validate step makes them).
//!
//! A new generation of a policy is validated off the watch stream, by one validator taking
//! policies in turns by namespace, the newest version of each ([`Validations`]): a tenant that
//! edits its policies many times a second gets one validation per turn of the namespaces
//! waiting, and an edit of any other namespace (a pin, a suspend, a drill, a new policy) waits
//! for at most one validation of each. A namespace whose validations are costly (health queries
//! at every limit, each compiled) has at most a quarter of the validator's time: the CPU of an
//! edit flood is the flooder's. Until its new generation is validated, a policy routes by
//! the generation the table holds (its metadata and status are the new version's). A health
//! query whose text did not change is not parsed again. The first list, and a relist, are
//! validated in order on the stream: a relist is complete only once every policy it listed is.

use std::{collections::HashMap, sync::Arc, time::Duration};

use futures::{Stream, StreamExt, channel::mpsc};
use kube::{ResourceExt, runtime::watcher};
use parking_lot::Mutex;
use tokio::{sync::Notify, time::Instant};
use tracing::warn;

use super::runner::Request;
use crate::{
    runtime::{
        fair::{self, Turns},
        writer::Writer,
        written::StatusKey,
    },
    sources::{
        Context,
        local::{
            claims,
            policies::{TableChange, Validation, key_of},
            shard::sharded,
        },
        remote::secrets,
        watch::{WatchedPolicy, events, map_event, scoped},
    },
};
use failover_core::{
    api::FailoverPolicy,
    apis::WatchKind,
    last_status::Compact,
    observation::{Namespace, PolicyKey},
    policy::{SpecProblem, ValidPolicy, Validated},
    validate::{parses_query, validated_after},
};

/// How long the policy watch waits for the Gateways and namespaces to list (or to be found not
/// served) before it makes claims without them; they are re-ranked when they list.
const ADMISSION_WAIT: Duration = Duration::from_secs(10);

/// What the policy stage takes in: a watch event, or a policy the validator validated.
enum Input {
    Event(Box<watcher::Event<FailoverPolicy>>),
    Validated(Box<FailoverPolicy>, Validated),
}

/// Policies → the table and the index; out come the policies to reconcile (each new or changed
/// one), and word that a complete list is in the table.
pub fn policy_requests(ctx: Arc<Context>) -> impl Stream<Item = Request> + Send + 'static {
    let watching = ctx.clone();
    let events = sharded(ctx.clone(), WatchKind::FailoverPolicy, move || {
        events(
            scoped::<WatchedPolicy>(&watching.client, watching.scope.namespace.as_deref()),
            WatchKind::FailoverPolicy,
            Default::default(),
            watching.clone(),
        )
    });
    // Claims are made once what the Gateways' listeners admit is known, so the first list's
    // claims are those the status recorded, not claims made anew when the Gateways arrive.
    let waiting = ctx.clone();
    let events = futures::stream::once(async move {
        let synced = &waiting.caches.synced;
        synced.wait_for(&WatchKind::ADMISSION, ADMISSION_WAIT).await;
        events
    })
    .flatten();
    let validations = Arc::new(Validations::default());
    let (validated, results) = mpsc::unbounded();
    tokio::spawn(validate_in_turn(
        ctx.clone(),
        validations.clone(),
        validated,
    ));
    let inputs = futures::stream::select(
        events.map(|event| Input::Event(Box::new(map_event(event, |p: WatchedPolicy| p.0)))),
        results.map(|(policy, valid)| Input::Validated(policy, valid)),
    );
    let applying = ctx.clone();
    inputs
        .then(move |input| admitted(applying.clone(), validations.clone(), input))
        .flat_map(move |admitted| {
            let Some((event, validation)) = admitted else {
                return futures::stream::iter(Vec::new());
            };
            let (changes, seen) = ctx.caches.table.write().apply(event, validation);
            // Told before the statuses seen are forgotten: what this replica wrote last.
            let (echoes, changes): (Vec<_>, Vec<_>) = changes
                .into_iter()
                .partition(|change| own_status(&ctx.writer, change));
            for _ in &echoes {
                ctx.metrics().echo("status");
            }
            // Statuses this replica wrote are forgotten once the table has them.
            if let Some(version) = seen {
                ctx.writer.recent_status.seen_through(version, |_| true);
            }
            let requests: Vec<Request> = changes.iter().flat_map(|c| follow(&ctx, c)).collect();
            futures::stream::iter(requests)
        })
}

/// An input as the table takes it: the event, and how its policy's spec is taken; `None`: not
/// now (a validation that a newer version or a deletion overtook).
async fn admitted(
    ctx: Arc<Context>,
    validations: Arc<Validations>,
    input: Input,
) -> Option<(watcher::Event<FailoverPolicy>, Validation)> {
    let event = match input {
        Input::Validated(policy, valid) => {
            let key = key_of(&policy)?;
            return validations
                .finish(&key, &policy)
                .then(|| (watcher::Event::Apply(*policy), Validation::Fresh(valid)));
        }
        Input::Event(event) => *event,
    };
    let validation = match &event {
        watcher::Event::Apply(p) if ctx.caches.table.read().needs_validation(p) => {
            validations.push(p.clone());
            Validation::Pending
        }
        watcher::Event::InitApply(p) => {
            if let Some(key) = key_of(p) {
                validations.cancel(&key);
            }
            if ctx.caches.table.read().needs_validation(p) {
                let previous = ctx.caches.table.read().held_valid(p);
                Validation::Fresh(validation(p.clone(), previous).await)
            } else {
                Validation::Held
            }
        }
        watcher::Event::Delete(p) => {
            if let Some(key) = key_of(p) {
                validations.cancel(&key);
            }
            Validation::Held
        }
        _ => Validation::Held,
    };
    Some((event, validation))
}

/// The policies waiting for their validation: the newest version of each, taken in turns by
/// namespace.
#[derive(Default)]
struct Validations {
    waiting: Mutex<Waiting>,
    arrived: Notify,
}

#[derive(Default)]
struct Waiting {
    turns: Turns<Namespace, PolicyKey>,
    newest: HashMap<PolicyKey, Box<FailoverPolicy>>,
    /// The version of each policy being validated.
    taken: HashMap<PolicyKey, Option<String>>,
    /// When each namespace whose last validation was costly may have its next one.
    not_before: HashMap<Namespace, Instant>,
}

/// How much longer than a namespace's validation took it waits before its next one: a namespace
/// has at most a quarter of the validator's time (a health query at every limit compiles for
/// tens of milliseconds; any other validation takes microseconds and waits as little).
const VALIDATION_PAUSE: u32 = 3;

impl Validations {
    /// A version of a policy to validate: it replaces any older one waiting.
    fn push(&self, policy: FailoverPolicy) {
        let Some(key) = key_of(&policy) else {
            return;
        };
        let mut waiting = self.waiting.lock();
        if waiting
            .newest
            .insert(key.clone(), Box::new(policy))
            .is_none()
        {
            waiting.turns.push(&key.namespace.clone(), key);
        }
        drop(waiting);
        self.arrived.notify_one();
    }

    /// The policy is gone, or validated in order on the stream (a relist): nothing waiting for it
    /// is applied any more.
    fn cancel(&self, key: &PolicyKey) {
        let mut waiting = self.waiting.lock();
        waiting.newest.remove(key);
        waiting.taken.remove(key);
        if waiting.newest.is_empty() {
            waiting.newest.shrink_to(64);
        }
    }

    /// The next policy to validate, in turn by namespace, of a namespace whose pause after its
    /// last validation is over.
    async fn next(&self) -> Box<FailoverPolicy> {
        loop {
            let arrived = self.arrived.notified();
            let pause = {
                let mut waiting = self.waiting.lock();
                let now = Instant::now();
                let Waiting {
                    turns,
                    newest,
                    taken,
                    not_before,
                } = &mut *waiting;
                not_before.retain(|_, at| *at > now);
                while let Some(key) = turns.pop_where(|ns| !not_before.contains_key(ns)) {
                    if let Some(policy) = newest.remove(&key) {
                        taken.insert(key, policy.metadata.resource_version.clone());
                        return policy;
                    }
                }
                not_before.values().min().copied()
            };
            fair::until_arrived_or_due(arrived, pause).await;
        }
    }

    /// A policy of `namespace` was validated in `took`: the namespace's next validation waits
    /// [`VALIDATION_PAUSE`] times as long.
    fn validated(&self, namespace: &Namespace, took: Duration) {
        let pause = took * VALIDATION_PAUSE;
        if pause >= Duration::from_millis(1) {
            let mut waiting = self.waiting.lock();
            waiting
                .not_before
                .insert(namespace.clone(), Instant::now() + pause);
        }
    }

    /// Whether `policy`, just validated, is still what the table should take: the version taken,
    /// not cancelled since.
    fn finish(&self, key: &PolicyKey, policy: &FailoverPolicy) -> bool {
        let mut waiting = self.waiting.lock();
        let current = waiting.taken.get(key) == Some(&policy.metadata.resource_version);
        if current {
            waiting.taken.remove(key);
        }
        current
    }
}

/// Validates the policies waiting, one at a time, in turn by namespace, for as long as the
/// stage takes them.
async fn validate_in_turn(
    ctx: Arc<Context>,
    validations: Arc<Validations>,
    validated: mpsc::UnboundedSender<(Box<FailoverPolicy>, Validated)>,
) {
    loop {
        let policy = validations.next().await;
        let previous = ctx.caches.table.read().held_valid(&policy);
        let started = Instant::now();
        let valid = validation((*policy).clone(), previous).await;
        if let Some(key) = key_of(&policy) {
            validations.validated(&key.namespace, started.elapsed());
        }
        if validated.unbounded_send((policy, valid)).is_err() {
            return;
        }
    }
}

/// What validating one policy should cost at most: a query at every limit of
/// `failover_core::health_query` is checked and parsed well within it. Longer is logged, for the
/// limits' sake.
const VALIDATION_BUDGET: std::time::Duration = std::time::Duration::from_millis(100);

/// A policy as validated, taking over the query `previous` (its last valid generation) parsed
/// when its text is the same. A query to parse is parsed on a blocking thread (its regexes are
/// compiled, bounded by the limits of `failover_core::health_query` yet too long for the thread that
/// serves `/healthz` and renews the Lease); any other validation is cheap and runs here.
async fn validation(policy: FailoverPolicy, previous: Option<Arc<ValidPolicy>>) -> Validated {
    if !parses_query(&policy, previous.as_deref()) {
        return validated_after(&policy, previous.as_deref());
    }
    tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        let valid = validated_after(&policy, previous.as_deref());
        let took = started.elapsed();
        if took > VALIDATION_BUDGET {
            warn!(
                namespace = policy.namespace().unwrap_or_default(),
                policy = policy.name_any(),
                took_ms = took.as_millis() as u64,
                "validating a policy took longer than its budget"
            );
        }
        valid
    })
    .await
    .unwrap_or_else(|_| {
        Err(Arc::from([SpecProblem {
            field: "spec".into(),
            message: "could not be validated".into(),
        }]))
    })
}

/// Whether a change only delivers the status this replica wrote (its echo): the same policy,
/// its spec, generation and lifecycle as before, at the very version the status write was
/// acknowledged at (or, before its answer, the status being written). A reconcile reads nothing
/// else of a policy's object, and its last reconcile read that status already (as written), so
/// it would decide and write the same: none runs.
fn own_status(writer: &Writer, change: &TableChange) -> bool {
    let TableChange::Upserted {
        held,
        previous: Some(previous),
        revalidated: false,
        ..
    } = change
    else {
        return false;
    };
    let (now, before) = (&held.identity, &previous.identity);
    let same = now.uid == before.uid
        && now.generation == before.generation
        && now.created == before.created
        && now.lifecycle == before.lifecycle;
    if !same {
        return false;
    }
    let key = StatusKey::new(&held.key, &now.uid);
    // Acknowledged at this version; or being written, its answer not in yet.
    writer.recent_status.wrote(&key, now.version, |_| true)
        || held
            .last
            .as_ref()
            .is_some_and(|last| writer.statuses.pending_is(&key, |status| last.is(status)))
}

/// Brings the index, the claims, the remote watches, the health pollers and the metrics in
/// line with one change; the requests it makes (the policy, and the policies whose claim
/// changed hands).
fn follow(ctx: &Context, change: &TableChange) -> Vec<Request> {
    let caches = &ctx.caches;
    let requests: Vec<PolicyKey> = match change {
        TableChange::Upserted {
            held,
            previous,
            object,
            revalidated,
        } => {
            caches.index.write().update(
                &held.key,
                previous.as_ref().and_then(|p| p.spec.valid()).map(|v| &**v),
                held.spec.valid().map(|v| &**v),
            );
            if *revalidated {
                // A poller for a valid policy with a health query; a changed, invalid or
                // health-less one's stops.
                caches.health.follow(
                    held.key.clone(),
                    Some(object),
                    held.spec.valid().map(|v| &**v),
                );
            }
            // What a policy claims follows its spec: a new version of the same one (a status
            // write, an annotation) claims nothing new.
            let same = previous
                .as_ref()
                .is_some_and(|p| p.identity.uid == held.identity.uid);
            if *revalidated || !same {
                // Made under the table's lock, as a re-rank makes them.
                let mut table = caches.claims.write();
                let now = claims::claimant(held, object.status.as_ref(), &ctx.gateways());
                let handed = table.update(&held.key, Some(&now), seen_at());
                drop(table);
                std::iter::once(held.key.clone()).chain(handed).collect()
            } else {
                vec![held.key.clone()]
            }
        }
        TableChange::Deleted(held) => {
            caches
                .index
                .write()
                .update(&held.key, held.spec.valid().map(|v| &**v), None);
            let handed = caches.claims.write().update(&held.key, None, seen_at());
            caches.health.follow(held.key.clone(), None, None);
            ctx.metrics().forget_policy(&held.key);
            ctx.writer.notifier.forget(&held.key);
            handed
        }
        TableChange::Listed => {
            caches.claims.write().listed();
            return vec![Request::Listed];
        }
    };
    watch_remote(ctx);
    requests.into_iter().map(Request::One).collect()
}

/// Remote clusters watch exactly the namespaces policies read from; the cluster Secrets are
/// watched once any policy reads from a remote cluster.
fn watch_remote(ctx: &Context) {
    let wanted = ctx.caches.index.read().remote_namespaces();
    let remote = &ctx.caches.remote;
    remote.want(wanted, || {
        tokio::spawn(secrets::feed(
            ctx.client.clone(),
            remote.clone(),
            ctx.metrics().clone(),
        ));
    });
}

/// Now, in milliseconds: when the claims table saw a change.
fn seen_at() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
