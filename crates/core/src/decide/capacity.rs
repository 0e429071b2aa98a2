//! Rule 4c: capacity (`spec.capacity`). A backend serves its ready endpoints times the requests
//! per second one endpoint serves; the demand is the primary's capacity with all its endpoints
//! ready (the traffic it was sized for), kept in the status while some are not.
//!
//! - Traffic leaving a primary that is not ready goes to the ready secondaries in their order
//!   (`Ordered`: the first until it is full, then the next) or shared as the strategy says
//!   (`Equal`, `Weighted`: by weight, what one cannot take going to the others), each only up to
//!   its capacity. What none can take stays on the primary (or, with `unserved: Secondaries`, is
//!   spread over the ready secondaries by their capacity), and the status says how much.
//! - A failback gives the primary the share its ready endpoints serve (and no more than a ramp
//!   step allows); the rest stays on the secondaries, within their capacity, until the primary
//!   serves it all.
//! - A primary that is ready but serves only part of the demand (some of its endpoints are not
//!   ready) keeps that part; the secondaries take the rest as in a failover, within their
//!   capacity, so the endpoints left are not sent what the missing ones served.
//! - With `scale`, the secondaries' workloads are asked for the replicas the demand needs from
//!   the moment the primary turns not ready; past the scale `deadline`, capacity no longer holds
//!   traffic back and the ordinary rules apply.
//!
//! Weights are basis points of the demand, adding up to [`PROPORTIONAL_TOTAL`]; each backend's
//! capacity is counted in the same unit (rounded to the nearest basis point), so a small demand
//! loses nothing to rounding. Pins, drills, holds and the nothing-ready case are left as the
//! other rules decided them.

use chrono::{DateTime, Utc};

pub use super::plan::{Load, ScaleWant};
use super::{
    before::Before,
    plan::{PROPORTIONAL_TOTAL, Routing, Rule},
    readiness::BackendState,
    strategy::{tier_weight, tiers},
};
use crate::{
    api::{Phase, Unserved},
    policy::{Capacity, ValidPolicy},
};

/// The routing bounded by capacity, what is served, and the replicas to ask for; the routing
/// unchanged without `spec.capacity` or a known demand.
pub fn bound(
    policy: &ValidPolicy,
    backends: &[BackendState],
    routing: Routing,
    previous: &Before,
    now: DateTime<Utc>,
) -> (Routing, Option<Load>, Vec<ScaleWant>) {
    let Some(cap) = policy.capacity.as_deref() else {
        return (routing, None, Vec::new());
    };
    let Some(demand) = demand(policy, backends, previous.demand) else {
        return (routing, None, Vec::new());
    };
    let capacity = capacities(policy, backends);
    let primary_down = !backends.first().is_some_and(|b| b.ready);
    let failing_back = !primary_down && (!previous.on_primary || previous.ramping);
    let wants = if primary_down || failing_back {
        scale_wants(policy, cap, backends, demand)
    } else {
        Vec::new()
    };
    let past_deadline = cap.scale.as_ref().is_some_and(|s| {
        primary_down
            && backends
                .first()
                .is_some_and(|b| now >= b.since + s.deadline.after)
    });
    let routing = match routing.rule {
        Rule::FailedOver if !past_deadline => failed_over(policy, cap, &capacity, demand, routing),
        Rule::PrimaryActive | Rule::FailbackRamp { .. } | Rule::CapacityFailback
            if failing_back =>
        {
            shared_with_the_primary(policy, &capacity, demand, routing, Rule::CapacityFailback)
        }
        Rule::PrimaryActive if !primary_down => {
            shared_with_the_primary(policy, &capacity, demand, routing, Rule::CapacitySpillover)
        }
        _ => routing,
    };
    let unserved = unserved(&routing.weights, &shares(&capacity, demand));
    let load = Load {
        demand,
        capacity,
        unserved_basis_points: unserved,
    };
    (routing, Some(load), wants)
}

