//! Step 4 of the pipeline: everything a decision reads, taken from the caches only (no API
//! call): each backend's observation (from its local Service, or from the remote cluster named
//! by its `readinessFrom`), the route as the cluster has it, and the previous status
//! (the one this replica wrote last when the policy cache has not caught up with it yet).

use std::{sync::Arc, time::Duration};

use kube::{Resource, ResourceExt};
use parking_lot::RwLock;

use crate::{
    api::{FailoverPolicy, FailoverPolicyStatus},
    health::Health,
    observe::index::PolicyKey,
    observe::{
        readiness::{BackendObservation, ReadinessStore},
        routes::RouteStore,
        synced::Synced,
    },
    remote::Clusters,
    route::RouteView,
    validate::ValidPolicy,
    writer::Writer,
};

/// Watch kinds a decision needs listed before it can trust the caches.
pub const DECISION_INPUTS: [&str; 2] = ["endpointslice", "service"];
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
        }
    }
}

impl Caches {
    /// Waits until the readiness caches have listed; `false` after [`SYNC_WAIT`].
    pub async fn wait_for_inputs(&self) -> bool {
        self.synced.wait_for(&DECISION_INPUTS, SYNC_WAIT).await
    }
}

/// What a decision reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Inputs {
    /// One observation per backend, primary first.
    pub observations: Vec<BackendObservation>,
    /// The route as the cluster has it, if it exists.
    pub route: Option<RouteView>,
}

/// Reads the inputs of a valid policy from the caches.
pub fn inputs(policy: &ValidPolicy, caches: &Caches) -> Inputs {
    let observations = {
        let readiness = caches.readiness.read();
        policy
            .backends
            .iter()
            .map(|b| {
                let mut observation = match &b.remote {
                    Some(remote) => caches.remote.observe(remote),
                    None => readiness.observe(&policy.namespace, &b.service),
                };
                if policy.health.is_some() {
                    let key = PolicyKey::new(&policy.namespace, &policy.name);
                    observation.health = caches.health.reading(&key, &b.service);
                }
                observation
            })
            .collect()
    };
    let route = caches
        .routes
        .read()
        .get(&policy.route.key(&policy.namespace))
        .cloned();
    Inputs {
        observations,
        route,
    }
}

/// The status the policy has: the one this replica queued and has not written yet, else the one
/// it wrote last while the cache is older, else the cached one.
pub fn previous_status(policy: &FailoverPolicy, writer: &Writer) -> Option<FailoverPolicyStatus> {
    let key = status_key(policy);
    writer.statuses.pending(&key).or_else(|| {
        writer
            .recent_status
            .newer_than(&key, policy.meta().resource_version.as_deref())
            .or_else(|| policy.status.clone())
    })
}

/// The key under which a policy's written status is remembered.
pub fn status_key(policy: &FailoverPolicy) -> String {
    format!(
        "{}/{}/{}",
        policy.namespace().unwrap_or_default(),
        policy.name_any(),
        policy.uid().unwrap_or_default()
    )
}
