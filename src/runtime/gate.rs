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
    route::{FIELD_MANAGER, RouteKey, RulesDigest},
    runtime::{
        leader::Leadership,
        metrics::Metrics,
        written::{Queue, Recent, StatusKey, Statuses},
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
    pub recent_routes: Recent<RouteKey, RulesDigest>,
    /// Statuses written, until the policy cache shows them.
    pub recent_status: Recent<StatusKey, FailoverPolicyStatus>,
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
