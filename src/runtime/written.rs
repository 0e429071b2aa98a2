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
//!   read as the object's previous status; the writer (`pipeline::write::statuses`) takes them
//!   in turns by namespace ([`Statuses::next`]), and a failed write waits for its retry without
//!   holding a writer.

use std::{
    collections::{BTreeMap, HashMap},
    future::Future,
    hash::Hash,
    sync::Arc,
    time::Duration,
};

use parking_lot::Mutex;
use tokio::{sync::Notify, time::Instant};

use crate::runtime::{
    fair::{self, Share, Turns},
    retry,
};
use failover_core::{
    api::{FailoverPolicyStatus, conditions},
    last_status::{Compact, LastStatus},
    observation::{Namespace, PolicyKey},
};

/// Recent writes of one kind of value, by object key.
#[derive(Debug)]
pub struct Recent<K, T> {
    entries: Mutex<HashMap<K, (u64, T)>>,
    /// The writes sent and not answered yet: the watch may deliver one before its answer.
    in_flight: Mutex<HashMap<K, T>>,
}

impl<K, T> Default for Recent<K, T> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            in_flight: Mutex::new(HashMap::new()),
        }
    }
}

/// A write in flight ([`Recent::sending`]), until dropped.
pub struct Sending<'a, K: Hash + Eq, T> {
    recent: &'a Recent<K, T>,
    key: Option<K>,
}

impl<K: Hash + Eq, T> Drop for Sending<'_, K, T> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.recent.in_flight.lock().remove(&key);
        }
    }
}

impl<K: Hash + Eq + Clone, T: Clone> Recent<K, T> {
    /// A write of `value` to the object is sent: until the returned guard is dropped (once its
    /// answer is recorded, or it failed), an object that says `value` may be its echo.
    pub fn sending(&self, key: K, value: T) -> Sending<'_, K, T> {
        self.in_flight.lock().insert(key.clone(), value);
        Sending {
            recent: self,
            key: Some(key),
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

    /// Whether the object at `version` is this replica's own write, not yet seen (its echo): the
    /// write acknowledged at exactly that version, its value as `same` says; or, before its
    /// answer came, the write in flight, if its value is the object's. An object at any other
    /// version, or a version that is not a number, is someone else's (or a later) change.
    pub fn wrote(&self, key: &K, version: Option<u64>, same: impl Fn(&T) -> bool) -> bool {
        let acknowledged = match (self.entries.lock().get(key), version) {
            (Some((written, value)), Some(version)) => *written == version && same(value),
            _ => false,
        };
        acknowledged || self.in_flight.lock().get(key).is_some_and(&same)
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

/// Why a status write failed, as the writer tells it apart: the API server refused this status
/// for good (its size or content: only a change of the object or the status helps), or the
/// write may succeed when tried again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Refused for what it is: retried rarely, said once.
    Refused(&'static str),
    /// The API server did not take it now.
    Transient(&'static str),
}

impl Failure {
    /// The reason, as the failures metric labels it.
    pub fn reason(self) -> &'static str {
        match self {
            Failure::Refused(reason) | Failure::Transient(reason) => reason,
        }
    }

    /// The delay before the `failures`-th retry in a row: a transient failure's backoff
    /// ([`retry::FIRST`] doubling to [`retry::MAX`]), a refusal's from [`retry::MAX`] doubling
    /// to [`REFUSED_MAX`].
    fn delay(self, failures: u32) -> Duration {
        let (first, max) = match self {
            Failure::Transient(_) => (retry::FIRST, retry::MAX),
            Failure::Refused(_) => (retry::MAX, REFUSED_MAX),
        };
        first
            .saturating_mul(1 << failures.saturating_sub(1).min(16))
            .min(max)
    }
}

/// The longest pause between two tries of a status the API server refused.
pub const REFUSED_MAX: Duration = Duration::from_secs(300);

/// Where an object's status is: waiting for a writer, being written, or waiting to be tried
/// again after a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Ready,
    Writing,
    Retry(Instant),
}

/// An object's status waiting to be written.
#[derive(Debug)]
struct Pending<S> {
    newest: Newest<S>,
    stage: Stage,
    /// Failures in a row, and the last one.
    failures: u32,
    failure: Option<Failure>,
}

/// What waits, and in which order it is taken.
struct Waiting<S> {
    pending: HashMap<StatusKey, Pending<S>>,
    /// The objects whose status is ready to be written, in turns by namespace.
    ready: Turns<Namespace, StatusKey>,
    /// The objects to try again, by when.
    retries: BTreeMap<(Instant, u64), StatusKey>,
    sequence: u64,
    /// The objects being written, by namespace.
    writing_in: HashMap<Namespace, usize>,
    /// The objects being written, in all.
    writing: usize,
}

/// What a failed write came to for its object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failed {
    /// When it is tried again.
    pub retry_in: Duration,
    /// This failure is news: the first of a run, or another reason than the last one.
    pub news: bool,
}

/// The statuses of one kind waiting to be written, by object, and the order the writers take
/// them in: in turns by namespace, so one namespace's many statuses delay another's by one turn
/// each; a status whose write failed is tried again after its backoff, and meanwhile holds no
/// writer.
pub struct Statuses<S> {
    waiting: Mutex<Waiting<S>>,
    /// Notified when a status becomes ready, or a retry is set.
    arrived: Notify,
    /// Notified whenever a pending status leaves, or fails.
    left: Arc<Notify>,
}

impl<S: Clone> Statuses<S> {
    /// The statuses that may wait at once before a pass over every policy is held back: 16
    /// rounds of the writer at its default concurrency of 16, which keeps it busy, and no more,
    /// as every status waiting adds to the peak of a cold start. Reconciles of a change are never
    /// held back by it.
    pub const LIMIT: usize = 256;

