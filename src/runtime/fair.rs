//! One queue fair by namespace, for every place where tenants' work waits for a shared resource
//! (the work queue's woken policies, the policy watch's validations, the status writer, the
//! Event publisher, the health queries' budget): while several namespaces wait, each gets the
//! next turn in order (round-robin), whatever the number of its waiters, so a namespace with a
//! thousand waiters delays another namespace's one waiter by at most one turn of each namespace
//! waiting. Within a namespace, first come, first served. Where what a namespace has in flight
//! is bounded too (its share), a namespace at its share is skipped ([`Turns::pop_where`]) and
//! keeps its waiters. How much that share is, is [`Share`]'s one reading, for the work queue and
//! the status writer alike.

use std::{
    collections::{HashMap, VecDeque},
    hash::Hash,
};

use tokio::{sync::futures::Notified, time::Instant};

/// The wait of a fair queue with nothing to give now: until a waiter arrives (`arrived`, taken
/// before the queue was looked at, so no arrival is missed) or, when some waiter falls due at
/// `due`, until then.
pub async fn until_arrived_or_due(arrived: Notified<'_>, due: Option<Instant>) {
    match due {
        Some(at) => {
            tokio::select! {
                () = arrived => {}
                () = tokio::time::sleep_until(at) => {}
            }
        }
        None => arrived.await,
    }
}

/// Waiters by namespace, served in turn.
#[derive(Debug)]
pub struct Turns<N, T> {
    waiting: HashMap<N, VecDeque<T>>,
    /// Every namespace with a waiter, once, the next to be served first.
    order: VecDeque<N>,
    len: usize,
}

impl<N, T> Default for Turns<N, T> {
    fn default() -> Self {
        Self {
            waiting: HashMap::new(),
            order: VecDeque::new(),
            len: 0,
        }
    }
}

impl<N: Hash + Eq + Clone, T> Turns<N, T> {
    /// Queues a waiter of `namespace`; a namespace not waiting yet is served after those that are.
    pub fn push(&mut self, namespace: &N, waiter: T) {
        self.len += 1;
        match self.waiting.get_mut(namespace) {
            Some(queue) => queue.push_back(waiter),
            None => {
                self.waiting
                    .insert(namespace.clone(), VecDeque::from([waiter]));
                self.order.push_back(namespace.clone());
            }
        }
    }

    /// Drops the waiters that are no longer wanted (not `alive`) from the head of the next
    /// namespace's queue, and the namespaces left with none; whether a waiter is left to serve.
    pub fn prune(&mut self, alive: impl Fn(&T) -> bool) -> bool {
        while let Some(namespace) = self.order.front() {
            let Some(queue) = self.waiting.get_mut(namespace) else {
                self.order.pop_front();
                continue;
            };
            while queue.front().is_some_and(|w| !alive(w)) {
                queue.pop_front();
                self.len -= 1;
            }
            if !queue.is_empty() {
                return true;
            }
            self.waiting.remove(namespace);
            self.order.pop_front();
        }
        self.shrink();
        false
    }

    /// The next namespace's first waiter; that namespace goes to the back of the round.
    pub fn pop(&mut self) -> Option<T> {
        let namespace = self.order.pop_front()?;
        let queue = self.waiting.get_mut(&namespace)?;
        let waiter = queue.pop_front();
        if waiter.is_some() {
            self.len -= 1;
        }
        if queue.is_empty() {
            self.waiting.remove(&namespace);
            self.shrink();
        } else {
            self.order.push_back(namespace);
        }
        waiter
    }

    /// The first waiter of the next namespace in turn that may go now (`may`: not at its share
    /// of what is in flight); a namespace that may not keeps its waiters and goes to the back of
    /// the round.
    pub fn pop_where(&mut self, may: impl Fn(&N) -> bool) -> Option<T> {
        for _ in 0..self.order.len() {
            let namespace = self.order.front()?;
            if may(namespace) {
                return self.pop();
            }
            self.order.rotate_left(1);
        }
        None
    }

