//! Rule 7: what the decision means for the policy's conditions, as verdicts (type, status,
//! reason, message). The status step turns them into `metav1.Condition`s with their transition
//! times; outcomes of the later steps (a conflict, a failed write, an invalid spec) replace the
//! `Ready` verdict there.

use chrono::{DateTime, Utc};

use super::{
    plan::{Plan, Rule},
    transition,
    verdict::Verdict,
};
use crate::{
    api::{
        Timestamp,
        conditions::{
            CLUSTERS_REACHABLE, DEGRADED, DEMAND_UNSERVED, HEALTH_QUERY_FAILED, PINNED, READY,
            capacity, clusters, degraded, health, pinned, ready,
        },
    },
    observation::Availability,
    policy::ValidPolicy,
};

/// The conditions of a decision: `Ready`, `Degraded`, and `Pinned` / `Drill` when set.
pub fn verdicts(policy: &ValidPolicy, plan: &Plan) -> Vec<Verdict> {
    let mut verdicts = vec![ready(policy, plan), degraded(plan)];
    verdicts.extend(clusters(policy, plan));
    verdicts.extend(health_queries(policy, plan));
    verdicts.extend(super::drill::verdict(policy, plan));
    verdicts.extend(demand_unserved(policy, plan));
    if let Rule::Pinned(p) = plan.routing.rule {
        let name = &policy.backends[p].reference.name;
        verdicts.push(if plan.backends[p].ready {
            Verdict::new(
                PINNED,
                true,
                pinned::PINNED_BACKEND_READY,
                format!("all traffic pinned to {name}"),
            )
        } else {
            Verdict::new(
                PINNED,
                true,
                pinned::PINNED_BACKEND_NOT_READY,
                format!("all traffic pinned to {name}, which is not ready"),
            )
        });
    }
    verdicts
}

fn ready(policy: &ValidPolicy, plan: &Plan) -> Verdict {
    let primary = policy.primary();
    match plan.routing.rule {
        Rule::Pinned(p) => pinned(policy, plan, p),
        Rule::Drill { to, until } => drilled(policy, plan, to, until),
        Rule::FailoverPending { due } => held(policy, plan, due, Direction::Failover),
        Rule::FailbackPending { due } => held(policy, plan, due, Direction::Failback),
        Rule::FailbackRamp { step, steps, due } => Verdict::new(
            READY,
            true,
            ready::FAILBACK_RAMP,
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
        Rule::CapacityFailback => shared_by_capacity(policy, plan, Direction::Failback),
        Rule::CapacitySpillover => shared_by_capacity(policy, plan, Direction::Failover),
        Rule::PrimaryActive => Verdict::new(
            READY,
            true,
            ready::PRIMARY_ACTIVE,
            format!("traffic goes to primary {primary}"),
        ),
        Rule::Spillover => Verdict::new(
            READY,
            true,
            ready::SPILLOVER,
            format!(
                "traffic shared by health: {}",
                spillover_shares(policy, plan)
            ),
        ),
        Rule::FailedOver => Verdict::new(
            READY,
            true,
            ready::FAILED_OVER,
            format!(
                "primary {primary} is not ready; traffic goes to {}{} (strategy {})",
                plan.active(policy).join(", "),
                super::strategy::tier_note(policy, &plan.routing.weights),
                policy.strategy
            ),
        ),
        Rule::NoReadyBackend => Verdict::new(
            READY,
            false,
            ready::NO_READY_BACKEND,
            transition::no_ready_message(policy, &plan.active(policy)),
        ),
        Rule::Following => following(policy, plan),
    }
}

/// `Ready` while the policy's failover group routes it to a site.
fn following(policy: &ValidPolicy, plan: &Plan) -> Verdict {
    let active = plan.active(policy).join(", ");
    Verdict::new(
        READY,
        true,
        ready::FOLLOWING_GROUP,
        match &plan.following {
            Some(order) => format!(
                "group {} routes to site {}: traffic goes to {active}",
                order.group, order.site
            ),
            None => format!("traffic goes to {active}"),
        },
    )
}

/// `Ready` under `spec.pin`: true while the pinned backend is ready.
fn pinned(policy: &ValidPolicy, plan: &Plan, p: usize) -> Verdict {
    let name = &policy.backends[p].reference.name;
    if plan.backends[p].ready {
        Verdict::new(
            READY,
            true,
            ready::PINNED,
            format!("spec.pin sends all traffic to {name}"),
        )
    } else {
        Verdict::new(
            READY,
            false,
            ready::PINNED_BACKEND_NOT_READY,
            format!("spec.pin sends all traffic to {name}, which is not ready"),
        )
    }
}

/// `Ready` during a drill: true while its backend is ready (a forced drill may send traffic to
/// one that is not).
fn drilled(policy: &ValidPolicy, plan: &Plan, to: usize, until: DateTime<Utc>) -> Verdict {
    let name = &policy.backends[to].reference.name;
    let until = Timestamp(until);
    if plan.backends[to].ready {
        Verdict::new(
            READY,
            true,
            ready::DRILL,
            format!("a drill sends all traffic to {name} until {until}"),
        )
    } else {
        Verdict::new(
            READY,
            false,
            ready::DRILL_BACKEND_NOT_READY,
            format!(
                "a forced drill sends all traffic to {name}, which is not ready, until {until}"
            ),
        )
    }
}

/// Which way traffic is moving: off the primary, or back to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    /// Away from the primary (or part of it).
    Failover,
    /// Back to the primary.
    Failback,
}

