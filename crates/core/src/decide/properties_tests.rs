//! Properties of the decision over every field of the spec: a generator draws the strategy (all
//! four), the number of secondaries and their weights, `minReadyEndpoints` and `minReadyRatio`,
//! the holds, the overprovisioning factor, `pin`, a drill, `suspend`, `whenNoneReady`, a failback
//! ramp and a health query; then a history of observations (endpoint counts, health readings that
//! answer, fail or never answered) fed through the decision, each status fed back as the previous
//! one.
//!
//! A property that holds only under a condition (a pin, a hold, nothing ready…) could hold
//! vacuously if the generator never met that condition, so the run counts how often each one was
//! exercised and fails when one was never met.

use std::{
    collections::BTreeMap,
    sync::{Mutex, atomic::AtomicU64},
};

use proptest::{
    prelude::{Just, any, prop_oneof},
    prop_assert, prop_assert_eq,
    strategy::Strategy as _,
    test_runner::{Config, TestCaseError, TestRunner},
};

use super::tests::{Decision, decide, spec, t};
use crate::{
    api::{
        CapacitySpec, DrillSpec, FailbackSpec, FailoverPolicySpec, FailoverPolicyStatus,
        HealthSpec, NoData, PrometheusHealth, RampSpec, Strategy, Timestamp, WhenNoneReady,
        conditions::ready,
    },
    decide::plan::PROPORTIONAL_TOTAL,
    observation::{BackendObservation, Reading, Sample},
};

/// How many histories a run draws.
const CASES: u32 = 1500;

fn arb_strategy() -> impl proptest::strategy::Strategy<Value = Strategy> {
    prop_oneof![
        Just(Strategy::Ordered),
        Just(Strategy::Equal),
        Just(Strategy::Weighted),
        Just(Strategy::Proportional)
    ]
}

fn arb_health() -> impl proptest::strategy::Strategy<Value = Option<HealthSpec>> {
    proptest::option::weighted(
        0.3,
        prop_oneof![Just(NoData::Healthy), Just(NoData::Unhealthy)].prop_map(|no_data| {
            HealthSpec {
                prometheus: Some(PrometheusHealth {
                    address: Some("http://prometheus:9090".into()),
                    query: "errors{service=\"{{service}}\"}".into(),
                    max: Some(0.5),
                    min: None,
                    interval: "10s".into(),
                    no_data,
                }),
            }
        }),
    )
}

/// The tier of backend `i` (a secondary) as the spec puts it: its place under `Ordered`, the tier
/// it names otherwise (0 when unset).
fn tier(s: &FailoverPolicySpec, i: usize) -> i32 {
    match s.strategy {
        Strategy::Ordered => i32::try_from(i).unwrap_or(i32::MAX),
        _ => s.secondaries.get(i - 1).and_then(|b| b.tier).unwrap_or(0),
    }
}

