//! Rule 7: what the decision means for the policy's conditions, as verdicts (type, status,
//! reason, message). The status step turns them into `metav1.Condition`s with their transition
//! times; outcomes of the later steps (a conflict, a failed write, an invalid spec) replace the
//! `Ready` verdict there.

use chrono::{DateTime, Utc};

use super::{Plan, Rule, transition};
use crate::{api::Timestamp, validate::ValidPolicy};

/// Condition type: traffic is routed to a ready backend through the owned route.
pub const READY: &str = "Ready";
/// Condition type: some backend is not ready.
pub const DEGRADED: &str = "Degraded";
/// Condition type: `spec.suspend` freezes the generated route.
pub const SUSPENDED: &str = "Suspended";
/// Condition type: `spec.pin` sends all traffic to one backend.
pub const PINNED: &str = "Pinned";
/// Condition type: a health query fails (the last verdict is kept).
pub const HEALTH_QUERY_FAILED: &str = "HealthQueryFailed";
/// Condition type: every cluster the policy reads readiness from answers.
pub const CLUSTERS_REACHABLE: &str = "ClustersReachable";

/// One condition as decided, before it gets its transition time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The condition type.
    pub type_: &'static str,
    /// `True` or `False`.
    pub status: bool,
    /// The reason, one CamelCase word.
    pub reason: String,
    /// A sentence for people.
    pub message: String,
}

impl Verdict {
    /// A verdict from its parts.
    pub fn new(type_: &'static str, status: bool, reason: &str, message: String) -> Self {
        Self {
            type_,
            status,
            reason: reason.to_string(),
            message,
        }
    }
}

/// The conditions of a decision: `Ready`, `Degraded`, and `Pinned` / `Suspended` when set.
pub fn verdicts(policy: &ValidPolicy, plan: &Plan) -> Vec<Verdict> {
    let mut verdicts = vec![ready(policy, plan), degraded(plan)];
    verdicts.extend(clusters(policy, plan));
    verdicts.extend(health_queries(policy, plan));
    if let Rule::Pinned(p) = plan.routing.rule {
        let name = &policy.backends[p].service;
        verdicts.push(if plan.backends[p].ready {
            Verdict::new(
                PINNED,
                true,
                "PinnedBackendReady",
                format!("all traffic pinned to {name}"),
            )
        } else {
            Verdict::new(
                PINNED,
                true,
                "PinnedBackendNotReady",
                format!("all traffic pinned to {name}, which is not ready"),
            )
        });
    }
    if policy.suspend {
        verdicts.push(Verdict::new(
            SUSPENDED,
            true,
            "Suspended",
            format!(
                "spec.suspend is set: the generated {} is frozen; without it, traffic would go to {}",
                policy.route.kind().as_str(),
                plan.active(policy).join(", ")
            ),
        ));
    }
    verdicts
}

fn ready(policy: &ValidPolicy, plan: &Plan) -> Verdict {
    let primary = policy.primary();
    match plan.routing.rule {
        Rule::Pinned(p) => pinned(policy, plan, p),
        Rule::FailoverPending { due } => held(policy, plan, due, false),
        Rule::FailbackPending { due } => held(policy, plan, due, true),
        Rule::FailbackRamp { step, steps, due } => Verdict::new(
            READY,
            true,
            "FailbackRamp",
            format!(
                "failing back: primary {primary} takes {}% of the traffic (step {} of {steps}); the next step at {} (every {})",
                plan.routing.weights[0] / 100,
                step + 1,
                Timestamp(due),
                policy
                    .ramp
                    .as_ref()
                    .map_or("", |r| r.every.written.as_str())
            ),
        ),
        Rule::PrimaryActive => Verdict::new(
            READY,
            true,
            "PrimaryActive",
            format!("traffic goes to primary {primary}"),
        ),
        Rule::Spillover => Verdict::new(
            READY,
            true,
            "Spillover",
            format!(
                "traffic shared by health: {}",
                spillover_shares(policy, plan)
            ),
        ),
        Rule::FailedOver => Verdict::new(
            READY,
            true,
            "FailedOver",
            format!(
                "primary {primary} is not ready; traffic goes to {} (strategy {})",
                plan.active(policy).join(", "),
                policy.strategy
            ),
        ),
        Rule::NoReadyBackend => Verdict::new(
            READY,
            false,
            "NoReadyBackend",
            transition::no_ready_message(policy, &plan.active(policy)),
        ),
    }
}

/// `Ready` under `spec.pin`: true while the pinned backend is ready.
fn pinned(policy: &ValidPolicy, plan: &Plan, p: usize) -> Verdict {
    let name = &policy.backends[p].service;
    if plan.backends[p].ready {
        Verdict::new(
            READY,
            true,
            "Pinned",
            format!("spec.pin sends all traffic to {name}"),
        )
    } else {
        Verdict::new(
            READY,
            false,
            "PinnedBackendNotReady",
            format!("spec.pin sends all traffic to {name}, which is not ready"),
        )
    }
}