    /// Nothing pending.
    pub fn new() -> Self {
        Self {
            waiting: Mutex::new(Waiting {
                pending: HashMap::new(),
                ready: Turns::default(),
                retries: BTreeMap::new(),
                sequence: 0,
                writing_in: HashMap::new(),
                writing: 0,
            }),
            arrived: Notify::new(),
            left: Arc::default(),
        }
    }

    /// The status queued or being written for an object, newer than any cache.
    pub fn pending(&self, key: &StatusKey) -> Option<S> {
        let waiting = self.waiting.lock();
        waiting.pending.get(key).map(|p| p.newest.status.clone())
    }

    /// Whether the object's status waiting (or being written) is one `is` accepts.
    pub fn pending_is(&self, key: &StatusKey, is: impl FnOnce(&S) -> bool) -> bool {
        let waiting = self.waiting.lock();
        waiting
            .pending
            .get(key)
            .is_some_and(|p| is(&p.newest.status))
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
        let mut waiting = self.waiting.lock();
        match waiting.pending.get_mut(&key) {
            // Its writer is at work and writes this one next, or it waits its turn or its retry.
            Some(p) => {
                p.newest.status = status;
                p.newest.version += 1;
            }
            None => {
                let pending = Pending {
                    newest: Newest { status, version: 0 },
                    stage: Stage::Ready,
                    failures: 0,
                    failure: None,
                };
                waiting.ready.push(&key.object.namespace, key.clone());
                waiting.pending.insert(key, pending);
                drop(waiting);
                self.arrived.notify_one();
            }
        }
        true
    }

    /// Whether [`Statuses::LIMIT`] statuses wait: a pass over every policy should add no more
    /// until some are written.
    pub fn full(&self) -> bool {
        self.waiting.lock().pending.len() >= Self::LIMIT
    }