/// The demand: what the primary serves with every endpoint ready. Its endpoints that are
/// terminating (a rollout, a scale down) are leaving on purpose and do not count. While some of
/// the others are not ready (or it has none), the demand last recorded stands, so a primary
/// losing endpoints is not taken to need less, and a rollout's extra Pod starting is not taken
/// to need more; `None` when neither is known.
pub fn demand(
    policy: &ValidPolicy,
    backends: &[BackendState],
    recorded: Option<i64>,
) -> Option<i64> {
    let o = &backends.first()?.observation;
    let staying = (o.total_endpoints - o.terminating_endpoints).max(0);
    let sized = i64::from(staying) * per_endpoint(policy, 0);
    let whole = o.ready_endpoints >= staying;
    match recorded.filter(|d| *d > 0) {
        Some(recorded) if !whole || sized == 0 => Some(recorded),
        _ => (sized > 0).then_some(sized),
    }
}

/// What each backend's ready endpoints serve (0 while it is not ready), primary first.
pub fn capacities(policy: &ValidPolicy, backends: &[BackendState]) -> Vec<i64> {
    backends
        .iter()
        .zip(policy.backends.iter())
        .map(|(b, backend)| {
            if b.ready {
                i64::from(b.observation.ready_endpoints.max(0))
                    * backend.per_endpoint.map_or(0, i64::from)
            } else {
                0
            }
        })
        .collect()
}

/// What one ready endpoint of the backend at `i` serves (0 without `spec.capacity`).
fn per_endpoint(policy: &ValidPolicy, i: usize) -> i64 {
    policy
        .backends
        .get(i)
        .and_then(|b| b.per_endpoint)
        .map_or(0, i64::from)
}

/// Each backend's capacity as basis points of the demand (rounded to the nearest, at most all
/// of it): the unit the weights are in, so a small demand loses nothing to rounding.
fn shares(capacity: &[i64], demand: i64) -> Vec<i64> {
    let total = i64::from(PROPORTIONAL_TOTAL);
    capacity
        .iter()
        .map(|c| ((c * total + demand / 2) / demand.max(1)).min(total))
        .collect()
}

/// Weights of these takes (basis points), the primary getting what is left.
fn weights(takes: &[i64]) -> Vec<i32> {
    let mut weights: Vec<i32> = takes
        .iter()
        .map(|t| i32::try_from(*t).unwrap_or(0))
        .collect();
    let taken: i32 = weights.iter().skip(1).sum();
    if let Some(first) = weights.first_mut() {
        *first = PROPORTIONAL_TOTAL - taken;
    }
    weights
}

/// The failover: the secondaries take the demand up to their capacity; the rest stays on the
/// primary, or is spread over the secondaries with capacity by it (`unserved: Secondaries`).
fn failed_over(
    policy: &ValidPolicy,
    cap: &Capacity,
    capacity: &[i64],
    demand: i64,
    routing: Routing,
) -> Routing {
    let shares = shares(capacity, demand);
    let mut takes = fill(policy, &shares, i64::from(PROPORTIONAL_TOTAL));
    if cap.unserved == Unserved::Secondaries {
        spread(&mut takes, &shares, i64::from(PROPORTIONAL_TOTAL));
    }
    Routing {
        weights: weights(&takes),
        ..routing
    }
}

/// Spreads what `takes` leave of `total` over the secondaries with a share, in proportion to it
/// (the last one with a share rounding up), so the takes add up to `total`; nothing when no
/// secondary has a share.
fn spread(takes: &mut [i64], shares: &[i64], total: i64) {
    let left = total - takes.iter().sum::<i64>();
    let open: Vec<usize> = (1..shares.len()).filter(|&i| shares[i] > 0).collect();
    let weight: i64 = open.iter().map(|&i| shares[i]).sum();
    let (Some(&last), true) = (open.last(), left > 0 && weight > 0) else {
        return;
    };
    let mut given = 0;
    for &i in &open {
        let part = if i == last {
            left - given
        } else {
            left * shares[i] / weight
        };
        takes[i] += part;
        given += part;
    }
}

