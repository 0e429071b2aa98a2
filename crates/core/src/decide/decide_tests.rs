//! The decision as a whole: every rule together, fed back through the status step as the
//! controller does, with the property tests over long histories.

use std::time::Duration;

use chrono::TimeZone;
use proptest::prelude::{any, prop_assert, prop_assert_eq, proptest};

use super::{plan::Transition, strategy::proportional_weights, *};
use crate::{
    api::{
        FailoverPolicy, FailoverPolicySpec, FailoverPolicyStatus, ReadinessSpec, SecondaryBackend,
        TrafficSplitSpec, time,
    },
    api::{
        Phase,
        conditions::{
            DEGRADED, HEALTH_QUERY_FAILED, PINNED, READY, SUSPENDED, degraded, health, pinned,
            ready, suspended,
        },
    },
    applied::Applied,
    last_status::LastStatus,
    observation::Availability,
    route::{RouteTarget, RouteView, RulesDigest},
    status::{Decided, Outcome, StatusInput, build},
    validate::validate,
};

const CONDITION_READY: &str = READY;
const CONDITION_DEGRADED: &str = DEGRADED;
const CONDITION_PINNED: &str = PINNED;
const CONDITION_SUSPENDED: &str = SUSPENDED;

/// A decision and the status the controller builds from it.
pub(crate) struct Decision {
    pub(crate) weights: Vec<i32>,
    pub(crate) status: FailoverPolicyStatus,
    pub(crate) requeue_after: Option<Duration>,
    pub(crate) transition: Option<Transition>,
    pub(crate) transition_message: Option<String>,
    /// The `Ready` reason of the decision itself (the status may say another: suspended).
    pub(crate) decided_reason: String,
}

pub(crate) fn policy_of(spec: &FailoverPolicySpec) -> FailoverPolicy {
    let mut policy = FailoverPolicy::new("web", spec.clone());
    policy.metadata.namespace = Some("ns".into());
    policy
}

/// A valid policy of this strategy with these secondaries, for the tests of single rules.
pub(crate) fn valid(strategy: Strategy, secondaries: &[(&str, Option<i32>)]) -> ValidPolicy {
    validate(&policy_of(&spec(strategy, secondaries))).expect("valid policy")
}

/// Decides, then builds the status as the controller does when the route is in place.
pub(crate) fn decide(
    spec: &FailoverPolicySpec,
    observations: &[BackendObservation],
    previous: Option<&FailoverPolicyStatus>,
    now: DateTime<Utc>,
) -> Decision {
    let policy = policy_of(spec);
    let valid = validate(&policy).expect("valid policy");
    let last = previous.map(LastStatus::of);
    let plan = super::decide(&valid, observations, last.as_ref(), None, now);
    let target = RouteTarget::of(&policy);
    let decided_reason = super::conditions::verdicts(&valid, &plan)[0].reason.clone();
    // Suspended, the route stays as the previous status describes it (the route in place).
    let (applied, route) = if spec.suspend {
        let kept: Vec<i32> = previous
            .map(|p| p.backends.iter().map(|b| b.weight).collect())
            .unwrap_or_default();
        let route = kept.iter().any(|w| *w > 0).then(|| RouteView {
            controller: None,
            policy_label: None,
            resource_version: None,
            rules: Some(RulesDigest::of(&target.rules(
                &spec.service,
                valid.backend_refs(),
                &kept,
            ))),
            answers: Vec::new(),
            named_rules: Box::default(),
            consents: Box::default(),
        });
        (Applied::Suspended, route)
    } else {
        (Applied::Written, None)
    };
    let outcome = Outcome::Decided(Box::new(Decided {
        policy: valid.into(),
        plan: plan.clone(),
        applied,
        route,
        refused_parents: Vec::new(),
        held_hostnames: Vec::new(),
        scaled: Default::default(),
    }));
    let status = build(&StatusInput {
        notices: &Default::default(),
        generation: None,
        target: &target,
        previous: last.as_ref(),
        outcome: &outcome,
        now,
        claims: None,
    });
    Decision {
        weights: plan.routing.weights,
        status,
        requeue_after: plan.requeue_after,
        transition: plan.transition.as_ref().map(|a| a.transition),
        transition_message: plan.transition.map(|a| a.message),
        decided_reason,
    }
}