    /// Waits until every queued status is written, dropped, or failed since it was queued (a
    /// status the API server refuses does not hold a shutdown up).
    pub async fn flushed(&self) {
        loop {
            let left = self.left.notified();
            let busy = {
                let waiting = self.waiting.lock();
                waiting
                    .pending
                    .values()
                    .any(|p| !matches!(p.stage, Stage::Retry(_)))
            };
            if !busy {
                return;
            }
            left.await;
        }
    }

    /// Resolves when a pending status leaves (written or dropped) or fails, from the moment it
    /// is called.
    pub fn left(&self) -> impl Future<Output = ()> + Send + 'static {
        self.left.clone().notified_owned()
    }

    /// The next object to write, in turn by namespace (a retry that fell due joins the turns),
    /// of a namespace that may write one more (`share`), and its newest status; it is being
    /// written until [`Self::done`] or [`Self::failed`].
    pub async fn next(&self, share: Share) -> (StatusKey, Newest<S>) {
        loop {
            let arrived = self.arrived.notified();
            let due = {
                let mut waiting = self.waiting.lock();
                let now = Instant::now();
                waiting.fire(now);
                if let Some(next) = waiting.take(share) {
                    return next;
                }
                waiting.retries.keys().next().map(|(at, _)| *at)
            };
            fair::until_arrived_or_due(arrived, due).await;
        }
    }

    /// The newest status queued for an object.
    pub fn newest(&self, key: &StatusKey) -> Option<Newest<S>> {
        let waiting = self.waiting.lock();
        waiting.pending.get(key).map(|p| p.newest.clone())
    }

    /// `version` of an object's status is written (`None`: not worth writing, the object is
    /// gone): its entry goes, unless a newer status came meanwhile, which then waits its turn
    /// (returns false).
    pub fn done(&self, key: &StatusKey, version: Option<u64>) -> bool {
        let mut waiting = self.waiting.lock();
        waiting.written(key);
        let newer = version.is_some_and(|v| {
            waiting
                .pending
                .get(key)
                .is_some_and(|p| p.newest.version != v)
        });
        if newer {
            if let Some(p) = waiting.pending.get_mut(key) {
                p.stage = Stage::Ready;
                p.failures = 0;
                p.failure = None;
            }
            waiting.ready.push(&key.object.namespace, key.clone());
            drop(waiting);
            self.arrived.notify_one();
            return false;
        }
        waiting.pending.remove(key);
        // The start-up pass queues a status per policy; the room is given back once written.
        if waiting.pending.is_empty() {
            waiting.pending.shrink_to(64);
        }
        drop(waiting);
        self.left.notify_waiters();
        // Its namespace may have another to write now.
        self.arrived.notify_one();
        true
    }

    /// Writing an object's status failed: it is tried again after its backoff (its newest status
    /// then), and holds no writer meanwhile.
    pub fn failed(&self, key: &StatusKey, failure: Failure) -> Failed {
        let mut waiting = self.waiting.lock();
        waiting.written(key);
        let at = Instant::now();
        let Some(p) = waiting.pending.get_mut(key) else {
            return Failed {
                retry_in: Duration::ZERO,
                news: false,
            };
        };
        p.failures = p.failures.saturating_add(1);
        let news = p.failure.is_none_or(|f| f.reason() != failure.reason());
        p.failure = Some(failure);
        let retry_in = failure.delay(p.failures);
        p.stage = Stage::Retry(at + retry_in);
        waiting.sequence += 1;
        let slot = (at + retry_in, waiting.sequence);
        waiting.retries.insert(slot, key.clone());
        drop(waiting);
        self.arrived.notify_one();
        self.left.notify_waiters();
        Failed { retry_in, news }
    }

    /// How many objects' statuses wait, and how many of them wait for a retry.
    pub fn counts(&self) -> (usize, usize) {
        let waiting = self.waiting.lock();
        (waiting.pending.len(), waiting.retries.len())
    }
}

