//! Rule 2b: `spec.drill` sends all traffic to one backend until its end time, as a pin that lifts
//! itself. Whether it runs is a pure function of the spec, the backend's readiness and now, so a
//! drill ends on time whichever replica decides, after any restart or change of leader: the
//! decision asks to be run again the millisecond after the end time.
//!
//! A drill waits (moves nothing) while its backend is not ready, unless forced; `spec.pin` takes
//! precedence over it, and `suspend` freezes the route as for any decision.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{
    plan::{Plan, Routing, Rule},
    readiness::BackendState,
    verdict::Verdict,
};
use crate::{
    api::{
        Phase, Timestamp,
        conditions::{DRILL, drill},
    },
    policy::{Drill, ValidPolicy},
};

/// Where a drill stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrillState {
    /// It sends all traffic to its backend.
    Running,
    /// Its backend is not ready (and it is not forced): it moves nothing yet.
    Waiting,
    /// `spec.pin` decides instead.
    OverriddenByPin,
    /// Its end time has passed.
    Ended,
}

/// The policy's drill and where it stands at `now`; `None` without a drill.
pub fn state(
    policy: &ValidPolicy,
    backends: &[BackendState],
    now: DateTime<Utc>,
) -> Option<(Drill, DrillState)> {
    let drill = policy.drill?;
    let ready = backends.get(drill.to).is_some_and(|b| b.ready);
    let state = if now >= drill.until {
        DrillState::Ended
    } else if policy.pin.is_some() {
        DrillState::OverriddenByPin
    } else if !ready && !drill.force {
        DrillState::Waiting
    } else {
        DrillState::Running
    };
    Some((drill, state))
}

/// Weight 1 to the drill's backend, 0 to the others, while the drill runs.
pub fn route(
    policy: &ValidPolicy,
    backends: &[BackendState],
    now: DateTime<Utc>,
) -> Option<Routing> {
    let (drill, DrillState::Running) = state(policy, backends, now)? else {
        return None;
    };
    Some(Routing {
        phase: if drill.to == 0 {
            Phase::Primary
        } else {
            Phase::FailedOver
        },
        weights: (0..policy.backends.len())
            .map(|i| i32::from(i == drill.to))
            .collect(),
        rule: Rule::Drill {
            to: drill.to,
            until: drill.until,
        },
    })
}

/// The millisecond after a drill's end time, while it is ahead (running or waiting).
pub fn requeue_after(policy: &ValidPolicy, now: DateTime<Utc>) -> Option<Duration> {
    let until = policy.drill?.until;
    (until > now).then(|| (until - now).to_std().unwrap_or_default() + Duration::from_millis(1))
}

/// The `Drill` condition, while the spec has a drill.
pub fn verdict(policy: &ValidPolicy, plan: &Plan) -> Option<Verdict> {
    let (drill, state) = state(policy, &plan.backends, plan.now)?;
    let to = &policy.backends.get(drill.to)?.reference.name;
    let until = Timestamp(drill.until);
    Some(match state {
        DrillState::Running => Verdict::new(
            DRILL,
            true,
            drill::RUNNING,
            format!("drill: all traffic goes to {to} until {until}"),
        ),
        DrillState::Waiting => Verdict::new(
            DRILL,
            false,
            drill::WAITING,
            format!(
                "drill to {to} until {until}: {to} is not ready, so traffic follows the ordinary rules until it is (force the drill to move traffic anyway)"
            ),
        ),
        DrillState::OverriddenByPin => Verdict::new(
            DRILL,
            false,
            drill::OVERRIDDEN_BY_PIN,
            format!("drill to {to} until {until}: spec.pin takes precedence"),
        ),
        DrillState::Ended => Verdict::new(
            DRILL,
            false,
            drill::ENDED,
            format!("the drill to {to} ended at {until}"),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{api::Strategy, decide::tests::valid};

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap_or_default()
    }

    fn backend(ready: bool) -> BackendState {
        BackendState {
            backend: crate::backend::BackendRef::service("b"),
            observation: Default::default(),
            ready,
            since: at(0),
            not_ready: None,
        }
    }

    fn drilled(to: usize, force: bool) -> ValidPolicy {
        let mut policy = valid(Strategy::Ordered, &[("a", None), ("b", None)]);
        policy.drill = Some(Drill {
            to,
            until: at(600),
            force,
        });
        policy
    }

    #[test]
    fn a_drill_sends_everything_to_its_backend_until_its_end_time_then_nothing() {
        let policy = drilled(2, false);
        let ready = [backend(true), backend(true), backend(true)];
        let routing = route(&policy, &ready, at(599)).expect("running");
        assert_eq!(routing.weights, vec![0, 0, 1]);
        assert_eq!(routing.phase, Phase::FailedOver);
        assert_eq!(
            requeue_after(&policy, at(599)),
            Some(Duration::from_millis(1001))
        );
        assert_eq!(route(&policy, &ready, at(600)), None);
        assert_eq!(requeue_after(&policy, at(600)), None);
        assert_eq!(
            state(&policy, &ready, at(600)).map(|s| s.1),
            Some(DrillState::Ended)
        );
    }

    #[test]
    fn a_drill_waits_for_a_backend_that_is_not_ready_unless_forced() {
        let down = [backend(true), backend(true), backend(false)];
        assert_eq!(route(&drilled(2, false), &down, at(10)), None);
        assert_eq!(
            state(&drilled(2, false), &down, at(10)).map(|s| s.1),
            Some(DrillState::Waiting)
        );
        assert!(route(&drilled(2, true), &down, at(10)).is_some());
    }

    #[test]
    fn a_pin_takes_precedence_over_a_drill() {
        let mut policy = drilled(1, false);
        policy.pin = Some(0);
        let ready = [backend(true), backend(true), backend(true)];
        assert_eq!(route(&policy, &ready, at(10)), None);
        assert_eq!(
            state(&policy, &ready, at(10)).map(|s| s.1),
            Some(DrillState::OverriddenByPin)
        );
    }
}