pub(crate) fn spec(strategy: Strategy, secondaries: &[(&str, Option<i32>)]) -> FailoverPolicySpec {
    FailoverPolicySpec {
        service: "web".into(),
        primary: "web-primary".into(),
        secondaries: secondaries
            .iter()
            .map(|(s, w)| SecondaryBackend {
                weight: *w,
                ..SecondaryBackend::new(*s)
            })
            .collect(),
        strategy,
        readiness: ReadinessSpec::default(),
        failover_after: "0s".into(),
        failback_after: "0s".into(),
        traffic_split: TrafficSplitSpec::default(),
        overprovisioning_factor: None,
        when_none_ready: Default::default(),
        suspend: false,
        pin: None,
        drill: None,
        ..FailoverPolicySpec::default()
    }
}

pub(crate) fn three(strategy: Strategy) -> FailoverPolicySpec {
    spec(strategy, &[("web-east", None), ("web-west", None)])
}

pub(crate) fn up(ready: i32) -> BackendObservation {
    BackendObservation {
        service_exists: true,
        slices: 1,
        ready_endpoints: ready,
        total_endpoints: ready.max(2),
        terminating_endpoints: 0,
        availability: Availability::Counted,
        health: None,
    }
}

pub(crate) fn down() -> BackendObservation {
    up(0)
}

pub(crate) fn t(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + seconds, 0)
        .single()
        .expect("valid time")
}

/// Runs the decision repeatedly, feeding each status back as the previous one.
fn run(spec: &FailoverPolicySpec, steps: &[(i64, Vec<BackendObservation>)]) -> Vec<Decision> {
    let mut previous: Option<FailoverPolicyStatus> = None;
    steps
        .iter()
        .map(|(at, obs)| {
            let d = decide(spec, obs, previous.as_ref(), t(*at));
            previous = Some(d.status.clone());
            d
        })
        .collect()
}

fn condition_reason<'a>(d: &'a Decision, type_: &str) -> (&'a str, &'a str) {
    let c = d
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .expect("condition present");
    (c.status.as_str(), c.reason.as_str())
}

#[test]
fn sends_all_traffic_to_ready_primary() {
    let d = decide(
        &three(Strategy::Ordered),
        &[up(3), up(3), up(3)],
        None,
        t(0),
    );
    assert_eq!(d.weights, vec![1, 0, 0]);
    assert_eq!(d.status.phase, Some(Phase::Primary));
    assert_eq!(d.status.active_backends, vec!["web-primary"]);
    assert_eq!(d.status.ready_summary.as_deref(), Some("3/3"));
    assert_eq!(
        condition_reason(&d, CONDITION_READY),
        ("True", ready::PRIMARY_ACTIVE)
    );
    assert_eq!(
        condition_reason(&d, CONDITION_DEGRADED),
        ("False", degraded::ALL_BACKENDS_READY)
    );
    assert_eq!(d.requeue_after, None);
}

#[test]
fn fails_over_to_first_ready_secondary() {
    let ds = run(
        &three(Strategy::Ordered),
        &[
            (0, vec![up(1), up(1), up(1)]),
            (5, vec![down(), down(), up(1)]),
        ],
    );
    let d = &ds[1];
    assert_eq!(d.weights, vec![0, 0, 1]);
    assert_eq!(d.status.phase, Some(Phase::FailedOver));
    assert_eq!(d.transition, Some(Transition::FailedOver));
    assert_eq!(d.status.last_failover_time, Some(Timestamp(t(5))));
    assert_eq!(
        condition_reason(d, CONDITION_READY),
        ("True", ready::FAILED_OVER)
    );
    assert_eq!(
        condition_reason(d, CONDITION_DEGRADED),
        ("True", degraded::PRIMARY_NOT_READY)
    );
}

#[test]
fn equal_strategy_splits_among_all_ready_secondaries() {
    let s = spec(Strategy::Equal, &[("a", None), ("b", None), ("c", None)]);
    let d = decide(&s, &[down(), up(1), down(), up(1)], None, t(0));
    assert_eq!(d.weights, vec![0, 1, 0, 1]);
    assert_eq!(d.status.active_backends, vec!["a", "c"]);
    assert_eq!(d.status.active_summary.as_deref(), Some("a,c"));
}

