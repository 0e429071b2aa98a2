//! Rule 2: `spec.pin` sends all traffic to one backend, whatever its readiness.

use super::plan::{Routing, Rule};
use crate::{api::Phase, policy::ValidPolicy};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{api::Strategy, decide::tests::valid};

    #[test]
    fn a_pin_sends_everything_to_its_backend_and_no_pin_decides_nothing() {
        let mut policy = valid(Strategy::Ordered, &[("a", None), ("b", None)]);
        assert_eq!(route(&policy), None);
        policy.pin = Some(2);
        let routing = route(&policy).expect("pinned");
        assert_eq!(routing.weights, vec![0, 0, 1]);
        assert_eq!(
            (routing.phase, routing.rule),
            (Phase::FailedOver, Rule::Pinned(2))
        );
        policy.pin = Some(0);
        assert_eq!(route(&policy).map(|r| r.phase), Some(Phase::Primary));
    }
}
