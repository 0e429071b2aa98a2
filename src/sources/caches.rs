//! The read side: what the watches fill and the gather step reads. The policy table and the
//! index (fed by the policy watch), the readiness counts and the route views (this cluster's
//! watches), who routes each apex, which watches have listed, the APIs found missing, remote
//! clusters' readiness and the health readings. Each is written by its own watch and read under
//! its own lock. A reconcile writes two things here, each in one place (`tests/it/architecture.rs`
//! holds the pipeline to it): the APIs it found missing, from the driver's effects
//! (the controller's `World::learn`, in `pipeline::reconcile`), and a group's recorded choice (`pipeline::group`: a
//! compare-and-set, since a choice made from a stale one is made again).

use std::{sync::Arc, time::Duration};

use parking_lot::RwLock;

use failover_core::{labels::Selector, listeners::Listeners};

use crate::{
    runtime::metrics::Metrics,
    sources::{
        health::Health,
        local::{
            apis::Apis, claims::Claims, groups::GroupTable, index::PolicyIndex,
            policies::PolicyTable, readiness::ReadinessStore, routes::RouteStore,
            shard::ShardMoves, synced::Synced,
        },
        namespaces::Namespaces,
        remote::Clusters,
        scope::Scope,
    },
};
use failover_core::{apis::WatchKind, tenancy::Gateways};

/// How long a reconcile waits for the readiness caches before it gives up and retries.
const SYNC_WAIT: Duration = Duration::from_secs(10);

/// What the watches fill and the gather step reads.
pub struct Caches {
    /// Every policy, as the policy watch delivered it.
    pub table: RwLock<PolicyTable>,
    /// What each policy references, to wake it.
    pub index: RwLock<PolicyIndex>,
    /// The failover groups, who follows which, and each group's last choice.
    pub groups: RwLock<GroupTable>,
    /// Backend readiness, from the EndpointSlice and Service watches.
    pub readiness: RwLock<ReadinessStore>,
    /// Generated routes, from their watches.
    pub routes: RwLock<RouteStore>,
    /// Which policy routes each apex Service and Gateway listener.
    pub claims: RwLock<Claims>,
    /// What each Gateway's listeners admit, and the namespaces' labels they read: replaced
    /// whole by the Gateway and Namespace watches, shared with the reconciles reading it.
    pub listeners: RwLock<Arc<Listeners>>,
    /// Which watches have listed.
    pub synced: Synced,
    /// The APIs found missing.
    pub apis: Apis,
    /// Readiness read from other clusters, and their liveness.
    pub remote: Clusters,
    /// The readings of health queries.
    pub health: Health,
    /// The namespaces' names the caches' keys share.
    pub namespaces: Namespaces,
    /// Each time a namespace joins or leaves this controller's shard.
    pub shard_moves: ShardMoves,
}

impl Caches {
    /// Every cache empty, beside these remote clusters and health queries, for a controller
    /// that owns the namespaces `shard` selects (`None`: all); the missing APIs are counted in
    /// `metrics`.
    pub fn new(
        remote: Clusters,
        health: Health,
        metrics: Arc<Metrics>,
        shard: Option<Selector>,
    ) -> Self {
        let namespaces = Namespaces::default();
        Self {
            table: RwLock::new(PolicyTable::new(namespaces.clone())),
            index: RwLock::default(),
            groups: RwLock::new(GroupTable::new(namespaces.clone())),
            readiness: RwLock::new(ReadinessStore::new(namespaces.clone())),
            routes: RwLock::default(),
            claims: RwLock::default(),
            listeners: RwLock::new(Arc::new(Listeners::sharded(shard))),
            synced: Synced::default(),
            apis: Apis::new(metrics),
            remote,
            health,
            namespaces,
            shard_moves: ShardMoves::default(),
        }
    }

    /// Where policies' routes may attach now: the Gateways the admin allows (`scope`), with what
    /// their listeners admit as last seen.
    pub fn gateways(&self, scope: &Scope) -> Gateways {
        scope.gateways.with_listeners(self.listeners.read().clone())
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