/// A ready primary's share: it takes what its ready endpoints serve (within a failback ramp's
/// step), the secondaries what they can of the rest, by `rule` (a failback, or a spillover of a
/// primary short of endpoints); all of it once the primary serves the demand.
fn shared_with_the_primary(
    policy: &ValidPolicy,
    capacity: &[i64],
    demand: i64,
    routing: Routing,
    rule: Rule,
) -> Routing {
    let shares = shares(capacity, demand);
    let mut primary = shares.first().copied().unwrap_or(0);
    if let Rule::FailbackRamp { .. } = routing.rule {
        primary = primary.min(i64::from(routing.weights.first().copied().unwrap_or(0)));
    }
    let takes = fill(policy, &shares, i64::from(PROPORTIONAL_TOTAL) - primary);
    // The primary serves it all, or no secondary can take any of the rest.
    if primary >= i64::from(PROPORTIONAL_TOTAL) || takes.iter().all(|t| *t == 0) {
        return match routing.rule {
            Rule::FailbackRamp { .. } => routing,
            _ => Routing {
                phase: Phase::Primary,
                weights: super::none_ready::primary_only(policy.backends.len()),
                rule: Rule::PrimaryActive,
            },
        };
    }
    let rule = match routing.rule {
        Rule::FailbackRamp { .. } => routing.rule,
        _ => rule,
    };
    Routing {
        phase: Phase::FailedOver,
        weights: weights(&takes),
        rule,
    }
}

/// Shares `amount` among the secondaries with capacity, each up to it (any unit), tier by tier
/// (what a tier cannot take spills into the next: with `Ordered`, each secondary in list order),
/// inside a tier by [`tier_weight`], what one cannot take going to the others. The primary's
/// entry is 0.
pub fn fill(policy: &ValidPolicy, capacity: &[i64], amount: i64) -> Vec<i64> {
    let mut takes = vec![0i64; capacity.len()];
    let mut left = amount.max(0);
    for (_, members) in tiers(policy) {
        let open: Vec<usize> = members
            .into_iter()
            .filter(|&i| capacity.get(i).is_some_and(|c| *c > 0))
            .collect();
        left -= fill_tier(policy, capacity, open, left, &mut takes);
    }
    takes
}

/// Fills one tier's `open` secondaries with up to `amount` by weight; what it gave.
fn fill_tier(
    policy: &ValidPolicy,
    capacity: &[i64],
    mut open: Vec<usize>,
    amount: i64,
    takes: &mut [i64],
) -> i64 {
    let weight = |i: usize| i64::from(tier_weight(policy, i));
    let mut left = amount;
    // Each round fills every open backend by weight; one that is full leaves the round, so at
    // most one round per backend.
    while left > 0 && !open.is_empty() {
        let total: i64 = open.iter().map(|&i| weight(i)).sum();
        let mut given = 0;
        for &i in &open {
            let share = (left * weight(i) / total).max(1).min(left - given);
            let take = share.min(capacity[i] - takes[i]);
            takes[i] += take;
            given += take;
        }
        left -= given;
        open.retain(|&i| takes[i] < capacity[i]);
        if given == 0 {
            break;
        }
    }
    amount - left
}

/// The share of the traffic (basis points) the weights send beyond what each backend serves
/// (`shares`: its capacity in basis points of the demand), less the basis point each weight
/// may be off by rounding.
fn unserved(weights: &[i32], shares: &[i64]) -> i32 {
    let total: i64 = weights.iter().map(|w| i64::from((*w).max(0))).sum();
    if total <= 0 {
        return PROPORTIONAL_TOTAL;
    }
    let over: i64 = weights
        .iter()
        .zip(shares)
        .map(|(w, share)| {
            let over = i64::from((*w).max(0)) * i64::from(PROPORTIONAL_TOTAL) - share * total;
            (over / total - 1).max(0)
        })
        .sum();
    i32::try_from(over.min(i64::from(PROPORTIONAL_TOTAL))).unwrap_or(PROPORTIONAL_TOTAL)
}