#[test]
fn weighted_strategy_uses_weights_of_ready_secondaries() {
    let s = spec(
        Strategy::Weighted,
        &[("a", Some(300)), ("b", None), ("c", Some(700))],
    );
    let d = decide(&s, &[down(), up(1), up(1), up(1)], None, t(0));
    assert_eq!(d.weights, vec![0, 300, 1, 700]);
    let d = decide(&s, &[down(), down(), down(), up(1)], None, t(0));
    assert_eq!(d.weights, vec![0, 0, 0, 700]);
}

#[test]
fn secondary_readiness_change_during_failover_moves_traffic() {
    let ds = run(
        &three(Strategy::Ordered),
        &[
            (0, vec![down(), up(1), up(1)]),
            (1, vec![down(), down(), up(1)]),
            (2, vec![down(), up(1), up(1)]),
        ],
    );
    assert_eq!(ds[0].weights, vec![0, 1, 0]);
    assert_eq!(ds[1].weights, vec![0, 0, 1]);
    assert_eq!(ds[1].transition, Some(Transition::FailedOver));
    assert_eq!(
        ds[1].transition_message.as_deref(),
        Some("traffic moved from web-east to web-west")
    );
    assert_eq!(ds[2].weights, vec![0, 1, 0]);
}

#[test]
fn fails_back_when_primary_is_ready_again() {
    let ds = run(
        &three(Strategy::Ordered),
        &[
            (0, vec![up(1), up(1), up(1)]),
            (1, vec![down(), up(1), up(1)]),
            (2, vec![up(1), up(1), up(1)]),
        ],
    );
    assert_eq!(ds[2].weights, vec![1, 0, 0]);
    assert_eq!(ds[2].transition, Some(Transition::FailedBack));
    assert_eq!(ds[2].status.last_failback_time, Some(Timestamp(t(2))));
    assert_eq!(ds[2].status.last_failover_time, Some(Timestamp(t(1))));
}

#[test]
fn keeps_weights_when_nothing_is_ready() {
    let ds = run(
        &three(Strategy::Ordered),
        &[
            (0, vec![down(), up(1), up(1)]),
            (1, vec![down(), down(), down()]),
        ],
    );
    assert_eq!(ds[1].weights, vec![0, 1, 0], "fail static: no churn");
    assert_eq!(ds[1].status.phase, Some(Phase::NoReadyBackend));
    assert_eq!(ds[1].transition, Some(Transition::NoReadyBackend));
    assert_eq!(
        condition_reason(&ds[1], CONDITION_READY),
        ("False", ready::NO_READY_BACKEND)
    );
}

#[test]
fn nothing_ready_at_creation_points_at_primary() {
    let d = decide(
        &three(Strategy::Equal),
        &[down(), down(), down()],
        None,
        t(0),
    );
    assert_eq!(d.weights, vec![1, 0, 0]);
    assert_eq!(d.status.phase, Some(Phase::NoReadyBackend));
}

#[test]
fn recovery_from_no_ready_backend_is_reported() {
    let ds = run(
        &three(Strategy::Ordered),
        &[
            (0, vec![up(1), up(1), up(1)]),
            (1, vec![down(), down(), down()]),
            (2, vec![up(1), down(), down()]),
        ],
    );
    assert_eq!(ds[1].weights, vec![1, 0, 0]);
    assert_eq!(ds[2].weights, vec![1, 0, 0]);
    assert_eq!(ds[2].transition, Some(Transition::Recovered));
    assert_eq!(ds[2].status.phase, Some(Phase::Primary));
}

#[test]
fn no_recovered_event_while_a_failover_hold_keeps_traffic_on_a_dead_primary() {
    let mut s = three(Strategy::Ordered);
    s.failover_after = "30s".into();
    let ds = run(
        &s,
        &[
            (0, vec![up(1), up(1), up(1)]),
            (1, vec![down(), down(), down()]),
            (2, vec![down(), up(1), down()]),
        ],
    );
    assert_eq!(ds[1].transition, Some(Transition::NoReadyBackend));
    assert_eq!(ds[2].weights, vec![1, 0, 0]);
    assert_eq!(ds[2].transition, None);
    assert_eq!(
        condition_reason(&ds[2], CONDITION_READY),
        ("False", ready::FAILOVER_PENDING)
    );
}

