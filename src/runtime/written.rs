//! What this replica wrote, or is about to write, kept until the caches show it.
//!
//! - [`Recent`]: the last value written to an object, until its cache shows that write. A watch
//!   event for one kind (a route) can trigger a reconcile before the watch of another kind (the
//!   policy, with the status just written) has caught up. Deciding from that stale cache would
//!   write or announce a transition twice. Each entry lives only until the cache reaches the
//!   written version. Versions are compared as numbers, as etcd-backed API servers issue them; a
//!   version that is not a number simply disables the shortcut.
//! - [`Statuses`]: the statuses built (a policy's by its status step, a group's by its members'
//!   group step) that the background writer has not written yet, newest per object. They are
//!   read as the object's previous status; the writer (`pipeline::write::statuses`) takes its
//!   work from the [`Queue`].

use std::{collections::HashMap, future::Future, hash::Hash, sync::Arc};

use futures::channel::mpsc;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::{
    api::{FailoverPolicyStatus, conditions},
    last_status::{Compact, LastStatus},
    observation::PolicyKey,
};

/// Recent writes of one kind of value, by object key.
#[derive(Debug)]
pub struct Recent<K, T> {
    entries: Mutex<HashMap<K, (u64, T)>>,
}

impl<K, T> Default for Recent<K, T> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Hash + Eq, T: Clone> Recent<K, T> {
    /// Remembers a write that the API server acknowledged at `written_version`.
    pub fn record(&self, key: K, written_version: Option<&str>, value: T) {
        if let Some(version) = written_version.and_then(|v| v.parse::<u64>().ok()) {
            self.entries.lock().insert(key, (version, value));
        }
    }

    /// The value written last when the cache (at `cached_version`) has not caught up with it;
    /// once it has, the entry is dropped and the cache wins.
    pub fn newer_than(&self, key: &K, cached_version: Option<u64>) -> Option<T> {
        let mut entries = self.entries.lock();
        let (written, value) = entries.get(key)?;
        match cached_version {
            Some(cached) if cached < *written => Some(value.clone()),
            _ => {
                entries.remove(key);
                None
            }
        }
    }

    /// The value written last, until a watch delivers it ([`Recent::seen_through`]).
    pub fn unseen(&self, key: &K) -> Option<T> {
        self.entries.lock().get(key).map(|(_, value)| value.clone())
    }

    /// Forgets the writes of the keys `of_watch` selects that one watch has delivered: it sent
    /// an event at `version`, and a watch sends events in the order of their versions, so every
    /// write up to it is in its cache. Without this, a write nobody reconciled again would stay
    /// for good (after the start-up pass, a status per policy); with it, only the writes no
    /// watch has delivered yet are remembered.
    pub fn seen_through(&self, version: u64, of_watch: impl Fn(&K) -> bool) {
        let mut entries = self.entries.lock();
        if entries.is_empty() {
            return;
        }
        entries.retain(|key, (written, _)| !(of_watch(key) && *written <= version));
        if entries.is_empty() {
            entries.shrink_to(64);
        }
    }
}

/// A policy's status as written, kept as the next reconcile reads it: compact, or whole when it
/// says the spec is invalid (an invalid policy's status step starts from the whole status).
#[derive(Clone, Debug)]
pub enum WrittenStatus {
    /// A valid policy's.
    Compact(LastStatus),
    /// An invalid policy's.
    Whole(Box<FailoverPolicyStatus>),
}

impl WrittenStatus {
    /// A status written, as kept.
    pub fn of(status: FailoverPolicyStatus) -> Self {
        let invalid = status
            .conditions
            .iter()
            .any(|c| c.type_ == conditions::READY && c.reason == conditions::ready::INVALID_SPEC);
        if invalid {
            Self::Whole(Box::new(status))
        } else {
            Self::Compact(LastStatus::of(&status))
        }
    }
}

/// The key under which an object's status waits and its written status is remembered: the
/// object (a policy, or a group) and its uid (one deleted and created again under its name is
/// another one).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StatusKey {
    /// The object's namespace and name.
    pub object: PolicyKey,
    /// Its uid.
    pub uid: Box<str>,
}

impl StatusKey {
    /// The key of an object's status, by its key and uid.
    pub fn new(object: &PolicyKey, uid: &str) -> Self {
        Self {
            object: object.clone(),
            uid: uid.into(),
        }
    }
}

/// One object's newest status, not written yet, and its version: bumped by each newer status,
/// so the writer knows whether it wrote the newest.
#[derive(Clone, Debug)]
pub struct Newest<S> {
    /// The status.
    pub status: S,
    /// Its version.
    pub version: u64,
}

/// The statuses of one kind waiting to be written, by object.
pub struct Statuses<S> {
    pending: Mutex<HashMap<StatusKey, Newest<S>>>,
    queue: mpsc::UnboundedSender<StatusKey>,
    /// Notified whenever a pending status leaves.
    left: Arc<Notify>,
}

/// The objects whose status waits, in the order they were queued.
pub type Queue = mpsc::UnboundedReceiver<StatusKey>;

impl<S: Clone> Statuses<S> {
    /// The statuses that may wait at once before reconciles are held back: 16 rounds of the
    /// writer at its default concurrency of 16, which keeps it busy, and no more, as every status
    /// waiting adds to the peak of a cold start.
    pub const LIMIT: usize = 256;

    /// Nothing pending; the writer takes its work from the returned queue.
    pub fn new() -> (Self, Queue) {
        let (queue, receiver) = mpsc::unbounded();
        let statuses = Self {
            pending: Mutex::default(),
            queue,
            left: Arc::default(),
        };
        (statuses, receiver)
    }

