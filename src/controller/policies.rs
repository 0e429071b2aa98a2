//! The policy watch: every FailoverPolicy into the policy table and the index, and what each
//! policy asks of the sources (the remote namespaces it reads, its health queries, as the
//! validate step makes them).

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::{Client, ResourceExt, runtime::watcher};
use parking_lot::RwLock;
use tracing::warn;

use super::runner::Request;
use crate::{
    api::FailoverPolicy,
    apis::WatchKind,
    observation::PolicyKey,
    policy::{SpecProblem, Validated},
    runtime::{gate::WriteGate, heap, policy_metrics::PolicyLabels},
    sources::{
        Caches,
        health::Health,
        local::{
            index::PolicyIndex,
            policies::{Change, PolicyTable, key_of},
        },
        remote::secrets,
        watch::{WatchContext, events, scoped, slim},
    },
    validate::validated,
};

/// What the policy watch feeds.
pub struct PolicyFeed {
    /// The policy table.
    pub table: Arc<RwLock<PolicyTable>>,
    /// The index of what policies reference.
    pub index: Arc<RwLock<PolicyIndex>>,
    /// The sources a policy asks things of.
    pub caches: Caches,
    /// What every watch reports to.
    pub watch: WatchContext,
    /// What this replica wrote: statuses are forgotten once the watch shows them.
    pub gate: Arc<WriteGate>,
}

/// Policies → the table and the index; out come the policies to reconcile (each new or changed
/// one), and word that a complete list is in the table.
pub fn policy_requests(
    client: &Client,
    ns: Option<&str>,
    feed: PolicyFeed,
) -> impl Stream<Item = Request> + Send + 'static + use<> {
    let client = client.clone();
    let events = events(
        scoped(&client, ns),
        WatchKind::FailoverPolicy,
        Default::default(),
        Arc::new(feed.watch.clone()),
    );
    let table = feed.table.clone();
    events
        .map(|event| event.modify(slim::<FailoverPolicy>))
        .then(move |event| validation(table.clone(), event))
        .flat_map(move |(event, fresh)| {
            let (changes, seen) = feed.table.write().apply(event, fresh);
            // Statuses this replica wrote are forgotten once the table has them.
            if let Some(version) = seen {
                feed.gate.recent_status.seen_through(version, |_| true);
            }
            let requests: Vec<Request> = changes
                .iter()
                .flat_map(|c| follow(&feed, &client, c))
                .collect();
            futures::stream::iter(requests)
        })
}

/// What validating one policy should cost at most: a query at every limit of
/// `crate::health_query` is checked and parsed well within it. Longer is logged, for the
/// limits' sake.
const VALIDATION_BUDGET: std::time::Duration = std::time::Duration::from_millis(100);

/// The event, and its policy as validated when it has a health query and the table holds no
/// validation of its generation: on a blocking thread, one at a time, as its query's regexes
/// are compiled (within the limits of `crate::health_query`, a few milliseconds each), never on
/// the thread that serves `/healthz` and renews the Lease.
async fn validation(
    table: Arc<RwLock<PolicyTable>>,
    event: watcher::Event<FailoverPolicy>,
) -> (watcher::Event<FailoverPolicy>, Option<Validated>) {
    static ONE_AT_A_TIME: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);
    let policy = match &event {
        watcher::Event::Apply(p) | watcher::Event::InitApply(p) => p,
        _ => return (event, None),
    };
    if !table.read().needs_validation(policy) {
        return (event, None);
    }
    let _turn = ONE_AT_A_TIME.acquire().await;
    let copy = policy.clone();
    let fresh = tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        let valid = validated(&copy);
        let took = started.elapsed();
        if took > VALIDATION_BUDGET {
            warn!(
                namespace = copy.namespace().unwrap_or_default(),
                policy = copy.name_any(),
                took_ms = took.as_millis() as u64,
                "validating a policy took longer than its budget"
            );
        }
        // What compiling the query's regexes freed stays in this thread's arena otherwise.
        heap::trim();
        valid
    })
    .await
    .unwrap_or_else(|_| {
        Err(Arc::from([SpecProblem {
            field: "spec".into(),
            message: "could not be validated".into(),
        }]))
    });
    (event, Some(fresh))
}

/// Brings the index, the claims, the remote watches, the health pollers and the metrics in
/// line with one change; the requests it makes (the policy, and the policies whose claim
/// changed hands).
fn follow(feed: &PolicyFeed, client: &Client, change: &Change) -> Vec<Request> {
    let requests: Vec<PolicyKey> = match change {
        Change::Applied {
            policy,
            previous,
            revalidated,
        } => {
            feed.index.write().upsert(previous.as_deref(), policy);
            let had_health = previous.as_ref().is_some_and(|p| p.spec.health.is_some());
            match revalidated {
                Some(valid) => follow_health(&feed.caches.health, policy, valid),
                // A health query removed: its poller stops.
                None if had_health && policy.spec.health.is_none() => {
                    if let Some(key) = key_of(policy) {
                        feed.caches.health.follow(key, Some(policy), None);
                    }
                }
                None => {}
            }
            let handed = feed
                .caches
                .claims
                .write()
                .upsert(previous.as_deref(), policy);
            key_of(policy).into_iter().chain(handed).collect()
        }
        Change::Deleted(policy) => {
            feed.index.write().remove(policy);
            let handed = feed.caches.claims.write().remove(policy);
            if let Some(key) = key_of(policy) {
                feed.caches.health.follow(key.clone(), None, None);
                feed.watch.metrics.forget_policy(&PolicyLabels {
                    namespace: key.namespace.to_string(),
                    policy: key.name.into(),
                });
            }
            handed
        }
        Change::Listed => return vec![Request::Listed],
    };
    // Remote clusters watch exactly the namespaces policies read from; the cluster Secrets are
    // watched once any policy reads from a remote cluster.
    let wanted = feed.index.read().remote_namespaces();
    let remote = &feed.caches.remote;
    remote.want(wanted, || {
        tokio::spawn(secrets::feed(
            client.clone(),
            remote.clone(),
            feed.watch.metrics.clone(),
        ));
    });
    requests.into_iter().map(Request::One).collect()
}

/// Each valid policy with a health query gets a poller; a changed, invalid or deleted policy's
/// follows. The poller gets the policy as the validate step made it.
fn follow_health(health: &Health, policy: &FailoverPolicy, valid: &Validated) {
    let Some(key) = key_of(policy) else { return };
    let valid = valid.as_deref().ok().filter(|v| v.health.is_some());
    health.follow(key, Some(policy), valid);
}