/// Everything of a spec the decision reads, drawn independently, then made valid (the rules
/// that tie fields together: weights only with `Weighted`, holds, factor and ramps only as
/// their strategy allows).
fn arb_spec() -> impl proptest::strategy::Strategy<Value = FailoverPolicySpec> {
    let shape = (
        arb_strategy(),
        proptest::collection::vec(proptest::option::of(1i32..=1000), 1..5),
        1i32..4,
        proptest::option::weighted(0.3, prop_oneof![Just(0.25), Just(0.5), Just(1.0)]),
        prop_oneof![Just("0s"), Just("10s"), Just("1m")],
        prop_oneof![Just("0s"), Just("10s"), Just("1m")],
        proptest::option::weighted(0.4, proptest::collection::vec(0i32..3, 5)),
    );
    let controls = (
        proptest::option::weighted(0.3, 1.0f64..5.0),
        proptest::option::weighted(0.2, 0usize..5),
        proptest::bool::weighted(0.2),
        prop_oneof![Just(WhenNoneReady::KeepLast), Just(WhenNoneReady::Primary)],
        proptest::option::weighted(
            0.3,
            prop_oneof![Just(vec![10, 50, 100]), Just(vec![25, 100])],
        ),
        arb_health(),
        proptest::option::weighted(0.25, (0usize..5, 0i64..600, proptest::bool::weighted(0.3))),
        proptest::option::weighted(0.3, (1i32..30, proptest::option::of(1i32..30))),
    );
    (shape, controls).prop_map(|(shape, controls)| {
        let (strategy, weights, min_ready, ratio, fo, fb, tiers) = shape;
        let (factor, pin, suspend, when_none_ready, ramp, health, drill, capacity) = controls;
        let names: Vec<String> = (0..weights.len()).map(|i| format!("s{i}")).collect();
        let secondaries: Vec<(&str, Option<i32>)> = names
            .iter()
            .zip(&weights)
            .map(|(n, w)| (n.as_str(), w.filter(|_| strategy == Strategy::Weighted)))
            .collect();
        let mut s = spec(strategy, &secondaries);
        if matches!(strategy, Strategy::Equal | Strategy::Weighted) {
            for (secondary, tier) in s.secondaries.iter_mut().zip(tiers.iter().flatten()) {
                secondary.tier = Some(*tier);
            }
        }
        s.readiness.min_ready_endpoints = min_ready;
        s.readiness.min_ready_ratio = ratio;
        s.pin = pin.map(|i| {
            if i == 0 || i > names.len() {
                s.primary.clone()
            } else {
                names[i - 1].clone()
            }
        });
        s.drill = drill.map(|(i, until, force)| DrillSpec {
            to: if i == 0 || i > names.len() {
                s.primary.clone()
            } else {
                names[i - 1].clone()
            },
            until: Timestamp(t(until)),
            force,
        });
        s.suspend = suspend;
        s.when_none_ready = when_none_ready;
        s.health = health;
        if strategy == Strategy::Proportional {
            s.overprovisioning_factor = factor;
        } else {
            s.capacity = capacity.map(|(per_endpoint, first)| {
                if let Some(first_secondary) = s.secondaries.first_mut() {
                    first_secondary.per_endpoint = first;
                }
                CapacitySpec {
                    unserved: Default::default(),
                    per_endpoint,
                    primary_per_endpoint: None,
                    scale: None,
                }
            });
            s.failover_after = fo.into();
            s.failback_after = fb.into();
            s.failback = ramp.map(|steps| FailbackSpec {
                ramp: Some(RampSpec {
                    steps,
                    every: "10s".into(),
                }),
            });
        }
        s
    })
}

/// A health reading: none yet, a value (healthy or not, or no data), or a failing query that
/// keeps its last value or never answered.
fn arb_reading() -> impl proptest::strategy::Strategy<Value = Option<Reading>> {
    let sample = proptest::option::of(proptest::option::of(prop_oneof![Just(0.1), Just(0.9)]))
        .prop_map(|value| {
            value.map(|value| Sample {
                value,
                read_at: t(0),
            })
        });
    proptest::option::weighted(
        0.8,
        (
            sample,
            proptest::option::weighted(0.3, Just("refused".to_string())),
        )
            .prop_map(|(sample, failing)| Reading {
                sample,
                failing,
                refused: None,
            }),
    )
}

/// A backend's observation, mostly an existing Service with endpoints (so that holds and ramps
/// run their course), sometimes none at all.
fn arb_observation() -> impl proptest::strategy::Strategy<Value = BackendObservation> {
    let slices = prop_oneof![1 => Just(0u32), 6 => 1u32..3];
    let ready = prop_oneof![1 => Just(0i32), 3 => 1i32..5];
    let extra = prop_oneof![2 => Just(0i32), 1 => 1i32..5];
    (
        proptest::bool::weighted(0.9),
        slices,
        ready,
        extra,
        arb_reading(),
    )
        .prop_map(
            |(exists, slices, ready, extra, health)| BackendObservation {
                service_exists: exists,
                slices,
                ready_endpoints: if slices == 0 { 0 } else { ready },
                total_endpoints: if slices == 0 { 0 } else { ready + extra },
                health,
                ..Default::default()
            },
        )
}

/// A spec with a sequence of (seconds since the last step, observations) steps; a step may
/// repeat the observations before it (`None`), as a cluster that does not change for a while.
fn arb_history()
-> impl proptest::strategy::Strategy<Value = (FailoverPolicySpec, Vec<(i64, Vec<BackendObservation>)>)>
{
    arb_spec().prop_flat_map(|s| {
        let n = s.secondaries.len() + 1;
        let step = (
            0i64..90,
            proptest::option::weighted(0.6, proptest::collection::vec(arb_observation(), n)),
        );
        let steps = proptest::collection::vec(step, 1..16).prop_map(move |steps| {
            let mut last = vec![BackendObservation::counted(1, 1); n];
            steps
                .into_iter()
                .map(|(gap, obs)| {
                    if let Some(obs) = obs {
                        last = obs;
                    }
                    (gap, last.clone())
                })
                .collect::<Vec<_>>()
        });
        (Just(s), steps)
    })
}

