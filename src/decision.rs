//! The failover decision: a pure function of (policy spec, backend readiness, previous status,
//! now) that returns the TrafficSplit weights, the new status and when to look again.
//!
//! No I/O happens here; the reconciler reads caches, calls [`decide`], and writes the result.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::api::{
    BackendStatus, Condition, FailoverPolicySpec, FailoverPolicyStatus, Phase, Role, Strategy,
    Timestamp,
};

/// Condition type: traffic is routed to a ready backend through the owned TrafficSplit.
pub const CONDITION_READY: &str = "Ready";
/// Condition type: some backend is not ready.
pub const CONDITION_DEGRADED: &str = "Degraded";

/// What the controller observed of one backend Service.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendObservation {
    /// The Service object exists.
    pub service_exists: bool,
    /// Number of EndpointSlices labelled with the Service's name.
    pub slices: u32,
    /// Ready endpoints over all slices.
    pub ready_endpoints: i32,
    /// All endpoints over all slices.
    pub total_endpoints: i32,
}

/// A change of where traffic goes, worth an Event and a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transition {
    /// Traffic left the primary, or moved between secondaries.
    FailedOver,
    /// Traffic returned to the primary.
    FailedBack,
    /// No backend is ready; weights are kept as they were.
    NoReadyBackend,
    /// A backend is ready again after a `NoReadyBackend` phase, with traffic where it was.
    Recovered,
}

impl Transition {
    /// The Event reason for this transition.
    pub fn reason(self) -> &'static str {
        match self {
            Transition::FailedOver => "FailedOver",
            Transition::FailedBack => "FailedBack",
            Transition::NoReadyBackend => "NoReadyBackend",
            Transition::Recovered => "Recovered",
        }
    }
}

/// The outcome of one decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// Weight of each backend, in the order of [`FailoverPolicySpec::backend_services`].
    pub weights: Vec<i32>,
    /// The status to write (the caller fills in generation and TrafficSplit name).
    pub status: FailoverPolicyStatus,
    /// When to decide again even if nothing changes (a held transition falls due).
    pub requeue_after: Option<Duration>,
    /// Set when the active backends or the phase changed.
    pub transition: Option<Transition>,
    /// A human-readable sentence describing the transition, for the Event.
    pub transition_message: Option<String>,
}

