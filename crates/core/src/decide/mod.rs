//! The decide stage of the pipeline: the failover decision, a pure function of (valid policy, backend
//! observations, previous status, now). No I/O happens here, and no status is built here: the
//! result is a [`Plan`] that the apply step writes and the status step reports.
//!
//! The decision is a short list of named rules, each in its own module and tested on its own:
//!
//! 1. [`readiness`]: which backends are ready, since when, and why not;
//! 2. [`pin`]: `spec.pin` sends everything to one backend, and [`drill`] does until its end
//!    time;
//! 3. [`strategy`]: `Proportional` spillover by health, or the secondaries' weights under
//!    `Ordered`, `Equal` and `Weighted`;
//! 4. [`holds`]: `failoverAfter` / `failbackAfter` keep traffic where it is until they fall due,
//!    and [`ramp`] brings traffic back to the primary in steps (`failback.ramp`); [`capacity`]
//!    bounds what each backend is sent by what it serves (`spec.capacity`);
//! 5. [`none_ready`]: what happens when nothing is ready (`whenNoneReady`);
//! 6. [`transition`]: whether traffic moved (an Event, a metric) and when it last did;
//! 7. [`conditions`]: what the decision means for the `Ready`, `Degraded`, `Pinned` and
//!    `Suspended` conditions.
//!
//! [`group`] chooses the one site every member of a failover group routes to, fed by each
//! member's own readiness.
//!
//! [`restore`] says what becomes of a workload the controller raised once nothing asks for it.
//!
//! `suspend` changes no weight here: the plan is the same, the apply step does not write it, no
//! transition is announced, and the `Suspended` condition says what would happen.
//! [`before`] reads where traffic was, from the last status, once for the rules that need it.

pub mod before;
pub mod capacity;
pub mod conditions;
pub mod drill;
pub mod group;
pub mod holds;
pub mod none_ready;
pub mod pin;
pub mod plan;
pub mod ramp;
pub mod readiness;
pub mod restore;
pub mod strategy;
pub mod transition;
pub mod verdict;

use chrono::{DateTime, Utc};

pub use self::plan::{Plan, Routing, Rule};
use self::{before::Before, readiness::BackendState};
use crate::{
    api::{Strategy, Timestamp},
    last_status::LastStatus,
    observation::BackendObservation,
    policy::ValidPolicy,
};

/// With strategy `Proportional`, the weights of a route always add up to this (basis points).
pub use plan::PROPORTIONAL_TOTAL;

/// Decides where the traffic of one policy goes.
///
/// `observations` holds one entry per backend, primary first; missing entries count as a Service
/// that does not exist.
///
/// `order` is what the policy's failover group asks of it (the site to route to), if it is a
/// member of one that has chosen a site.
pub fn decide(
    policy: &ValidPolicy,
    observations: &[BackendObservation],
    previous: Option<&LastStatus>,
    order: Option<&group::Order>,
    now: DateTime<Utc>,
) -> Plan {
    let now = truncate_to_millis(now);
    let backends = readiness::assess(policy, observations, previous, now);
    let previous = Before::of(policy, previous);
    let order = order.filter(|_| group::held(policy, now).is_none());
    let routing = route(policy, &backends, &previous, order, now);
    let routing_followed = routing.rule == Rule::Following;
    let (routing, load, scale) = capacity::bound(policy, &backends, routing, &previous, now);
    let transition = transition::detect(policy, &routing, &backends, &previous)
        .map(|a| group::announced(a, order.filter(|_| routing_followed), &routing, policy));
    let (last_failover_time, last_failback_time) =
        transition::times(policy, &routing, &previous, Timestamp(now));
    let requeue_after = [
        holds::requeue_after(routing.rule, now),
        drill::requeue_after(policy, now),
        order.and_then(|o| o.requeue_after(now)),
    ]
    .into_iter()
    .flatten()
    .min();
    Plan {
        routing,
        backends,
        transition,
        last_failover_time,
        last_failback_time,
        requeue_after,
        load,
        scale,
        now,
        following: order.filter(|_| routing_followed).cloned(),
    }
}

/// The rules that choose the weights, in order: pin, drill, proportional spillover, then the
/// strategy with its holds, and the none-ready fallback under both.
fn route(
    policy: &ValidPolicy,
    backends: &[BackendState],
    previous: &Before,
    order: Option<&group::Order>,
    now: DateTime<Utc>,
) -> Routing {
    if let Some(routing) = pin::route(policy) {
        return routing;
    }
    if let Some(routing) = drill::route(policy, backends, now) {
        return routing;
    }
    if let Some(routing) = order.and_then(|o| group::follow(policy, backends, o, previous)) {
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

#[cfg(test)]
#[path = "properties_tests.rs"]
mod properties;

#[cfg(test)]
#[path = "tiers_tests.rs"]
mod tiers;

#[cfg(test)]
#[path = "group_tests.rs"]
mod group_choice;
