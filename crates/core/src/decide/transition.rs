//! Rule 6: whether traffic moved since the previous decision (worth an Event and a metric), what
//! the Event says, and when traffic last left and returned to the primary.

use super::plan::{Announcement, Transition, active};
use super::{
    before::Before,
    plan::{Routing, Rule},
    readiness::BackendState,
};
use crate::{
    api::{Phase, Timestamp, WhenNoneReady},
    policy::ValidPolicy,
};

/// The transition from the previous decision to this one, if any.
pub fn detect(
    policy: &ValidPolicy,
    routing: &Routing,
    backends: &[BackendState],
    previous: &Before,
) -> Option<Announcement> {
    let active = active(policy, &routing.weights);
    let pinned_not_ready = matches!(routing.rule, Rule::Pinned(p) if !backends[p].ready);
    let active_ready = routing
        .weights
        .iter()
        .zip(backends)
        .filter(|(w, _)| **w > 0)
        .all(|(_, b)| b.ready);
    let transition = match routing.phase {
        // While suspended nothing moves, so nothing is announced.
        _ if policy.suspend => None,
        _ if pinned_not_ready && !previous.pinned_not_ready => {
            Some(Transition::PinnedBackendNotReady)
        }
        _ if !previous.decided => None,
        Phase::NoReadyBackend if previous.phase != Some(Phase::NoReadyBackend) => {
            Some(Transition::NoReadyBackend)
        }
        Phase::NoReadyBackend => None,
        _ if matches!(
            routing.rule,
            Rule::FailbackRamp { .. } | Rule::CapacityFailback
        ) =>
        {
            (previous.weights.as_ref() != Some(&routing.weights))
                .then_some(Transition::FailbackStep)
        }
        phase if active != previous.active => Some(if phase == Phase::Primary {
            Transition::FailedBack
        } else {
            Transition::FailedOver
        }),
        // Leaving NoReadyBackend with traffic where it was: worth an Event only once the backends
        // taking the traffic are ready (not while a failover hold keeps it on a dead primary).
        _ if previous.phase == Some(Phase::NoReadyBackend) && active_ready => {
            Some(Transition::Recovered)
        }
        _ => None,
    }?;
    Some(Announcement {
        transition,
        message: rule_message(policy, routing, transition, &active, previous),
    })
}

