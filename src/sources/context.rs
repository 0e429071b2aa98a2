//! What the watches run against, built once by the controller's wiring and shared by the
//! watches, the policy watch's queue and the admin server: the [`Caches`] the watches fill, the
//! [`Scope`] the cluster admin set, the [`Writer`] (the watches tell its memory of writes what
//! they saw), the client the watches read through, the metrics, and the work queue's [`Wake`].
//! A reconcile does not take it: it reads and writes its own parts
//! (`pipeline::reconcile::Reconciler`), and the status writer its writer and metrics.

use std::sync::Arc;

use kube::Client;
use tracing::{info, warn};

use crate::{
    runtime::{metrics::Metrics, writer::Writer},
    sources::{
        caches::Caches,
        scope::Scope,
        wake::Wake,
        watch::{WatchReport, describe, forbidden, not_found},
    },
};
use failover_core::{apis::WatchKind, tenancy::Gateways};

/// What the watches run against.
pub struct Context {
    /// What the watches fill and the gather step reads.
    pub caches: Caches,
    /// What the cluster admin set.
    pub scope: Scope,
    /// The only way to write: each write checked for leadership; the memory of writes.
    pub writer: Arc<Writer>,
    /// The client the watches list and watch through (reads only; the writer has its own).
    pub client: Client,
    /// The work queue's door: the policies woken.
    pub wake: Wake,
    /// The metrics registry.
    metrics: Arc<Metrics>,
}

impl Context {
    /// A context of these parts.
    pub fn new(
        caches: Caches,
        scope: Scope,
        writer: Arc<Writer>,
        client: Client,
        wake: Wake,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            caches,
            scope,
            writer,
            client,
            wake,
            metrics,
        }
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Where policies' routes may attach now: the Gateways the admin allows, with what their
    /// listeners admit as last seen.
    pub fn gateways(&self) -> Gateways {
        self.caches.gateways(&self.scope)
    }
}

/// The local cluster's watches report here: first lists in the caches' `synced`, missing CRDs in
/// their `apis`, errors in the metrics and the log.
impl WatchReport for Context {
    fn starting(&self, kind: WatchKind) {
        self.caches.synced.expect(kind);
    }

    fn listed(&self, kind: WatchKind) {
        if self.caches.synced.done(kind) {
            info!(%kind, "first list received");
        }
        if let Some(api) = kind.api() {
            self.caches.apis.present(api);
        }
    }

    fn failed(&self, kind: WatchKind, error: &kube::runtime::watcher::Error) {
        self.metrics().watch_restart(kind);
        if WatchKind::ADMISSION.contains(&kind) && (not_found(error) || forbidden(error)) {
            // No Gateway API, or no right to read it: nothing to list, and the listeners of a
            // Gateway not seen are not judged (the Gateway answers in the route's status).
            if self.caches.synced.done(kind) {
                let why = match not_found(error) {
                    true => "not served by the API server",
                    false => "not granted to the controller",
                };
                info!(%kind, "{why}; Gateways' listeners are not judged");
            }
            return;
        }
        match kind.api().filter(|_| not_found(error)) {
            Some(api) => self.caches.apis.missing(api),
            None => warn!(%kind, error = %describe(error), "watch failed; retrying"),
        }
    }
}
