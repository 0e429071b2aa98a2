//! The status writer: what the status step built is queued, newest per policy, and written in
//! the background, so the next reconcile of a policy never waits for its previous status write.
//! Without it, a readiness change that follows another one closely (a flap, a failback right
//! after a failover) waited for the previous reconcile's status write before its route was
//! written (see docs/benchmarks.md for what this bought).
//!
//! - The route is written before its status is queued, so a status never reports a route that
//!   is not in place.
//! - While a status waits or is being written, the gather step reads it as the policy's previous
//!   status ([`Statuses::pending`]): decisions never go back to an older one.
//! - Only the newest status of a policy is written; one write per policy is in flight at a time.
//! - A failed write is retried with backoff (200 ms doubling to 10 s); a policy that is gone or
//!   a namespace being deleted drops it; a replica that lost leadership drops everything queued
//!   (the new leader decides again).
//! - On shutdown, what is queued is written within the shutdown grace period.

use std::{collections::HashMap, sync::Arc, time::Duration};

use backon::{BackoffBuilder, ExponentialBuilder};
use futures::{StreamExt, channel::mpsc};
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
};
use parking_lot::Mutex;
use serde_json::json;
use tracing::{debug, warn};

use crate::{
    api::{FailoverPolicy, FailoverPolicyStatus},
    gather::status_key,
    route::FIELD_MANAGER,
    writer::{NotLeader, Writer, describe},
};

/// Why writing a status failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// This replica lost leadership before writing.
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
    /// The API server refused or did not answer.
    #[error("writing status failed: {}", describe(.0))]
    Api(#[source] kube::Error),
}

/// One policy's newest status, not written yet.
struct Pending {
    namespace: String,
    name: String,
    status: FailoverPolicyStatus,
    /// Bumped by each newer status, so the writer knows whether it wrote the newest.
    version: u64,
}

/// The statuses waiting to be written, by policy.
pub struct Statuses {
    pending: Mutex<HashMap<String, Pending>>,
    queue: mpsc::UnboundedSender<String>,
}

/// The policies whose status waits, in the order they were queued.
pub type Queue = mpsc::UnboundedReceiver<String>;

impl Statuses {
    /// Nothing pending; the writer takes its work from the returned queue.
    pub fn new() -> (Self, Queue) {
        let (queue, receiver) = mpsc::unbounded();
        let statuses = Self {
            pending: Mutex::default(),
            queue,
        };
        (statuses, receiver)
    }

    /// The status queued or being written for a policy (its key), newer than any cache.
    pub fn pending(&self, key: &str) -> Option<FailoverPolicyStatus> {
        self.pending.lock().get(key).map(|p| p.status.clone())
    }

    /// Queues `status` unless it is what the policy has (`current`); returns whether it did.
    pub fn queue(
        &self,
        policy: &FailoverPolicy,
        status: FailoverPolicyStatus,
        current: Option<&FailoverPolicyStatus>,
    ) -> bool {
        if current == Some(&status) {
            return false;
        }
        let key = status_key(policy);
        let mut pending = self.pending.lock();
        match pending.get_mut(&key) {
            // Its writer is at work and writes this one next.
            Some(p) => {
                p.status = status;
                p.version += 1;
            }
            None => {
                pending.insert(
                    key.clone(),
                    Pending {
                        namespace: policy.namespace().unwrap_or_default(),
                        name: policy.name_any(),
                        status,
                        version: 0,
                    },
                );
                // The receiver lives as long as the controller; after it, nothing is written.
                let _ = self.queue.unbounded_send(key);
            }
        }
        true
    }

