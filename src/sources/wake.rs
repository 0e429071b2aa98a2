//! Which policies an observed change wakes: the index answers, the Controller's queue gets them.
//! A readiness change wakes the policies naming the Service, a route change the policy whose
//! route it is, a remote cluster's change the policies reading from it.

use tracing::debug;

use crate::{
    observation::{PolicyKey, RemoteService, ServiceKey},
    route::RouteKey,
    sources::{Context, remote::cluster::RemoteChange},
};

impl Context {
    /// Queues the policies naming these Services.
    pub fn wake_for_services(&self, changed: Vec<ServiceKey>) {
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
        self.wake(policies);
    }

    /// Queues the policies a remote cluster's change concerns.
    pub fn wake_for_remote(&self, change: RemoteChange) {
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
        self.wake(policies);
    }

    /// Queues the policies whose routes these are.
    pub fn wake_for_routes(&self, changed: Vec<RouteKey>) {
        let policies: Vec<PolicyKey> = {
            let index = self.index.read();
            changed
                .iter()
                .flat_map(|r| index.policies_for_route(r))
                .collect()
        };
        self.wake(policies);
    }
}