#[test]
fn failover_after_holds_traffic_on_primary_until_due() {
    let mut s = three(Strategy::Ordered);
    s.failover_after = "30s".into();
    let ds = run(
        &s,
        &[
            (0, vec![up(1), up(1), up(1)]),
            (10, vec![down(), up(1), up(1)]),
            (25, vec![down(), up(1), up(1)]),
            (40, vec![down(), up(1), up(1)]),
        ],
    );
    assert_eq!(ds[1].weights, vec![1, 0, 0]);
    assert_eq!(ds[1].requeue_after, Some(Duration::from_millis(30_001)));
    assert_eq!(
        condition_reason(&ds[1], CONDITION_READY),
        ("False", ready::FAILOVER_PENDING)
    );
    assert_eq!(ds[2].weights, vec![1, 0, 0]);
    assert_eq!(ds[2].requeue_after, Some(Duration::from_millis(15_001)));
    assert_eq!(ds[3].weights, vec![0, 1, 0]);
    assert_eq!(ds[3].requeue_after, None);
    assert_eq!(ds[3].transition, Some(Transition::FailedOver));
}

#[test]
fn primary_blip_shorter_than_failover_after_moves_nothing() {
    let mut s = three(Strategy::Ordered);
    s.failover_after = "30s".into();
    let ds = run(
        &s,
        &[
            (0, vec![up(1), up(1), up(1)]),
            (10, vec![down(), up(1), up(1)]),
            (20, vec![up(1), up(1), up(1)]),
            (45, vec![down(), up(1), up(1)]),
        ],
    );
    assert!(ds.iter().all(|d| d.weights == vec![1, 0, 0]));
    assert!(ds.iter().all(|d| d.transition.is_none()));
    assert_eq!(
        ds[3].requeue_after,
        Some(Duration::from_millis(30_001)),
        "hold restarts at the new blip"
    );
}

#[test]
fn failback_after_holds_traffic_on_secondaries_until_due() {
    let mut s = three(Strategy::Ordered);
    s.failback_after = "1m".into();
    let ds = run(
        &s,
        &[
            (0, vec![down(), up(1), up(1)]),
            (10, vec![up(1), up(1), up(1)]),
            (69, vec![up(1), up(1), up(1)]),
            (70, vec![up(1), up(1), up(1)]),
        ],
    );
    assert_eq!(ds[1].weights, vec![0, 1, 0]);
    assert_eq!(ds[1].requeue_after, Some(Duration::from_millis(60_001)));
    assert_eq!(
        condition_reason(&ds[1], CONDITION_READY),
        ("True", ready::FAILBACK_PENDING)
    );
    assert_eq!(ds[2].weights, vec![0, 1, 0]);
    assert_eq!(ds[3].weights, vec![1, 0, 0]);
    assert_eq!(ds[3].transition, Some(Transition::FailedBack));
}

#[test]
fn failback_hold_is_skipped_when_no_secondary_is_ready() {
    let mut s = three(Strategy::Ordered);
    s.failback_after = "1m".into();
    let ds = run(
        &s,
        &[
            (0, vec![down(), up(1), up(1)]),
            (10, vec![up(1), down(), down()]),
        ],
    );
    assert_eq!(ds[1].weights, vec![1, 0, 0]);
}

#[test]
fn min_ready_endpoints_decides_readiness() {
    let mut s = three(Strategy::Ordered);
    s.readiness.min_ready_endpoints = 3;
    let d = decide(&s, &[up(2), up(3), up(5)], None, t(0));
    assert_eq!(d.weights, vec![0, 1, 0]);
    assert_eq!(
        d.status.backends[0].message.as_deref(),
        Some("2 of 2 endpoints ready, 3 needed")
    );
}

#[test]
fn missing_service_and_missing_slices_are_told_apart() {
    let no_service = BackendObservation::default();
    let no_slices = BackendObservation {
        service_exists: true,
        ..Default::default()
    };
    let d = decide(
        &three(Strategy::Ordered),
        &[no_service, no_slices, up(1)],
        None,
        t(0),
    );
    assert_eq!(
        d.status.backends[0].message.as_deref(),
        Some("Service not found")
    );
    assert_eq!(
        d.status.backends[1].message.as_deref(),
        Some("Service has no EndpointSlices")
    );
    assert_eq!(d.weights, vec![0, 0, 1]);
}