/// How often each conditional property met its condition, by name.
#[derive(Default)]
struct Exercised(Mutex<BTreeMap<&'static str, u64>>);

impl Exercised {
    fn met(&self, condition: &'static str) {
        *self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(condition)
            .or_default() += 1;
    }
}

/// The `Ready` reason of the decision (what the rules chose, whether or not it is written).
fn reason(d: &Decision) -> Option<&str> {
    Some(d.decided_reason.as_str())
}

/// The properties of one decision of a history.
fn check(
    s: &FailoverPolicySpec,
    obs: &[BackendObservation],
    previous: Option<&FailoverPolicyStatus>,
    at: i64,
    seen: &Exercised,
) -> Result<Decision, TestCaseError> {
    let d = decide(s, obs, previous, t(at));
    let n = s.secondaries.len() + 1;
    prop_assert_eq!(d.weights.len(), n);
    prop_assert!(d.weights.iter().all(|w| *w >= 0));
    // Never all zero, whatever is ready (fail static keeps the last weights).
    prop_assert!(d.weights.iter().any(|w| *w > 0), "{:?}", d.weights);
    let ready: Vec<bool> = d.status.backends.iter().map(|b| b.ready).collect();
    let reason = reason(&d);
    let pinned = matches!(
        reason,
        Some(ready::PINNED | ready::PINNED_BACKEND_NOT_READY)
    );
    let held = reason == Some(ready::FAILOVER_PENDING);
    // A forced drill, as a pin, sends traffic whatever the readiness (checked in `check_drill`).
    let forced = reason == Some(ready::DRILL_BACKEND_NOT_READY);
    let drilled = forced || reason == Some(ready::DRILL);
    if pinned {
        seen.met("pinned: all traffic on the pinned backend");
        let pin = s.pin.as_deref().unwrap_or_default();
        let index = std::iter::once(s.primary.as_str())
            .chain(s.secondaries.iter().map(|b| b.service.as_str()))
            .position(|b| b == pin)
            .unwrap_or(usize::MAX);
        for (i, w) in d.weights.iter().enumerate() {
            prop_assert_eq!(*w > 0, i == index, "{:?} pinned to {}", d.weights, pin);
        }
        if reason == Some(ready::PINNED_BACKEND_NOT_READY) {
            seen.met("pinned to a backend that is not ready");
        }
    } else if ready.iter().any(|r| *r) && !held && !forced {
        seen.met("something ready, not held: traffic only to ready backends");
        // With capacity, what the secondaries cannot serve stays on the primary, ready or not.
        let unserved_on_primary = d.status.capacity.is_some();
        for (i, (w, r)) in d.weights.iter().zip(&ready).enumerate() {
            prop_assert!(
                *w == 0 || *r || (i == 0 && unserved_on_primary),
                "{:?} with ready {:?} ({reason:?})",
                d.weights,
                ready
            );
        }
    }
    if !pinned && !forced && !ready.iter().any(|r| *r) {
        if s.when_none_ready == WhenNoneReady::Primary {
            seen.met("nothing ready, whenNoneReady Primary: all on the primary");
            prop_assert!(d.weights[0] > 0 && d.weights[1..].iter().all(|w| *w == 0));
        } else {
            seen.met("nothing ready, KeepLast: the previous weights stand");
            if let Some(last) = previous.filter(|p| !p.backends.is_empty()) {
                let kept: Vec<i32> = last.backends.iter().map(|b| b.weight).collect();
                if kept.iter().any(|w| *w > 0) {
                    prop_assert_eq!(&d.weights, &kept);
                }
            }
        }
    }
    if held {
        seen.met("failover held: still all on the primary");
        prop_assert!(d.weights[0] > 0 && d.weights[1..].iter().all(|w| *w == 0));
        prop_assert!(d.requeue_after.is_some());
    }
    if reason == Some(ready::FAILBACK_PENDING) {
        seen.met("failback held: nothing on the primary");
        prop_assert_eq!(d.weights[0], 0);
        prop_assert!(d.requeue_after.is_some());
    }
    if reason == Some(ready::FAILBACK_RAMP) {
        seen.met("failback ramp: the primary has a share and a next step");
        prop_assert!(d.weights[0] > 0 && ready[0]);
        prop_assert!(d.requeue_after.is_some());
    }
    if s.strategy == Strategy::Proportional
        && !pinned
        && !drilled
        && reason != Some(ready::NO_READY_BACKEND)
    {
        seen.met("proportional: weights add up to the total");
        prop_assert_eq!(d.weights.iter().sum::<i32>(), PROPORTIONAL_TOTAL);
    }
    check_health(s, obs, &d, seen)?;
    check_drill(s, at, &d, seen)?;
    check_capacity(s, &d, seen)?;
    check_suspend(s, obs, previous, at, &d, seen)?;
    check_stable(s, obs, at, &d, seen)?;
    Ok(d)
}

/// A drill sends everything to its backend only before its end time, and asks to decide again
/// by then; at and after its end, no decision is a drill's.
fn check_drill(
    s: &FailoverPolicySpec,
    at: i64,
    d: &Decision,
    seen: &Exercised,
) -> Result<(), TestCaseError> {
    let Some(drill) = &s.drill else {
        return Ok(());
    };
    let drilled = matches!(
        d.decided_reason.as_str(),
        ready::DRILL | ready::DRILL_BACKEND_NOT_READY
    );
    let until = drill.until.0;
    if t(at) >= until {
        seen.met("drill past its end time: not a drill's decision");
        prop_assert!(!drilled, "a drill outlived its end ({})", d.decided_reason);
        return Ok(());
    }
    if drilled {
        seen.met("drill: all traffic on its backend, a wake-up by its end");
        let index = std::iter::once(s.primary.as_str())
            .chain(s.secondaries.iter().map(|b| b.service.as_str()))
            .position(|b| b == drill.to)
            .unwrap_or(usize::MAX);
        for (i, w) in d.weights.iter().enumerate() {
            prop_assert_eq!(
                *w > 0,
                i == index,
                "{:?} drilled to {}",
                d.weights,
                drill.to
            );
        }
        let left = (until - t(at)).to_std().unwrap_or_default();
        prop_assert!(
            d.requeue_after
                .is_some_and(|r| r <= left + std::time::Duration::from_millis(1)),
            "{:?} with {left:?} left",
            d.requeue_after
        );
    }
    Ok(())
}

/// With `spec.capacity`: a ready primary keeps all the traffic only when it serves it (or no
/// secondary has room); after a failover, during a failback by capacity and while a primary
/// short of endpoints spills over: no secondary is sent more than it serves (within a basis point of the demand, the weights' rounding);
/// `Ordered` sends to a secondary only once the ready ones before it are full; what is unserved
/// is at least what the ready backends cannot serve, and nothing when the secondaries can.
fn check_capacity(
    s: &FailoverPolicySpec,
    d: &Decision,
    seen: &Exercised,
) -> Result<(), TestCaseError> {
    let Some(load) = &d.status.capacity else {
        return Ok(());
    };
    let demand = load.demand;
    let capacity: Vec<i64> = d
        .status
        .backends
        .iter()
        .map(|b| b.capacity.unwrap_or(0))
        .collect();
    if d.decided_reason == ready::PRIMARY_ACTIVE && d.status.phase.is_some() && !s.suspend {
        // A ready primary keeps all the traffic only if it serves it, or no secondary has room.
        // In basis points of the demand, as the rule counts them.
        let share = |c: i64| ((c * 10_000 + demand / 2) / demand.max(1)).min(10_000);
        if capacity.iter().skip(1).any(|c| share(*c) > 0) {
            seen.met("capacity: a primary keeps it all only when it serves it all");
            prop_assert!(
                share(capacity[0]) >= 10_000,
                "primary serves {} of {demand} yet keeps it all ({capacity:?})",
                capacity[0]
            );
        }
    }
    let bounded = matches!(
        d.decided_reason.as_str(),
        ready::FAILED_OVER | ready::FAILBACK_BY_CAPACITY | ready::SPILLOVER_BY_CAPACITY
    );
    if !bounded || d.status.phase.is_none() || s.suspend {
        return Ok(());
    }
    seen.met("capacity: traffic bounded by what each backend serves");
    let sent = |i: usize| i64::from(d.weights[i]) * demand;
    let total = i64::from(PROPORTIONAL_TOTAL);
    for (i, serves) in capacity.iter().enumerate().skip(1) {
        prop_assert!(
            sent(i) <= serves * total + demand,
            "{i} sent {}/10000 of {demand} requests/s, serves {serves} ({:?})",
            d.weights[i],
            d.weights
        );
    }
    if d.decided_reason == ready::FAILED_OVER {
        seen.met("capacity: a tier only once the tiers before are full (Ordered: each secondary)");
        for j in 1..d.weights.len() {
            if d.weights[j] == 0 {
                continue;
            }
            for i in (1..d.weights.len()).filter(|&i| tier(s, i) < tier(s, j)) {
                prop_assert!(
                    sent(i) + demand >= capacity[i] * total,
                    "{:?}: secondary {j} has traffic while {i} of a tier before has room ({capacity:?})",
                    d.weights
                );
            }
        }
    }
    let unserved: f64 = load.unserved.trim_end_matches('%').parse().unwrap_or(-1.0);
    let can_serve: i64 = capacity.iter().sum();
    let least = (demand - can_serve).max(0) as f64 * 100.0 / demand as f64;
    // Each weight may be a basis point (0.01%) off by rounding.
    let rounding = 0.01 * (d.weights.len() as f64 + 1.0);
    prop_assert!(
        unserved + rounding >= least,
        "unserved {unserved}% with capacity {capacity:?} for {demand}"
    );
    let secondaries: i64 = capacity.iter().skip(1).sum();
    if d.decided_reason == ready::FAILED_OVER && secondaries >= demand {
        seen.met("capacity: secondaries enough, nothing unserved");
        prop_assert!(
            unserved <= rounding,
            "{unserved}% unserved with {capacity:?}"
        );
    }
    Ok(())
}

/// A backend whose last health value is out of the threshold is not ready, whether its query
/// answers now or fails (fail static); one that never answered is judged on readiness alone.
fn check_health(
    s: &FailoverPolicySpec,
    obs: &[BackendObservation],
    d: &Decision,
    seen: &Exercised,
) -> Result<(), TestCaseError> {
    let Some(no_data) = s
        .health
        .as_ref()
        .and_then(|h| h.prometheus.as_ref())
        .map(|p| p.no_data)
    else {
        return Ok(());
    };
    for (o, b) in obs.iter().zip(&d.status.backends) {
        let Some(sample) = o.health.as_ref().and_then(|r| r.sample.as_ref()) else {
            continue;
        };
        let unhealthy = match sample.value {
            Some(v) => v > 0.5,
            None => no_data == NoData::Unhealthy,
        };
        if unhealthy {
            if o.health.as_ref().is_some_and(|r| r.failing.is_some()) {
                seen.met("health: a failing query keeps an unhealthy verdict");
            } else {
                seen.met("health: an unhealthy value makes a backend not ready");
            }
            prop_assert!(!b.ready, "{} is ready with {:?}", b.service, o.health);
        }
    }
    Ok(())
}

/// Suspending changes no decision and announces nothing.
fn check_suspend(
    s: &FailoverPolicySpec,
    obs: &[BackendObservation],
    previous: Option<&FailoverPolicyStatus>,
    at: i64,
    d: &Decision,
    seen: &Exercised,
) -> Result<(), TestCaseError> {
    if !s.suspend {
        return Ok(());
    }
    seen.met("suspended: same decision, nothing announced");
    let running = FailoverPolicySpec {
        suspend: false,
        ..s.clone()
    };
    let unsuspended = decide(&running, obs, previous, t(at));
    prop_assert_eq!(&d.weights, &unsuspended.weights);
    prop_assert_eq!(d.transition, None);
    // The status describes the route as it stands: the weights the previous status had.
    let kept: Vec<i32> = previous
        .map(|p| p.backends.iter().map(|b| b.weight).collect())
        .unwrap_or_default();
    let shown: Vec<i32> = d.status.backends.iter().map(|b| b.weight).collect();
    if kept.iter().any(|w| *w > 0) {
        seen.met("suspended: the status shows the route kept");
        prop_assert_eq!(&shown, &kept);
    } else {
        prop_assert!(shown.iter().all(|w| *w == 0) && d.status.active_backends.is_empty());
    }
    Ok(())
}

/// Deciding again at the same instant from the status just computed changes nothing (a suspended
/// policy settles after one more decision); without a pending hold, neither does deciding later on
/// the same input.
fn check_stable(
    s: &FailoverPolicySpec,
    obs: &[BackendObservation],
    at: i64,
    d: &Decision,
    seen: &Exercised,
) -> Result<(), TestCaseError> {
    let again = decide(s, obs, Some(&d.status), t(at));
    prop_assert_eq!(again.transition, None);
    if s.suspend {
        // The status of a suspended policy shows the route as it stands, and what traffic would do
        // without suspend is read from it: one more decision settles, and then nothing changes.
        let settled = decide(s, obs, Some(&again.status), t(at));
        prop_assert_eq!(&settled.status, &again.status);
        prop_assert_eq!(&settled.weights, &again.weights);
        return Ok(());
    }
    prop_assert_eq!(&again.weights, &d.weights);
    prop_assert_eq!(&again.status, &d.status);
    if d.requeue_after.is_none() {
        seen.met("no hold pending: a later decision on the same input changes nothing");
        let later = decide(s, obs, Some(&d.status), t(at + 7));
        prop_assert_eq!(&later.status, &d.status);
    }
    Ok(())
}

#[test]
fn the_decision_keeps_its_properties_over_every_field_of_the_spec() {
    let seen = Exercised::default();
    let steps = AtomicU64::new(0);
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&arb_history(), |(s, history)| {
        let mut at = 0;
        let mut previous: Option<FailoverPolicyStatus> = None;
        // A suspended policy runs unsuspended for its first half: it has a route to freeze.
        let running = FailoverPolicySpec {
            suspend: false,
            ..s.clone()
        };
        let half = history.len() / 2;
        for (i, (gap, obs)) in history.into_iter().enumerate() {
            at += gap;
            let spec = if i < half { &running } else { &s };
            let d = check(spec, &obs, previous.as_ref(), at, &seen)?;
            steps.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            previous = Some(d.status);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let counts = seen.0.into_inner().unwrap_or_else(|e| e.into_inner());
    eprintln!(
        "{CASES} histories, {} decisions; each conditional property met:",
        steps.into_inner()
    );
    for (condition, n) in &counts {
        eprintln!("  {n:>6}  {condition}");
    }
    let expected = [
        "pinned: all traffic on the pinned backend",
        "pinned to a backend that is not ready",
        "something ready, not held: traffic only to ready backends",
        "nothing ready, whenNoneReady Primary: all on the primary",
        "nothing ready, KeepLast: the previous weights stand",
        "failover held: still all on the primary",
        "failback held: nothing on the primary",
        "failback ramp: the primary has a share and a next step",
        "proportional: weights add up to the total",
        "health: an unhealthy value makes a backend not ready",
        "health: a failing query keeps an unhealthy verdict",
        "suspended: same decision, nothing announced",
        "suspended: the status shows the route kept",
        "no hold pending: a later decision on the same input changes nothing",
        "drill: all traffic on its backend, a wake-up by its end",
        "drill past its end time: not a drill's decision",
        "capacity: traffic bounded by what each backend serves",
        "capacity: a tier only once the tiers before are full (Ordered: each secondary)",
        "capacity: secondaries enough, nothing unserved",
        "capacity: a primary keeps it all only when it serves it all",
    ];
    let never: Vec<&str> = expected
        .iter()
        .filter(|c| counts.get(*c).copied().unwrap_or(0) < 10)
        .copied()
        .collect();
    assert!(
        never.is_empty(),
        "conditional properties met fewer than 10 times (they could hold vacuously): {never:?}"
    );
}

#[test]
fn decide_never_panics_on_short_or_odd_input() {
    let mut runner = TestRunner::new(Config {
        failure_persistence: None,
        ..Config::default()
    });
    let input = (
        arb_spec(),
        proptest::collection::vec(arb_observation(), 0..3),
        any::<i64>(),
    );
    let result = runner.run(&input, |(s, obs, junk)| {
        let previous = FailoverPolicyStatus {
            active_backends: vec!["unknown".into()],
            ..Default::default()
        };
        let _ = decide(&s, &obs, Some(&previous), t(junk % 1_000_000));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