    /// The next waiter that is still wanted (`alive`), skipping those that are not.
    pub fn pop_alive(&mut self, alive: impl Fn(&T) -> bool) -> Option<T> {
        self.prune(alive).then(|| self.pop()).flatten()
    }

    /// How many wait, in every namespace (those no longer wanted included, until pruned).
    pub fn len(&self) -> usize {
        self.len
    }

    /// How many wait in `namespace`.
    pub fn waiting_in(&self, namespace: &N) -> usize {
        self.waiting.get(namespace).map_or(0, VecDeque::len)
    }

    /// Whether nobody waits.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// A burst (every policy queued at once) leaves room for all; it is given back once drained.
    fn shrink(&mut self) {
        if self.order.is_empty() && self.order.capacity() > SPARE {
            self.order.shrink_to(SPARE);
            self.waiting.shrink_to(SPARE);
        }
    }
}

/// Room kept when the queue drains.
const SPARE: usize = 64;

/// How many of a resource's `total` places (reconcile slots, status writers) one namespace may
/// hold at once: an eighth of them (at least one) always; more only while a quarter of them (at
/// least one) stay free. So one namespace alone may use three quarters of the resource (a mass
/// failover of one namespace is not run one policy at a time), and while it does another
/// namespace finds a place free at its next turn.
#[derive(Clone, Copy, Debug)]
pub struct Share {
    total: usize,
}

impl Share {
    /// The share of a resource of `total` places.
    pub fn of(total: usize) -> Self {
        Self {
            total: total.max(1),
        }
    }

    /// Whether a namespace holding `of_namespace` places may take one more while `held` are
    /// held in all.
    pub fn may_take(self, of_namespace: usize, held: usize) -> bool {
        of_namespace < (self.total / 8).max(1) || held + (self.total / 4).max(1) < self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_take_turns_whatever_their_number_of_waiters() {
        let mut turns = Turns::default();
        for n in 0..10 {
            turns.push(&"noisy", ("noisy", n));
        }
        turns.push(&"quiet", ("quiet", 0));
        for n in 0..3 {
            turns.push(&"other", ("other", n));
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
        assert_eq!(turns.waiting_in(&"noisy"), 7);
    }

    #[test]
    fn a_namespace_at_its_share_waits_and_keeps_its_waiters() {
        let mut turns = Turns::default();
        turns.push(&"busy", 1);
        turns.push(&"busy", 2);
        turns.push(&"quiet", 3);
        assert_eq!(turns.pop_where(|ns| *ns != "busy"), Some(3));
        assert_eq!(turns.pop_where(|ns| *ns != "busy"), None);
        assert_eq!(turns.len(), 2);
        assert_eq!(turns.pop_where(|_| true), Some(1));
    }

    #[test]
    fn a_namespace_beyond_its_eighth_takes_a_place_only_while_a_quarter_stay_free() {
        let share = Share::of(16);
        assert!(
            share.may_take(1, 15),
            "an eighth of 16, whatever else is held"
        );
        assert!(!share.may_take(2, 12), "beyond it, a quarter stays free");
        assert!(
            share.may_take(11, 11),
            "alone, a namespace uses three quarters"
        );
        assert!(!share.may_take(12, 12));
        assert!(Share::of(1).may_take(0, 0));
        assert!(!Share::of(1).may_take(1, 1));
    }

    #[test]
    fn waiters_no_longer_wanted_are_skipped_and_cost_no_turn() {
        let mut turns = Turns::default();
        turns.push(&"a", 1);
        turns.push(&"a", 2);
        turns.push(&"b", 3);
        assert_eq!(turns.pop_alive(|w| *w != 1), Some(2));
        assert_eq!(
            turns.pop_alive(|w| *w != 3),
            None,
            "b's only waiter is gone"
        );
        assert!(turns.is_empty());
        assert_eq!(turns.len(), 0);
    }
}