/// The note of a transition: the rule's own for a ramp, a drill, a pin and a spillover by
/// capacity, else the move's.
fn rule_message(
    policy: &ValidPolicy,
    routing: &Routing,
    transition: Transition,
    active: &[String],
    previous: &Before,
) -> String {
    match routing.rule {
        Rule::FailbackRamp { step, steps, .. } => format!(
            "failing back: primary {} takes {}% of the traffic (step {} of {steps})",
            policy.primary(),
            routing.weights.first().copied().unwrap_or(0) / 100,
            step + 1
        ),
        Rule::Drill { until, .. } => format!(
            "drill: all traffic moved to {} until {}",
            active.join(", "),
            Timestamp(until)
        ),
        Rule::CapacitySpillover => format!(
            "primary {} is short of ready endpoints; what they cannot serve moved to {}",
            policy.primary(),
            active
                .iter()
                .filter(|a| a.as_str() != policy.primary())
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Rule::Pinned(_) if transition != Transition::PinnedBackendNotReady => {
            format!("spec.pin: all traffic moved to {}", active.join(", "))
        }
        _ if transition == Transition::FailedOver => format!(
            "{}{}",
            message(policy, transition, active, previous),
            super::strategy::tier_note(policy, &routing.weights)
        ),
        _ => message(policy, transition, active, previous),
    }
}

fn message(
    policy: &ValidPolicy,
    transition: Transition,
    active: &[String],
    previous: &Before,
) -> String {
    let primary = policy.primary();
    // What the secondaries cannot serve stays on the primary; the note names where traffic went.
    let active: Vec<String> = match transition {
        Transition::FailedOver => active.iter().filter(|a| *a != primary).cloned().collect(),
        _ => active.to_vec(),
    };
    match transition {
        Transition::FailedOver if previous.on_primary => format!(
            "primary {primary} is not ready; traffic moved to {}",
            active.join(", ")
        ),
        Transition::FailedOver => format!(
            "traffic moved from {} to {}",
            previous.active.join(", "),
            active.join(", ")
        ),
        Transition::FailedBack => format!("primary {primary} is ready; traffic moved back to it"),
        Transition::NoReadyBackend => no_ready_message(policy, &active),
        Transition::Recovered => format!("{} is ready again", active.join(", ")),
        Transition::PinnedBackendNotReady => format!(
            "spec.pin sends all traffic to {}, which is not ready",
            active.join(", ")
        ),
        Transition::FailbackStep => format!("failing back to primary {primary}"),
    }
}

/// What happens while no backend is ready, in one sentence.
pub fn no_ready_message(policy: &ValidPolicy, active: &[String]) -> String {
    match policy.when_none_ready {
        WhenNoneReady::KeepLast => format!(
            "no backend is ready; weights kept as they were (traffic stays on {})",
            active.join(", ")
        ),
        WhenNoneReady::Primary => format!(
            "no backend is ready; all traffic goes to the primary {} (whenNoneReady: Primary)",
            policy.primary()
        ),
    }
}

/// When traffic last left the primary and last returned to it, updated when it moved now.
pub fn times(
    policy: &ValidPolicy,
    routing: &Routing,
    previous: &Before,
    now: Timestamp,
) -> (Option<Timestamp>, Option<Timestamp>) {
    let (mut last_failover, mut last_failback) =
        (previous.last_failover_time, previous.last_failback_time);
    let active = active(policy, &routing.weights);
    if active != previous.active && !previous.active.is_empty() {
        // A failover leaves what the secondaries cannot serve on the primary: still a failover.
        let now_on_primary =
            routing.rule != Rule::FailedOver && routing.weights.first().is_some_and(|w| *w > 0);
        if previous.on_primary && !now_on_primary {
            last_failover = Some(now);
        } else if !previous.on_primary && now_on_primary {
            last_failback = Some(now);
        }
    }
    (last_failover, last_failback)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{api::Strategy, decide::tests::valid};

    fn routing(phase: Phase, weights: Vec<i32>) -> Routing {
        Routing {
            phase,
            weights,
            rule: Rule::FailedOver,
        }
    }

    fn state(service: &str, ready: bool) -> BackendState {
        BackendState {
            backend: crate::backend::BackendRef::service(service),
            observation: Default::default(),
            ready,
            since: chrono::DateTime::UNIX_EPOCH,
            not_ready: None,
        }
    }

    fn on_primary() -> Before {
        Before {
            decided: true,
            phase: Some(Phase::Primary),
            weights: Some(vec![1, 0]),
            active: vec!["web-primary".into()],
            on_primary: true,
            ..Before::default()
        }
    }

    #[test]
    fn traffic_leaving_the_primary_is_a_failover_with_a_sentence() {
        let policy = valid(Strategy::Ordered, &[("a", None)]);
        let backends = [state("web-primary", false), state("a", true)];
        let moved = detect(
            &policy,
            &routing(Phase::FailedOver, vec![0, 1]),
            &backends,
            &on_primary(),
        )
        .expect("a transition");
        assert_eq!(moved.transition, Transition::FailedOver);
        assert_eq!(
            moved.message,
            "primary web-primary is not ready; traffic moved to a"
        );
        let now = Timestamp(chrono::DateTime::UNIX_EPOCH);
        let (failover, failback) = times(
            &policy,
            &routing(Phase::FailedOver, vec![0, 1]),
            &on_primary(),
            now,
        );
        assert_eq!((failover, failback), (Some(now), None));
    }

    #[test]
    fn nothing_is_announced_on_a_first_decision_while_suspended_or_when_nothing_moved() {
        let mut policy = valid(Strategy::Ordered, &[("a", None)]);
        let backends = [state("web-primary", true), state("a", true)];
        let same = routing(Phase::Primary, vec![1, 0]);
        assert_eq!(detect(&policy, &same, &backends, &on_primary()), None);
        let moved = routing(Phase::FailedOver, vec![0, 1]);
        assert_eq!(detect(&policy, &moved, &backends, &Before::default()), None);
        policy.suspend = true;
        assert_eq!(detect(&policy, &moved, &backends, &on_primary()), None);
    }

    #[test]
    fn losing_every_backend_is_a_warning_once() {
        let policy = valid(Strategy::Ordered, &[("a", None)]);
        let backends = [state("web-primary", false), state("a", false)];
        let none = routing(Phase::NoReadyBackend, vec![1, 0]);
        let first = detect(&policy, &none, &backends, &on_primary()).expect("announced");
        assert!(first.transition.is_warning());
        let already = Before {
            phase: Some(Phase::NoReadyBackend),
            ..on_primary()
        };
        assert_eq!(detect(&policy, &none, &backends, &already), None);
    }
}
