//! Rule 2: `spec.pin` sends all traffic to one backend, whatever its readiness.

use super::{Routing, Rule};
use crate::{api::Phase, validate::ValidPolicy};

/// Weight 1 to the pinned backend, 0 to the others; `None` without a pin.
pub fn route(policy: &ValidPolicy) -> Option<Routing> {
    let pinned = policy.pin?;
    Some(Routing {
        phase: if pinned == 0 {
            Phase::Primary
        } else {
            Phase::FailedOver
        },
        weights: (0..policy.backends.len())
            .map(|i| i32::from(i == pinned))
            .collect(),
        rule: Rule::Pinned(pinned),
    })
}
