//! The policy watch: every FailoverPolicy into the policy table and the index, and what each
//! policy asks of the sources (the remote namespaces it reads, its health queries, as the
//! validate step makes them).

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::Client;
use parking_lot::RwLock;

use super::runner::Request;
use crate::{
    api::FailoverPolicy,
    pipeline::validate::validate,
    runtime::{
        gate::WriteGate,
        policy_metrics::PolicyLabels,
        written::{Watermark, event_version},
    },
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
        "failoverpolicy",
        Default::default(),
        Arc::new(feed.watch.clone()),
    );
    let mut watermark = Watermark::default();
    events.flat_map(move |event| {
        let event = event.modify(slim::<FailoverPolicy>);
        // Statuses this replica wrote are forgotten once the table has them.
        let seen = watermark.after(&event, event_version(&event));
        let changes = feed.table.write().apply(event);
        if let Some(version) = seen {
            feed.gate.recent_status.seen_through("", version);
        }
        let requests: Vec<Request> = changes
            .iter()
            .filter_map(|c| follow(&feed, &client, c))
            .collect();
        futures::stream::iter(requests)
    })
}

/// Brings the index, the remote watches, the health pollers and the metrics in line with one
/// change; the request it makes, if any.
fn follow(feed: &PolicyFeed, client: &Client, change: &Change) -> Option<Request> {
    let request = match change {
        Change::Applied { policy, previous } => {
            feed.index.write().upsert(previous.as_deref(), policy);
            follow_health(&feed.caches.health, policy);
            Some(Request::One(key_of(policy)?))
        }
        Change::Deleted(policy) => {
            feed.index.write().remove(policy);
            let key = key_of(policy)?;
            feed.caches.health.follow(key.clone(), None, None);
            feed.watch.metrics.forget_policy(&PolicyLabels {
                namespace: key.namespace.to_string(),
                policy: key.name.into(),
            });
            None
        }
        Change::Listed => Some(Request::Listed),
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
    request
}

/// Each valid policy with a health query gets a poller; a changed, invalid or deleted policy's
/// follows. The poller gets the policy as the validate step makes it.
fn follow_health(health: &Health, policy: &FailoverPolicy) {
    let Some(key) = key_of(policy) else { return };
    let valid = policy
        .spec
        .health
        .as_ref()
        .and_then(|_| validate(policy).ok());
    health.follow(key, Some(policy), valid.as_ref());
}
