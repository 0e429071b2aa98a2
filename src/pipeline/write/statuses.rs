//! The status writer: what the status step built is queued, newest per policy, and written in
//! the background, so the next reconcile of a policy never waits for its previous status write.
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

use std::sync::Arc;

use futures::StreamExt;
use kube::Resource;
use serde_json::json;
use tracing::{debug, warn};

use crate::{
    api::{FailoverPolicy, FailoverPolicyStatus},
    runtime::{
        api_client::{describe, namespace_terminating},
        metrics::Metrics,
        retry,
        writer::{NotLeader, Writer},
        written::{Newest, Queue, StatusKey},
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

/// Writes queued statuses, `concurrency` policies at a time, for as long as the controller runs.
pub async fn run(ctx: Arc<Context>, queue: Queue, concurrency: usize) {
    queue
        .for_each_concurrent(concurrency, |key| {
            write_newest(&ctx.writer, ctx.metrics(), key)
        })
        .await;
}

/// Writes the newest status of one policy until it is written, superseded by none, or dropped.
async fn write_newest(writer: &Writer, metrics: &Metrics, key: StatusKey) {
    let mut delays = retry::delays();
    let (namespace, name) = (&key.policy.namespace, &key.policy.name);
    while let Some(Newest { status, version }) = writer.statuses.newest(&key) {
        match apply(writer, namespace, name, &status).await {
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
                let delay = retry::next(&mut delays);
                metrics.error("status_write");
                warn!(%namespace, policy = %name, error = %e, retry_in_ms = delay.as_millis() as u64, "status write failed");
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

/// One server-side apply of the status; returns the policy's new resourceVersion.
async fn apply(
    writer: &Writer,
    namespace: &str,
    name: &str,
    status: &FailoverPolicyStatus,
) -> Result<Option<String>, StatusError> {
    let body = json!({
        "apiVersion": FailoverPolicy::api_version(&()),
        "kind": FailoverPolicy::kind(&()),
        "status": status,
    });
    let written = writer
        .namespaced::<FailoverPolicy>(namespace, "status")
        .apply_status(name, &body)
        .await?
        .map_err(StatusError::Api)?;
    Ok(written.resource_version().map(str::to_string))
}
