//! The one door every API write of a reconcile goes through: the leadership check right before
//! each request, the one field manager, the write counters, and the memory of recent writes
//! ([`Recent`]) that keeps a stale cache from causing a second write.

use std::sync::Arc;

use kube::{
    Client,
    runtime::events::{Recorder, Reporter},
};

use crate::{
    api::FailoverPolicyStatus,
    route::{FIELD_MANAGER, RulesDigest},
    runtime::{
        leader::Leadership,
        metrics::Metrics,
        written::{Queue, Recent, Statuses},
    },
};

/// A write refused because this replica does not lead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not the leader; writes stopped")]
pub struct NotLeader;

/// What the apply and write steps write through.
pub struct WriteGate {
    /// API client.
    pub client: Client,
    /// Whether this replica may write.
    pub leadership: Leadership,
    /// Write counters.
    pub metrics: Arc<Metrics>,
    /// Event recorder.
    pub recorder: Recorder,
    /// Routes written, until the route cache shows them.
    pub recent_routes: Recent<RulesDigest>,
    /// Statuses written, until the policy cache shows them.
    pub recent_status: Recent<FailoverPolicyStatus>,
    /// Statuses queued, until they are written.
    pub statuses: Statuses,
}

impl WriteGate {
    /// A writer for this client; `instance` names this replica in Events. The queue is the status
    /// writer's work ([`crate::pipeline::write::statuses::run`]).
    pub fn new(
        client: Client,
        leadership: Leadership,
        metrics: Arc<Metrics>,
        instance: Option<String>,
    ) -> (Self, Queue) {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: FIELD_MANAGER.to_string(),
                instance,
            },
        );
        let (statuses, queue) = Statuses::new();
        let gate = Self {
            client,
            leadership,
            metrics,
            recorder,
            recent_routes: Recent::default(),
            recent_status: Recent::default(),
            statuses,
        };
        (gate, queue)
    }

    /// Fails unless this replica may write right now: a lost lease stops writes at once.
    pub fn ensure_leader(&self) -> Result<(), NotLeader> {
        if self.leadership.is_leader() {
            Ok(())
        } else {
            Err(NotLeader)
        }
    }
}

/// An API error as a short sentence for people: the API server's own message and reason, not
/// the client's debug dump.
pub fn describe(error: &kube::Error) -> String {
    let text = match error {
        kube::Error::Api(status) if !status.message.is_empty() && !status.reason.is_empty() => {
            format!("{} ({})", status.message, status.reason)
        }
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        kube::Error::Api(status) => format!("HTTP {} {}", status.code, status.reason),
        other => with_causes(other),
    };
    crate::message::line(&text)
}

/// An error and the causes under it, as one line: `client error (Connect): tcp connect error:
/// Connection refused (os error 111)`.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        let line = c.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        cause = c.source();
    }
    text
}
