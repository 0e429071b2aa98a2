//! What this replica wrote, or is about to write, kept until the caches show it.
//!
//! - [`Recent`]: the last value written to an object, until its cache shows that write. A watch
//!   event for one kind (a route) can trigger a reconcile before the watch of another kind (the
//!   policy, with the status just written) has caught up. Deciding from that stale cache would
//!   write or announce a transition twice. Each entry lives only until the cache reaches the
//!   written version. Versions are compared as numbers, as etcd-backed API servers issue them; a
//!   version that is not a number simply disables the shortcut.
//! - [`Statuses`]: the statuses the status step built and the background writer has not written
//!   yet, newest per policy. The gather step reads them as a policy's previous status; the
//!   writer (`pipeline::write::statuses`) takes its work from the [`Queue`].

use std::{collections::HashMap, time::Duration};

use futures::channel::mpsc;
use kube::{Resource, ResourceExt, runtime::watcher};
use parking_lot::Mutex;

use crate::api::{FailoverPolicy, FailoverPolicyStatus};

/// Recent writes of one kind of value, by object key.
#[derive(Debug)]
pub struct Recent<T> {
    entries: Mutex<HashMap<String, (u64, T)>>,
}

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone> Recent<T> {
    /// Remembers a write that the API server acknowledged at `written_version`.
    pub fn record(&self, key: String, written_version: Option<&str>, value: T) {
        if let Some(version) = written_version.and_then(|v| v.parse::<u64>().ok()) {
            self.entries.lock().insert(key, (version, value));
        }
    }

    /// The value written last when the cache (at `cached_version`) has not caught up with it;
    /// once it has, the entry is dropped and the cache wins.
    pub fn newer_than(&self, key: &str, cached_version: Option<&str>) -> Option<T> {
        self.newer_than_version(key, cached_version.and_then(|v| v.parse::<u64>().ok()))
    }

    /// [`Recent::newer_than`] with the cache's version already a number.
    pub fn newer_than_version(&self, key: &str, cached_version: Option<u64>) -> Option<T> {
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
}

impl<T> Recent<T> {
    /// Forgets the writes of keys starting with `prefix` that one watch has delivered: it sent an
    /// event at `version`, and a watch sends events in the order of their versions, so every
    /// write up to it is in its cache. Without this, a write nobody reconciled again stayed
    /// (a status per policy after the start-up pass: 7 MiB at 10,000 policies).
    pub fn seen_through(&self, prefix: &str, version: u64) {
        let mut entries = self.entries.lock();
        if entries.is_empty() {
            return;
        }
        entries.retain(|key, (written, _)| !(key.starts_with(prefix) && *written <= version));
        if entries.is_empty() {
            entries.shrink_to(64);
        }
    }
}

/// The version up to which one watch's cache is complete, event by event: an applied or deleted
/// object's version at once; during a relist, whose objects come in no order of versions, the
/// highest listed version once it has ended.
#[derive(Debug, Default)]
pub struct Watermark {
    relist: Option<u64>,
}

impl Watermark {
    /// The version the cache is complete up to after `event` (whose object has `version`).
    pub fn after<K>(&mut self, event: &watcher::Event<K>, version: Option<u64>) -> Option<u64> {
        match event {
            watcher::Event::Apply(_) | watcher::Event::Delete(_) => version,
            watcher::Event::Init => {
                self.relist = Some(0);
                None
            }
            watcher::Event::InitApply(_) => {
                if let (Some(highest), Some(v)) = (self.relist.as_mut(), version) {
                    *highest = (*highest).max(v);
                }
                None
            }
            watcher::Event::InitDone => self.relist.take(),
        }
    }
}

/// The resource version of an event's object, as a number (etcd-backed API servers issue them
/// so); `None` for an event without an object.
pub fn event_version<K: Resource>(event: &watcher::Event<K>) -> Option<u64> {
    match event {
        watcher::Event::Apply(o) | watcher::Event::Delete(o) | watcher::Event::InitApply(o) => {
            o.meta().resource_version.as_deref()?.parse().ok()
        }
        watcher::Event::Init | watcher::Event::InitDone => None,
    }
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
    /// The statuses that may wait at once before reconciles are held back: at most about
    /// 0.4 MiB of statuses, and 16 rounds of the writer at its default concurrency of 16, which
    /// keeps it busy. 1,024 held 1.6 MiB more at the peak of a cold start.
    pub const LIMIT: usize = 256;

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

    /// Whether [`Statuses::LIMIT`] statuses wait: no reconcile should add more until some are
    /// written.
    pub fn full(&self) -> bool {
        self.pending.lock().len() >= Self::LIMIT
    }

    /// Waits until every queued status is written (or dropped).
    pub async fn flushed(&self) {
        while !self.pending.lock().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The newest status queued for a policy (its key): namespace, name, status and version.
    pub fn newest(&self, key: &str) -> Option<(String, String, FailoverPolicyStatus, u64)> {
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
    pub fn done(&self, key: &str, version: Option<u64>) -> bool {
        let mut pending = self.pending.lock();
        if version.is_some_and(|v| pending.get(key).is_some_and(|p| p.version != v)) {
            return false;
        }
        pending.remove(key);
        // The start-up pass queues a status per policy; the room is given back once written.
        if pending.is_empty() {
            pending.shrink_to(64);
        }
        true
    }
}

/// The key under which a policy's written status is remembered.
pub fn status_key(policy: &FailoverPolicy) -> String {
    format!(
        "{}/{}/{}",
        policy.namespace().unwrap_or_default(),
        policy.name_any(),
        policy.uid().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_that_delivered_a_later_version_forgets_the_writes_before_it() {
        let recent: Recent<&str> = Recent::default();
        recent.record("trafficsplit/ns/a".into(), Some("10"), "a");
        recent.record("trafficsplit/ns/b".into(), Some("20"), "b");
        recent.record("httproute/ns/c".into(), Some("5"), "c");
        recent.seen_through("trafficsplit/", 15);
        assert_eq!(recent.newer_than("trafficsplit/ns/a", Some("1")), None);
        assert_eq!(recent.newer_than("trafficsplit/ns/b", Some("1")), Some("b"));
        assert_eq!(
            recent.newer_than("httproute/ns/c", Some("1")),
            Some("c"),
            "another watch's writes stay"
        );
    }

    #[test]
    fn a_relist_sets_the_watermark_only_when_it_ends() {
        let mut mark = Watermark::default();
        assert_eq!(
            mark.after(&watcher::Event::<()>::Apply(()), Some(7)),
            Some(7)
        );
        assert_eq!(mark.after(&watcher::Event::<()>::Init, None), None);
        assert_eq!(mark.after(&watcher::Event::InitApply(()), Some(30)), None);
        assert_eq!(mark.after(&watcher::Event::InitApply(()), Some(20)), None);
        assert_eq!(mark.after(&watcher::Event::<()>::InitDone, None), Some(30));
    }

    #[test]
    fn recent_writes_win_until_the_cache_catches_up() {
        let recent: Recent<&str> = Recent::default();
        recent.record("a".into(), Some("10"), "written");
        assert_eq!(recent.newer_than("a", Some("9")), Some("written"));
        assert_eq!(
            recent.newer_than("a", Some("10")),
            None,
            "caught up: the cache wins"
        );
        assert_eq!(
            recent.newer_than("a", Some("9")),
            None,
            "and the entry is gone"
        );
        recent.record("b".into(), Some("not-a-number"), "written");
        assert_eq!(recent.newer_than("b", Some("1")), None);
    }

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
