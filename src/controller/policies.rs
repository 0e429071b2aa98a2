//! The policy watch: every FailoverPolicy into the runner's store and the index, and what each
//! policy asks of the sources (the remote namespaces it reads, its health queries, as the
//! validate step makes them).

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::{
    Client, ResourceExt,
    runtime::{WatchStreamExt, reflector, watcher},
};
use parking_lot::RwLock;

use crate::{
    api::FailoverPolicy,
    observation::PolicyKey,
    pipeline::validate::validate,
    runtime::{
        gate::WriteGate,
        policy_metrics::PolicyLabels,
        written::{Watermark, event_version},
    },
    sources::{
        Caches,
        health::Health,
        local::index::PolicyIndex,
        remote::secrets,
        watch::{WatchContext, events, scoped, slim},
    },
};

/// Policies → the controller's store, and the Service and route index.
pub fn policy_stream(
    client: &Client,
    ns: Option<&str>,
    index: Arc<RwLock<PolicyIndex>>,
    caches: &Caches,
    watch: &WatchContext,
    gate: Arc<WriteGate>,
) -> (
    impl Stream<Item = Result<FailoverPolicy, watcher::Error>> + Send + 'static + use<>,
    reflector::Store<FailoverPolicy>,
) {
    let (store, store_writer) = reflector::store::<FailoverPolicy>();
    let metrics = watch.metrics.clone();
    let (remote, health) = (caches.remote.clone(), caches.health.clone());
    let client = client.clone();
    let events = events(
        scoped(&client, ns),
        "failoverpolicy",
        Default::default(),
        Arc::new(watch.clone()),
    )
    .map(|event| Ok(event.modify(slim::<FailoverPolicy>)));
    let mut watermark = Watermark::default();
    let stream = reflector::reflector(store_writer, events)
        .inspect(move |event| {
            if let Ok(event) = event {
                // Statuses this replica wrote are forgotten once the store shows them.
                if let Some(version) = watermark.after(event, event_version(event)) {
                    gate.recent_status.seen_through("", version);
                }
                index.write().apply_event(event);
                // Remote clusters watch exactly the namespaces policies read from; the cluster
                // Secrets are watched once any policy reads from a remote cluster.
                let wanted = index.read().remote_namespaces();
                remote.want(wanted, || {
                    tokio::spawn(secrets::feed(
                        client.clone(),
                        remote.clone(),
                        metrics.clone(),
                    ));
                });
                follow_health(&health, event);
                if let watcher::Event::Delete(p) = event {
                    metrics.forget_policy(&PolicyLabels {
                        namespace: p.namespace().unwrap_or_default(),
                        policy: p.name_any(),
                    });
                }
            }
        })
        .applied_objects();
    (stream, store)
}

/// Each valid policy with a health query gets a poller; a changed, invalid or deleted policy's
/// follows. The poller gets the policy as the validate step makes it.
fn follow_health(health: &Health, event: &watcher::Event<FailoverPolicy>) {
    let key =
        |p: &FailoverPolicy| PolicyKey::new(&p.namespace().unwrap_or_default(), &p.name_any());
    match event {
        watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
            let valid = p.spec.health.as_ref().and_then(|_| validate(p).ok());
            health.follow(key(p), Some(p), valid.as_ref());
        }
        watcher::Event::Delete(p) => health.follow(key(p), None, None),
        watcher::Event::Init | watcher::Event::InitDone => {}
    }
}
