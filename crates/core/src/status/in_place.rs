//! The status of a policy whose decision is not what the route says: suspended, a write that
//! failed, a foreign route in the way, the route's CRD missing. The status describes the route as
//! it stands (its weights, the backends they send traffic to, the phase that amounts to); what
//! the controller decided and could not write is in the condition that says why (`Suspended`, the
//! conflict, the failed write) and in `kubectl failover explain-decision`.

use crate::{
    api::{
        BackendStatus, FailoverPolicyStatus, Phase,
        conditions::{READY, SUSPENDED, ready, suspended},
    },
    decide::{plan::share, verdict::Verdict},
    last_status::LastStatus,
    policy::ValidPolicy,
    route::RouteView,
};

/// The weights of the route as it stands, one per backend of the policy (matched by Service
/// name); `None` when no route of this policy's form is in place.
pub fn weights(policy: &ValidPolicy, route: Option<&RouteView>) -> Option<Vec<i32>> {
    let rules = route?.rules_of(&policy.route)?;
    let weights = policy
        .backend_names()
        .map(|name| {
            rules
                .weight(name)
                .map_or(0, |w| i32::try_from(w).unwrap_or(i32::MAX))
        })
        .collect::<Vec<_>>();
    weights.iter().any(|w| *w > 0).then_some(weights)
}

/// Where the route sends traffic: to the primary alone, to secondaries, or to backends none of
/// which is ready while nothing is.
pub fn phase(weights: &[i32], backends: &[BackendStatus]) -> Phase {
    let active_ready = weights.iter().zip(backends).any(|(w, b)| *w > 0 && b.ready);
    if !active_ready && !backends.iter().any(|b| b.ready) {
        Phase::NoReadyBackend
    } else if weights.iter().skip(1).all(|w| *w == 0) {
        Phase::Primary
    } else {
        Phase::FailedOver
    }
}

/// The status with the route as it stands (`weights`, none when no route is in place) and the
/// backends as observed now; the times of the last failover and failback stay what they were.
pub fn status(
    mut status: FailoverPolicyStatus,
    previous: Option<&LastStatus>,
    weights: Option<&[i32]>,
) -> FailoverPolicyStatus {
    let total: i64 = weights.into_iter().flatten().map(|w| i64::from(*w)).sum();
    for (i, b) in status.backends.iter_mut().enumerate() {
        let w = weights.and_then(|w| w.get(i)).copied().unwrap_or(0);
        b.weight = w;
        b.share = weights.map(|_| share(w, total));
    }
    status.active_backends = status
        .backends
        .iter()
        .filter(|b| b.weight > 0)
        .map(|b| b.service.clone())
        .collect();
    status.active_summary = Some(status.active_backends.join(",")).filter(|s| !s.is_empty());
    status.phase = weights.map(|w| phase(w, &status.backends));
    status.last_failover_time = previous.and_then(|p| p.last_failover_time);
    status.last_failback_time = previous.and_then(|p| p.last_failback_time);
    status.hold_until = None;
    status
}

/// `backend=weight` pairs of a route, for messages.
pub fn describe(status: &FailoverPolicyStatus) -> String {
    status
        .backends
        .iter()
        .map(|b| format!("{}={}", b.service, b.weight))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The `Ready` and `Suspended` verdicts of a suspended policy: the route as it stands, and where
/// traffic would go without suspend.
pub fn suspended(status: &FailoverPolicyStatus, decided: &[String], kind: &str) -> [Verdict; 2] {
    let serving = status.backends.iter().any(|b| b.weight > 0 && b.ready);
    let stays = if status.active_backends.is_empty() {
        format!("no {kind} is in place, and none is written")
    } else {
        format!("the {kind} stays at {}", describe(status))
    };
    let would = format!(
        "spec.suspend is set: {stays}; without suspend, traffic would go to {}",
        decided.join(", ")
    );
    [
        Verdict::new(READY, serving, ready::SUSPENDED, would.clone()),
        Verdict::new(SUSPENDED, true, suspended::SUSPENDED, would),
    ]
}
