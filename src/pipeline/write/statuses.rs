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
//! - Objects are taken in turns by namespace, so one namespace's many statuses delay another's
//!   by one turn each; one namespace writes an eighth of the writers' statuses at once, more only
//!   while a quarter of them stay free ([`Share`]).
//! - A write is tried once per turn. A failed one gives its writer back and waits for its retry
//!   in the queue: 200 ms doubling to 10 s, or, when the API server refuses the status for what
//!   it is (too large with the object's metadata, or invalid), 10 s doubling to 5 minutes, said
//!   once in the log and in a Warning Event. So no object, whatever its metadata, holds a writer
//!   or the queue. Every failure is counted by reason (`failover_status_write_failures_total`).
//! - A policy that is gone or a namespace being deleted drops it; a replica that lost leadership
//!   drops everything queued (the new leader decides again).
//! - On shutdown, what is queued is written within the shutdown grace period (a status that
//!   failed since it was queued is not waited for).

use std::{fmt::Debug, sync::Arc};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Resource,
    core::NamespaceResourceScope,
    runtime::events::{Event, EventType},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::json;
use tokio::sync::Semaphore;
use tracing::{debug, warn};

use crate::runtime::{
    api_client::{describe, namespace_terminating},
    fair::Share,
    metrics::Metrics,
    writer::{NotLeader, Writer},
    written::{Failure, Newest, StatusKey, Statuses, WrittenStatus},
};
use failover_core::{
    api::{
        FailoverGroup, FailoverGroupStatus, FailoverPolicy, FailoverPolicyStatus,
        conditions::events::STATUS_NOT_WRITTEN,
    },
    last_status::LastGroupStatus,
    message,
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
        writer.notifier.written(&key, &status);
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
/// writes in flight are bounded together), a namespace's share of them at once ([`Share`]), for
/// as long as the controller runs.
/// Writes through `writer`, counting failures in `metrics`.
pub async fn run(writer: Arc<Writer>, metrics: Arc<Metrics>, concurrency: usize) {
    let slots = Arc::new(Semaphore::new(concurrency.max(1)));
    let share = Share::of(concurrency);
    let parts = Parts { writer, metrics };
    futures::join!(
        write_kind::<FailoverPolicy>(parts.clone(), slots.clone(), share),
        write_kind::<FailoverGroup>(parts, slots, share),
    );
}

/// What the status writer writes through and counts in.
#[derive(Clone)]
struct Parts {
    writer: Arc<Writer>,
    metrics: Arc<Metrics>,
}

/// Takes the objects of kind `K` whose status waits, in turn, a namespace's `share` at once, each written once by a writer of its own when a slot is free.
async fn write_kind<K: StatusOf>(parts: Parts, slots: Arc<Semaphore>, share: Share) {
    loop {
        let (key, newest) = K::statuses(&parts.writer).next(share).await;
        // The semaphore is never closed.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let parts = parts.clone();
        tokio::spawn(async move {
            write_once::<K>(&parts, key, newest).await;
            drop(slot);
        });
    }
}

/// One try of an object's newest status: written (and remembered), dropped (the object is gone),
/// or left to its retry.
async fn write_once<K: StatusOf>(parts: &Parts, key: StatusKey, newest: Newest<K::Status>) {
    let writer = &*parts.writer;
    let (namespace, name) = (&key.object.namespace, &key.object.name);
    let statuses = K::statuses(writer);
    let Newest { status, version } = newest;
    match apply::<K>(writer, namespace, name, &status).await {
        Ok(resource_version) => {
            // Remembered before it leaves the queue: a reconcile never sees an older one.
            K::written(writer, key.clone(), resource_version.as_deref(), status);
            statuses.done(&key, Some(version));
        }
        Err(e) if gone(&e) => {
            debug!(%namespace, object = %name, kind = K::kind(&()).as_ref(), error = %e, "status not written: the object is gone");
            statuses.done(&key, None);
        }
        Err(e) => {
            let failure = failure(&e);
            parts.metrics.error("status_write");
            parts.metrics.status_write_failure(failure.reason());
            let failed = statuses.failed(&key, failure);
            let retry_in_ms = failed.retry_in.as_millis() as u64;
            let kind = K::kind(&()).to_string();
            if !failed.news {
                debug!(%namespace, object = %name, kind, error = %e, retry_in_ms, "status write failed again");
            } else if let Failure::Refused(reason) = failure {
                warn!(%namespace, object = %name, kind, reason, error = %e, retry_in_ms, "the API server refused this status; tried again later");
                writer.publish(refused_event(&e), reference::<K>(&key));
            } else {
                warn!(%namespace, object = %name, kind, error = %e, retry_in_ms, "status write failed");
            }
        }
    }
}

/// The Warning Event of a status the API server refused, on its object (an Event is an object
/// of its own, so it can be stored whatever the object's size).
fn refused_event(error: &StatusError) -> Event {
    Event {
        type_: EventType::Warning,
        reason: STATUS_NOT_WRITTEN.into(),
        note: Some(message::line(&format!(
            "{error}; the controller tries again after up to 5 minutes"
        ))),
        action: "WriteStatus".into(),
        secondary: None,
    }
}

/// A reference to the object whose status waits, for its Events.
fn reference<K: StatusOf>(key: &StatusKey) -> ObjectReference {
    ObjectReference {
        api_version: Some(K::api_version(&()).into()),
        kind: Some(K::kind(&()).into()),
        namespace: Some(key.object.namespace.to_string()),
        name: Some(key.object.name.to_string()),
        uid: Some(key.uid.to_string()),
        ..ObjectReference::default()
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

/// What a failed write tells: the status refused for what it is (too large: the object with it
/// is over the API server's or etcd's limit; invalid), or a failure that may pass.
fn failure(error: &StatusError) -> Failure {
    let StatusError::Api(kube::Error::Api(e)) = error else {
        return Failure::Transient("unavailable");
    };
    let too_large = e.code == 413
        || e.message.contains("request is too large")
        || e.message.contains("too long")
        || e.reason == "RequestEntityTooLarge";
    match e.code {
        _ if too_large => Failure::Refused("too_large"),
        400 | 422 => Failure::Refused("invalid"),
        401 | 403 => Failure::Transient("forbidden"),
        408 | 429 | 500..=599 => Failure::Transient("unavailable"),
        _ => Failure::Transient("other"),
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
