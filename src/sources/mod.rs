//! What feeds the decision, each source keeping small facts and waking the policies a change
//! concerns: the list-and-watch helper every watch goes through ([`watch`]), the one store every
//! watched kind is kept in ([`store`]), the local caches and the index fed by this cluster's
//! watches ([`local`]), readiness read from other clusters
//! ([`remote`]), Prometheus health queries ([`health`]), and the wake-ups ([`wake`]).
//! [`Caches`] is what the gather step reads.

pub mod health;
pub mod local;
pub mod remote;
pub mod store;
pub mod wake;
pub mod watch;

use std::{sync::Arc, time::Duration};

use parking_lot::RwLock;

use crate::apis::WatchKind;

use self::{
    health::Health,
    local::{claims::Claims, readiness::ReadinessStore, routes::RouteStore, synced::Synced},
    remote::Clusters,
};

/// How long a reconcile waits for those caches before it gives up and retries.
const SYNC_WAIT: Duration = Duration::from_secs(10);

/// The caches the pipeline reads.
#[derive(Clone)]
pub struct Caches {
    /// Backend readiness, from the EndpointSlice and Service watches.
    pub readiness: Arc<RwLock<ReadinessStore>>,
    /// Generated routes, from their watches.
    pub routes: Arc<RwLock<RouteStore>>,
    /// Which watches have listed.
    pub synced: Synced,
    /// Readiness read from other clusters, and their liveness.
    pub remote: Clusters,
    /// The readings of health queries.
    pub health: Health,
    /// Which policy routes each apex Service and Gateway listener.
    pub claims: Arc<RwLock<Claims>>,
}

impl Caches {
    /// Empty caches; remote readiness comes from these clusters, health readings from `health`.
    pub fn new(remote: Clusters, health: Health) -> Self {
        Self {
            readiness: Arc::default(),
            routes: Arc::default(),
            synced: Synced::default(),
            remote,
            health,
            claims: Arc::default(),
        }
    }
}

impl Caches {
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