#[test]
fn unchanged_input_gives_identical_status() {
    let s = three(Strategy::Equal);
    let obs = vec![down(), up(1), up(2)];
    let first = decide(&s, &obs, None, t(0));
    let second = decide(&s, &obs, Some(&first.status), t(100));
    assert_eq!(first.status, second.status);
    assert_eq!(first.weights, second.weights);
    assert_eq!(second.transition, None);
}

#[test]
fn condition_transition_time_moves_only_on_status_change() {
    let ds = run(
        &three(Strategy::Ordered),
        &[
            (0, vec![up(1), up(1), up(1)]),
            (5, vec![up(1), down(), up(1)]),
            (9, vec![up(1), up(1), up(1)]),
        ],
    );
    let ready_time = |d: &Decision| d.status.conditions[0].last_transition_time.clone();
    assert_eq!(ready_time(&ds[0]), ready_time(&ds[2]));
    let degraded_time = |d: &Decision| d.status.conditions[1].last_transition_time.clone();
    assert_eq!(degraded_time(&ds[1]), time(t(5)));
    assert_eq!(degraded_time(&ds[2]), time(t(9)));
}

pub(crate) fn endpoints(ready: i32, total: i32) -> BackendObservation {
    BackendObservation::counted(ready, total)
}

#[test]
fn proportional_primary_at_least_72_percent_ready_keeps_all_traffic() {
    let s = three(Strategy::Proportional);
    let d = decide(
        &s,
        &[endpoints(72, 100), endpoints(10, 10), endpoints(10, 10)],
        None,
        t(0),
    );
    assert_eq!(d.weights, vec![10_000, 0, 0]);
    assert_eq!(d.status.phase, Some(Phase::Primary));
    assert_eq!(d.status.backends[0].share.as_deref(), Some("100%"));
}

#[test]
fn proportional_primary_half_ready_keeps_70_percent() {
    let s = three(Strategy::Proportional);
    let d = decide(
        &s,
        &[endpoints(5, 10), endpoints(10, 10), endpoints(10, 10)],
        None,
        t(0),
    );
    assert_eq!(d.weights, vec![7_000, 3_000, 0]);
    assert_eq!(d.status.phase, Some(Phase::FailedOver));
    assert_eq!(
        condition_reason(&d, CONDITION_READY),
        ("True", ready::SPILLOVER)
    );
    assert_eq!(d.status.backends[1].share.as_deref(), Some("30%"));
}

#[test]
fn proportional_normalises_when_every_backend_is_degraded() {
    // Healths 14 and 28 (factor 1.4): sum 42, so shares 33.33% and 66.67%.
    let s = three(Strategy::Proportional);
    let d = decide(
        &s,
        &[endpoints(1, 10), endpoints(2, 10), endpoints(0, 10)],
        None,
        t(0),
    );
    assert_eq!(d.weights, vec![3_334, 6_666, 0]);
    assert_eq!(d.weights.iter().sum::<i32>(), PROPORTIONAL_TOTAL);
    assert_eq!(d.status.backends[0].share.as_deref(), Some("33.34%"));
}

#[test]
fn proportional_with_nothing_healthy_applies_when_none_ready() {
    let mut s = three(Strategy::Proportional);
    let d = decide(
        &s,
        &[endpoints(0, 3), endpoints(0, 3), endpoints(0, 3)],
        None,
        t(0),
    );
    assert_eq!(d.status.phase, Some(Phase::NoReadyBackend));
    assert_eq!(d.weights, vec![1, 0, 0]);
    s.when_none_ready = crate::api::WhenNoneReady::Primary;
    let first = decide(
        &s,
        &[endpoints(0, 3), endpoints(3, 3), endpoints(0, 3)],
        None,
        t(0),
    );
    let d = decide(
        &s,
        &[endpoints(0, 3), endpoints(0, 3), endpoints(0, 3)],
        Some(&first.status),
        t(1),
    );
    assert_eq!(
        d.weights,
        vec![1, 0, 0],
        "whenNoneReady Primary sends everything to the primary"
    );
}

#[test]
fn when_none_ready_primary_overrides_fail_static() {
    let mut s = three(Strategy::Ordered);
    s.when_none_ready = crate::api::WhenNoneReady::Primary;
    let ds = run(
        &s,
        &[
            (0, vec![down(), up(1), up(1)]),
            (1, vec![down(), down(), down()]),
        ],
    );
    assert_eq!(ds[0].weights, vec![0, 1, 0]);
    assert_eq!(ds[1].weights, vec![1, 0, 0]);
    assert_eq!(ds[1].status.phase, Some(Phase::NoReadyBackend));
    assert!(
        ds[1]
            .transition_message
            .as_deref()
            .is_some_and(|m| m.contains("whenNoneReady: Primary"))
    );
}

