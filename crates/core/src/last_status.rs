//! The status a policy has, in the form the next reconcile reads it: what the decide step needs
//! of where traffic was (phase, weights, readiness and since when, the times of the last failover
//! and failback), what the status step needs to keep a condition's `lastTransitionTime`, and a
//! digest of the whole status, so an unchanged one is not written again.
//!
//! Backends' names, condition types and reasons are only compared, never read back, so they are
//! held as digests ([`crate::digest`]); the active backends' names, which messages name, are held
//! as one string, inline when it is 24 bytes or shorter. A policy's last status is at most three
//! allocations however many backends and conditions it has, plus a not-ready backend's message
//! (the reason a backend whose cluster has not answered yet stays not ready) and, once it has
//! recorded a transition, its history (shared, bounded by `spec.notifications.history`).

use std::hash::{DefaultHasher, Hasher};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::{
    api::{FailoverGroupStatus, FailoverPolicyStatus, Phase, Timestamp},
    digest::digest,
};

/// A policy's status as last written, compact.
#[derive(Clone, Debug, PartialEq)]
pub struct LastStatus {
    /// The generation it was computed from.
    pub observed_generation: Option<i64>,
    /// Where traffic went.
    pub phase: Option<Phase>,
    /// The backends that were active, in priority order, joined by commas (as
    /// `activeSummary`; a Service's name has no comma).
    pub active: Option<compact_str::CompactString>,
    /// Every backend it listed, in its order.
    pub backends: Box<[LastBackend]>,
    /// Its conditions.
    pub conditions: Box<[LastCondition]>,
    /// When traffic last left the primary.
    pub last_failover_time: Option<Timestamp>,
    /// When traffic last returned to the primary.
    pub last_failback_time: Option<Timestamp>,
    /// With `spec.capacity`: the demand recorded.
    pub demand: Option<i64>,
    /// With `spec.capacity.scale`: the workloads raised, with what each had.
    pub scaled: Box<[crate::api::ScaledWorkload]>,
    /// The transitions it recorded, oldest first ([`Self::history`]): none, no allocation;
    /// some, shared by every copy of this status (a reconcile's copy of the policy's entry
    /// clones no entry).
    pub history: Option<std::sync::Arc<[crate::api::HistoryEntry]>>,
    /// The last history entry every webhook sink acknowledged.
    pub notified_through: Option<u64>,
    /// A digest of the whole status (`None`: it could not be encoded, so it equals nothing).
    pub digest: Option<u64>,
}

/// One backend of a status.
#[derive(Clone, Debug, PartialEq)]
pub struct LastBackend {
    /// A digest of its Service's name.
    pub service: u64,
    /// Whether it was ready.
    pub ready: bool,
    /// Its ready endpoints.
    pub ready_endpoints: i32,
    /// All its endpoints.
    pub total_endpoints: i32,
    /// Its weight.
    pub weight: i32,
    /// Since when it has been ready (or not).
    pub since: Option<Timestamp>,
    /// Why it was not ready (a ready backend's is not held).
    pub message: Option<Box<str>>,
}

/// One condition of a status.
#[derive(Clone, Debug, PartialEq)]
pub struct LastCondition {
    /// A digest of its type.
    pub type_: u64,
    /// Whether its status was `True`.
    pub status: bool,
    /// A digest of its reason.
    pub reason: u64,
    /// Since when its status has held.
    pub last_transition_time: Time,
}

impl LastStatus {
    /// The compact form of a status.
    pub fn of(status: &FailoverPolicyStatus) -> Self {
        Self {
            observed_generation: status.observed_generation,
            phase: status.phase,
            active: (!status.active_backends.is_empty())
                .then(|| status.active_backends.join(",").into()),
            backends: status
                .backends
                .iter()
                .map(|b| LastBackend {
                    service: digest(b.service.as_str()),
                    ready: b.ready,
                    ready_endpoints: b.ready_endpoints,
                    total_endpoints: b.total_endpoints,
                    weight: b.weight,
                    since: b.last_transition_time,
                    message: b.message.as_deref().filter(|_| !b.ready).map(Box::from),
                })
                .collect(),
            conditions: status.conditions.iter().map(LastCondition::of).collect(),
            last_failover_time: status.last_failover_time,
            last_failback_time: status.last_failback_time,
            demand: status.capacity.as_ref().map(|c| c.demand),
            scaled: status.scaled.clone().into_boxed_slice(),
            history: (!status.history.is_empty()).then(|| status.history.as_slice().into()),
            notified_through: status.notified_through,
            digest: digest_of(status),
        }
    }

    /// The transitions it recorded, oldest first.
    pub fn history(&self) -> &[crate::api::HistoryEntry] {
        self.history.as_deref().unwrap_or_default()
    }

    /// The backends that were active, in priority order.
    pub fn active(&self) -> impl Iterator<Item = &str> {
        self.active
            .as_deref()
            .into_iter()
            .flat_map(|a| a.split(','))
    }

