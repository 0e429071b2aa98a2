//! What every step runs against, built once by the controller's wiring and shared by the
//! watches, the work queue, the reconciles, the status writer and the admin server: the door for
//! writes, the policy table and the index, each source's cache, what the watches found, and the
//! work queue's door.

use std::{sync::Arc, time::Duration};

use futures::channel::mpsc;
use kube::Client;
use parking_lot::RwLock;
use tracing::{info, warn};

use crate::{
    apis::WatchKind,
    observation::PolicyKey,
    runtime::{metrics::Metrics, writer::Writer},
    sources::{
        health::Health,
        local::{
            apis::Apis, claims::Claims, index::PolicyIndex, policies::PolicyTable,
            readiness::ReadinessStore, routes::RouteStore, synced::Synced,
        },
        remote::Clusters,
        watch::{Report, describe, not_found},
    },
    tenancy::Gateways,
};

/// How long a reconcile waits for the readiness caches before it gives up and retries.
const SYNC_WAIT: Duration = Duration::from_secs(10);

/// What every step runs against.
pub struct Context {
    /// The only way to write: each write checked for leadership; the memory of writes.
    pub writer: Writer,
    /// The client the watches list and watch through (reads only; the writer has its own).
    pub client: Client,
    /// The metrics registry.
    metrics: Arc<Metrics>,
    /// Watch only this namespace; all namespaces when `None`.
    pub namespace: Option<String>,
    /// Every policy, as the policy watch delivered it.
    pub table: RwLock<PolicyTable>,
    /// What each policy references, to wake it.
    pub index: RwLock<PolicyIndex>,
    /// Backend readiness, from the EndpointSlice and Service watches.
    pub readiness: RwLock<ReadinessStore>,
    /// Generated routes, from their watches.
    pub routes: RwLock<RouteStore>,
    /// Which policy routes each apex Service and Gateway listener.
    pub claims: RwLock<Claims>,
    /// Which watches have listed.
    pub synced: Synced,
    /// The APIs found missing.
    pub apis: Apis,
    /// Readiness read from other clusters, and their liveness.
    pub remote: Clusters,
    /// The readings of health queries.
    pub health: Health,
    /// The Gateways of other namespaces that routes may attach to.
    pub gateways: Gateways,
    /// Whether policies may scale their secondaries' workloads.
    pub allow_scaling: bool,
    /// The work queue's door: the policies woken.
    queue: mpsc::UnboundedSender<PolicyKey>,
}

/// The parts a [`Context`] is built from; the rest starts empty.
pub struct Parts {
    /// The only way to write.
    pub writer: Writer,
    /// The client of the watches.
    pub client: Client,
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    /// The namespace watched (all when `None`).
    pub namespace: Option<String>,
    /// Remote clusters.
    pub remote: Clusters,
    /// Health queries.
    pub health: Health,
    /// The Gateways of other namespaces that routes may attach to.
    pub gateways: Gateways,
    /// Whether policies may scale their secondaries' workloads.
    pub allow_scaling: bool,
    /// The work queue's door.
    pub queue: mpsc::UnboundedSender<PolicyKey>,
}

impl Context {
    /// A context of these parts, every cache empty.
    pub fn new(parts: Parts) -> Self {
        let apis = Apis::new(parts.metrics.clone());
        Self {
            writer: parts.writer,
            client: parts.client,
            metrics: parts.metrics,
            namespace: parts.namespace,
            table: RwLock::default(),
            index: RwLock::default(),
            readiness: RwLock::default(),
            routes: RwLock::default(),
            claims: RwLock::default(),
            synced: Synced::default(),
            apis,
            remote: parts.remote,
            health: parts.health,
            gateways: parts.gateways,
            allow_scaling: parts.allow_scaling,
            queue: parts.queue,
        }
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Queues these policies.
    pub fn wake(&self, policies: impl IntoIterator<Item = PolicyKey>) {
        for p in policies {
            // The receiver lives as long as the controller; after it, nothing runs anyway.
            let _ = self.queue.unbounded_send(p);
        }
    }

    /// Waits until the readiness caches have listed; `false` after [`SYNC_WAIT`].
    pub async fn wait_for_inputs(&self) -> bool {
        self.synced
            .wait_for(&WatchKind::DECISION_INPUTS, SYNC_WAIT)
            .await
    }

    /// Whether the readiness caches have listed once. Until then no reconcile can decide (each
    /// waits for them), so a readiness change has nobody to wake.
    pub fn inputs_listed(&self) -> bool {
        self.synced.all_done(&WatchKind::DECISION_INPUTS)
    }
}

/// The local cluster's watches report here: first lists in [`Synced`], missing CRDs in
/// [`Apis`], errors in the metrics and the log.
impl Report for Context {
    fn starting(&self, kind: WatchKind) {
        self.synced.expect(kind);
    }

    fn listed(&self, kind: WatchKind) {
        if self.synced.done(kind) {
            info!(%kind, "first list received");
        }
        if let Some(api) = kind.api() {
            self.apis.present(api);
        }
    }

    fn failed(&self, kind: WatchKind, error: &kube::runtime::watcher::Error) {
        self.metrics().watch_restart(kind);
        match kind.api().filter(|_| not_found(error)) {
            Some(api) => self.apis.missing(api),
            None => warn!(%kind, error = %describe(error), "watch failed; retrying"),
        }
    }
}