#[test]
fn min_ready_ratio_makes_a_thinned_backend_not_ready() {
    let mut s = three(Strategy::Ordered);
    s.readiness.min_ready_ratio = Some(0.5);
    let d = decide(
        &s,
        &[endpoints(4, 10), endpoints(5, 10), endpoints(10, 10)],
        None,
        t(0),
    );
    assert_eq!(d.weights, vec![0, 1, 0], "4/10 < 0.5 is not ready; 5/10 is");
    assert!(!d.status.backends[0].ready);
}

#[test]
fn pin_sends_everything_to_the_pinned_backend_and_warns_when_it_is_not_ready() {
    let mut s = three(Strategy::Ordered);
    s.pin = Some("web-west".into());
    let ds = run(
        &s,
        &[
            (0, vec![up(1), up(1), up(1)]),
            (1, vec![up(1), up(1), down()]),
            (2, vec![up(1), up(1), down()]),
        ],
    );
    assert_eq!(ds[0].weights, vec![0, 0, 1]);
    assert_eq!(
        condition_reason(&ds[0], CONDITION_PINNED),
        ("True", pinned::PINNED_BACKEND_READY)
    );
    assert_eq!(ds[1].weights, vec![0, 0, 1], "regardless of readiness");
    assert_eq!(ds[1].transition, Some(Transition::PinnedBackendNotReady));
    assert!(ds[1].transition.is_some_and(Transition::is_warning));
    assert_eq!(
        condition_reason(&ds[1], CONDITION_READY),
        ("False", ready::PINNED_BACKEND_NOT_READY)
    );
    assert_eq!(ds[2].transition, None, "warned once per episode");
}

#[test]
fn suspend_reports_what_would_happen_and_announces_nothing() {
    let mut s = three(Strategy::Ordered);
    s.suspend = true;
    let ds = run(
        &s,
        &[
            (0, vec![up(1), up(1), up(1)]),
            (1, vec![down(), up(1), up(1)]),
        ],
    );
    assert_eq!(ds[1].weights, vec![0, 1, 0], "what it would do");
    assert_eq!(ds[1].transition, None);
    let c = ds[1]
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_SUSPENDED)
        .expect(suspended::SUSPENDED);
    assert_eq!(c.status, "True");
    assert!(c.message.contains("would go to web-east"), "{}", c.message);
}

#[test]
fn shares_are_rounded_percentages() {
    let s = spec(Strategy::Equal, &[("a", None), ("b", None), ("c", None)]);
    let d = decide(&s, &[down(), up(1), up(1), up(1)], None, t(0));
    let shares: Vec<_> = d
        .status
        .backends
        .iter()
        .map(|b| b.share.clone().unwrap_or_default())
        .collect();
    assert_eq!(shares, vec!["0%", "33.33%", "33.33%", "33.33%"]);
}

proptest! {
    /// More ready endpoints on the primary never moves traffic away from it.
    #[test]
    fn proportional_is_monotonic_in_the_primary_readiness(
        total in 1i32..50,
        ready_a in 0i32..50,
        extra in 1i32..10,
        others in proptest::collection::vec((0i32..20, 1i32..20), 1..5),
        factor in 1.0f64..5.0,
    ) {
        let ready_a = ready_a.min(total);
        let ready_b = (ready_a + extra).min(total);
        let mut obs = vec![endpoints(ready_a, total)];
        obs.extend(others.iter().map(|&(r, t)| endpoints(r.min(t), t)));
        let ready: Vec<bool> = obs.iter().map(|o| o.ready_endpoints >= 1).collect();
        let before = proportional_weights(factor, &obs, &ready);
        obs[0] = endpoints(ready_b, total);
        let ready: Vec<bool> = obs.iter().map(|o| o.ready_endpoints >= 1).collect();
        let after = proportional_weights(factor, &obs, &ready);
        let primary = |w: &Option<Vec<i32>>| w.as_ref().map_or(0, |w| w[0]);
        prop_assert!(primary(&after) >= primary(&before), "{before:?} -> {after:?}");
        for w in [&before, &after].into_iter().flatten() {
            prop_assert_eq!(w.iter().sum::<i32>(), PROPORTIONAL_TOTAL);
            prop_assert!(w.iter().all(|x| *x >= 0));
        }
    }
}