impl<S: Clone> Default for Statuses<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S: Clone> Waiting<S> {
    /// Moves the retries due by `now` to the turns.
    fn fire(&mut self, now: Instant) {
        while let Some(entry) = self.retries.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            if let Some(p) = self.pending.get_mut(&key)
                && matches!(p.stage, Stage::Retry(_))
            {
                p.stage = Stage::Ready;
                let namespace = key.object.namespace.clone();
                self.ready.push(&namespace, key);
            }
        }
        if self.retries.is_empty() && self.pending.is_empty() {
            self.retries = BTreeMap::new();
        }
    }

    /// The next ready object in turn, of a namespace that may write one more (`share`), now
    /// being written.
    fn take(&mut self, share: Share) -> Option<(StatusKey, Newest<S>)> {
        loop {
            let (writing_in, writing) = (&self.writing_in, self.writing);
            let key = self.ready.pop_where(|ns| {
                share.may_take(writing_in.get(ns).copied().unwrap_or(0), writing)
            })?;
            let Some(p) = self.pending.get_mut(&key) else {
                continue;
            };
            if p.stage != Stage::Ready {
                continue;
            }
            p.stage = Stage::Writing;
            let newest = p.newest.clone();
            *self
                .writing_in
                .entry(key.object.namespace.clone())
                .or_default() += 1;
            self.writing += 1;
            return Some((key, newest));
        }
    }

    /// A write of `key` ended.
    fn written(&mut self, key: &StatusKey) {
        let writing = self
            .pending
            .get(key)
            .is_some_and(|p| p.stage == Stage::Writing);
        let namespace = &key.object.namespace;
        if writing && let Some(n) = self.writing_in.get_mut(namespace) {
            self.writing -= 1;
            *n -= 1;
            if *n == 0 {
                self.writing_in.remove(namespace);
            }
        }
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

    #[test]
    fn only_the_object_at_the_written_version_with_the_written_value_is_an_echo() {
        let recent: Recent<&str, &str> = Recent::default();
        recent.record("a", Some("10"), "written");
        assert!(recent.wrote(&"a", Some(10), |v| *v == "written"));
        assert!(
            !recent.wrote(&"a", Some(11), |_| true),
            "a later version is someone's change"
        );
        assert!(!recent.wrote(&"a", Some(10), |v| *v == "other"));
        assert!(!recent.wrote(&"a", None, |_| true));
        assert!(!recent.wrote(&"b", Some(10), |_| true), "never written");
        recent.seen_through(10, |_| true);
        assert!(!recent.wrote(&"a", Some(10), |_| true), "seen: forgotten");
        let sending = recent.sending("a", "next");
        assert!(
            recent.wrote(&"a", Some(12), |v| *v == "next"),
            "delivered before its answer"
        );
        assert!(!recent.wrote(&"a", Some(12), |v| *v == "other"));
        drop(sending);
        assert!(!recent.wrote(&"a", Some(12), |v| *v == "next"));
    }

    use failover_core::api::Phase;

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
            conditions: vec![failover_core::api::Condition {
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

    #[tokio::test]
    async fn the_newest_status_waits_once_per_policy_and_is_read_as_the_previous_one() {
        let statuses = Statuses::new();
        let key = StatusKey::new(&PolicyKey::new("ns", "web"), "u1");
        let primary = LastStatus::of(&phase(Phase::Primary));
        assert!(!statuses.queue(key.clone(), phase(Phase::Primary), Some(&primary)));
        assert!(statuses.queue(key.clone(), phase(Phase::FailedOver), None::<&LastStatus>));
        assert!(statuses.queue(key.clone(), phase(Phase::Primary), None::<&LastStatus>));
        assert_eq!(statuses.pending(&key), Some(phase(Phase::Primary)));
        let (taken, newest) = statuses.next(Share::of(4)).await;
        assert_eq!((taken, newest.version), (key.clone(), 1));
        assert!(
            statuses.waiting.lock().take(Share::of(4)).is_none(),
            "one writer per policy"
        );
        assert!(statuses.queue(key.clone(), phase(Phase::FailedOver), None::<&LastStatus>));
        assert!(!statuses.done(&key, Some(1)), "a newer one came");
        let (_, newest) = statuses.next(Share::of(4)).await;
        assert!(statuses.done(&key, Some(newest.version)));
        assert_eq!(statuses.pending(&key), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_write_holds_no_writer_and_is_tried_again_after_its_backoff() {
        let statuses = Statuses::new();
        let (stuck, other) = (
            StatusKey::new(&PolicyKey::new("hostile", "huge"), "u1"),
            StatusKey::new(&PolicyKey::new("team", "web"), "u2"),
        );
        statuses.queue(stuck.clone(), phase(Phase::Primary), None::<&LastStatus>);
        let (taken, _) = statuses.next(Share::of(4)).await;
        assert_eq!(taken, stuck);
        let refused = Failure::Refused("too_large");
        let failed = statuses.failed(&stuck, refused);
        assert_eq!(
            failed,
            Failed {
                retry_in: retry::MAX,
                news: true
            }
        );
        // Another object's status is written meanwhile.
        statuses.queue(other.clone(), phase(Phase::Primary), None::<&LastStatus>);
        let (taken, newest) = statuses.next(Share::of(4)).await;
        assert_eq!(taken, other);
        assert!(statuses.done(&other, Some(newest.version)));
        assert_eq!(
            statuses.counts(),
            (1, 1),
            "the refused one waits for its retry"
        );
        // A shutdown does not wait for it.
        tokio::time::timeout(Duration::from_millis(1), statuses.flushed())
            .await
            .expect("flushed without the refused status");
        let started = Instant::now();
        let (taken, _) = statuses.next(Share::of(4)).await;
        assert_eq!(
            (taken.clone(), started.elapsed()),
            (stuck.clone(), retry::MAX)
        );
        let again = statuses.failed(&stuck, refused);
        assert_eq!(
            again,
            Failed {
                retry_in: retry::MAX * 2,
                news: false
            }
        );
        assert_eq!(
            Failure::Transient("unavailable").delay(1),
            retry::FIRST,
            "a transient failure backs off as any write"
        );
        assert_eq!(refused.delay(30), REFUSED_MAX);
    }

    #[tokio::test]
    async fn a_namespace_at_its_share_writes_its_next_status_once_one_is_written() {
        let statuses = Arc::new(Statuses::new());
        let (a, b) = (
            StatusKey::new(&PolicyKey::new("ns", "a"), "u1"),
            StatusKey::new(&PolicyKey::new("ns", "b"), "u2"),
        );
        for key in [&a, &b] {
            statuses.queue(key.clone(), phase(Phase::Primary), None::<&LastStatus>);
        }
        let (first, newest) = statuses.next(Share::of(1)).await;
        let waiting = tokio::spawn({
            let statuses = statuses.clone();
            async move { statuses.next(Share::of(1)).await.0 }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "one of the namespace at a time");
        statuses.done(&first, Some(newest.version));
        let second = tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("the next one goes once the first is written")
            .expect("task");
        assert_ne!(first, second);
    }

    #[tokio::test]
    async fn statuses_are_taken_in_turns_by_namespace() {
        let statuses = Statuses::new();
        for n in 0..5 {
            let key = StatusKey::new(&PolicyKey::new("noisy", &format!("p{n}")), "u");
            statuses.queue(key, phase(Phase::Primary), None::<&LastStatus>);
        }
        let quiet = StatusKey::new(&PolicyKey::new("quiet", "web"), "u");
        statuses.queue(quiet.clone(), phase(Phase::Primary), None::<&LastStatus>);
        let (first, _) = statuses.next(Share::of(4)).await;
        let (second, _) = statuses.next(Share::of(4)).await;
        assert_eq!(&*first.object.namespace, "noisy");
        assert_eq!(
            second, quiet,
            "the quiet namespace's one status goes second"
        );
    }
}
