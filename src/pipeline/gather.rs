//! Step 4 of the pipeline: everything a decision reads, taken from the caches only (no API
//! call): each backend's observation (from its own readiness source, or from the remote cluster named
//! by its `readinessFrom`), the route as the cluster has it, and the previous status
//! (the one this replica wrote last when the policy cache has not caught up with it yet).

use crate::{
    api::FailoverPolicyStatus,
    last_status::LastStatus,
    observation::{BackendObservation, PolicyKey},
    policy::ValidPolicy,
    route::RouteView,
    runtime::{
        writer::Writer,
        written::{StatusKey, WrittenStatus},
    },
    sources::{
        Caches,
        local::policies::{PolicyEntry, Spec},
    },
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
pub fn inputs(policy: &ValidPolicy, caches: &Caches) -> Inputs {
    let observations = {
        let readiness = caches.readiness.read();
        policy
            .backends
            .iter()
            .map(|b| {
                let mut observation = match &b.remote {
                    Some(remote) => caches.remote.observe(&policy.namespace, remote),
                    None => readiness.observe(&b.reference.key(&policy.namespace)),
                };
                if policy.health.is_some() {
                    let key = PolicyKey::new(&policy.namespace, &policy.name);
                    observation.health = caches.health.reading(&key, &b.reference.name);
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

/// The status a policy has, as the decide and status steps read it.
#[derive(Clone, Debug, Default)]
pub struct PreviousStatus {
    /// Compact: what the decide step and the conditions read.
    pub last: Option<LastStatus>,
    /// Whole, for an invalid policy only: its status step keeps it.
    pub whole: Option<FailoverPolicyStatus>,
}

/// The status the policy has: the one this replica queued and has not written yet, else the one
/// it wrote last while the cache is older, else the one the table holds.
pub fn previous_status(policy: &PolicyEntry, writer: &Writer) -> PreviousStatus {
    let key = StatusKey::new(&policy.key, &policy.identity.uid);
    let invalid = match &policy.spec {
        Spec::Valid(_) => None,
        Spec::Invalid(invalid) => Some(invalid),
    };
    if let Some(status) = writer.statuses.pending(&key) {
        return PreviousStatus {
            last: Some(LastStatus::of(&status)),
            whole: invalid.map(|_| status),
        };
    }
    let cached = || invalid.and_then(|i| i.status.clone());
    match writer
        .recent_status
        .newer_than(&key, policy.identity.version)
    {
        Some(WrittenStatus::Whole(status)) => PreviousStatus {
            last: Some(LastStatus::of(&status)),
            whole: invalid.map(|_| *status),
        },
        // Written when the policy was valid: an invalid one keeps the status the cache has.
        Some(WrittenStatus::Compact(last)) => PreviousStatus {
            last: Some(last),
            whole: cached(),
        },
        None => PreviousStatus {
            last: policy.last.clone(),
            whole: cached(),
        },
    }
}
