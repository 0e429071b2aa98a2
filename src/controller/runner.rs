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
//! What kube-runtime's controller does not do:
//!
//! - Two lanes. A policy woken by a change (a readiness change, a user's edit, a health verdict,
//!   a hold falling due) waits in the *event* lane, in turns by namespace (one namespace's many
//!   woken policies delay another's one by a turn each); a pass over every policy (the start, a
//!   gained leadership, the resync, a CRD that turned up) queues them in the *bulk* lane, which
//!   runs only when no woken policy waits and uses at most three quarters of the concurrency. A
//!   policy of the bulk lane that is woken moves to the event lane. One namespace's woken
//!   policies run on an eighth of the slots, more only while a quarter of them stay free
//!   ([`Share`]): a namespace's storm of readiness changes never holds every slot, and its mass
//!   failover is not run one policy at a time.
//! - A bulk pass is held back while the statuses waiting to be written are at their limit
//!   (`HoldBack`): a pass over every policy otherwise builds a status per policy faster than
//!   they are written, each held until written. A woken policy never waits for statuses: back
//!   pressure on statuses never holds a route write back. Both lanes wait, at start only and for
//!   at most 10 s, until every watch the controller reads has listed.

use std::{
    collections::{BTreeMap, HashMap, HashSet, VecDeque},
    future::Future,
    sync::Arc,
};

use futures::{Stream, StreamExt, future::BoxFuture, stream::FuturesUnordered};
use tokio::time::Instant;

use crate::{
    runtime::fair::{Share, Turns},
    sources::{Context, local::policies::PolicyEntry},
};
use failover_core::{
    observation::{Namespace, PolicyKey},
    reconcile::Next,
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

/// Where a policy waits: woken by a change, or queued by a pass over every policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Woken by a change: first, in turns by namespace.
    Event,
    /// Queued by a pass over every policy: when no woken policy waits.
    Bulk,
}

/// What holds reconciles back (`holds`), and a notice that this may have changed (`released`).
pub trait HoldBack {
    /// Whether no reconcile of `lane` may start now.
    fn holds(&self, lane: Lane) -> bool;
    /// Resolves when what holds reconciles back may have let go; it hears every change from
    /// the moment it is made, so it is made before the check that decides to wait for it.
    fn released(&self) -> BoxFuture<'static, ()>;
}

/// The queue's bookkeeping, apart from the running futures.
#[derive(Default)]
struct Queue {
    /// Policies woken by a change, in turns by namespace, each with when it was queued.
    events: Turns<Namespace, (Key, Instant)>,
    /// Policies a pass over every policy queued, in order.
    bulk: VecDeque<(Key, Instant)>,
    /// Every policy waiting, and its lane (an entry of the other lane is stale).
    queued: HashMap<Key, Lane>,
    /// Every policy running, and the lane it was taken from.
    running: HashMap<Key, Lane>,
    /// How many of those were taken from the bulk lane.
    running_bulk: usize,
    /// How many of those were woken, by namespace.
    running_in: HashMap<Namespace, usize>,
    again: HashSet<Key>,
    timers: BTreeMap<(Instant, u64), Key>,
    timer_of: HashMap<Key, (Instant, u64)>,
    sequence: u64,
}

impl Queue {
    /// A request to run `key` now, woken by a change.
    fn now(&mut self, key: Key) {
        self.cancel_timer(&key);
        if self.running.contains_key(&key) {
            self.again.insert(key);
            return;
        }
        match self.queued.insert(key.clone(), Lane::Event) {
            Some(Lane::Event) => {}
            // New, or moved from the bulk lane (its entry there is stale now).
            _ => self
                .events
                .push(&key.namespace.clone(), (key, Instant::now())),
        }
    }

    /// A request to run `key` in a pass over every policy.
    fn bulk(&mut self, key: Key) {
        if self.running.contains_key(&key) {
            self.again.insert(key);
        } else if !self.queued.contains_key(&key) {
            self.queued.insert(key.clone(), Lane::Bulk);
            self.bulk.push_back((key, Instant::now()));
        }
    }

