//! Rule 3: how traffic is shared. `Proportional` spills over by health across all backends;
//! `Ordered`, `Equal` and `Weighted` share it, while the primary is not ready, among the ready
//! secondaries of the first tier that has one: `Ordered` is one secondary per tier, in list
//! order; `Equal` and `Weighted` are the tiers the secondaries name (one tier when none does),
//! shared equally or by weight inside a tier.

use super::{
    plan::{PROPORTIONAL_TOTAL, Routing, Rule},
    readiness::BackendState,
};
use crate::{
    api::{Phase, Strategy, rules::MAX_WEIGHT},
    policy::ValidPolicy,
};

/// Weights of the secondaries: those of the first tier with a ready secondary share the traffic
/// by [`tier_weight`]; `None` when no secondary is ready. The primary's weight (index 0) is
/// always 0 here.
pub fn secondary_weights(policy: &ValidPolicy, ready: &[bool]) -> Option<Vec<i32>> {
    let mut weights = vec![0; ready.len()];
    let tier_of = |i: usize| policy.backends.get(i).map_or(0, |b| b.tier);
    let serving = (1..ready.len()).filter(|&i| ready[i]).map(tier_of).min()?;
    for i in (1..ready.len()).filter(|&i| ready[i] && tier_of(i) == serving) {
        weights[i] = tier_weight(policy, i);
    }
    Some(weights)
}

/// A secondary's share inside its tier: its weight under `Weighted`, else 1.
pub fn tier_weight(policy: &ValidPolicy, i: usize) -> i32 {
    match policy.strategy {
        Strategy::Weighted => policy
            .backends
            .get(i)
            .map_or(1, |b| b.weight)
            .clamp(1, MAX_WEIGHT),
        Strategy::Ordered | Strategy::Equal | Strategy::Proportional => 1,
    }
}

/// The tiers of the secondaries, lowest first, each with its secondaries in list order.
pub fn tiers(policy: &ValidPolicy) -> Vec<(u8, Vec<usize>)> {
    let mut tiers: Vec<(u8, Vec<usize>)> = Vec::new();
    for (i, backend) in policy.backends.iter().enumerate().skip(1) {
        match tiers.iter_mut().find(|(t, _)| *t == backend.tier) {
            Some((_, members)) => members.push(i),
            None => tiers.push((backend.tier, vec![i])),
        }
    }
    tiers.sort_by_key(|(t, _)| *t);
    tiers
}

/// Whether the policy names tiers of its own (`secondaries[].tier` under `Equal` or
/// `Weighted`): then its messages say which tier serves.
pub fn tiered(policy: &ValidPolicy) -> bool {
    policy.strategy != Strategy::Ordered && policy.backends.iter().any(|b| b.tier > 0)
}

/// `" (tier N)"`, the tiers the secondaries with weight serve from, for a policy with tiers of
/// its own; empty otherwise.
pub fn tier_note(policy: &ValidPolicy, weights: &[i32]) -> String {
    if !tiered(policy) {
        return String::new();
    }
    let mut serving: Vec<u8> = weights
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(_, w)| **w > 0)
        .filter_map(|(i, _)| policy.backends.get(i).map(|b| b.tier))
        .collect();
    serving.sort_unstable();
    serving.dedup();
    match serving.as_slice() {
        [] => String::new(),
        [tier] => format!(" (tier {tier})"),
        tiers => format!(
            " (tiers {})",
            tiers
                .iter()
                .map(u8::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
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
        let three = [("a", None), ("b", None), ("c", None)];
        let policy = valid(Strategy::Ordered, &three);
        assert_eq!(secondary_weights(&policy, &ready), Some(vec![0, 0, 1, 0]));
        let policy = valid(Strategy::Equal, &three);
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
