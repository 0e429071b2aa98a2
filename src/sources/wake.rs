//! Which policies an observed change wakes: the index answers, the Controller's queue gets them.
//! A readiness change wakes the policies naming the Service, a route change the policy whose
//! route it is, a remote cluster's change the policies reading from it.

use std::sync::Arc;

use futures::channel::mpsc;
use parking_lot::RwLock;
use tracing::debug;

use crate::{
    observation::{PolicyKey, RemoteService, ServiceKey},
    route::RouteKey,
    sources::{local::index::PolicyIndex, remote::cluster::RemoteChange},
};

/// Wakes the policies that reference what changed.
#[derive(Clone)]
pub struct Wake {
    /// The index of what policies reference.
    pub index: Arc<RwLock<PolicyIndex>>,
    /// The Controller's queue.
    pub queue: mpsc::UnboundedSender<PolicyKey>,
}

impl Wake {
    /// Queues these policies.
    pub fn policies(&self, policies: Vec<PolicyKey>) {
        for p in policies {
            let _ = self.queue.unbounded_send(p);
        }
    }

    /// Queues the policies naming these Services.
    pub fn services(&self, changed: Vec<ServiceKey>) {
        if changed.is_empty() {
            return;
        }
        debug!(services = changed.len(), "readiness changed");
        let policies: Vec<PolicyKey> = {
            let index = self.index.read();
            changed
                .iter()
                .flat_map(|s| index.policies_for_service(s))
                .collect()
        };
        self.policies(policies);
    }

    /// Queues the policies a remote cluster's change concerns.
    pub fn remote(&self, change: RemoteChange) {
        let policies: Vec<PolicyKey> = {
            let index = self.index.read();
            match change {
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
            }
        };
        self.policies(policies);
    }

    /// Queues the policies whose routes these are.
    pub fn routes(&self, changed: Vec<RouteKey>) {
        let policies: Vec<PolicyKey> = {
            let index = self.index.read();
            changed
                .iter()
                .flat_map(|r| index.policies_for_route(r))
                .collect()
        };
        self.policies(policies);
    }
}
