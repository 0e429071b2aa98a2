//! The cluster-wide budget of health queries (`--prometheus-queries-per-second`): however many
//! policies, backends and namespaces there are, the controller sends at most that many queries
//! a second to Prometheus (after a first burst of one second's worth), and the budget is shared
//! fairly by namespace. While several namespaces wait, each gets the next query in turn
//! (round-robin), whatever the number of its policies and backends: a namespace with many
//! backends at `interval: 1s` gets its share and no more, a lone namespace gets the whole budget,
//! and a quiet namespace's query waits at most one turn of the namespaces waiting.
//!
//! The rate is governor's (GCRA, a token bucket kept as one timestamp). The fairness is the
//! controller's one fair queue ([`crate::runtime::fair::Turns`]): governor's keyed limiter gives
//! each key a fixed quota of its own, which neither bounds the sum over many namespaces nor lets
//! a lone namespace use the whole budget; here one limiter is shared, and each query it allows
//! goes to the next namespace in turn. A poller asks for one turn at a time (its queries run one
//! after another), so a namespace queues at most one waiter per poller of its.
//!
//! A rate bounds what is sent, not what it costs: one query can hold one of Prometheus' query
//! slots (20 by default, `--query.max-concurrency`) for as long as it runs. So queries in flight
//! are bounded too: at most [`InFlight::per_namespace`] of one namespace at once, whatever its
//! number of policies, and at most [`InFlight::total`] of all (set it below Prometheus' own
//! concurrency). A namespace's slow or timed-out queries hold its own slots while they run, so
//! they delay its own next queries and no other namespace's.

use std::{
    collections::HashMap,
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
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};

use crate::runtime::fair::Turns;
use failover_core::observation::Namespace;

/// The budget when the admin sets none.
pub const DEFAULT_QUERIES_PER_SECOND: NonZeroU32 = match NonZeroU32::new(50) {
    Some(n) => n,
    None => NonZeroU32::MIN,
};

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
    turns: Turns<Namespace, T>,
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
    pub fn push(&mut self, namespace: &Namespace, waiter: T) {
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

/// How many health queries may be in flight at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFlight {
    /// Of every namespace together (`--prometheus-queries-in-flight`).
    pub total: usize,
    /// Of one namespace (`--prometheus-queries-in-flight-per-namespace`).
    pub per_namespace: usize,
}

impl Default for InFlight {
    /// Well below Prometheus' default of 20 queries at once, so its rules and dashboards keep
    /// room; two per namespace, so one namespace's slow queries hold two of them at most.
    fn default() -> Self {
        Self {
            total: 8,
            per_namespace: 2,
        }
    }
}

struct Shared {
    fair: Mutex<Fair<MonotonicClock, oneshot::Sender<()>>>,
    arrived: Notify,
    dispatching: AtomicBool,
    in_flight: InFlight,
    /// The slots of every namespace together.
    total: Arc<Semaphore>,
    /// Each namespace's slots, while some are taken or waited for.
    namespaces: Mutex<HashMap<Namespace, Arc<Semaphore>>>,
}

/// The budget every poller takes its turns from.
#[derive(Clone)]
pub struct Budget {
    shared: Arc<Shared>,
}

/// One query's slots while it is in flight: its namespace's and one of all; given back when
/// dropped (the answer is in, or the query failed or timed out).
pub struct Slot {
    namespace: Option<(Namespace, OwnedSemaphorePermit)>,
    total: Option<OwnedSemaphorePermit>,
    shared: Arc<Shared>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.total.take();
        if let Some((namespace, permit)) = self.namespace.take() {
            drop(permit);
            // A namespace's slots are kept only while someone holds or waits for one.
            let mut namespaces = self.shared.namespaces.lock();
            if namespaces
                .get(&namespace)
                .is_some_and(|s| Arc::strong_count(s) == 1)
            {
                namespaces.remove(&namespace);
            }
        }
    }
}

impl Budget {
    /// At most `per_second` queries a second, shared by namespace, and at most `in_flight` at
    /// once.
    pub fn new(per_second: NonZeroU32, in_flight: InFlight) -> Self {
        Self {
            shared: Arc::new(Shared {
                fair: Mutex::new(Fair::<_, oneshot::Sender<()>>::new(
                    per_second,
                    MonotonicClock,
                )),
                arrived: Notify::new(),
                dispatching: AtomicBool::new(false),
                total: Arc::new(Semaphore::new(in_flight.total.max(1))),
                namespaces: Mutex::default(),
                in_flight,
            }),
        }
    }

