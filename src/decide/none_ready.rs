//! Rule 5: no backend is ready. `KeepLast` (fail static) keeps the previous weights, never all
//! zero; `Primary` sends everything to the primary.

use super::{Routing, Rule, previous::Previous};
use crate::{
    api::{Phase, WhenNoneReady},
    validate::ValidPolicy,
};

/// The routing when nothing is ready.
pub fn route(policy: &ValidPolicy, previous: &Previous) -> Routing {
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