/// The replicas each secondary's workload needs for the demand: the demand filled over them as
/// if each had its most replicas (secondaries without a workload at what they serve now).
fn scale_wants(
    policy: &ValidPolicy,
    cap: &Capacity,
    backends: &[BackendState],
    demand: i64,
) -> Vec<ScaleWant> {
    let Some(scale) = cap.scale.as_ref() else {
        return Vec::new();
    };
    let now = capacities(policy, backends);
    let scaled = |i: usize| {
        policy
            .backends
            .get(i)
            .is_some_and(|b| b.scale_target.is_some())
    };
    let most: Vec<i64> = (0..backends.len())
        .map(|i| match i {
            0 => 0,
            _ if scaled(i) => i64::from(scale.max_replicas) * per_endpoint(policy, i),
            _ => now[i],
        })
        .collect();
    let takes = fill(policy, &most, demand);
    (1..backends.len())
        .filter(|&i| scaled(i) && takes[i] > 0)
        .map(|i| ScaleWant {
            backend: i,
            replicas: i32::try_from(ceil_div(takes[i], per_endpoint(policy, i).max(1)))
                .unwrap_or(scale.max_replicas)
                .min(scale.max_replicas),
        })
        .collect()
}

/// `a / b` rounded up, for positive `b`.
fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

#[cfg(test)]
mod tests {
    use crate::{
        api::{
            CapacitySpec, FailoverPolicySpec, ScaleKind, ScaleSpec, ScaleTarget, Strategy,
            conditions::{DEMAND_UNSERVED, READY, ready},
        },
        decide::tests::{decide, endpoints, spec, t},
        observation::BackendObservation,
    };

    /// Three backends, 20 requests/s per endpoint.
    fn sized(strategy: Strategy) -> FailoverPolicySpec {
        let mut s = spec(strategy, &[("east", None), ("west", None)]);
        s.capacity = Some(CapacitySpec {
            unserved: Default::default(),
            per_endpoint: 20,
            primary_per_endpoint: None,
            scale: None,
        });
        s
    }

    fn reason(status: &crate::api::FailoverPolicyStatus, type_: &str) -> String {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map_or_else(String::new, |c| c.reason.clone())
    }

    #[test]
    fn ordered_fills_the_secondaries_in_order_and_keeps_the_unserved_share_on_the_primary() {
        // Demand 3 x 20 = 60; east serves 20 (one endpoint), west 20 (one of two ready).
        let obs = [endpoints(0, 3), endpoints(1, 1), endpoints(1, 2)];
        let d = decide(&sized(Strategy::Ordered), &obs, None, t(0));
        assert_eq!(d.weights, vec![3334, 3333, 3333]);
        let capacity = d.status.capacity.as_ref().expect("capacity status");
        assert_eq!(
            (capacity.demand, capacity.unserved.as_str()),
            (60, "33.33%")
        );
        assert_eq!(reason(&d.status, DEMAND_UNSERVED), "NotEnoughCapacity");
        assert_eq!(reason(&d.status, READY), ready::FAILED_OVER);
        let served: Vec<Option<i64>> = d.status.backends.iter().map(|b| b.capacity).collect();
        assert_eq!(served, vec![Some(0), Some(20), Some(20)]);
    }

    #[test]
    fn with_unserved_on_the_secondaries_the_share_they_cannot_take_is_spread_over_them() {
        // Demand 60; east and west serve 20 each: the 20 left goes to them by their capacity,
        // none to the primary that is not ready, and the status still says a third is unserved.
        let mut s = sized(Strategy::Ordered);
        if let Some(c) = s.capacity.as_mut() {
            c.unserved = crate::api::Unserved::Secondaries;
        }
        let obs = [endpoints(0, 3), endpoints(1, 1), endpoints(1, 2)];
        let d = decide(&s, &obs, None, t(0));
        assert_eq!(d.weights, vec![0, 5000, 5000]);
        let capacity = d.status.capacity.as_ref().expect("capacity status");
        assert_eq!(
            (capacity.demand, capacity.unserved.as_str()),
            (60, "33.32%")
        );
        assert_eq!(reason(&d.status, DEMAND_UNSERVED), "NotEnoughCapacity");
    }

    #[test]
    fn a_secondary_with_room_takes_it_all_and_nothing_is_unserved() {
        let obs = [endpoints(0, 3), endpoints(3, 3), endpoints(1, 1)];
        let d = decide(&sized(Strategy::Ordered), &obs, None, t(0));
        assert_eq!(d.weights, vec![0, 10_000, 0]);
        assert_eq!(reason(&d.status, DEMAND_UNSERVED), "EnoughCapacity");
    }

