//! Rule 4: `failoverAfter` and `failbackAfter` keep traffic where it is until they fall due.
//!
//! A hold counts from when the primary's readiness last changed (kept in the status), so it
//! survives restarts, and the decision asks to be run again the millisecond after it falls due.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{
    before::Before,
    none_ready::primary_only,
    plan::{Routing, Rule},
    readiness::BackendState,
};
use crate::{api::Phase, policy::ValidPolicy};

/// The routing of the non-proportional strategies once at least one backend is ready:
/// `secondaries` holds the strategy's weights of the ready secondaries (`None` when none is).
pub fn route(
    policy: &ValidPolicy,
    primary: &BackendState,
    secondaries: Option<Vec<i32>>,
    previous: &Before,
    now: DateTime<Utc>,
) -> Routing {
    let primary_only = || Routing {
        phase: Phase::Primary,
        weights: primary_only(policy.backends.len()),
        rule: Rule::PrimaryActive,
    };
    let failed_over = |weights| Routing {
        phase: Phase::FailedOver,
        weights,
        rule: Rule::FailedOver,
    };
    match secondaries {
        // Only the primary is ready: it takes everything.
        None => primary_only(),
        // A failback ramp goes on while the primary stays ready...
        Some(weights) if primary.ready && previous.ramping => {
            failback(policy, primary, weights, now).unwrap_or_else(primary_only)
        }
        // ...and ends at once when it does not.
        Some(weights) if previous.ramping => failed_over(weights),
        // Traffic never left the primary.
        Some(_) if primary.ready && previous.on_primary => primary_only(),
        Some(weights) if primary.ready => {
            let due = primary.since + policy.failback_after.after;
            if now >= due {
                failback(policy, primary, weights, now).unwrap_or_else(primary_only)
            } else {
                Routing {
                    phase: Phase::FailedOver,
                    weights,
                    rule: Rule::FailbackPending { due },
                }
            }
        }
        Some(weights) if previous.on_primary => {
            let due = primary.since + policy.failover_after.after;
            if now >= due {
                failed_over(weights)
            } else {
                Routing {
                    phase: Phase::Primary,
                    weights: primary_only().weights,
                    rule: Rule::FailoverPending { due },
                }
            }
        }
        Some(weights) => failed_over(weights),
    }
}

/// Once `failbackAfter` has passed: the step of the policy's ramp, if it has one and it is not
/// over; `None` means all traffic goes back to the primary.
fn failback(
    policy: &ValidPolicy,
    primary: &BackendState,
    secondaries: Vec<i32>,
    now: DateTime<Utc>,
) -> Option<Routing> {
    let ramp = policy.ramp.as_ref()?;
    let start = primary.since + policy.failback_after.after;
    super::ramp::route(ramp, start, &secondaries, now)
}

/// When to decide again: the millisecond after a pending hold falls due, so the requeue never
/// fires before it; `None` without a hold.
pub fn requeue_after(rule: Rule, now: DateTime<Utc>) -> Option<Duration> {
    match rule {
        Rule::FailoverPending { due }
        | Rule::FailbackPending { due }
        | Rule::FailbackRamp { due, .. } => {
            Some((due - now).to_std().unwrap_or_default() + Duration::from_millis(1))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{api::Strategy, decide::tests::valid};

    fn state(ready: bool, since: i64) -> BackendState {
        BackendState {
            backend: crate::backend::BackendRef::service("primary"),
            observation: Default::default(),
            ready,
            since: DateTime::from_timestamp(since, 0).unwrap_or_default(),
            not_ready: None,
        }
    }

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(seconds, 0).unwrap_or_default()
    }

    #[test]
    fn failover_waits_for_failover_after_counted_from_the_primary_going_down() {
        let mut policy = valid(Strategy::Ordered, &[("a", None)]);
        policy.failover_after.after = Duration::from_secs(30);
        let on_primary = Before {
            on_primary: true,
            ..Default::default()
        };
        let held = route(
            &policy,
            &state(false, 100),
            Some(vec![0, 1]),
            &on_primary,
            at(110),
        );
        assert_eq!(held.rule, Rule::FailoverPending { due: at(130) });
        assert_eq!(held.weights, vec![1, 0]);
        assert_eq!(
            requeue_after(held.rule, at(110)),
            Some(Duration::from_millis(20_001))
        );
        let due = route(
            &policy,
            &state(false, 100),
            Some(vec![0, 1]),
            &on_primary,
            at(130),
        );
        assert_eq!((due.rule, due.weights), (Rule::FailedOver, vec![0, 1]));
    }

    #[test]
    fn failback_waits_for_failback_after_counted_from_the_primary_coming_back() {
        let mut policy = valid(Strategy::Ordered, &[("a", None)]);
        policy.failback_after.after = Duration::from_secs(60);
        let failed_over = Before::default();
        let held = route(
            &policy,
            &state(true, 100),
            Some(vec![0, 1]),
            &failed_over,
            at(159),
        );
        assert_eq!(held.rule, Rule::FailbackPending { due: at(160) });
        assert_eq!(held.weights, vec![0, 1]);
        let due = route(
            &policy,
            &state(true, 100),
            Some(vec![0, 1]),
            &failed_over,
            at(160),
        );
        assert_eq!((due.rule, due.weights), (Rule::PrimaryActive, vec![1, 0]));
    }
}
