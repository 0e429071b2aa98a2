//! Rule 5: no backend is ready. `KeepLast` (fail static) keeps the previous weights, never all
//! zero; `Primary` sends everything to the primary.

use super::{
    before::Before,
    plan::{Routing, Rule},
};
use crate::{
    api::{Phase, WhenNoneReady},
    policy::ValidPolicy,
};

/// The routing when nothing is ready.
pub fn route(policy: &ValidPolicy, previous: &Before) -> Routing {
    let primary_only = primary_only(policy.backends.len());
    let weights = match policy.when_none_ready {
        WhenNoneReady::Primary => primary_only,
        WhenNoneReady::KeepLast => previous
            .weights
            .clone()
            .filter(|w| w.iter().any(|&x| x > 0))
            .unwrap_or(primary_only),
    };
    Routing {
        phase: Phase::NoReadyBackend,
        weights,
        rule: Rule::NoReadyBackend,
    }
}

/// Weight 1 to the primary, 0 to the others.
pub fn primary_only(backends: usize) -> Vec<i32> {
    (0..backends).map(|i| i32::from(i == 0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{api::Strategy, decide::tests::valid};

    #[test]
    fn keep_last_keeps_the_previous_weights_but_never_all_zero() {
        let policy = valid(Strategy::Ordered, &[("a", None), ("b", None)]);
        let on_b = Before {
            weights: Some(vec![0, 0, 1]),
            ..Before::default()
        };
        assert_eq!(route(&policy, &on_b).weights, vec![0, 0, 1]);
        let all_zero = Before {
            weights: Some(vec![0, 0, 0]),
            ..Before::default()
        };
        assert_eq!(route(&policy, &all_zero).weights, vec![1, 0, 0]);
        assert_eq!(route(&policy, &Before::default()).weights, vec![1, 0, 0]);
        assert_eq!(route(&policy, &on_b).phase, Phase::NoReadyBackend);
    }

    #[test]
    fn primary_sends_everything_to_the_primary_whatever_came_before() {
        let mut policy = valid(Strategy::Ordered, &[("a", None)]);
        policy.when_none_ready = WhenNoneReady::Primary;
        let on_a = Before {
            weights: Some(vec![0, 1]),
            ..Before::default()
        };
        assert_eq!(route(&policy, &on_a).weights, vec![1, 0]);
    }
}
