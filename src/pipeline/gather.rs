//! Step 4 of the pipeline: everything a decision reads, taken from the caches only (no API
//! call): each backend's observation (from its local Service, or from the remote cluster named
//! by its `readinessFrom`), the route as the cluster has it, and the previous status
//! (the one this replica wrote last when the policy cache has not caught up with it yet).

use kube::Resource;

use crate::{
    api::{FailoverPolicy, FailoverPolicyStatus},
    observation::{BackendObservation, PolicyKey},
    policy::ValidPolicy,
    route::RouteView,
    runtime::{gate::WriteGate, written::StatusKey},
    sources::Context,
};

/// What a decision reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Inputs {
    /// One observation per backend, primary first.
    pub observations: Vec<BackendObservation>,
    /// The route as the cluster has it, if it exists.
    pub route: Option<RouteView>,
}

/// Reads the inputs of a valid policy from the caches.
pub fn inputs(policy: &ValidPolicy, ctx: &Context) -> Inputs {
    let observations = {
        let readiness = ctx.readiness.read();
        policy
            .backends
            .iter()
            .map(|b| {
                let mut observation = match &b.remote {
                    Some(remote) => ctx.remote.observe(&policy.namespace, remote),
                    None => readiness.observe(&policy.namespace, &b.service),
                };
                if policy.health.is_some() {
                    let key = PolicyKey::new(&policy.namespace, &policy.name);
                    observation.health = ctx.health.reading(&key, &b.service);
                }
                observation
            })
            .collect()
    };
    let route = ctx
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
pub fn previous_status(policy: &FailoverPolicy, gate: &WriteGate) -> Option<FailoverPolicyStatus> {
    let key = StatusKey::of(policy);
    let cached = policy.meta().resource_version.as_deref();
    gate.statuses.pending(&key).or_else(|| {
        gate.recent_status
            .newer_than(&key, cached.and_then(|v| v.parse().ok()))
            .or_else(|| policy.status.clone())
    })
}
