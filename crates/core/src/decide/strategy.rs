//! Rule 3: how traffic is shared. `Proportional` spills over by health across all backends;
//! `Ordered`, `Equal` and `Weighted` share it among the ready secondaries while the primary is
//! not ready.

use super::{
    plan::{PROPORTIONAL_TOTAL, Routing, Rule},
    readiness::BackendState,
};
use crate::{
    api::{Phase, Strategy, rules::MAX_WEIGHT},
    policy::ValidPolicy,
};

/// Weights of the secondaries per strategy, `None` when no secondary is ready. The primary's
/// weight (index 0) is always 0 here.
pub fn secondary_weights(policy: &ValidPolicy, ready: &[bool]) -> Option<Vec<i32>> {
    let mut weights = vec![0; ready.len()];
    let ready_secondaries: Vec<usize> = (1..ready.len()).filter(|&i| ready[i]).collect();
    let first = *ready_secondaries.first()?;
    match policy.strategy {
        Strategy::Ordered => weights[first] = 1,
        // Proportional is decided by `proportional`; as a plain strategy it is Equal.
        Strategy::Equal | Strategy::Proportional => {
            ready_secondaries.iter().for_each(|&i| weights[i] = 1)
        }
        Strategy::Weighted => ready_secondaries.iter().for_each(|&i| {
            weights[i] = policy
                .backends
                .get(i)
                .map_or(1, |b| b.weight)
                .clamp(1, MAX_WEIGHT)
        }),
    }
    Some(weights)
}

/// `Proportional`: the routing by health; `None` when no backend has any.
pub fn proportional(policy: &ValidPolicy, backends: &[BackendState]) -> Option<Routing> {
    let observed: Vec<_> = backends.iter().map(|b| b.observation.clone()).collect();
    let ready: Vec<bool> = backends.iter().map(|b| b.ready).collect();
    let weights = proportional_weights(policy.overprovisioning_factor, &observed, &ready)?;
    let (phase, rule) = if weights[0] == PROPORTIONAL_TOTAL {
        (Phase::Primary, Rule::PrimaryActive)
    } else {
        (Phase::FailedOver, Rule::Spillover)
    };
    Some(Routing {
        phase,
        weights,
        rule,
    })
}

/// Envoy's priority-level spillover, the primary first and the secondaries after it in list
/// order. Health of a backend: `min(100, factor x 100 x ready / total)` (0 when not ready under
/// `spec.readiness`); `sum = min(100, total of healths)`; the first backend's share is
/// `min(100, health x 100 / sum)` and each next one's `min(100 - shares before, health x 100 / sum)`.
/// Weights are basis points adding up to [`PROPORTIONAL_TOTAL`]: every backend gets the floor of
/// its share and the first backend with a share gets the rounding remainder, so more ready
/// endpoints on a backend never move traffic away from it. `None` when every health is 0.
pub fn proportional_weights(
    factor: f64,
    observations: &[crate::observation::BackendObservation],
    ready: &[bool],
) -> Option<Vec<i32>> {
    let health: Vec<f64> = observations
        .iter()
        .zip(ready)
        .map(|(o, &r)| {
            if !r || o.total_endpoints <= 0 {
                0.0
            } else {
                (factor * 100.0 * f64::from(o.ready_endpoints) / f64::from(o.total_endpoints))
                    .min(100.0)
            }
        })
        .collect();
    let sum = health.iter().sum::<f64>().min(100.0);
    if sum <= 0.0 {
        return None;
    }
    let mut assigned = 0.0;
    let shares: Vec<f64> = health
        .iter()
        .map(|h| {
            let share = (h * 100.0 / sum).min(100.0 - assigned).max(0.0);
            assigned += share;
            share
        })
        .collect();
    let scale = f64::from(PROPORTIONAL_TOTAL) / 100.0;
    let mut weights: Vec<i32> = shares.iter().map(|s| (s * scale).floor() as i32).collect();
    let remainder = PROPORTIONAL_TOTAL - weights.iter().sum::<i32>();
    if let Some(first) = shares.iter().position(|s| *s > 0.0) {
        weights[first] += remainder;
    }
    Some(weights)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::tests::valid;

    #[test]
    fn ordered_takes_the_first_ready_secondary_equal_takes_all_weighted_uses_weights() {
        let ready = [false, false, true, true];
        let mut policy = valid(Strategy::Ordered, &[("a", None), ("b", None), ("c", None)]);
        assert_eq!(secondary_weights(&policy, &ready), Some(vec![0, 0, 1, 0]));
        policy.strategy = Strategy::Equal;
        assert_eq!(secondary_weights(&policy, &ready), Some(vec![0, 0, 1, 1]));
        let policy = valid(
            Strategy::Weighted,
            &[("a", Some(5)), ("b", Some(3)), ("c", Some(7))],
        );
        assert_eq!(secondary_weights(&policy, &ready), Some(vec![0, 0, 3, 7]));
        assert_eq!(
            secondary_weights(&policy, &[true, false, false, false]),
            None
        );
    }
}