    #[test]
    fn equal_and_weighted_share_by_weight_and_pass_on_what_one_cannot_take() {
        let obs = [endpoints(0, 3), endpoints(1, 1), endpoints(5, 5)];
        let d = decide(&sized(Strategy::Equal), &obs, None, t(0));
        // 30 each by weight; east serves 20, west takes the other 40.
        assert_eq!(d.weights, vec![0, 3333, 6667]);
        let mut weighted = sized(Strategy::Weighted);
        weighted.secondaries[0].weight = Some(1);
        weighted.secondaries[1].weight = Some(3);
        let obs = [endpoints(0, 3), endpoints(5, 5), endpoints(5, 5)];
        let d = decide(&weighted, &obs, None, t(0));
        assert_eq!(d.weights, vec![0, 2500, 7500]);
    }

    #[test]
    fn a_failback_gives_the_primary_what_its_ready_endpoints_serve() {
        let s = sized(Strategy::Ordered);
        let failed = decide(
            &s,
            &[endpoints(0, 3), endpoints(3, 3), endpoints(1, 1)],
            None,
            t(0),
        );
        let one = decide(
            &s,
            &[endpoints(1, 3), endpoints(3, 3), endpoints(1, 1)],
            Some(&failed.status),
            t(10),
        );
        assert_eq!(one.weights, vec![3333, 6667, 0]);
        assert_eq!(reason(&one.status, READY), ready::FAILBACK_BY_CAPACITY);
        let two = decide(
            &s,
            &[endpoints(2, 3), endpoints(3, 3), endpoints(1, 1)],
            Some(&one.status),
            t(20),
        );
        assert_eq!(two.weights, vec![6667, 3333, 0]);
        let all = decide(
            &s,
            &[endpoints(3, 3), endpoints(3, 3), endpoints(1, 1)],
            Some(&two.status),
            t(30),
        );
        assert_eq!(all.weights, vec![1, 0, 0]);
        assert_eq!(reason(&all.status, READY), ready::PRIMARY_ACTIVE);
    }

    #[test]
    fn a_primary_short_of_endpoints_keeps_what_they_serve_and_the_secondaries_take_the_rest() {
        // Demand 3 x 20 = 60: with 1 of its 3 endpoints ready the primary serves 20.
        let s = sized(Strategy::Ordered);
        let full = decide(
            &s,
            &[endpoints(3, 3), endpoints(1, 1), endpoints(1, 1)],
            None,
            t(0),
        );
        assert_eq!(full.weights, vec![1, 0, 0]);
        let two = decide(
            &s,
            &[endpoints(2, 3), endpoints(1, 1), endpoints(1, 1)],
            Some(&full.status),
            t(10),
        );
        assert_eq!(two.weights, vec![6667, 3333, 0]);
        assert_eq!(reason(&two.status, READY), ready::SPILLOVER_BY_CAPACITY);
        assert_eq!(
            two.transition_message.as_deref(),
            Some(
                "primary web-primary is short of ready endpoints; what they cannot serve moved to east"
            )
        );
        let one = decide(
            &s,
            &[endpoints(1, 3), endpoints(1, 1), endpoints(1, 1)],
            Some(&two.status),
            t(20),
        );
        assert_eq!(one.weights, vec![3334, 3333, 3333]);
        let capacity = one.status.capacity.as_ref().expect("capacity status");
        assert_eq!(capacity.unserved, "0%");
        let back = decide(
            &s,
            &[endpoints(3, 3), endpoints(1, 1), endpoints(1, 1)],
            Some(&one.status),
            t(30),
        );
        assert_eq!(back.weights, vec![1, 0, 0]);
        assert_eq!(reason(&back.status, READY), ready::PRIMARY_ACTIVE);
    }