/// Decides the weights and the status of one policy.
///
/// `observations` holds one entry per backend, in the order of
/// [`FailoverPolicySpec::backend_services`] (primary first); missing entries count as a Service
/// that does not exist.
pub fn decide(
    spec: &FailoverPolicySpec,
    observations: &[BackendObservation],
    previous: Option<&FailoverPolicyStatus>,
    now: DateTime<Utc>,
) -> Decision {
    let now = truncate_to_millis(now);
    let names: Vec<&str> = spec.backend_services().collect();
    let min_ready = spec.readiness.min_ready_endpoints.max(1);
    let observation = |i: usize| observations.get(i).copied().unwrap_or_default();
    let ready: Vec<bool> = (0..names.len())
        .map(|i| {
            let o = observation(i);
            o.service_exists && o.ready_endpoints >= min_ready
        })
        .collect();
    let previous_backend =
        |name: &str| previous.and_then(|p| p.backends.iter().find(|b| b.service == name));
    // When each backend's readiness last changed: kept from the previous status while unchanged.
    let since: Vec<DateTime<Utc>> = names
        .iter()
        .zip(&ready)
        .map(|(name, &is_ready)| match previous_backend(name) {
            Some(b) if b.ready == is_ready => b.last_transition_time.map_or(now, |t| t.0),
            _ => now,
        })
        .collect();

    let previous_weights: Option<Vec<i32>> =
        previous.filter(|p| !p.backends.is_empty()).map(|_| {
            names
                .iter()
                .map(|name| previous_backend(name).map_or(0, |b| b.weight.max(0)))
                .collect()
        });
    let previous_active: Vec<String> = previous
        .map(|p| p.active_backends.clone())
        .unwrap_or_default();
    // Traffic is on the primary unless the previous status says it left it.
    let on_primary = previous_active.is_empty() || previous_active.iter().any(|a| a == names[0]);

    let primary_only: Vec<i32> = (0..names.len()).map(|i| i32::from(i == 0)).collect();
    let secondary_weights = strategy_weights(spec, &ready);

    let mut hold: Option<Hold> = None;
    let (phase, weights) = if ready[0] {
        if on_primary || secondary_weights.is_none() {
            (Phase::Primary, primary_only)
        } else {
            let due = since[0] + spec.failback_after();
            if now >= due {
                (Phase::Primary, primary_only)
            } else {
                hold = Some(Hold::Failback { due });
                (Phase::FailedOver, secondary_weights.unwrap_or(primary_only))
            }
        }
    } else {
        match secondary_weights {
            None => (
                Phase::NoReadyBackend,
                previous_weights
                    .filter(|w| w.iter().any(|&x| x > 0))
                    .unwrap_or(primary_only),
            ),
            Some(weights) if on_primary => {
                let due = since[0] + spec.failover_after();
                if now >= due {
                    (Phase::FailedOver, weights)
                } else {
                    hold = Some(Hold::Failover { due });
                    (Phase::Primary, primary_only)
                }
            }
            Some(weights) => (Phase::FailedOver, weights),
        }
    };

    let active: Vec<String> = names
        .iter()
        .zip(&weights)
        .filter(|(_, w)| **w > 0)
        .map(|(n, _)| n.to_string())
        .collect();

    let backends: Vec<BackendStatus> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let o = observation(i);
            BackendStatus {
                service: name.to_string(),
                role: if i == 0 {
                    Role::Primary
                } else {
                    Role::Secondary
                },
                ready: ready[i],
                ready_endpoints: o.ready_endpoints,
                total_endpoints: o.total_endpoints,
                weight: weights[i],
                last_transition_time: Some(Timestamp(since[i])),
                message: (!ready[i]).then(|| not_ready_message(o, min_ready)),
            }
        })
        .collect();

    let previous_phase = previous.and_then(|p| p.phase);
    let active_ready = names
        .iter()
        .zip(&weights)
        .zip(&ready)
        .filter(|((_, w), _)| **w > 0)
        .all(|(_, r)| *r);
    let transition = match phase {
        _ if previous.is_none() || previous_phase.is_none() => None,
        Phase::NoReadyBackend if previous_phase != Some(Phase::NoReadyBackend) => {
            Some(Transition::NoReadyBackend)
        }
        Phase::NoReadyBackend => None,
        _ if active != previous_active => Some(if phase == Phase::Primary {
            Transition::FailedBack
        } else {
            Transition::FailedOver
        }),
        // Leaving NoReadyBackend with traffic where it was: worth an Event only once the backends
        // taking the traffic are ready (not while a failover hold keeps it on a dead primary).
        _ if previous_phase == Some(Phase::NoReadyBackend) && active_ready => {
            Some(Transition::Recovered)
        }
        _ => None,
    };
    let transition_message = transition.map(|t| match t {
        Transition::FailedOver if on_primary => format!(
            "primary {} is not ready; traffic moved to {}",
            names[0],
            active.join(", ")
        ),
        Transition::FailedOver => format!(
            "traffic moved from {} to {}",
            previous_active.join(", "),
            active.join(", ")
        ),
        Transition::FailedBack => {
            format!("primary {} is ready; traffic moved back to it", names[0])
        }
        Transition::NoReadyBackend => format!(
            "no backend is ready; weights kept as they were (traffic stays on {})",
            active.join(", ")
        ),
        Transition::Recovered => format!("{} is ready again", active.join(", ")),
    });

    let mut last_failover_time = previous.and_then(|p| p.last_failover_time);
    let mut last_failback_time = previous.and_then(|p| p.last_failback_time);
    if active != previous_active && previous.is_some() && !previous_active.is_empty() {
        let now_on_primary = active.iter().any(|a| a == names[0]);
        if on_primary && !now_on_primary {
            last_failover_time = Some(Timestamp(now));
        } else if !on_primary && now_on_primary {
            last_failback_time = Some(Timestamp(now));
        }
    }

    let previous_conditions = previous
        .map(|p| p.conditions.as_slice())
        .unwrap_or_default();
    let (ready_status, ready_reason, ready_message) =
        ready_condition(phase, hold, &names, &active, &since, spec);
    let (degraded_status, degraded_reason, degraded_message) =
        degraded_condition(&names, &ready, &backends);
    let conditions = vec![
        condition(
            previous_conditions,
            CONDITION_READY,
            ready_status,
            ready_reason,
            ready_message,
            now,
        ),
        condition(
            previous_conditions,
            CONDITION_DEGRADED,
            degraded_status,
            degraded_reason,
            degraded_message,
            now,
        ),
    ];

    let ready_count = ready.iter().filter(|r| **r).count();
    let status = FailoverPolicyStatus {
        observed_generation: previous.and_then(|p| p.observed_generation),
        phase: Some(phase),
        active_summary: Some(active.join(",")),
        active_backends: active,
        ready_summary: Some(format!("{ready_count}/{}", names.len())),
        backends,
        last_failover_time,
        last_failback_time,
        traffic_split: previous.and_then(|p| p.traffic_split.clone()),
        conditions,
    };

    let requeue_after = hold.map(|h| {
        let due = match h {
            Hold::Failover { due } | Hold::Failback { due } => due,
        };
        // Round up to the next millisecond so the requeue never fires before `due`.
        (due - now).to_std().unwrap_or_default() + Duration::from_millis(1)
    });

    Decision {
        weights,
        status,
        requeue_after,
        transition,
        transition_message,
    }
}

