//! Which policies an observed change wakes: the index answers, the work queue gets them through
//! its door ([`Wake`]). A readiness change wakes the policies naming the Service, a route change
//! the policy whose route it is, a remote cluster's change the policies reading from it.

use futures::channel::mpsc;
use tracing::debug;

use crate::sources::{Context, local::index::PolicyIndex, remote::cluster::RemoteChange};
use failover_core::{
    backend::BackendKey,
    observation::{PolicyKey, RemoteService},
    route::RouteKey,
};

/// The work queue's door: what wakes a policy sends it here.
pub struct Wake(mpsc::UnboundedSender<PolicyKey>);

impl Wake {
    /// A door into the work queue that `queue` feeds.
    pub fn new(queue: mpsc::UnboundedSender<PolicyKey>) -> Self {
        Self(queue)
    }

    /// Queues these policies.
    pub fn policies(&self, policies: impl IntoIterator<Item = PolicyKey>) {
        for p in policies {
            // The receiver lives as long as the controller; after it, nothing runs anyway.
            let _ = self.0.unbounded_send(p);
        }
    }
}

impl Context {
    /// Queues the policies naming these backends.
    pub fn wake_for_services(&self, changed: Vec<BackendKey>) {
        if changed.is_empty() {
            return;
        }
        debug!(services = changed.len(), "readiness changed");
        self.wake_from_index(|index| {
            changed
                .iter()
                .flat_map(|s| index.policies_for_service(s))
                .collect()
        });
    }

    /// Queues the policies a remote cluster's change concerns.
    pub fn wake_for_remote(&self, change: RemoteChange) {
        self.wake_from_index(|index| match change {
            RemoteChange::Cluster(cluster) => index.policies_for_cluster(&cluster),
            RemoteChange::Services(cluster, services) => services
                .into_iter()
                .flat_map(|s| {
                    index.policies_for_remote(&RemoteService {
                        cluster: cluster.clone(),
                        namespace: s.namespace.to_string(),
                        service: s.name.into(),
                    })
                })
                .collect(),
        });
    }

    /// Queues the policies whose routes these are.
    pub fn wake_for_routes(&self, changed: Vec<RouteKey>) {
        self.wake_from_index(|index| {
            changed
                .iter()
                .flat_map(|r| index.policies_for_route(r))
                .collect()
        });
    }

    /// Queues the policies the index finds (read under its lock, queued after it).
    fn wake_from_index(&self, find: impl FnOnce(&PolicyIndex) -> Vec<PolicyKey>) {
        let policies = find(&self.caches.index.read());
        self.wake.policies(policies);
    }
}