/// `Ready` while a ready primary takes what its ready endpoints serve and the secondaries the
/// rest: a failback (`FailbackByCapacity`) or a primary short of endpoints
/// (`SpilloverByCapacity`).
fn shared_by_capacity(policy: &ValidPolicy, plan: &Plan, toward: Direction) -> Verdict {
    let primary = policy.primary();
    let rest: Vec<String> = plan
        .active(policy)
        .into_iter()
        .filter(|a| a.as_str() != primary)
        .collect();
    let share = plan
        .shares()
        .first()
        .cloned()
        .unwrap_or_else(|| "0%".into());
    let (reason, message) = if toward == Direction::Failback {
        (
            ready::FAILBACK_BY_CAPACITY,
            format!(
                "failing back by capacity: primary {primary} takes {share} of the traffic, what its ready endpoints serve; the rest stays on {}",
                rest.join(", ")
            ),
        )
    } else {
        (
            ready::SPILLOVER_BY_CAPACITY,
            format!(
                "primary {primary} is short of ready endpoints: it takes {share} of the traffic, what they serve; the rest goes to {}",
                rest.join(", ")
            ),
        )
    };
    Verdict::new(READY, true, reason, message)
}

/// `Ready` while a hold keeps traffic where it is, with when it falls due.
fn held(policy: &ValidPolicy, plan: &Plan, due: DateTime<Utc>, toward: Direction) -> Verdict {
    let primary = policy.primary();
    let (since, due) = (Timestamp(plan.backends[0].since), Timestamp(due));
    if toward == Direction::Failback {
        Verdict::new(
            READY,
            true,
            ready::FAILBACK_PENDING,
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
            ready::FAILOVER_PENDING,
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

/// `DemandUnserved`, for a policy with `spec.capacity` whose demand is known.
fn demand_unserved(policy: &ValidPolicy, plan: &Plan) -> Option<Verdict> {
    let load = plan.load.as_ref()?;
    let unserved = load.unserved_basis_points;
    if unserved == 0 {
        return Some(Verdict::new(
            DEMAND_UNSERVED,
            false,
            capacity::ENOUGH_CAPACITY,
            format!(
                "the backends traffic goes to serve all {} requests/s",
                load.demand
            ),
        ));
    }
    Some(Verdict::new(
        DEMAND_UNSERVED,
        true,
        capacity::NOT_ENOUGH_CAPACITY,
        format!(
            "{} of {} requests/s ({}) go where no ready endpoint serves them; ready capacity: {}",
            load.unserved(),
            load.demand,
            super::plan::share(unserved, i64::from(super::plan::PROPORTIONAL_TOTAL)),
            policy
                .backend_names()
                .zip(&load.capacity)
                .map(|(n, c)| format!("{n} {c}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}

/// `HealthQueryFailed`, for a policy with a health query: the backends whose query fails, grouped
/// by error (a refusal or an unreachable Prometheus is usually the same for all).
fn health_queries(policy: &ValidPolicy, plan: &Plan) -> Option<Verdict> {
    policy.health.as_ref()?;
    let mut by_error: Vec<(&str, Vec<&str>)> = Vec::new();
    let mut refused = None;
    for b in &plan.backends {
        let Some(reading) = b.observation.health.as_ref() else {
            continue;
        };
        let Some(error) = reading.failing.as_deref() else {
            continue;
        };
        refused = refused.or(reading.refused);
        match by_error.iter_mut().find(|(e, _)| *e == error) {
            Some((_, services)) => services.push(&b.backend.name),
            None => by_error.push((error, vec![&b.backend.name])),
        }
    }
    let failing: Vec<String> = by_error
        .iter()
        .map(|(error, services)| format!("{}: {error}", services.join(", ")))
        .collect();
    if let Some(reason) = refused {
        return Some(Verdict::new(
            HEALTH_QUERY_FAILED,
            true,
            reason,
            format!("routing on readiness alone; {}", failing.join("; ")),
        ));
    }
    Some(if failing.is_empty() {
        Verdict::new(
            HEALTH_QUERY_FAILED,
            false,
            health::QUERIES_ANSWER,
            "every health query answers".to_string(),
        )
    } else {
        Verdict::new(
            HEALTH_QUERY_FAILED,
            true,
            health::HEALTH_QUERY_FAILED,
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
    let remote = || {
        policy
            .backends
            .iter()
            .zip(&plan.backends)
            .filter(|(b, _)| b.remote.is_some())
            .map(|(_, state)| &state.observation)
    };
    let mut unreachable: Vec<&str> = remote()
        .filter_map(|o| o.availability.untrusted())
        .collect();
    unreachable.sort_unstable();
    unreachable.dedup();
    let refused = remote().any(|o| matches!(o.availability, Availability::Refused(_)));
    Some(if unreachable.is_empty() {
        Verdict::new(
            CLUSTERS_REACHABLE,
            true,
            clusters::ALL_CLUSTERS_REACHABLE,
            format!("readiness is current from {}", clusters.join(", ")),
        )
    } else {
        Verdict::new(
            CLUSTERS_REACHABLE,
            false,
            if refused {
                clusters::NAMESPACE_NOT_GRANTED
            } else {
                clusters::CLUSTER_UNREACHABLE
            },
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
                b.backend,
                b.not_ready.as_deref().unwrap_or("not ready")
            )
        })
        .collect();
    if not_ready.is_empty() {
        Verdict::new(
            DEGRADED,
            false,
            degraded::ALL_BACKENDS_READY,
            format!("all {} backends are ready", plan.backends.len()),
        )
    } else if !plan.backends[0].ready {
        Verdict::new(
            DEGRADED,
            true,
            degraded::PRIMARY_NOT_READY,
            format!("not ready: {}", not_ready.join(", ")),
        )
    } else {
        Verdict::new(
            DEGRADED,
            true,
            degraded::SECONDARY_NOT_READY,
            format!("not ready: {}", not_ready.join(", ")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{api::Strategy, decide::tests::valid, observation::BackendObservation};

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
        let plan = super::super::decide(&policy, &observed, None, None, Utc::now());
        let verdicts = verdicts(&policy, &plan);
        assert_eq!(find(&verdicts, READY), (ready::FAILED_OVER, true));
        assert_eq!(
            find(&verdicts, DEGRADED),
            (degraded::PRIMARY_NOT_READY, true)
        );
        let degraded = verdicts.iter().find(|v| v.type_ == DEGRADED);
        assert!(
            degraded.is_some_and(|v| v.message.contains("web-primary (0 of 2 endpoints ready")),
            "{verdicts:?}"
        );
        assert_eq!(find(&verdicts, PINNED), ("", false), "no pin, no condition");
    }
}