    /// Waits until `namespace` may send one query: a slot of its own, then one of all (so a
    /// namespace queues at most its own number of slots for the shared ones), then its turn of
    /// the rate. Dropped while waiting, the turn is given up; the slot returned is held while
    /// the query is in flight.
    pub async fn turn(&self, namespace: &Namespace) -> Slot {
        let own = self
            .shared
            .namespaces
            .lock()
            .entry(namespace.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(self.shared.in_flight.per_namespace.max(1))))
            .clone();
        let mut slot = Slot {
            namespace: None,
            total: None,
            shared: self.shared.clone(),
        };
        // The semaphores are never closed: acquiring fails never.
        slot.namespace = own
            .acquire_owned()
            .await
            .ok()
            .map(|p| (namespace.clone(), p));
        slot.total = self.shared.total.clone().acquire_owned().await.ok();
        if !self.shared.dispatching.swap(true, Ordering::AcqRel) {
            tokio::spawn(dispatch(self.shared.clone()));
        }
        let (go, gone) = oneshot::channel();
        self.shared.fair.lock().push(namespace, go);
        self.shared.arrived.notify_one();
        // An error means the dispatcher is gone, which it never is while the process runs.
        let _ = gone.await;
        slot
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

    fn ns(name: &str) -> Namespace {
        Namespace::new(name)
    }

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
    fn a_lone_namespace_uses_the_whole_budget_and_no_more() {
        let clock = FakeRelativeClock::default();
        let mut fair = Fair::<_, u32>::new(per_second(10), clock.clone());
        for n in 0..100 {
            fair.push(&ns("alone"), n);
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
            fair.push(&ns("noisy"), "noisy");
        }
        fair.push(&ns("quiet"), "quiet");
        let span = Duration::from_secs(60);
        let mut elapsed = Duration::ZERO;
        while elapsed <= span {
            match fair.next(|_| true) {
                // Each poller asks again at once: demand never ends.
                Next::Go(name) => {
                    *went.entry(name).or_default() += 1;
                    fair.push(&ns(name), name);
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
        let mut fair = Fair::<_, u32>::new(per_second(1), clock.clone());
        fair.push(&ns("a"), 1);
        fair.push(&ns("a"), 2);
        assert_eq!(
            fair.next(|w| *w != 1),
            Next::Go(2),
            "1 gave up: 2 has the query"
        );
        fair.push(&ns("b"), 3);
        assert_eq!(
            fair.next(|w| *w != 3),
            Next::Idle,
            "nobody left to wait for"
        );
        clock.advance(Duration::from_secs(1));
        fair.push(&ns("c"), 4);
        assert_eq!(fair.next(|_| true), Next::Go(4));
        assert!(matches!(fair.next(|_| true), Next::Idle));
    }

    #[tokio::test]
    async fn turns_are_handed_out_on_a_running_budget() {
        let budget = Budget::new(per_second(1000), InFlight::default());
        let turns = (0..20).map(|n| {
            let budget = budget.clone();
            async move {
                drop(budget.turn(&ns(if n % 2 == 0 { "a" } else { "b" })).await);
            }
        });
        let all = futures::future::join_all(turns);
        tokio::time::timeout(Duration::from_secs(10), all)
            .await
            .expect("every turn within 10 s");
        assert!(
            budget.shared.namespaces.lock().is_empty(),
            "no namespace's slots are kept once all are given back"
        );
    }

    #[tokio::test]
    async fn a_namespace_holding_its_slots_waits_alone_and_another_namespace_goes_at_once() {
        let in_flight = InFlight {
            total: 3,
            per_namespace: 2,
        };
        let budget = Budget::new(per_second(1000), in_flight);
        // The noisy namespace's queries hang: it holds both of its slots.
        let held = [
            budget.turn(&ns("noisy")).await,
            budget.turn(&ns("noisy")).await,
        ];
        let (noisy, quiet) = (ns("noisy"), ns("quiet"));
        let third = tokio::time::timeout(Duration::from_millis(200), budget.turn(&noisy));
        assert!(
            third.await.is_err(),
            "a third noisy query waits for its own slots"
        );
        let went = tokio::time::timeout(Duration::from_millis(200), budget.turn(&quiet));
        drop(went.await.expect("the quiet namespace goes at once"));
        drop(held);
        let again = tokio::time::timeout(Duration::from_secs(1), budget.turn(&noisy));
        assert!(
            again.await.is_ok(),
            "its slots are given back with its answers"
        );
    }
}