/// `Ready` while a hold keeps traffic where it is, with when it falls due.
fn held(policy: &ValidPolicy, plan: &Plan, due: DateTime<Utc>, failback: bool) -> Verdict {
    let primary = policy.primary();
    let (since, due) = (Timestamp(plan.backends[0].since), Timestamp(due));
    if failback {
        Verdict::new(
            READY,
            true,
            "FailbackPending",
            format!(
                "primary {primary} ready since {since}; traffic stays on {} until {due} (failbackAfter {})",
                plan.active(policy).join(", "),
                policy.failback_after.written
            ),
        )
    } else {
        Verdict::new(
            READY,
            false,
            "FailoverPending",
            format!(
                "primary {primary} not ready since {since}; traffic stays on it until {due} (failoverAfter {})",
                policy.failover_after.written
            ),
        )
    }
}

fn spillover_shares(policy: &ValidPolicy, plan: &Plan) -> String {
    let shares = plan.shares();
    policy
        .backend_names()
        .zip(&plan.routing.weights)
        .zip(shares)
        .filter(|((_, w), _)| **w > 0)
        .map(|((name, _), share)| format!("{name} {share}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `HealthQueryFailed`, for a policy with a health query.
fn health_queries(policy: &ValidPolicy, plan: &Plan) -> Option<Verdict> {
    policy.health.as_ref()?;
    let failing: Vec<String> = plan
        .backends
        .iter()
        .filter_map(|b| {
            let error = b.observation.health.as_ref()?.failing.as_ref()?;
            Some(format!("{}: {error}", b.service))
        })
        .collect();
    Some(if failing.is_empty() {
        Verdict::new(
            HEALTH_QUERY_FAILED,
            false,
            "QueriesAnswer",
            "every health query answers".to_string(),
        )
    } else {
        Verdict::new(
            HEALTH_QUERY_FAILED,
            true,
            "HealthQueryFailed",
            format!("keeping the last verdict; {}", failing.join("; ")),
        )
    })
}

/// `ClustersReachable`, for a policy that reads readiness from other clusters.
fn clusters(policy: &ValidPolicy, plan: &Plan) -> Option<Verdict> {
    let mut clusters: Vec<&str> = policy
        .backends
        .iter()
        .filter_map(|b| b.remote.as_ref().map(|r| r.cluster.as_str()))
        .collect();
    clusters.sort_unstable();
    clusters.dedup();
    if clusters.is_empty() {
        return None;
    }
    let mut unreachable: Vec<&str> = policy
        .backends
        .iter()
        .zip(&plan.backends)
        .filter(|(b, _)| b.remote.is_some())
        .filter_map(|(_, state)| state.observation.unavailable.as_deref())
        .collect();
    unreachable.sort_unstable();
    unreachable.dedup();
    Some(if unreachable.is_empty() {
        Verdict::new(
            CLUSTERS_REACHABLE,
            true,
            "AllClustersReachable",
            format!("readiness is current from {}", clusters.join(", ")),
        )
    } else {
        Verdict::new(
            CLUSTERS_REACHABLE,
            false,
            "ClusterUnreachable",
            unreachable.join("; "),
        )
    })
}

fn degraded(plan: &Plan) -> Verdict {
    let not_ready: Vec<String> = plan
        .backends
        .iter()
        .filter(|b| !b.ready)
        .map(|b| {
            format!(
                "{} ({})",
                b.service,
                b.not_ready.as_deref().unwrap_or("not ready")
            )
        })
        .collect();
    if not_ready.is_empty() {
        Verdict::new(
            DEGRADED,
            false,
            "AllBackendsReady",
            format!("all {} backends are ready", plan.backends.len()),
        )
    } else if !plan.backends[0].ready {
        Verdict::new(
            DEGRADED,
            true,
            "PrimaryNotReady",
            format!("not ready: {}", not_ready.join(", ")),
        )
    } else {
        Verdict::new(
            DEGRADED,
            true,
            "SecondaryNotReady",
            format!("not ready: {}", not_ready.join(", ")),
        )
    }
}

/// A weight as a share of the total, e.g. `70%` or `33.33%`.
pub fn share(weight: i32, total: i64) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{api::Strategy, decide::tests::valid, observe::readiness::BackendObservation};

    fn find<'a>(verdicts: &'a [Verdict], type_: &str) -> (&'a str, bool) {
        verdicts
            .iter()
            .find(|v| v.type_ == type_)
            .map(|v| (v.reason.as_str(), v.status))
            .unwrap_or_default()
    }

    #[test]
    fn a_failover_is_ready_and_degraded_naming_the_primary() {
        let policy = valid(Strategy::Ordered, &[("a", None)]);
        let observed = [
            BackendObservation::counted(0, 2),
            BackendObservation::counted(1, 1),
        ];
        let plan = super::super::decide(&policy, &observed, None, Utc::now());
        let verdicts = verdicts(&policy, &plan);
        assert_eq!(find(&verdicts, READY), ("FailedOver", true));
        assert_eq!(find(&verdicts, DEGRADED), ("PrimaryNotReady", true));
        let degraded = verdicts.iter().find(|v| v.type_ == DEGRADED);
        assert!(
            degraded.is_some_and(|v| v.message.contains("web-primary (0 of 2 endpoints ready")),
            "{verdicts:?}"
        );
        assert_eq!(find(&verdicts, PINNED), ("", false), "no pin, no condition");
    }

    #[test]
    fn shares_are_percentages_with_at_most_two_decimals() {
        assert_eq!(share(1, 1), "100%");
        assert_eq!(share(1, 3), "33.33%");
        assert_eq!(share(7000, 10_000), "70%");
        assert_eq!(share(1, 8), "12.5%");
        assert_eq!(share(0, 0), "0%");
    }
}