    /// Waits until every queued status is written (or dropped).
    pub async fn flushed(&self) {
        while !self.pending.lock().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn newest(&self, key: &str) -> Option<(String, String, FailoverPolicyStatus, u64)> {
        let pending = self.pending.lock();
        let p = pending.get(key)?;
        Some((
            p.namespace.clone(),
            p.name.clone(),
            p.status.clone(),
            p.version,
        ))
    }

    /// Drops a policy's entry once `version` is written (or not worth writing); returns false
    /// when a newer status came meanwhile.
    fn done(&self, key: &str, version: Option<u64>) -> bool {
        let mut pending = self.pending.lock();
        if version.is_some_and(|v| pending.get(key).is_some_and(|p| p.version != v)) {
            return false;
        }
        pending.remove(key);
        true
    }
}

/// Writes queued statuses, `concurrency` policies at a time, for as long as the controller runs.
pub async fn run(writer: Arc<Writer>, queue: Queue, concurrency: usize) {
    queue
        .for_each_concurrent(concurrency, |key| write_newest(&writer, key))
        .await;
}

/// Writes the newest status of one policy until it is written, superseded by none, or dropped.
async fn write_newest(writer: &Writer, key: String) {
    let mut delays = retry_delays().build();
    while let Some((namespace, name, status, version)) = writer.statuses.newest(&key) {
        match apply(writer, &namespace, &name, &status).await {
            Ok(resource_version) => {
                // Remembered before it leaves the queue: a reconcile never sees an older one.
                writer
                    .recent_status
                    .record(key.clone(), resource_version.as_deref(), status);
                if writer.statuses.done(&key, Some(version)) {
                    return;
                }
            }
            Err(e) if gone(&e) => {
                debug!(%namespace, policy = %name, error = %e, "status not written: the policy is gone");
                writer.statuses.done(&key, None);
                return;
            }
            Err(e) => {
                let delay = delays.next().unwrap_or(Duration::from_secs(10));
                writer.metrics.error("status_write");
                warn!(%namespace, policy = %name, error = %e, retry_in_ms = delay.as_millis() as u64, "status write failed");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// Retry delays of a failing status write: 200 ms doubling to 10 s.
fn retry_delays() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(10))
        .with_factor(2.0)
        .without_max_times()
}

/// A write that can never succeed: not the leader, the policy deleted, its namespace going away.
fn gone(error: &StatusError) -> bool {
    match error {
        StatusError::NotLeader(_) => true,
        StatusError::Api(kube::Error::Api(e)) => {
            e.code == 404 || (e.code == 403 && e.message.contains("being terminated"))
        }
        StatusError::Api(_) => false,
    }
}

/// One server-side apply of the status; returns the policy's new resourceVersion.
async fn apply(
    writer: &Writer,
    namespace: &str,
    name: &str,
    status: &FailoverPolicyStatus,
) -> Result<Option<String>, StatusError> {
    let api: Api<FailoverPolicy> = Api::namespaced(writer.client.clone(), namespace);
    let body = json!({
        "apiVersion": FailoverPolicy::api_version(&()),
        "kind": FailoverPolicy::kind(&()),
        "status": status,
    });
    writer.ensure_leader()?;
    let written = api
        .patch_status(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(StatusError::Api)?;
    writer.metrics.write("status");
    Ok(written.meta().resource_version.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{FailoverPolicySpec, Phase};

    fn policy() -> FailoverPolicy {
        let mut p = FailoverPolicy::new("web", FailoverPolicySpec::default());
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some("u1".into());
        p
    }

    fn phase(phase: Phase) -> FailoverPolicyStatus {
        FailoverPolicyStatus {
            phase: Some(phase),
            ..Default::default()
        }
    }

    #[test]
    fn the_newest_status_waits_once_per_policy_and_is_read_as_the_previous_one() {
        let (statuses, mut queue) = Statuses::new();
        let p = policy();
        let key = status_key(&p);
        assert!(!statuses.queue(&p, phase(Phase::Primary), Some(&phase(Phase::Primary))));
        assert!(statuses.queue(&p, phase(Phase::FailedOver), None));
        assert!(statuses.queue(&p, phase(Phase::Primary), None));
        assert_eq!(statuses.pending(&key), Some(phase(Phase::Primary)));
        assert_eq!(queue.try_recv().ok(), Some(key.clone()));
        assert!(queue.try_recv().is_err(), "one writer per policy");
        let (_, _, _, version) = statuses.newest(&key).expect("pending");
        assert!(!statuses.done(&key, Some(version - 1)), "a newer one came");
        assert!(statuses.done(&key, Some(version)));
        assert_eq!(statuses.pending(&key), None);
    }
}