#[derive(Clone, Copy, Debug)]
enum Hold {
    Failover { due: DateTime<Utc> },
    Failback { due: DateTime<Utc> },
}

/// Weights of the secondaries per strategy, `None` when no secondary is ready. The primary's
/// weight (index 0) is always 0 here.
fn strategy_weights(spec: &FailoverPolicySpec, ready: &[bool]) -> Option<Vec<i32>> {
    let mut weights = vec![0; ready.len()];
    let ready_secondaries: Vec<usize> = (1..ready.len()).filter(|&i| ready[i]).collect();
    let first = *ready_secondaries.first()?;
    match spec.strategy {
        Strategy::Ordered => weights[first] = 1,
        Strategy::Equal => ready_secondaries.iter().for_each(|&i| weights[i] = 1),
        Strategy::Weighted => ready_secondaries.iter().for_each(|&i| {
            weights[i] = spec
                .secondaries
                .get(i - 1)
                .and_then(|s| s.weight)
                .unwrap_or(1)
                .clamp(1, crate::api::MAX_WEIGHT)
        }),
    }
    Some(weights)
}

fn not_ready_message(o: BackendObservation, min_ready: i32) -> String {
    if !o.service_exists {
        "Service not found".to_string()
    } else if o.slices == 0 {
        "Service has no EndpointSlices".to_string()
    } else {
        format!(
            "{} of {} endpoints ready, {} needed",
            o.ready_endpoints, o.total_endpoints, min_ready
        )
    }
}

fn ready_condition(
    phase: Phase,
    hold: Option<Hold>,
    names: &[&str],
    active: &[String],
    since: &[DateTime<Utc>],
    spec: &FailoverPolicySpec,
) -> (&'static str, &'static str, String) {
    let fmt_time = |t: DateTime<Utc>| Timestamp(t).to_string();
    match (phase, hold) {
        (Phase::Primary, Some(Hold::Failover { due })) => (
            "False",
            "FailoverPending",
            format!(
                "primary {} not ready since {}; traffic stays on it until {} (failoverAfter {})",
                names[0],
                fmt_time(since[0]),
                fmt_time(due),
                spec.failover_after
            ),
        ),
        (Phase::Primary, _) => (
            "True",
            "PrimaryActive",
            format!("traffic goes to primary {}", names[0]),
        ),
        (Phase::FailedOver, Some(Hold::Failback { due })) => (
            "True",
            "FailbackPending",
            format!(
                "primary {} ready since {}; traffic stays on {} until {} (failbackAfter {})",
                names[0],
                fmt_time(since[0]),
                active.join(", "),
                fmt_time(due),
                spec.failback_after
            ),
        ),
        (Phase::FailedOver, _) => (
            "True",
            "FailedOver",
            format!(
                "primary {} is not ready; traffic goes to {} (strategy {})",
                names[0],
                active.join(", "),
                spec.strategy
            ),
        ),
        (Phase::NoReadyBackend, _) => (
            "False",
            "NoReadyBackend",
            format!(
                "no backend is ready; weights kept as they were (traffic stays on {})",
                active.join(", ")
            ),
        ),
    }
}

fn degraded_condition(
    names: &[&str],
    ready: &[bool],
    backends: &[BackendStatus],
) -> (&'static str, &'static str, String) {
    let not_ready: Vec<String> = backends
        .iter()
        .filter(|b| !b.ready)
        .map(|b| {
            format!(
                "{} ({})",
                b.service,
                b.message.as_deref().unwrap_or("not ready")
            )
        })
        .collect();
    if not_ready.is_empty() {
        (
            "False",
            "AllBackendsReady",
            format!("all {} backends are ready", names.len()),
        )
    } else if !ready[0] {
        (
            "True",
            "PrimaryNotReady",
            format!("not ready: {}", not_ready.join(", ")),
        )
    } else {
        (
            "True",
            "SecondaryNotReady",
            format!("not ready: {}", not_ready.join(", ")),
        )
    }
}

/// A condition that keeps its previous `lastTransitionTime` while its status is unchanged.
pub fn condition(
    previous: &[Condition],
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: DateTime<Utc>,
) -> Condition {
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map_or(Timestamp(now), |c| c.last_transition_time);
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        observed_generation: None,
        last_transition_time,
        reason: reason.to_string(),
        message,
    }
}

fn truncate_to_millis(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap_or(t)
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
    }
}

#[cfg(test)]
#[path = "decision_tests.rs"]
mod tests;
