//! What a decision comes to: where traffic goes ([`Routing`], decided by a [`Rule`]), what is
//! known of each backend, whether traffic moved ([`Announcement`]), and when to decide again. The
//! rules build it; the apply step writes its weights and the status step reports it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use compact_str::CompactString;

use super::readiness::BackendState;
use crate::{
    api::{
        Phase, Timestamp,
        conditions::{events, pinned, ready},
    },
    policy::ValidPolicy,
};

/// The total of a route's weights (basis points) wherever they are shares: with strategy
/// `Proportional`, under `spec.capacity` and during a failback ramp.
pub const PROPORTIONAL_TOTAL: i32 = 10_000;

/// Which rule put traffic where it is: the `Ready` condition's reason, with its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// `spec.pin` sends all traffic to this backend (index), ready or not.
    Pinned(usize),
    /// `spec.drill` sends all traffic to this backend (index) until `until`.
    Drill {
        /// The backend.
        to: usize,
        /// When the drill ends.
        until: DateTime<Utc>,
    },
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
    /// `spec.capacity`: the primary is back and takes what its ready endpoints serve; the
    /// secondaries keep the rest.
    CapacityFailback,
    /// `spec.capacity`: the primary is ready but its ready endpoints serve only part of the
    /// demand; the secondaries take the rest, within their capacity.
    CapacitySpillover,
    /// `Proportional`: traffic is shared by health.
    Spillover,
    /// No backend is ready; `whenNoneReady` chose the weights.
    NoReadyBackend,
    /// The policy's failover group routes its members to one site ([`Plan::following`]): its
    /// backends there take the traffic.
    Following,
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
    /// With `spec.capacity`: the demand and what is served of it.
    pub load: Option<Load>,
    /// With `spec.capacity.scale`: the replicas to ask of the secondaries' workloads (none:
    /// restore what was changed).
    pub scale: Vec<ScaleWant>,
    /// The instant of the decision, to the millisecond.
    pub now: DateTime<Utc>,
    /// The group order the policy follows, when it does.
    pub following: Option<Order>,
}

impl Plan {
    /// The backends with weight above zero, in priority order.
    pub fn active(&self, policy: &ValidPolicy) -> Vec<String> {
        active(policy, &self.routing.weights)
    }

    /// Each backend's share of the traffic, e.g. `70%`, primary first.
    pub fn shares(&self) -> Vec<String> {
        let total: i64 = self.routing.weights.iter().map(|w| i64::from(*w)).sum();
        self.routing
            .weights
            .iter()
            .map(|w| share(*w, total))
            .collect()
    }
}

/// What a policy with `spec.capacity` has to serve, and what it can.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Load {
    /// Requests per second to serve.
    pub demand: i64,
    /// What each backend's ready endpoints serve, primary first.
    pub capacity: Vec<i64>,
    /// The share of the traffic (basis points) sent beyond what the backends it goes to serve.
    pub unserved_basis_points: i32,
}

impl Load {
    /// Requests per second no ready backend serves, rounded.
    pub fn unserved(&self) -> i64 {
        (self.demand * i64::from(self.unserved_basis_points) + i64::from(PROPORTIONAL_TOTAL) / 2)
            / i64::from(PROPORTIONAL_TOTAL)
    }
}

/// The replicas a secondary's workload is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScaleWant {
    /// The backend (index, never the primary).
    pub backend: usize,
    /// Its replicas.
    pub replicas: i32,
}

/// A change of where traffic goes, worth an Event and a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transition {
    /// Traffic left the primary, or moved between secondaries.
    FailedOver,
    /// Traffic returned to the primary.
    FailedBack,
    /// No backend is ready; weights are kept as they were.
    NoReadyBackend,
    /// A backend is ready again after a `NoReadyBackend` phase, with traffic where it was.
    Recovered,
    /// The backend named by `spec.pin` is not ready, yet takes all traffic.
    PinnedBackendNotReady,
    /// A failback ramp moved to its next step.
    FailbackStep,
}

impl Transition {
    /// The Event reason for this transition.
    pub fn reason(self) -> &'static str {
        match self {
            Transition::FailedOver => ready::FAILED_OVER,
            Transition::FailedBack => events::FAILED_BACK,
            Transition::NoReadyBackend => ready::NO_READY_BACKEND,
            Transition::Recovered => events::RECOVERED,
            Transition::PinnedBackendNotReady => pinned::PINNED_BACKEND_NOT_READY,
            Transition::FailbackStep => events::FAILBACK_STEP,
        }
    }

    /// Whether the Event for this transition is a Warning.
    pub fn is_warning(self) -> bool {
        matches!(
            self,
            Transition::NoReadyBackend | Transition::PinnedBackendNotReady
        )
    }
}

/// A transition with the sentence its Event carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announcement {
    /// What happened.
    pub transition: Transition,
    /// The Event's note.
    pub message: String,
}

/// The backends with weight above zero, in priority order.
pub fn active(policy: &ValidPolicy, weights: &[i32]) -> Vec<String> {
    policy
        .backend_names()
        .zip(weights)
        .filter(|(_, w)| **w > 0)
        .map(|(n, _)| n.to_string())
        .collect()
}

/// A weight as a share of the total, e.g. `70%` or `33.33%`.
pub fn share(weight: i32, total: i64) -> String {
    if total <= 0 {
        return "0%".to_string();
    }
    let basis_points = (i64::from(weight) * 10_000 + total / 2) / total;
    let (whole, fraction) = (basis_points / 100, basis_points % 100);
    if fraction == 0 {
        format!("{whole}%")
    } else if fraction % 10 == 0 {
        format!("{whole}.{}%", fraction / 10)
    } else {
        format!("{whole}.{fraction:02}%")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_percentages_with_at_most_two_decimals() {
        assert_eq!(share(1, 1), "100%");
        assert_eq!(share(1, 3), "33.33%");
        assert_eq!(share(7000, 10_000), "70%");
        assert_eq!(share(1, 8), "12.5%");
        assert_eq!(share(0, 0), "0%");
    }
}

/// What a member's group asks of it: route to `site`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    /// The group.
    pub group: CompactString,
    /// The site its members route to.
    pub site: CompactString,
    /// When the group chooses again though nothing changes (one of its holds falls due).
    pub due: Option<DateTime<Utc>>,
}

impl Order {
    /// How long until the group chooses again, if a hold of its falls due.
    pub fn requeue_after(&self, now: DateTime<Utc>) -> Option<Duration> {
        self.due
            .map(|due| (due - now).to_std().unwrap_or_default() + Duration::from_millis(1))
    }
}