    /// A request to run `key` at `at`, unless it runs earlier anyway.
    fn at(&mut self, key: Key, at: Instant) {
        if self.queued.contains_key(&key) || self.again.contains(&key) {
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

    /// Moves the timers due by `now` to the event lane (a hold that falls due is a change).
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

    /// The next woken policy of a namespace that may run one more (`share`), and how
    /// long it waited.
    fn take_event(&mut self, share: Share) -> Option<(Key, std::time::Duration)> {
        loop {
            let (running_in, running) = (&self.running_in, self.running.len());
            let (key, queued) = self.events.pop_where(|ns| {
                share.may_take(running_in.get(ns).copied().unwrap_or(0), running)
            })?;
            // An entry whose policy moved or left is stale.
            if self.queued.get(&key) == Some(&Lane::Event) {
                *self.running_in.entry(key.namespace.clone()).or_default() += 1;
                return Some(self.started(key, Lane::Event, queued));
            }
        }
    }

    /// The next policy of the bulk lane, and how long it waited.
    fn take_bulk(&mut self) -> Option<(Key, std::time::Duration)> {
        while let Some((key, queued)) = self.bulk.pop_front() {
            if self.queued.get(&key) == Some(&Lane::Bulk) {
                self.running_bulk += 1;
                return Some(self.started(key, Lane::Bulk, queued));
            }
        }
        None
    }

    /// Whether a policy waits in the bulk lane (its first entry not stale).
    fn has_bulk(&mut self) -> bool {
        while let Some((key, _)) = self.bulk.front() {
            if self.queued.get(key) == Some(&Lane::Bulk) {
                return true;
            }
            self.bulk.pop_front();
        }
        false
    }

    /// Policies waiting to run.
    fn depth(&self) -> usize {
        self.queued.len()
    }

    /// `key` leaves its lane and runs: how long it waited.
    fn started(&mut self, key: Key, lane: Lane, queued: Instant) -> (Key, std::time::Duration) {
        self.queued.remove(&key);
        self.running.insert(key.clone(), lane);
        // A burst (the start-up pass queues every policy) leaves room for all of them; it is
        // given back once drained, so an idle queue keeps room for `SPARE` only.
        if self.bulk.is_empty() && self.bulk.capacity() > SPARE {
            self.bulk.shrink_to(SPARE);
        }
        if self.queued.is_empty() && self.queued.capacity() > SPARE {
            self.queued.shrink_to(SPARE);
        }
        (key, queued.elapsed())
    }

    /// A reconcile of `key` ended at `now` and wants `next`.
    fn finished(&mut self, key: Key, next: Next, now: Instant) {
        match self.running.remove(&key) {
            Some(Lane::Bulk) => self.running_bulk -= 1,
            Some(Lane::Event) => {
                if let Some(n) = self.running_in.get_mut(&key.namespace) {
                    *n -= 1;
                    if *n == 0 {
                        self.running_in.remove(&key.namespace);
                    }
                }
            }
            None => {}
        }
        if self.again.remove(&key) {
            self.now(key);
        } else if let Next::After(delay) = next {
            self.at(key, now + delay);
        }
    }
}

impl Queue {
    /// What may start now, with `concurrency` slots: a woken policy first; one of the bulk lane
    /// while fewer than three quarters of the slots run such reconciles; none while `held_back`
    /// holds its lane (then the notice that it may have let go).
    fn next_start(&mut self, concurrency: usize, held_back: &impl HoldBack) -> Start {
        if self.running.len() >= concurrency {
            return Start::Nothing;
        }
        let lane = if !self.events.is_empty() {
            Lane::Event
        } else if self.has_bulk() && self.running_bulk < bulk_concurrency(concurrency) {
            Lane::Bulk
        } else {
            return Start::Nothing;
        };
        if held_back.holds(lane) {
            let notice = held_back.released();
            // Checked again once the notice hears: a release in between is not missed.
            if held_back.holds(lane) {
                return Start::Held(notice);
            }
        }
        let taken = match lane {
            Lane::Event => self.take_event(Share::of(concurrency)).or_else(|| {
                let bulk = self.has_bulk()
                    && self.running_bulk < bulk_concurrency(concurrency)
                    && !held_back.holds(Lane::Bulk);
                bulk.then(|| self.take_bulk()).flatten()
            }),
            Lane::Bulk => self.take_bulk(),
        };
        match taken {
            Some((key, waited)) => Start::Run(key, waited),
            None => Start::Nothing,
        }
    }
}

/// What the queue may start now.
enum Start {
    /// This policy, which waited this long.
    Run(Key, std::time::Duration),
    /// Nothing until what holds the lane back lets go.
    Held(BoxFuture<'static, ()>),
    /// Nothing: no slot free, or nobody waits.
    Nothing,
}

/// The most reconciles of the bulk lane at once: three quarters of `concurrency` (at least one),
/// so a woken policy finds a free slot at once.
fn bulk_concurrency(concurrency: usize) -> usize {
    (concurrency * 3 / 4).max(1)
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
    let concurrency = concurrency.max(1);
    loop {
        let mut released = None;
        if ready && !stopping {
            loop {
                let (key, waited) = match queue.next_start(concurrency, &held_back) {
                    Start::Run(key, waited) => (key, waited),
                    Start::Held(notice) => {
                        released = Some(notice);
                        break;
                    }
                    Start::Nothing => break,
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
                Some(Request::All) => ctx.caches.table.read().keys().into_iter().for_each(|key| queue.bulk(key)),
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
        assert_eq!(next(&mut q), Some(key("a")));
        q.now(key("a"));
        assert_eq!(next(&mut q), Some(key("b")), "a runs once at a time");
        assert_eq!(next(&mut q), None);
        let now = Instant::now();
        q.finished(key("a"), Next::Wait, now);
        assert_eq!(
            next(&mut q),
            Some(key("a")),
            "the request made while it ran"
        );
        q.finished(key("a"), Next::Wait, now);
        assert_eq!(next(&mut q), None);
    }

    #[test]
    fn a_wish_to_run_later_is_kept_until_due_and_an_earlier_request_replaces_it() {
        let mut q = Queue::default();
        q.now(key("a"));
        assert_eq!(next(&mut q), Some(key("a")));
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
        assert_eq!(next(&mut q), None, "not due yet");
        q.now(key("a"));
        assert_eq!(q.next_due(), None, "a request replaces the timer");
        assert_eq!(next(&mut q), Some(key("a")));
        q.finished(key("a"), Next::After(Duration::from_secs(1)), start);
        q.fire(start + Duration::from_secs(2));
        assert_eq!(next(&mut q), Some(key("a")));
    }

    /// Holds nothing back.
    struct Free;

    impl HoldBack for Free {
        fn holds(&self, _: Lane) -> bool {
            false
        }
        fn released(&self) -> BoxFuture<'static, ()> {
            Box::pin(std::future::pending())
        }
    }

    /// The next policy to run, of whichever lane goes first, with room for all.
    fn next(q: &mut Queue) -> Option<Key> {
        match q.next_start(1000, &Free) {
            Start::Run(key, _) => Some(key),
            _ => None,
        }
    }

    fn in_namespace(namespace: &str, name: &str) -> Key {
        PolicyKey::new(namespace, name)
    }

    #[test]
    fn woken_policies_go_before_a_bulk_pass_in_turns_by_namespace_and_a_woken_one_leaves_the_pass()
    {
        let mut q = Queue::default();
        for n in 0..3 {
            q.bulk(in_namespace("all", &format!("p{n}")));
        }
        for n in 0..3 {
            q.now(in_namespace("noisy", &format!("n{n}")));
        }
        q.now(in_namespace("quiet", "q"));
        q.now(in_namespace("all", "p2"));
        let order: Vec<String> = std::iter::from_fn(|| next(&mut q))
            .map(|k| k.to_string())
            .collect();
        assert_eq!(
            order,
            [
                "noisy/n0", "quiet/q", "all/p2", "noisy/n1", "noisy/n2", "all/p0", "all/p1"
            ],
            "p2 was woken: it left the pass and ran with the woken ones"
        );
        assert_eq!(bulk_concurrency(16), 12);
        assert_eq!(bulk_concurrency(1), 1);
    }

    #[test]
    fn a_namespace_runs_woken_policies_on_three_quarters_of_the_slots_and_another_starts_at_once() {
        let mut q = Queue::default();
        for n in 0..20 {
            q.now(in_namespace("storm", &format!("s{n}")));
        }
        let started: Vec<Key> = std::iter::from_fn(|| match q.next_start(16, &Free) {
            Start::Run(key, _) => Some(key),
            _ => None,
        })
        .collect();
        assert_eq!(started.len(), 12, "three quarters of 16");
        q.now(in_namespace("quiet", "q"));
        assert!(
            matches!(q.next_start(16, &Free), Start::Run(key, _) if key.to_string() == "quiet/q"),
            "another namespace starts at once"
        );
        q.finished(started[0].clone(), Next::Wait, Instant::now());
        assert!(
            matches!(q.next_start(16, &Free), Start::Nothing),
            "a quarter of the slots stays free for other namespaces"
        );
        q.finished(started[1].clone(), Next::Wait, Instant::now());
        assert!(
            matches!(q.next_start(16, &Free), Start::Run(key, _) if &*key.namespace == "storm")
        );
    }
}
