//! The work queue that runs reconciles: requests for policies in, one reconcile per policy at a
//! time, at most `concurrency` at once, and a reconcile's wish to run again later.
//!
//! kube-runtime's `Controller` did this here before; its scheduler puts every request, even an
//! immediate one, on a timer queue rounded up to the next millisecond, then waits for the
//! runtime's millisecond timer: a large share of the path from an EndpointSlice write to the
//! route change. This queue runs an immediate request at once, never through a timer, and keeps
//! timers for what is due later. Everything else is as kube-runtime does it:
//!
//! - requests merge: a request for a queued policy adds nothing, one for a running policy runs
//!   it once more right after;
//! - a request replaces a later timer of the same policy; a reconcile's `After(d)` sets a timer
//!   unless an earlier one is set;
//! - nothing runs before the policy table has its first list; a policy no longer in the table
//!   is skipped;
//! - on shutdown no reconcile starts, and those running finish.
//!
//! One thing kube-runtime's controller does not do: no reconcile starts while the statuses
//! waiting to be written are at their limit (`held_back`). A pass over every policy (the start,
//! a regained leadership) otherwise builds a status per policy faster than they are written,
//! each held until written, so what waits would grow with the policies. PolicyEntry back, at most the
//! limit waits; the pass takes as long, the status writer being its pace anyway. The
//! controller also holds the start-up pass back until every watch it reads has listed.

use std::{
    collections::{BTreeMap, HashMap, HashSet, VecDeque},
    future::Future,
    sync::Arc,
};

use futures::{Stream, StreamExt, future::BoxFuture, stream::FuturesUnordered};
use tokio::time::Instant;

use crate::{
    observation::PolicyKey,
    pipeline::reconcile::Next,
    sources::{Context, local::policies::PolicyEntry},
};

/// A request for work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Reconcile this policy.
    One(PolicyKey),
    /// Reconcile every policy in the table.
    All,
    /// The table has a complete list: reconciles may start.
    Listed,
}

type Key = PolicyKey;

/// Room kept in the queue when it drains.
const SPARE: usize = 256;

/// What holds reconciles back (`holds`), and a notice that this may have changed (`released`).
pub trait HoldBack {
    /// Whether no reconcile may start now.
    fn holds(&self) -> bool;
    /// Resolves when what holds reconciles back may have let go; it hears every change from
    /// the moment it is made, so it is made before the check that decides to wait for it.
    fn released(&self) -> BoxFuture<'static, ()>;
}

/// The queue's bookkeeping, apart from the running futures.
#[derive(Default)]
struct Queue {
    /// Policies to run, each with when it was queued.
    ready: VecDeque<(Key, Instant)>,
    queued: HashSet<Key>,
    running: HashSet<Key>,
    again: HashSet<Key>,
    timers: BTreeMap<(Instant, u64), Key>,
    timer_of: HashMap<Key, (Instant, u64)>,
    sequence: u64,
}

impl Queue {
    /// A request to run `key` now.
    fn now(&mut self, key: Key) {
        self.cancel_timer(&key);
        if self.running.contains(&key) {
            self.again.insert(key);
        } else if self.queued.insert(key.clone()) {
            self.ready.push_back((key, Instant::now()));
        }
    }

    /// A request to run `key` at `at`, unless it runs earlier anyway.
    fn at(&mut self, key: Key, at: Instant) {
        if self.queued.contains(&key) || self.again.contains(&key) {
            return;
        }
        if self.timer_of.get(&key).is_some_and(|(t, _)| *t <= at) {
            return;
        }
        self.cancel_timer(&key);
        self.sequence += 1;
        self.timers.insert((at, self.sequence), key.clone());
        self.timer_of.insert(key, (at, self.sequence));
    }

    fn cancel_timer(&mut self, key: &Key) {
        if let Some(slot) = self.timer_of.remove(key) {
            self.timers.remove(&slot);
        }
    }

    /// The earliest timer.
    fn next_due(&self) -> Option<Instant> {
        self.timers.keys().next().map(|(at, _)| *at)
    }

    /// Moves the timers due by `now` to the ready queue.
    fn fire(&mut self, now: Instant) {
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            self.timer_of.remove(&key);
            self.now(key);
        }
    }

    /// Whether a policy waits to run.
    fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Policies waiting to run.
    fn depth(&self) -> usize {
        self.ready.len()
    }

    /// The next policy to run, if one waits, and how long it waited.
    fn take(&mut self) -> Option<(Key, std::time::Duration)> {
        let (key, queued) = self.ready.pop_front()?;
        self.queued.remove(&key);
        self.running.insert(key.clone());
        // A burst (the start-up pass queues every policy) leaves room for all of them; it is
        // given back once drained, so an idle queue keeps room for `SPARE` only.
        if self.ready.is_empty() && self.ready.capacity() > SPARE {
            self.ready.shrink_to(SPARE);
            self.queued.shrink_to(SPARE);
        }
        Some((key, queued.elapsed()))
    }

    /// A reconcile of `key` ended at `now` and wants `next`.
    fn finished(&mut self, key: Key, next: Next, now: Instant) {
        self.running.remove(&key);
        if self.again.remove(&key) {
            self.now(key);
        } else if let Next::After(delay) = next {
            self.at(key, now + delay);
        }
    }
}

