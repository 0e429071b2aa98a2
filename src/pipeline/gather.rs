//! The gather stage of the pipeline: everything a decision reads, taken from the caches only (no API
//! call): each backend's observation (from its own readiness source, or from the remote cluster named
//! by its `readinessFrom`), the route as the cluster has it, and the previous status
//! (the one this replica wrote last when the policy cache has not caught up with it yet).

use crate::{
    runtime::{
        writer::Writer,
        written::{StatusKey, WrittenStatus},
    },
    sources::{
        Caches,
        local::policies::{Invalid, PolicyEntry},
    },
};
use failover_core::{
    api::FailoverPolicyStatus, last_status::LastStatus, observation::PolicyKey,
    policy::ValidPolicy, reconcile::Inputs,
};

/// Reads the inputs of a valid policy from the caches; its route as this replica last wrote it
/// while the cache has not caught up with that write (its echo wakes nobody, so the status that
/// describes the route as it stands reads the write, not the version before it).
pub fn inputs(policy: &ValidPolicy, caches: &Caches, writer: &Writer) -> Inputs {
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
    let key = policy.route.key(&policy.namespace);
    let route = caches.routes.read().get(&key).cloned().map(|mut view| {
        // A route the user owns is written rule by rule: its view's rules are not the write's.
        if policy.route.referenced().is_none()
            && let Some(written) = writer.recent_routes.newer_than(&key, view.resource_version)
        {
            view.rules = Some(written);
        }
        view
    });
    Inputs {
        observations,
        route,
    }
}

/// The status a policy has, as the decide and status stages read it: the one this replica queued
/// and has not written yet, else the one it wrote last while the cache is older, else the one the
/// table holds.
pub fn previous_status(policy: &PolicyEntry, writer: &Writer) -> Option<LastStatus> {
    let key = StatusKey::new(&policy.key, &policy.identity.uid);
    if let Some(status) = writer.statuses.pending(&key) {
        return Some(LastStatus::of(&status));
    }
    match writer
        .recent_status
        .newer_than(&key, policy.identity.version)
    {
        Some(WrittenStatus::Whole(status)) => Some(LastStatus::of(&status)),
        Some(WrittenStatus::Compact(last)) => Some(last),
        None => policy.last.clone(),
    }
}

/// The status an invalid policy keeps, whole (its status stage starts from it), read in the same
/// order as [`previous_status`]: queued, else written and newer than the cache, else cached.
pub fn kept_status(
    policy: &PolicyEntry,
    invalid: &Invalid,
    writer: &Writer,
) -> Option<Box<FailoverPolicyStatus>> {
    let key = StatusKey::new(&policy.key, &policy.identity.uid);
    if let Some(status) = writer.statuses.pending(&key) {
        return Some(Box::new(status));
    }
    match writer
        .recent_status
        .newer_than(&key, policy.identity.version)
    {
        Some(WrittenStatus::Whole(status)) => Some(status),
        // Written when the policy was valid: an invalid one keeps the status the cache has.
        Some(WrittenStatus::Compact(_)) | None => invalid.status.clone().map(Box::new),
    }
}
