//! Rule 4b: a gradual failback. Once `failbackAfter` has passed, the primary's share of the
//! traffic goes through `failback.ramp.steps`, each held for `every` while the primary stays
//! ready; the secondaries share the rest by the strategy. The step is a pure function of when
//! the primary became ready (kept in the status) and now, so it survives restarts and the
//! decision asks to be run again exactly when the next step falls due. A primary turning not
//! ready during the ramp sends all traffic back to the secondaries at once (see `holds`).

use chrono::{DateTime, Utc};

use super::plan::{PROPORTIONAL_TOTAL, Routing, Rule};
use crate::{api::Phase, policy::Ramp};

/// The routing at the ramp's current step; `None` once its last step (100%) is reached.
pub fn route(
    ramp: &Ramp,
    start: DateTime<Utc>,
    secondaries: &[i32],
    now: DateTime<Utc>,
) -> Option<Routing> {
    let every = chrono::Duration::from_std(ramp.every.after).ok()?;
    if every <= chrono::Duration::zero() {
        return None;
    }
    let elapsed = (now - start).max(chrono::Duration::zero());
    let step = usize::try_from(elapsed.num_milliseconds() / every.num_milliseconds()).ok()?;
    let percent = *ramp.steps.get(step)?;
    if percent >= 100 {
        return None;
    }
    let due = start + every * i32::try_from(step + 1).ok()?;
    Some(Routing {
        phase: Phase::FailedOver,
        weights: weights(percent, secondaries),
        rule: Rule::FailbackRamp {
            step,
            steps: ramp.steps.len(),
            due,
        },
    })
}

/// Weights in basis points: `percent` to the primary (index 0), the rest to the secondaries in
/// proportion to their strategy weights, the rounding remainder to the first of them.
pub fn weights(percent: i32, secondaries: &[i32]) -> Vec<i32> {
    let primary = percent.clamp(0, 100) * (PROPORTIONAL_TOTAL / 100);
    let rest = PROPORTIONAL_TOTAL - primary;
    let total: i64 = secondaries.iter().skip(1).map(|w| i64::from(*w)).sum();
    let mut weights: Vec<i32> = secondaries
        .iter()
        .enumerate()
        .map(|(i, w)| match i {
            0 => primary,
            _ if total > 0 => i32::try_from(i64::from(rest) * i64::from(*w) / total).unwrap_or(0),
            _ => 0,
        })
        .collect();
    let remainder = PROPORTIONAL_TOTAL - weights.iter().sum::<i32>();
    if let Some(first) = (1..weights.len()).find(|&i| secondaries[i] > 0) {
        weights[first] += remainder;
    } else if let Some(p) = weights.first_mut() {
        *p += remainder;
    }
    weights
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::policy::Hold;

    fn ramp(steps: &[i32], every_s: u64) -> Ramp {
        Ramp {
            steps: steps.into(),
            every: Hold {
                after: Duration::from_secs(every_s),
                written: format!("{every_s}s").into(),
            },
        }
    }

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap_or_default()
    }

    #[test]
    fn each_step_lasts_every_and_the_last_ends_the_ramp() {
        let r = ramp(&[10, 25, 50, 100], 30);
        let step = |s| route(&r, at(0), &[0, 1, 0], at(s)).map(|x| (x.weights, x.rule));
        let (w, rule) = step(0).expect("first step");
        assert_eq!(w, vec![1000, 9000, 0]);
        assert_eq!(
            rule,
            Rule::FailbackRamp {
                step: 0,
                steps: 4,
                due: at(30)
            }
        );
        assert_eq!(step(29).map(|s| s.0[0]), Some(1000));
        assert_eq!(step(30).map(|s| s.0[0]), Some(2500));
        assert_eq!(
            step(60).map(|s| s.1),
            Some(Rule::FailbackRamp {
                step: 2,
                steps: 4,
                due: at(90)
            })
        );
        assert_eq!(step(90), None, "the last step (100%) ends the ramp");
    }

    #[test]
    fn the_rest_is_shared_by_the_strategy_weights() {
        assert_eq!(weights(25, &[0, 300, 0, 700]), vec![2500, 2250, 0, 5250]);
        assert_eq!(weights(10, &[0, 1, 1, 1]), vec![1000, 3000, 3000, 3000]);
        assert_eq!(
            weights(33, &[0, 1, 1, 1]).iter().sum::<i32>(),
            PROPORTIONAL_TOTAL
        );
    }

    proptest! {
        /// The primary's share never decreases while the ramp runs, each weight set adds up to
        /// the total, and each step is due exactly `every` after the one before.
        #[test]
        fn steps_are_monotone_and_due_exactly(
            raw in proptest::collection::btree_set(1i32..100, 0..6),
            every in 1u64..120,
            secondaries in proptest::collection::vec(0i32..5, 1..4),
            times in proptest::collection::vec(0i64..2000, 1..20),
        ) {
            let mut steps: Vec<i32> = raw.into_iter().collect();
            steps.push(100);
            let r = ramp(&steps, every);
            let mut secondaries = secondaries;
            secondaries.insert(0, 0);
            secondaries[1] = secondaries[1].max(1);
            let mut times = times;
            times.sort_unstable();
            let mut last = 0;
            for t in times {
                match route(&r, at(0), &secondaries, at(t)) {
                    Some(routing) => {
                        prop_assert!(routing.weights[0] >= last);
                        last = routing.weights[0];
                        prop_assert_eq!(routing.weights.iter().sum::<i32>(), PROPORTIONAL_TOTAL);
                        let Rule::FailbackRamp { step, due, .. } = routing.rule else {
                            return Err(TestCaseError::fail("not a ramp step"));
                        };
                        let expected = at(0) + chrono::Duration::seconds(every as i64 * (step as i64 + 1));
                        prop_assert_eq!(due, expected);
                        prop_assert!(due > at(t));
                    }
                    None => last = PROPORTIONAL_TOTAL,
                }
            }
        }
    }
}