    #[test]
    fn a_rollout_of_the_primary_moves_nothing_while_its_ready_endpoints_serve_the_demand() {
        // 3 endpoints (demand 60); a rollout with a surge of one: a fourth starts, becomes
        // ready, then an old one terminates (still listed, not ready) and goes.
        let s = sized(Strategy::Ordered);
        let terminating = |ready, total, leaving| BackendObservation {
            terminating_endpoints: leaving,
            ..endpoints(ready, total)
        };
        let steps = [
            (terminating(3, 3, 0), 60),
            (terminating(3, 4, 0), 60),
            (terminating(4, 4, 0), 80),
            (terminating(3, 4, 1), 60),
            (terminating(3, 3, 0), 60),
        ];
        let mut previous = None;
        for (i, (primary, demand)) in steps.into_iter().enumerate() {
            let d = decide(
                &s,
                &[primary, endpoints(1, 1), endpoints(1, 1)],
                previous.as_ref(),
                t(10 * i as i64),
            );
            assert_eq!(d.weights, vec![1, 0, 0], "step {}", i + 1);
            assert_eq!(d.status.capacity.as_ref().map(|c| c.demand), Some(demand));
            previous = Some(d.status);
        }
    }

    /// The example of docs/decision-rules.md ("Capacity"), row by row.
    #[test]
    fn the_documented_example_holds_row_by_row() {
        let s = sized(Strategy::Ordered);
        let rows: [([i32; 3], [i32; 3], &str, &str); 6] = [
            ([3, 1, 2], [1, 0, 0], ready::PRIMARY_ACTIVE, "0%"),
            ([0, 1, 2], [0, 3333, 6667], ready::FAILED_OVER, "0%"),
            ([0, 1, 1], [3334, 3333, 3333], ready::FAILED_OVER, "33.33%"),
            (
                [1, 1, 1],
                [3334, 3333, 3333],
                ready::FAILBACK_BY_CAPACITY,
                "0%",
            ),
            ([3, 1, 1], [1, 0, 0], ready::PRIMARY_ACTIVE, "0%"),
            (
                [2, 1, 1],
                [6667, 3333, 0],
                ready::SPILLOVER_BY_CAPACITY,
                "0%",
            ),
        ];
        let mut previous = None;
        for (i, (ready_endpoints, weights, rule, unserved)) in rows.into_iter().enumerate() {
            let obs = [
                endpoints(ready_endpoints[0], 3),
                endpoints(ready_endpoints[1], 1),
                endpoints(ready_endpoints[2], 2),
            ];
            let d = decide(&s, &obs, previous.as_ref(), t(10 * i as i64));
            assert_eq!(d.weights, weights.to_vec(), "row {}", i + 1);
            assert_eq!(reason(&d.status, READY), rule, "row {}", i + 1);
            let capacity = d.status.capacity.as_ref().expect("capacity status");
            assert_eq!(capacity.unserved, unserved, "row {}", i + 1);
            previous = Some(d.status);
        }
    }

    #[test]
    fn the_demand_is_kept_while_the_primary_has_no_endpoints() {
        let s = sized(Strategy::Ordered);
        let before = decide(
            &s,
            &[endpoints(3, 3), endpoints(1, 1), endpoints(1, 1)],
            None,
            t(0),
        );
        let gone = BackendObservation {
            service_exists: true,
            ..Default::default()
        };
        let d = decide(
            &s,
            &[gone, endpoints(1, 1), endpoints(1, 1)],
            Some(&before.status),
            t(10),
        );
        assert_eq!(d.status.capacity.map(|c| c.demand), Some(60));
        assert_eq!(d.weights, vec![3334, 3333, 3333]);
    }

    #[test]
    fn scaling_asks_each_workload_for_what_the_demand_needs_within_its_bound() {
        let mut s = sized(Strategy::Ordered);
        s.secondaries[0].scale_target = Some(ScaleTarget {
            kind: ScaleKind::HorizontalPodAutoscaler,
            name: "east".into(),
        });
        if let Some(c) = s.capacity.as_mut() {
            c.scale = Some(ScaleSpec {
                deadline: "1m".into(),
                max_replicas: 2,
            });
        }
        let policy = crate::decide::tests::policy_of(&s);
        let valid = crate::validate::validate(&policy).expect("valid");
        let backends = crate::decide::readiness::assess(
            &valid,
            &[endpoints(0, 3), endpoints(1, 1), endpoints(1, 1)],
            None,
            t(0),
        );
        let cap = valid.capacity.as_deref().expect("capacity");
        // 60 requests/s: east may have 2 replicas (40), west serves the other 20 as it is.
        assert_eq!(
            super::scale_wants(&valid, cap, &backends, 60),
            vec![super::ScaleWant {
                backend: 1,
                replicas: 2
            }]
        );
    }
}
