//! The cluster-wide budget of health queries (`--prometheus-queries-per-second`): however many
//! policies, backends and namespaces there are, the controller sends at most that many queries
//! a second to Prometheus (after a first burst of one second's worth), and the budget is shared
//! fairly by namespace. While several namespaces wait, each gets the next query in turn
//! (round-robin), whatever the number of its policies and backends: a namespace with many
//! backends at `interval: 1s` gets its share and no more, a lone namespace gets the whole budget,
//! and a quiet namespace's query waits at most one turn of the namespaces waiting.
//!
//! The rate is governor's (GCRA, a token bucket kept as one timestamp). The fairness is a small
//! part of our own, [`Turns`]: governor's keyed limiter gives each key a fixed quota of its own,
//! which neither bounds the sum over many namespaces nor lets a lone namespace use the whole
//! budget; here one limiter is shared, and each query it allows goes to the next namespace in
//! turn. A poller asks for one turn at a time (its queries run one after another), so a
//! namespace queues at most one waiter per poller of its.

use std::{
    collections::{HashMap, VecDeque},
    num::NonZeroU32,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use governor::{
    Quota, RateLimiter,
    clock::{Clock, MonotonicClock},
    middleware::NoOpMiddleware,
    state::{InMemoryState, NotKeyed},
};
use parking_lot::Mutex;
use tokio::sync::{Notify, oneshot};

/// The budget when the admin sets none.
pub const DEFAULT_QUERIES_PER_SECOND: NonZeroU32 = match NonZeroU32::new(50) {
    Some(n) => n,
    None => NonZeroU32::MIN,
};

/// Waiters by namespace, served in turn: each namespace with a waiter gets one turn per round,
/// its waiters first come, first served.
#[derive(Debug)]
pub struct Turns<T> {
    waiting: HashMap<String, VecDeque<T>>,
    /// Every namespace with a waiter, once, the next to be served first.
    order: VecDeque<String>,
}

impl<T> Default for Turns<T> {
    fn default() -> Self {
        Self {
            waiting: HashMap::new(),
            order: VecDeque::new(),
        }
    }
}

impl<T> Turns<T> {
    /// Queues a waiter of `namespace`; a namespace not waiting yet is served after those that are.
    pub fn push(&mut self, namespace: &str, waiter: T) {
        match self.waiting.get_mut(namespace) {
            Some(queue) => queue.push_back(waiter),
            None => {
                self.waiting
                    .insert(namespace.to_string(), VecDeque::from([waiter]));
                self.order.push_back(namespace.to_string());
            }
        }
    }

    /// Drops the waiters that gave up (not `alive`) from the head of the next namespace's queue,
    /// and the namespaces left with none; whether a waiter is left to serve.
    fn prune(&mut self, alive: impl Fn(&T) -> bool) -> bool {
        while let Some(namespace) = self.order.front() {
            let Some(queue) = self.waiting.get_mut(namespace) else {
                self.order.pop_front();
                continue;
            };
            while queue.front().is_some_and(|w| !alive(w)) {
                queue.pop_front();
            }
            if !queue.is_empty() {
                return true;
            }
            self.waiting.remove(namespace);
            self.order.pop_front();
        }
        false
    }

    /// The next namespace's first waiter; that namespace goes to the back of the round.
    pub fn pop(&mut self) -> Option<T> {
        let namespace = self.order.pop_front()?;
        let queue = self.waiting.get_mut(&namespace)?;
        let waiter = queue.pop_front();
        if queue.is_empty() {
            self.waiting.remove(&namespace);
        } else {
            self.order.push_back(namespace);
        }
        waiter
    }

    /// How many wait, in every namespace.
    pub fn len(&self) -> usize {
        self.waiting.values().map(VecDeque::len).sum()
    }

    /// Whether nobody waits.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

/// What the budget allows now.
#[derive(Debug, PartialEq)]
pub enum Next<T> {
    /// This waiter may send its query.
    Go(T),
    /// Someone waits, and the budget allows the next query after this long.
    Wait(Duration),
    /// Nobody waits.
    Idle,
}

/// The rate, shared by the namespaces in turn; `C` is the clock (a fake one in tests).
pub struct Fair<C: Clock, T> {
    limiter: RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<C::Instant>>,
    turns: Turns<T>,
}

impl<C: Clock, T> Fair<C, T> {
    /// At most `per_second` queries a second, after a burst of as many.
    pub fn new(per_second: NonZeroU32, clock: C) -> Self {
        Self {
            limiter: RateLimiter::direct_with_clock(Quota::per_second(per_second), clock),
            turns: Turns::default(),
        }
    }

    /// Queues a waiter of `namespace`.
    pub fn push(&mut self, namespace: &str, waiter: T) {
        self.turns.push(namespace, waiter);
    }

    /// Who may go now, or how long until someone may; a waiter that gave up (not `alive`)
    /// costs nothing of the budget.
    pub fn next(&mut self, alive: impl Fn(&T) -> bool) -> Next<T> {
        if !self.turns.prune(alive) {
            return Next::Idle;
        }
        match self.limiter.check() {
            Ok(()) => self.turns.pop().map_or(Next::Idle, Next::Go),
            Err(not_until) => Next::Wait(not_until.wait_time_from(self.limiter.clock().now())),
        }
    }

    /// How many wait.
    pub fn waiting(&self) -> usize {
        self.turns.len()
    }
}

struct Shared {
    fair: Mutex<Fair<MonotonicClock, oneshot::Sender<()>>>,
    arrived: Notify,
    dispatching: AtomicBool,
}

/// The budget every poller takes its turns from.
#[derive(Clone)]
pub struct Budget {
    shared: Arc<Shared>,
}

impl Budget {
    /// At most `per_second` queries a second, shared by namespace.
    pub fn new(per_second: NonZeroU32) -> Self {
        Self {
            shared: Arc::new(Shared {
                fair: Mutex::new(Fair::new(per_second, MonotonicClock)),
                arrived: Notify::new(),
                dispatching: AtomicBool::new(false),
            }),
        }
    }

    /// Waits until `namespace` may send one query. Dropped while waiting, the turn is given up.
    pub async fn turn(&self, namespace: &str) {
        if !self.shared.dispatching.swap(true, Ordering::AcqRel) {
            tokio::spawn(dispatch(self.shared.clone()));
        }
        let (go, gone) = oneshot::channel();
        self.shared.fair.lock().push(namespace, go);
        self.shared.arrived.notify_one();
        // An error means the dispatcher is gone, which it never is while the process runs.
        let _ = gone.await;
    }
}

/// Hands out the turns as the budget allows, for ever.
async fn dispatch(shared: Arc<Shared>) {
    loop {
        let next = shared.fair.lock().next(|go| !go.is_closed());
        match next {
            Next::Go(go) => {
                let _ = go.send(());
            }
            Next::Wait(pause) => tokio::time::sleep(pause).await,
            // A waiter queued since `next` left a permit: the wait returns at once then.
            Next::Idle => shared.arrived.notified().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use governor::clock::FakeRelativeClock;

    use super::*;

    fn per_second(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
    }

    /// Runs the budget for `span` of fake time, every waiter alive; who went, in order.
    fn run<T>(
        fair: &mut Fair<FakeRelativeClock, T>,
        clock: &FakeRelativeClock,
        span: Duration,
    ) -> Vec<T> {
        let mut went = Vec::new();
        let mut elapsed = Duration::ZERO;
        loop {
            match fair.next(|_| true) {
                Next::Go(w) => went.push(w),
                Next::Wait(pause) if elapsed + pause <= span => {
                    clock.advance(pause);
                    elapsed += pause;
                }
                Next::Wait(_) | Next::Idle => return went,
            }
        }
    }

    #[test]
    fn namespaces_take_turns_whatever_their_number_of_waiters() {
        let mut turns = Turns::default();
        for n in 0..10 {
            turns.push("noisy", ("noisy", n));
        }
        turns.push("quiet", ("quiet", 0));
        for n in 0..3 {
            turns.push("other", ("other", n));
        }
        let order: Vec<_> = std::iter::from_fn(|| turns.pop()).take(7).collect();
        assert_eq!(
            order,
            [
                ("noisy", 0),
                ("quiet", 0),
                ("other", 0),
                ("noisy", 1),
                ("other", 1),
                ("noisy", 2),
                ("other", 2),
            ]
        );
        assert_eq!(turns.len(), 7, "noisy's last seven");
    }

    #[test]
    fn a_lone_namespace_uses_the_whole_budget_and_no_more() {
        let clock = FakeRelativeClock::default();
        let mut fair = Fair::new(per_second(10), clock.clone());
        for n in 0..100 {
            fair.push("alone", n);
        }
        // A second's worth at once, then one every tenth of a second.
        assert_eq!(run(&mut fair, &clock, Duration::ZERO).len(), 10);
        assert_eq!(fair.next(|_| true), Next::Wait(Duration::from_millis(100)));
        assert_eq!(run(&mut fair, &clock, Duration::from_secs(5)).len(), 50);
        assert_eq!(fair.waiting(), 40);
    }

    #[test]
    fn many_backends_in_one_namespace_cannot_exceed_the_budget_or_starve_another() {
        let clock = FakeRelativeClock::default();
        let mut fair = Fair::new(per_second(5), clock.clone());
        // A tenant's 4 policies of 32 backends each at 1 s ask for 128 queries a second; each
        // poller waits for one turn at a time, so the tenant has 4 waiters queued at any time.
        // The quiet namespace's one poller has one.
        let mut went: HashMap<&str, usize> = HashMap::new();
        for _ in 0..4 {
            fair.push("noisy", "noisy");
        }
        fair.push("quiet", "quiet");
        let span = Duration::from_secs(60);
        let mut elapsed = Duration::ZERO;
        while elapsed <= span {
            match fair.next(|_| true) {
                // Each poller asks again at once: demand never ends.
                Next::Go(ns) => {
                    *went.entry(ns).or_default() += 1;
                    fair.push(ns, ns);
                }
                Next::Wait(pause) => {
                    clock.advance(pause);
                    elapsed += pause;
                }
                Next::Idle => unreachable!("someone always waits"),
            }
        }
        let total = went.values().sum::<usize>();
        assert!(total <= 5 * 60 + 5, "{total} queries in 60 s at 5 a second");
        assert!(total >= 5 * 60, "the budget is used: {total}");
        let (noisy, quiet) = (went["noisy"], went["quiet"]);
        assert!(noisy.abs_diff(quiet) <= 1, "half each: {noisy} and {quiet}");
    }

    #[test]
    fn a_waiter_that_gave_up_costs_nothing_of_the_budget() {
        let clock = FakeRelativeClock::default();
        let mut fair = Fair::new(per_second(1), clock.clone());
        fair.push("a", 1);
        fair.push("a", 2);
        assert_eq!(
            fair.next(|w| *w != 1),
            Next::Go(2),
            "1 gave up: 2 has the query"
        );
        fair.push("b", 3);
        assert_eq!(
            fair.next(|w| *w != 3),
            Next::Idle,
            "nobody left to wait for"
        );
        clock.advance(Duration::from_secs(1));
        fair.push("c", 4);
        assert_eq!(fair.next(|_| true), Next::Go(4));
        assert!(matches!(fair.next(|_| true), Next::Idle));
    }

    #[tokio::test]
    async fn turns_are_handed_out_on_a_running_budget() {
        let budget = Budget::new(per_second(1000));
        let turns = (0..20).map(|n| {
            let budget = budget.clone();
            async move { budget.turn(if n % 2 == 0 { "a" } else { "b" }).await }
        });
        let all = futures::future::join_all(turns);
        tokio::time::timeout(Duration::from_secs(10), all)
            .await
            .expect("every turn within 10 s");
    }
}
