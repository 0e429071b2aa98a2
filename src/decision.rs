//! The failover decision: a pure function of (policy spec, backend readiness, previous status,
//! now) that returns the TrafficSplit weights, the new status and when to look again.
//!
//! No I/O happens here; the reconciler reads caches, calls [`decide`], and writes the result.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::api::{
    BackendStatus, Condition, FailoverPolicySpec, FailoverPolicyStatus, Phase, Role, Strategy,
    Timestamp, WhenNoneReady,
};

/// Condition type: traffic is routed to a ready backend through the owned TrafficSplit.
pub const CONDITION_READY: &str = "Ready";
/// Condition type: some backend is not ready.
pub const CONDITION_DEGRADED: &str = "Degraded";
/// Condition type: `spec.suspend` freezes the generated route.
pub const CONDITION_SUSPENDED: &str = "Suspended";
/// Condition type: `spec.pin` sends all traffic to one backend.
pub const CONDITION_PINNED: &str = "Pinned";
/// With strategy `Proportional`, the weights of a route always add up to this (basis points).
pub const PROPORTIONAL_TOTAL: i32 = 10_000;

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
    /// The backend named by `spec.pin` is not ready, yet takes all traffic.
    PinnedBackendNotReady,
}

impl Transition {
    /// The Event reason for this transition.
    pub fn reason(self) -> &'static str {
        match self {
            Transition::FailedOver => "FailedOver",
            Transition::FailedBack => "FailedBack",
            Transition::NoReadyBackend => "NoReadyBackend",
            Transition::Recovered => "Recovered",
            Transition::PinnedBackendNotReady => "PinnedBackendNotReady",
        }
    }

    /// Whether the Event for this transition is a Warning.
    pub fn is_warning(self) -> bool {
        matches!(
            self,
            Transition::NoReadyBackend | Transition::PinnedBackendNotReady
        )
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
    let min_ratio = spec.readiness.min_ready_ratio.unwrap_or(0.0);
    let ready: Vec<bool> = (0..names.len())
        .map(|i| is_ready(observation(i), min_ready, min_ratio))
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
    let when_none_ready = || match spec.when_none_ready {
        WhenNoneReady::Primary => primary_only.clone(),
        WhenNoneReady::KeepLast => previous_weights
            .clone()
            .filter(|w| w.iter().any(|&x| x > 0))
            .unwrap_or_else(|| primary_only.clone()),
    };
    let pinned = spec
        .pin
        .as_deref()
        .and_then(|pin| names.iter().position(|n| *n == pin));

    let mut hold: Option<Hold> = None;
    let (phase, weights) = if let Some(p) = pinned {
        let weights = (0..names.len()).map(|i| i32::from(i == p)).collect();
        (
            if p == 0 {
                Phase::Primary
            } else {
                Phase::FailedOver
            },
            weights,
        )
    } else if spec.strategy == Strategy::Proportional {
        let observed: Vec<BackendObservation> = (0..names.len()).map(observation).collect();
        match proportional_weights(spec.overprovisioning_factor(), &observed, &ready) {
            Some(w) if w[0] == PROPORTIONAL_TOTAL => (Phase::Primary, w),
            Some(w) => (Phase::FailedOver, w),
            None => (Phase::NoReadyBackend, when_none_ready()),
        }
    } else {
        let secondary_weights = strategy_weights(spec, &ready);
        if ready[0] {
            if on_primary || secondary_weights.is_none() {
                (Phase::Primary, primary_only.clone())
            } else {
                let due = since[0] + spec.failback_after();
                if now >= due {
                    (Phase::Primary, primary_only.clone())
                } else {
                    hold = Some(Hold::Failback { due });
                    (
                        Phase::FailedOver,
                        secondary_weights.unwrap_or_else(|| primary_only.clone()),
                    )
                }
            }
        } else {
            match secondary_weights {
                None => (Phase::NoReadyBackend, when_none_ready()),
                Some(weights) if on_primary => {
                    let due = since[0] + spec.failover_after();
                    if now >= due {
                        (Phase::FailedOver, weights)
                    } else {
                        hold = Some(Hold::Failover { due });
                        (Phase::Primary, primary_only.clone())
                    }
                }
                Some(weights) => (Phase::FailedOver, weights),
            }
        }
    };
    let total_weight: i64 = weights.iter().map(|w| i64::from(*w)).sum();

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
                share: Some(share(weights[i], total_weight)),
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
    let previous_conditions = previous
        .map(|p| p.conditions.as_slice())
        .unwrap_or_default();
    let pinned_not_ready = pinned.is_some_and(|p| !ready[p]);
    let was_pinned_not_ready = previous_conditions
        .iter()
        .any(|c| c.type_ == CONDITION_PINNED && c.reason == "PinnedBackendNotReady");
    let transition = match phase {
        // While suspended nothing moves, so nothing is announced.
        _ if spec.suspend => None,
        _ if pinned_not_ready && !was_pinned_not_ready => Some(Transition::PinnedBackendNotReady),
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
        Transition::NoReadyBackend => no_ready_message(spec, &active),
        Transition::Recovered => format!("{} is ready again", active.join(", ")),
        Transition::PinnedBackendNotReady => format!(
            "spec.pin sends all traffic to {}, which is not ready",
            active.join(", ")
        ),
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

    let (ready_status, ready_reason, ready_message) = match pinned {
        Some(p) if ready[p] => (
            "True",
            "Pinned",
            format!("spec.pin sends all traffic to {}", names[p]),
        ),
        Some(p) => (
            "False",
            "PinnedBackendNotReady",
            format!(
                "spec.pin sends all traffic to {}, which is not ready",
                names[p]
            ),
        ),
        None => ready_condition(phase, hold, &names, &active, &backends, &since, spec),
    };
    let (degraded_status, degraded_reason, degraded_message) =
        degraded_condition(&names, &ready, &backends);
    let mut conditions = vec![
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
    if let Some(p) = pinned {
        let (reason, message) = if ready[p] {
            (
                "PinnedBackendReady",
                format!("all traffic pinned to {}", names[p]),
            )
        } else {
            (
                "PinnedBackendNotReady",
                format!("all traffic pinned to {}, which is not ready", names[p]),
            )
        };
        conditions.push(condition(
            previous_conditions,
            CONDITION_PINNED,
            "True",
            reason,
            message,
            now,
        ));
    }
    if spec.suspend {
        conditions.push(condition(
            previous_conditions,
            CONDITION_SUSPENDED,
            "True",
            "Suspended",
            format!(
                "spec.suspend is set: the generated {} is frozen; without it, traffic would go to {}",
                spec.output.kind(),
                active.join(", ")
            ),
            now,
        ));
    }

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
        http_route: previous.and_then(|p| p.http_route.clone()),
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

/// A backend is ready when its Service exists, at least `min_ready` of its endpoints are ready,
/// and (when `min_ratio` > 0) at least that share of them.
fn is_ready(o: BackendObservation, min_ready: i32, min_ratio: f64) -> bool {
    let ratio_ok = min_ratio <= 0.0
        || (o.total_endpoints > 0
            && f64::from(o.ready_endpoints) >= min_ratio * f64::from(o.total_endpoints));
    o.service_exists && o.ready_endpoints >= min_ready && ratio_ok
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
    observations: &[BackendObservation],
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

/// A weight as a share of the total, e.g. `70%` or `33.33%`.
fn share(weight: i32, total: i64) -> String {
    if total <= 0 {
        return "0%".to_string();
    }
    let basis_points = (i64::from(weight) * 10_000 + total / 2) / total;
    let (whole, fraction) = (basis_points / 100, basis_points % 100);
    if fraction == 0 {
        format!("{whole}%")
    } else if fraction % 10 == 0 {
        format!("{whole}.{}%", fraction / 10)
    } else {
        format!("{whole}.{fraction:02}%")
    }
}

fn no_ready_message(spec: &FailoverPolicySpec, active: &[String]) -> String {
    match spec.when_none_ready {
        WhenNoneReady::KeepLast => format!(
            "no backend is ready; weights kept as they were (traffic stays on {})",
            active.join(", ")
        ),
        WhenNoneReady::Primary => format!(
            "no backend is ready; all traffic goes to the primary {} (whenNoneReady: Primary)",
            spec.primary
        ),
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
        // Proportional is decided by `proportional_weights`; as a plain strategy it is Equal.
        Strategy::Equal | Strategy::Proportional => {
            ready_secondaries.iter().for_each(|&i| weights[i] = 1)
        }
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
    backends: &[BackendStatus],
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
        (Phase::FailedOver, _) if spec.strategy == Strategy::Proportional => (
            "True",
            "Spillover",
            format!(
                "traffic shared by health: {}",
                backends
                    .iter()
                    .filter(|b| b.weight > 0)
                    .map(|b| format!("{} {}", b.service, b.share.as_deref().unwrap_or("")))
                    .collect::<Vec<_>>()
                    .join(", ")
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
        (Phase::NoReadyBackend, _) => ("False", "NoReadyBackend", no_ready_message(spec, active)),
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
