//! The status writer: what the status step built is queued, newest per policy, and written in
//! the background, so the next reconcile of a policy never waits for its previous status write.
//! A failover group's status, built by its members' group step, waits and is written the same
//! way ([`StatusOf`]), so the last written is the newest whichever member built it.
//! Without it, a readiness change that follows another one closely (a flap, a failback right
//! after a failover) waited for the previous reconcile's status write before its route was
//! written.
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

use std::{fmt::Debug, sync::Arc};

use futures::StreamExt;
use kube::{Resource, core::NamespaceResourceScope};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::json;
use tracing::{debug, warn};

use crate::{
    api::{FailoverGroup, FailoverGroupStatus, FailoverPolicy, FailoverPolicyStatus},
    last_status::LastGroupStatus,
    runtime::{
        api_client::{describe, namespace_terminating},
        metrics::Metrics,
        retry,
        writer::{NotLeader, StatusQueues, Writer},
        written::{Newest, StatusKey, Statuses, WrittenStatus},
    },
    sources::Context,
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

/// A kind whose statuses the writer writes: where they wait, and how one written is remembered
/// until the kind's watch delivers it.
pub trait StatusOf:
    Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Debug
{
    /// Its status.
    type Status: Serialize + Clone + Debug + Send + Sync + 'static;
    /// The label its writes are counted under.
    const WRITES: &'static str;

    /// Where its statuses wait.
    fn statuses(writer: &Writer) -> &Statuses<Self::Status>;

    /// Remembers a status written, at the object's new `resourceVersion`.
    fn written(writer: &Writer, key: StatusKey, version: Option<&str>, status: Self::Status);
}

impl StatusOf for FailoverPolicy {
    type Status = FailoverPolicyStatus;
    const WRITES: &'static str = "status";

    fn statuses(writer: &Writer) -> &Statuses<FailoverPolicyStatus> {
        &writer.statuses
    }

    fn written(writer: &Writer, key: StatusKey, version: Option<&str>, status: Self::Status) {
        writer
            .recent_status
            .record(key, version, WrittenStatus::of(status));
    }
}

impl StatusOf for FailoverGroup {
    type Status = FailoverGroupStatus;
    const WRITES: &'static str = "group_status";

    fn statuses(writer: &Writer) -> &Statuses<FailoverGroupStatus> {
        &writer.group_statuses
    }

    fn written(writer: &Writer, key: StatusKey, version: Option<&str>, status: Self::Status) {
        let last = LastGroupStatus::of(&status);
        writer.recent_group_status.record(key, version, last);
    }
}

/// Writes the queued statuses, policies' and groups' alike, `concurrency` objects at a time (the
/// writes in flight are bounded together), for as long as the controller runs.
pub async fn run(ctx: Arc<Context>, queues: StatusQueues, concurrency: usize) {
    let policies = queues.policies.map(Queued::Policy);
    let groups = queues.groups.map(Queued::Group);
    futures::stream::select(policies, groups)
        .for_each_concurrent(concurrency, |queued| {
            let (writer, metrics) = (&ctx.writer, ctx.metrics());
            async move {
                match queued {
                    Queued::Policy(key) => {
                        write_newest::<FailoverPolicy>(writer, metrics, key).await
                    }
                    Queued::Group(key) => write_newest::<FailoverGroup>(writer, metrics, key).await,
                }
            }
        })
        .await;
}

/// An object whose status waits, by kind.
enum Queued {
    Policy(StatusKey),
    Group(StatusKey),
}

/// Writes the newest status of one object until it is written, superseded by none, or dropped.
async fn write_newest<K: StatusOf>(writer: &Writer, metrics: &Metrics, key: StatusKey) {
    let mut delays = retry::delays();
    let (namespace, name) = (&key.object.namespace, &key.object.name);
    let statuses = K::statuses(writer);
    while let Some(Newest { status, version }) = statuses.newest(&key) {
        match apply::<K>(writer, namespace, name, &status).await {
            Ok(resource_version) => {
                // Remembered before it leaves the queue: a reconcile never sees an older one.
                K::written(writer, key.clone(), resource_version.as_deref(), status);
                if statuses.done(&key, Some(version)) {
                    return;
                }
            }
            Err(e) if gone(&e) => {
                debug!(%namespace, object = %name, kind = K::kind(&()).as_ref(), error = %e, "status not written: the object is gone");
                statuses.done(&key, None);
                return;
            }
            Err(e) => {
                let delay = retry::next(&mut delays);
                metrics.error("status_write");
                warn!(%namespace, object = %name, kind = K::kind(&()).as_ref(), error = %e, retry_in_ms = delay.as_millis() as u64, "status write failed");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// A write that can never succeed: not the leader, the policy deleted, its namespace going away.
fn gone(error: &StatusError) -> bool {
    match error {
        StatusError::NotLeader(_) => true,
        StatusError::Api(e) => {
            matches!(e, kube::Error::Api(e) if e.code == 404) || namespace_terminating(e)
        }
    }
}

/// One server-side apply of the status; returns the object's new resourceVersion.
async fn apply<K: StatusOf>(
    writer: &Writer,
    namespace: &str,
    name: &str,
    status: &K::Status,
) -> Result<Option<String>, StatusError> {
    let body = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    let written = writer
        .namespaced::<K>(namespace, K::WRITES)
        .apply_status(name, &body)
        .await?
        .map_err(StatusError::Api)?;
    Ok(written.resource_version().map(str::to_string))
}