proptest! {
    /// With a failback ramp, the primary's share only grows while it stays ready, and the first
    /// decision after it turns not ready during a ramp gives it nothing (no failover hold).
    #[test]
    fn a_ramp_grows_while_the_primary_stays_ready_and_aborts_at_once(
        flips in proptest::collection::vec((1i64..20, any::<bool>()), 1..30),
    ) {
        let mut s = three(Strategy::Equal);
        s.failover_after = "1m".into();
        s.failback = Some(crate::api::FailbackSpec {
            ramp: Some(crate::api::RampSpec { steps: vec![10, 50, 100], every: "5s".into() }),
        });
        let mut previous: Option<FailoverPolicyStatus> = None;
        let mut at = 0;
        // Start failed over: the primary down long enough.
        let first = decide(&s, &[down(), up(1), up(1)], None, t(0));
        let first = decide(&s, &[down(), up(1), up(1)], Some(&first.status), t(61));
        prop_assert_eq!(first.weights[0], 0);
        previous = previous.or(Some(first.status));
        let mut last_primary = 0;
        for (gap, primary_ready) in flips {
            at += gap;
            let obs = [if primary_ready { up(1) } else { down() }, up(1), up(1)];
            let was_ramping = previous.as_ref().is_some_and(|p| {
                p.conditions.iter().any(|c| c.reason == ready::FAILBACK_RAMP)
            });
            let d = decide(&s, &obs, previous.as_ref(), t(61 + at));
            if !primary_ready && was_ramping {
                prop_assert_eq!(d.weights[0], 0, "a failure during the ramp ends it at once");
            }
            let ramping = d.status.conditions.iter().any(|c| c.reason == ready::FAILBACK_RAMP);
            if ramping {
                prop_assert!(d.weights[0] >= last_primary || !was_ramping);
                prop_assert!(d.requeue_after.is_some());
            }
            last_primary = if ramping { d.weights[0] } else { 0 };
            previous = Some(d.status);
        }
    }
}

fn with_health(max: f64, no_data: crate::api::NoData) -> FailoverPolicySpec {
    let mut s = three(Strategy::Ordered);
    s.health = Some(crate::api::HealthSpec {
        prometheus: Some(crate::api::PrometheusHealth {
            address: Some("http://prometheus:9090".into()),
            query: "errors{service=\"{{service}}\"}".into(),
            max: Some(max),
            min: None,
            interval: "10s".into(),
            no_data,
        }),
    });
    s
}

fn reading(value: Option<f64>, failing: Option<&str>) -> BackendObservation {
    BackendObservation {
        health: Some(crate::observation::Reading {
            sample: Some(crate::observation::Sample {
                value,
                read_at: t(0),
            }),
            failing: failing.map(str::to_string),
            ..Default::default()
        }),
        ..up(3)
    }
}

#[test]
fn a_ready_backend_whose_metric_is_out_of_threshold_is_not_ready() {
    let s = with_health(0.5, crate::api::NoData::Healthy);
    let d = decide(&s, &[reading(Some(0.7), None), up(1), up(1)], None, t(0));
    assert_eq!(d.weights, vec![0, 1, 0]);
    let message = d.status.backends[0].message.clone().unwrap_or_default();
    assert!(
        message.starts_with("health query gave 0.7, not at most 0.5"),
        "{message}"
    );
    let health = d.status.backends[0]
        .health
        .clone()
        .expect("reading in status");
    assert_eq!((health.value, health.healthy), (Some(0.7), false));
    let d = decide(
        &s,
        &[reading(Some(0.2), None), up(1), up(1)],
        Some(&d.status),
        t(1),
    );
    assert_eq!(d.weights, vec![1, 0, 0]);
}