    /// The status queued or being written for an object, newer than any cache.
    pub fn pending(&self, key: &StatusKey) -> Option<S> {
        self.pending.lock().get(key).map(|p| p.status.clone())
    }

    /// Queues `status` unless it is what the object has (`current`); returns whether it did.
    pub fn queue(
        &self,
        key: StatusKey,
        status: S,
        current: Option<&impl Compact<Whole = S>>,
    ) -> bool {
        if current.is_some_and(|c| c.is(&status)) {
            return false;
        }
        let mut pending = self.pending.lock();
        match pending.get_mut(&key) {
            // Its writer is at work and writes this one next.
            Some(p) => {
                p.status = status;
                p.version += 1;
            }
            None => {
                pending.insert(key.clone(), Newest { status, version: 0 });
                // The receiver lives as long as the controller; after it, nothing is written.
                let _ = self.queue.unbounded_send(key);
            }
        }
        true
    }

    /// Whether [`Statuses::LIMIT`] statuses wait: no reconcile should add more until some are
    /// written.
    pub fn full(&self) -> bool {
        self.pending.lock().len() >= Self::LIMIT
    }

    /// Waits until every queued status is written (or dropped).
    pub async fn flushed(&self) {
        loop {
            let left = self.left.notified();
            if self.pending.lock().is_empty() {
                return;
            }
            left.await;
        }
    }

    /// Resolves when a pending status leaves (written or dropped), from the moment it is called.
    pub fn left(&self) -> impl Future<Output = ()> + Send + 'static {
        self.left.clone().notified_owned()
    }

    /// The newest status queued for an object.
    pub fn newest(&self, key: &StatusKey) -> Option<Newest<S>> {
        self.pending.lock().get(key).cloned()
    }

    /// Drops an object's entry once `version` is written (or not worth writing); returns false
    /// when a newer status came meanwhile.
    pub fn done(&self, key: &StatusKey, version: Option<u64>) -> bool {
        let mut pending = self.pending.lock();
        if version.is_some_and(|v| pending.get(key).is_some_and(|p| p.version != v)) {
            return false;
        }
        pending.remove(key);
        // The start-up pass queues a status per policy; the room is given back once written.
        if pending.is_empty() {
            pending.shrink_to(64);
        }
        drop(pending);
        self.left.notify_waiters();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_that_delivered_a_later_version_forgets_the_writes_before_it() {
        let recent: Recent<(bool, &str), &str> = Recent::default();
        recent.record((true, "a"), Some("10"), "a");
        recent.record((true, "b"), Some("20"), "b");
        recent.record((false, "c"), Some("5"), "c");
        recent.seen_through(15, |(split, _)| *split);
        assert_eq!(recent.newer_than(&(true, "a"), Some(1)), None);
        assert_eq!(recent.newer_than(&(true, "b"), Some(1)), Some("b"));
        assert_eq!(
            recent.newer_than(&(false, "c"), Some(1)),
            Some("c"),
            "another watch's writes stay"
        );
    }

    #[test]
    fn recent_writes_win_until_the_cache_catches_up() {
        let recent: Recent<&str, &str> = Recent::default();
        recent.record("a", Some("10"), "written");
        assert_eq!(recent.newer_than(&"a", Some(9)), Some("written"));
        assert_eq!(
            recent.newer_than(&"a", Some(10)),
            None,
            "caught up: the cache wins"
        );
        assert_eq!(
            recent.newer_than(&"a", Some(9)),
            None,
            "and the entry is gone"
        );
        recent.record("b", Some("not-a-number"), "written");
        assert_eq!(recent.newer_than(&"b", Some(1)), None);
    }

    use crate::api::Phase;

    fn phase(phase: Phase) -> FailoverPolicyStatus {
        FailoverPolicyStatus {
            phase: Some(phase),
            ..Default::default()
        }
    }

    #[test]
    fn a_written_status_is_kept_compact_unless_it_says_the_spec_is_invalid() {
        let valid = phase(Phase::Primary);
        assert!(
            matches!(WrittenStatus::of(valid.clone()), WrittenStatus::Compact(last) if last.is(&valid))
        );
        let invalid = FailoverPolicyStatus {
            conditions: vec![crate::api::Condition {
                type_: conditions::READY.into(),
                status: "False".into(),
                reason: conditions::ready::INVALID_SPEC.into(),
                message: "spec.service: required".into(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
                observed_generation: None,
            }],
            ..phase(Phase::Primary)
        };
        assert!(
            matches!(WrittenStatus::of(invalid.clone()), WrittenStatus::Whole(whole) if *whole == invalid)
        );
    }

    #[test]
    fn the_newest_status_waits_once_per_policy_and_is_read_as_the_previous_one() {
        let (statuses, mut queue) = Statuses::new();
        let key = StatusKey::new(&PolicyKey::new("ns", "web"), "u1");
        let primary = LastStatus::of(&phase(Phase::Primary));
        assert!(!statuses.queue(key.clone(), phase(Phase::Primary), Some(&primary)));
        assert!(statuses.queue(key.clone(), phase(Phase::FailedOver), None::<&LastStatus>));
        assert!(statuses.queue(key.clone(), phase(Phase::Primary), None::<&LastStatus>));
        assert_eq!(statuses.pending(&key), Some(phase(Phase::Primary)));
        assert_eq!(queue.try_recv().ok(), Some(key.clone()));
        assert!(queue.try_recv().is_err(), "one writer per policy");
        let version = statuses.newest(&key).expect("pending").version;
        assert!(!statuses.done(&key, Some(version - 1)), "a newer one came");
        assert!(statuses.done(&key, Some(version)));
        assert_eq!(statuses.pending(&key), None);
    }
}
