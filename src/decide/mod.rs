//! Step 5 of the pipeline: the failover decision, a pure function of (valid policy, backend
//! observations, previous status, now). No I/O happens here, and no status is built here: the
//! result is a [`Plan`] that the apply step writes and the status step reports.
//!
//! The decision is a short list of named rules, each in its own module and tested on its own:
//!
//! 1. [`readiness`]: which backends are ready, since when, and why not;
//! 2. [`pin`]: `spec.pin` sends everything to one backend;
//! 3. [`strategy`]: `Proportional` spillover by health, or the secondaries' weights under
//!    `Ordered`, `Equal` and `Weighted`;
//! 4. [`holds`]: `failoverAfter` / `failbackAfter` keep traffic where it is until they fall due,
//!    and [`ramp`] brings traffic back to the primary in steps (`failback.ramp`);
//! 5. [`none_ready`]: what happens when nothing is ready (`whenNoneReady`);
//! 6. [`transition`]: whether traffic moved (an Event, a metric) and when it last did;
//! 7. [`conditions`]: what the decision means for the `Ready`, `Degraded`, `Pinned` and
//!    `Suspended` conditions.
//!
//! `suspend` changes no weight here: the plan is the same, the apply step does not write it, no
//! transition is announced, and the `Suspended` condition says what would happen.
//! [`previous`] reads the previous status once for the rules that need it.

pub mod conditions;
pub mod holds;
pub mod none_ready;
pub mod pin;
pub mod previous;
pub mod ramp;
pub mod readiness;
pub mod strategy;
pub mod transition;

use std::time::Duration;

use chrono::{DateTime, Utc};

use self::{previous::Previous, readiness::BackendState, transition::Announcement};
use crate::{
    api::{FailoverPolicyStatus, Phase, Strategy, Timestamp},
    observe::readiness::BackendObservation,
    validate::ValidPolicy,
};

/// With strategy `Proportional`, the weights of a route always add up to this (basis points).
pub use strategy::PROPORTIONAL_TOTAL;

/// Which rule put traffic where it is: the `Ready` condition's reason, with its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// `spec.pin` sends all traffic to this backend (index), ready or not.
    Pinned(usize),
    /// The primary is ready and takes all traffic.
    PrimaryActive,
    /// The primary is not ready, but `failoverAfter` keeps traffic on it until `due`.
    FailoverPending {
        /// When the hold falls due.
        due: DateTime<Utc>,
    },
    /// The primary is ready again, but `failbackAfter` keeps traffic on the secondaries until `due`.
    FailbackPending {
        /// When the hold falls due.
        due: DateTime<Utc>,
    },
    /// A failback ramp: the primary takes the share of step `step` (of `steps`) until `due`.
    FailbackRamp {
        /// The step now, from 0.
        step: usize,
        /// How many steps the ramp has.
        steps: usize,
        /// When the next step falls due.
        due: DateTime<Utc>,
    },
    /// The secondaries take the traffic, by the policy's strategy.
    FailedOver,
    /// `Proportional`: traffic is shared by health.
    Spillover,
    /// No backend is ready; `whenNoneReady` chose the weights.
    NoReadyBackend,
}

/// Where traffic goes: the phase, one weight per backend, and the rule that decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Routing {
    /// `Primary`, `FailedOver` or `NoReadyBackend`.
    pub phase: Phase,
    /// One weight per backend, primary first.
    pub weights: Vec<i32>,
    /// The rule that decided.
    pub rule: Rule,
}

/// The outcome of one decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Where traffic goes.
    pub routing: Routing,
    /// What is known of each backend, primary first.
    pub backends: Vec<BackendState>,
    /// Set when traffic moved (or nothing is ready any more), worth an Event and a metric.
    pub transition: Option<Announcement>,
    /// When traffic last left the primary.
    pub last_failover_time: Option<Timestamp>,
    /// When traffic last returned to the primary.
    pub last_failback_time: Option<Timestamp>,
    /// When to decide again even if nothing changes (a hold falls due).
    pub requeue_after: Option<Duration>,
    /// The instant of the decision, to the millisecond.
    pub now: DateTime<Utc>,
}

impl Plan {
    /// The backends with weight above zero, in priority order.
    pub fn active(&self, policy: &ValidPolicy) -> Vec<String> {
        transition::active(policy, &self.routing.weights)
    }

    /// Each backend's share of the traffic, e.g. `70%`, primary first.
    pub fn shares(&self) -> Vec<String> {
        let total: i64 = self.routing.weights.iter().map(|w| i64::from(*w)).sum();
        self.routing
            .weights
            .iter()
            .map(|w| conditions::share(*w, total))
            .collect()
    }
}

/// Decides where the traffic of one policy goes.
///
/// `observations` holds one entry per backend, primary first; missing entries count as a Service
/// that does not exist.
pub fn decide(
    policy: &ValidPolicy,
    observations: &[BackendObservation],
    previous: Option<&FailoverPolicyStatus>,
    now: DateTime<Utc>,
) -> Plan {
    let now = truncate_to_millis(now);
    let backends = readiness::assess(policy, observations, previous, now);
    let previous = Previous::of(policy, previous);
    let routing = route(policy, &backends, &previous, now);
    let transition = transition::detect(policy, &routing, &backends, &previous);
    let (last_failover_time, last_failback_time) =
        transition::times(policy, &routing, &previous, Timestamp(now));
    let requeue_after = holds::requeue_after(routing.rule, now);
    Plan {
        routing,
        backends,
        transition,
        last_failover_time,
        last_failback_time,
        requeue_after,
        now,
    }
}

/// The rules that choose the weights, in order: pin, proportional spillover, then the strategy
/// with its holds, and the none-ready fallback under both.
fn route(
    policy: &ValidPolicy,
    backends: &[BackendState],
    previous: &Previous,
    now: DateTime<Utc>,
) -> Routing {
    if let Some(routing) = pin::route(policy) {
        return routing;
    }
    if policy.strategy == Strategy::Proportional {
        return strategy::proportional(policy, backends)
            .unwrap_or_else(|| none_ready::route(policy, previous));
    }
    let ready: Vec<bool> = backends.iter().map(|b| b.ready).collect();
    match strategy::secondary_weights(policy, &ready) {
        None if !ready[0] => none_ready::route(policy, previous),
        secondaries => holds::route(policy, &backends[0], secondaries, previous, now),
    }
}

fn truncate_to_millis(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap_or(t)
}

#[cfg(test)]
#[path = "decide_tests.rs"]
pub(crate) mod tests;