#[test]
fn a_failing_query_keeps_the_last_verdict_and_says_so() {
    let s = with_health(0.5, crate::api::NoData::Healthy);
    let failing = reading(
        Some(0.2),
        Some("Prometheus at http://prometheus:9090 did not answer"),
    );
    let d = decide(&s, &[failing, up(1), up(1)], None, t(0));
    assert_eq!(d.weights, vec![1, 0, 0], "the last value (healthy) stands");
    // The last value unhealthy: it stands too, although this policy's noData is Healthy (a
    // failed query taken for "no data" would send traffic back to the primary).
    let failing = reading(
        Some(0.7),
        Some("Prometheus at http://prometheus:9090 did not answer"),
    );
    let d = decide(&s, &[failing, up(1), up(1)], None, t(0));
    assert_eq!(
        d.weights,
        vec![0, 1, 0],
        "the last value (unhealthy) stands"
    );
    let c = d
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == HEALTH_QUERY_FAILED)
        .expect("condition");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", health::HEALTH_QUERY_FAILED)
    );
}

#[test]
fn a_query_that_never_answered_gives_no_verdict_whatever_no_data_says() {
    let never = BackendObservation {
        health: Some(crate::observation::Reading {
            sample: None,
            failing: Some("no Prometheus to ask".into()),
            ..Default::default()
        }),
        ..up(3)
    };
    for no_data in [crate::api::NoData::Healthy, crate::api::NoData::Unhealthy] {
        let d = decide(
            &with_health(0.5, no_data),
            &[never.clone(), up(1), up(1)],
            None,
            t(0),
        );
        assert_eq!(d.weights, vec![1, 0, 0], "readiness alone decides");
        assert!(d.status.backends[0].health.is_none());
        assert!(
            d.status
                .conditions
                .iter()
                .any(|c| c.type_ == HEALTH_QUERY_FAILED && c.status == "True")
        );
    }
}

#[test]
fn no_data_means_what_the_policy_says() {
    let healthy = with_health(0.5, crate::api::NoData::Healthy);
    let d = decide(&healthy, &[reading(None, None), up(1), up(1)], None, t(0));
    assert_eq!(d.weights, vec![1, 0, 0]);
    let unhealthy = with_health(0.5, crate::api::NoData::Unhealthy);
    let d = decide(&unhealthy, &[reading(None, None), up(1), up(1)], None, t(0));
    assert_eq!(d.weights, vec![0, 1, 0]);
}

/// A ready secondary's status entry with one of one endpoints ready, for tests that need a
/// previous status.
pub(crate) fn backend_status(service: &str, weight: i32) -> crate::api::BackendStatus {
    crate::api::BackendStatus {
        service: service.into(),
        role: crate::api::Role::Secondary,
        ready: true,
        ready_endpoints: 1,
        total_endpoints: 1,
        weight,
        share: None,
        last_transition_time: None,
        message: None,
        readiness_from: None,
        readiness_as_of: None,
        health: None,
        capacity: None,
    }
}

#[test]
fn an_invalid_spec_is_stalled_and_a_settled_policy_is_not() {
    use crate::{
        api::{Condition, conditions::STALLED},
        policy::SpecProblem,
    };
    let spec = three(Strategy::Ordered);
    let settled = decide(&spec, &[up(2), up(1), up(1)], None, t(0));
    let stalled = |status: &FailoverPolicyStatus| -> Vec<Condition> {
        status
            .conditions
            .iter()
            .filter(|c| c.type_ == STALLED)
            .cloned()
            .collect()
    };
    assert!(stalled(&settled.status).is_empty());
    let target = RouteTarget::of(&policy_of(&spec));
    let invalid = |previous: &FailoverPolicyStatus, now| {
        build(&StatusInput {
            notices: &Default::default(),
            generation: Some(2),
            target: &target,
            previous: Some(&LastStatus::of(previous)),
            outcome: &Outcome::Invalid {
                problems: vec![SpecProblem {
                    field: "spec.pin".into(),
                    message: "names no backend".into(),
                }],
                kept: Some(Box::new(previous.clone())),
            },
            now,
            claims: None,
        })
    };
    let status = invalid(&settled.status, t(10));
    let first = stalled(&status);
    assert_eq!(first.len(), 1);
    assert_eq!(
        (first[0].status.as_str(), first[0].reason.as_str()),
        ("True", ready::INVALID_SPEC)
    );
    assert!(
        first[0].message.contains("spec.pin"),
        "{}",
        first[0].message
    );
    assert_eq!(first[0].observed_generation, Some(2));
    // Built again from itself, the status keeps one Stalled and its transition time.
    let again = stalled(&invalid(&status, t(20)));
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].last_transition_time, first[0].last_transition_time);
}