    /// The backend of this Service, if the status listed it.
    pub fn backend(&self, service: &str) -> Option<&LastBackend> {
        let service = digest(service);
        self.backends.iter().find(|b| b.service == service)
    }

    /// The condition of this type, if the status had it.
    pub fn condition(&self, type_: &str) -> Option<&LastCondition> {
        let type_ = digest(type_);
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Whether the condition of this type has this reason.
    pub fn has_reason(&self, type_: &str, reason: &str) -> bool {
        self.condition(type_)
            .is_some_and(|c| c.reason == digest(reason))
    }
}

/// A status held compact, compared with a whole one as the JSON written compares (a time finer
/// than the JSON keeps is no difference).
pub trait Compact {
    /// The status it is made of.
    type Whole;

    /// Whether `whole` is the status this one was made from.
    fn is(&self, whole: &Self::Whole) -> bool;
}

impl Compact for LastStatus {
    type Whole = FailoverPolicyStatus;

    fn is(&self, whole: &FailoverPolicyStatus) -> bool {
        self.digest.is_some() && self.digest == digest_of(whole)
    }
}

impl Compact for LastGroupStatus {
    type Whole = FailoverGroupStatus;

    fn is(&self, whole: &FailoverGroupStatus) -> bool {
        self.digest.is_some() && self.digest == digest_of(whole)
    }
}

/// A failover group's status as last written, compact: what the next choice of its site and the
/// next status read of it (its site and since when, the member that moved it last, when each
/// condition took its status), and a digest of the whole, so an unchanged one is not written
/// again. Its members' names and messages are only compared, so only the digest holds them: at
/// most two allocations, where the status took one per string.
#[derive(Clone, Debug, PartialEq)]
pub struct LastGroupStatus {
    /// The site every member routed to.
    pub site: Option<compact_str::CompactString>,
    /// When the group last moved.
    pub since: Option<Timestamp>,
    /// The member whose readiness moved the group last.
    pub last_trigger: Option<compact_str::CompactString>,
    /// Its conditions.
    pub conditions: Box<[LastCondition]>,
    /// A digest of the whole status (`None`: it could not be encoded, so it equals nothing).
    pub digest: Option<u64>,
}

impl LastGroupStatus {
    /// The compact form of a group's status.
    pub fn of(status: &FailoverGroupStatus) -> Self {
        Self {
            site: status.site.as_deref().map(Into::into),
            since: status.last_transition_time,
            last_trigger: status.last_trigger.as_deref().map(Into::into),
            conditions: status.conditions.iter().map(LastCondition::of).collect(),
            digest: digest_of(status),
        }
    }

    /// The condition of this type, if the status had it.
    pub fn condition(&self, type_: &str) -> Option<&LastCondition> {
        let type_ = digest(type_);
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

impl LastCondition {
    fn of(c: &crate::api::Condition) -> Self {
        LastCondition {
            type_: digest(c.type_.as_str()),
            status: c.status == "True",
            reason: digest(c.reason.as_str()),
            last_transition_time: c.last_transition_time.clone(),
        }
    }
}

/// A digest of a whole status: of its JSON, as the status holds numbers that do not hash. The
/// JSON is hashed as it is written, never held.
fn digest_of(status: &impl serde::Serialize) -> Option<u64> {
    struct Hashing(DefaultHasher);
    impl std::io::Write for Hashing {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.write(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut hashing = Hashing(DefaultHasher::new());
    // Never expected to fail: a status is plain data. An unencodable one has no digest, and is
    // written again rather than taken as unchanged.
    serde_json::to_writer(&mut hashing, status)
        .ok()
        .map(|()| hashing.0.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        api::{BackendStatus, Condition},
        decide::tests::backend_status,
    };

    fn status() -> FailoverPolicyStatus {
        FailoverPolicyStatus {
            observed_generation: Some(3),
            phase: Some(Phase::FailedOver),
            backends: vec![
                BackendStatus {
                    ready: false,
                    message: Some("0 of 2 endpoints ready".into()),
                    ..backend_status("web-a", 0)
                },
                BackendStatus {
                    message: Some("ready".into()),
                    ..backend_status("web-b", 100)
                },
            ],
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: "FailedOver".into(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: crate::api::time(chrono::Utc::now()),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn the_compact_form_answers_what_the_reconcile_asks_of_the_last_status() {
        let last = LastStatus::of(&status());
        assert_eq!(last.backend("web-b").map(|b| b.weight), Some(100));
        assert_eq!(
            last.backend("web-a").and_then(|b| b.message.as_deref()),
            Some("0 of 2 endpoints ready")
        );
        assert_eq!(
            last.backend("web-b").and_then(|b| b.message.as_deref()),
            None
        );
        assert!(last.backend("web-c").is_none());
        assert!(last.has_reason("Ready", "FailedOver"));
        assert!(!last.has_reason("Ready", "Primary"));
        assert!(last.condition("Degraded").is_none());
        assert!(last.is(&status()));
        let mut other = status();
        other.backends[1].weight = 50;
        assert!(!last.is(&other));
    }
}