/// Runs `reconcile` for every requested policy until `shutdown`, then waits for the running ones;
/// starts none while `held_back` holds them.
pub async fn run<F, Fut>(
    ctx: Arc<Context>,
    requests: impl Stream<Item = Request>,
    concurrency: usize,
    held_back: impl HoldBack,
    reconcile: F,
    shutdown: impl Future<Output = ()>,
) where
    F: Fn(PolicyEntry) -> Fut,
    Fut: Future<Output = Next>,
{
    let mut queue = Queue::default();
    let mut running = FuturesUnordered::new();
    let mut requests = std::pin::pin!(requests.fuse());
    let mut shutdown = std::pin::pin!(shutdown);
    let (mut ready, mut stopping) = (ctx.caches.table.read().listed(), false);
    loop {
        let mut released = None;
        while ready && !stopping && running.len() < concurrency.max(1) {
            if queue.has_ready() && held_back.holds() {
                let notice = held_back.released();
                // Checked again once the notice hears: a release in between is not missed.
                if held_back.holds() {
                    released = Some(notice);
                    break;
                }
            }
            let Some((key, waited)) = queue.take() else {
                break;
            };
            ctx.metrics().queue_waited(waited);
            let policy = ctx.caches.table.read().get(&key);
            match policy {
                Some(policy) => {
                    let run = reconcile(policy);
                    running.push(async move { (key, run.await) });
                }
                None => queue.finished(key, Next::Wait, Instant::now()),
            }
        }
        ctx.metrics().queue_depth(queue.depth());
        if stopping && running.is_empty() {
            return;
        }
        let due = queue.next_due();
        tokio::select! {
            biased;
            Some((key, next)) = running.next(), if !running.is_empty() => queue.finished(key, next, Instant::now()),
            _ = &mut shutdown, if !stopping => stopping = true,
            request = requests.next(), if !stopping => match request {
                Some(Request::One(key)) => queue.now(key),
                Some(Request::All) => ctx.caches.table.read().keys().into_iter().for_each(|key| queue.now(key)),
                Some(Request::Listed) => ready = true,
                None => stopping = true,
            },
            () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => queue.fire(Instant::now()),
            () = async { if let Some(notice) = released.as_mut() { notice.await } }, if released.is_some() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn key(name: &str) -> Key {
        PolicyKey::new("ns", name)
    }

    #[test]
    fn requests_merge_and_one_for_a_running_policy_runs_it_again_after() {
        let mut q = Queue::default();
        q.now(key("a"));
        q.now(key("a"));
        q.now(key("b"));
        assert_eq!(q.take().map(|(k, _)| k), Some(key("a")));
        q.now(key("a"));
        assert_eq!(
            q.take().map(|(k, _)| k),
            Some(key("b")),
            "a runs once at a time"
        );
        assert_eq!(q.take().map(|(k, _)| k), None);
        let now = Instant::now();
        q.finished(key("a"), Next::Wait, now);
        assert_eq!(
            q.take().map(|(k, _)| k),
            Some(key("a")),
            "the request made while it ran"
        );
        q.finished(key("a"), Next::Wait, now);
        assert_eq!(q.take().map(|(k, _)| k), None);
    }

    #[test]
    fn a_wish_to_run_later_is_kept_until_due_and_an_earlier_request_replaces_it() {
        let mut q = Queue::default();
        q.now(key("a"));
        assert_eq!(q.take().map(|(k, _)| k), Some(key("a")));
        let start = Instant::now();
        q.finished(key("a"), Next::After(Duration::from_secs(10)), start);
        assert_eq!(q.next_due(), Some(start + Duration::from_secs(10)));
        q.at(key("a"), start + Duration::from_secs(20));
        assert_eq!(
            q.next_due(),
            Some(start + Duration::from_secs(10)),
            "the earlier wins"
        );
        q.fire(start + Duration::from_secs(5));
        assert_eq!(q.take().map(|(k, _)| k), None, "not due yet");
        q.now(key("a"));
        assert_eq!(q.next_due(), None, "a request replaces the timer");
        assert_eq!(q.take().map(|(k, _)| k), Some(key("a")));
        q.finished(key("a"), Next::After(Duration::from_secs(1)), start);
        q.fire(start + Duration::from_secs(2));
        assert_eq!(q.take().map(|(k, _)| k), Some(key("a")));
    }
}
