//! A planted regression for every kind of verdict: each test builds figures that meet the
//! target, then puts one fault back (a slower tail, a lost change, an extra write, a bigger
//! peak, a slower start) and asserts the verdict turns to missed. A verdict that cannot fail
//! judges nothing.

use super::*;
use crate::{
    groups::Groups, latency::Latency, memory::PhaseMemory, pass::PassFailovers, recovery::Recovery,
    startup::Restart,
};

fn ms(p50_ms: f64, p99_ms: f64, max_ms: f64) -> Percentiles {
    Percentiles {
        samples: 400,
        p50_ms,
        p95_ms: p99_ms,
        p99_ms,
        max_ms,
    }
}

/// A scale of 1,000 policies that meets every latency, write and start target.
fn scale() -> ScaleResult {
    ScaleResult {
        policies: 1000,
        latency: vec![Latency {
            churn_per_second: 50,
            controller: ms(6.0, 12.0, 20.0),
            floor: ms(2.0, 4.0, 8.0),
            floor_same_writes: ms(5.5, 10.0, 18.0),
            writes_per_change: [("trafficsplit", 1.0), ("status", 1.0), ("event", 1.0)]
                .map(|(k, v)| (k.to_string(), v))
                .into(),
            ..Latency::default()
        }],
        groups: Some(Groups {
            groups: 1000,
            members: 10,
            latency: ms(30.0, 60.0, 80.0),
            floor: ms(25.0, 50.0, 70.0),
            route_writes_per_failover: 10.0,
            ..Groups::default()
        }),
        cold_start_s: 1.1,
        cold_floor_s: 1.0,
        restart: Restart {
            ready_s: 1.1,
            lists_s: 1.0,
            writes: 0.0,
            restarts: 3,
        },
        start_pass: PassFailovers {
            latency: ms(8.0, 12.0, 14.0),
            during_pass: 20,
            lost: 0,
        },
        peak_rss_mib: 30.0,
        memory: vec![PhaseMemory {
            phase: "cold start".into(),
            peak_rss_mib: 30.0,
            rss_mib: 28.0,
            rss_file_mib: 9.0,
            heap_mib: 10.0,
            live_allocations: 1000.0,
            allocations: 1000.0,
        }],
        ..ScaleResult::default()
    }
}

/// The verdict of `verdicts` whose target contains `target`.
fn find(verdicts: Vec<Verdict>, target: &str) -> Option<bool> {
    verdicts
        .into_iter()
        .find(|v| v.target.contains(target))
        .unwrap_or_else(|| panic!("no target {target:?}"))
        .met
}

fn latency_met(r: &ScaleResult, target: &str) -> Option<bool> {
    find(latency_verdicts(std::slice::from_ref(r)), target)
}

#[test]
fn the_figures_planted_below_meet_every_target_unchanged() {
    let r = scale();
    for target in [
        "p50",
        "p99",
        "max",
        "0 lost",
        "1 route",
        "0 writes when idle",
    ] {
        assert_eq!(latency_met(&r, target), Some(true), "{target}");
    }
    for v in group_verdicts(&r)
        .into_iter()
        .chain(process_verdicts(std::slice::from_ref(&r)))
        .filter(|v| !v.target.contains("KiB per policy"))
    {
        assert_eq!(v.met, Some(true), "{}", v.target);
    }
}

#[test]
fn a_failover_held_up_by_the_start_up_pass_or_lost_misses_the_pass_target() {
    let target = "failover during a restart's start-up pass";
    let mut slow = scale();
    slow.start_pass.latency.p50_ms = 9.5;
    let mut lost = scale();
    lost.start_pass.lost = 1;
    for r in [slow, lost] {
        assert_eq!(
            find(process_verdicts(std::slice::from_ref(&r)), target),
            Some(false)
        );
    }
}

#[test]
fn a_longer_tail_than_three_times_the_relays_misses_the_max() {
    let mut r = scale();
    r.latency[0].controller.max_ms = 55.0;
    assert_eq!(latency_met(&r, "max"), Some(false));
}

#[test]
fn a_change_lost_by_the_controller_or_a_floor_misses_the_lost_target() {
    for lost in [[1, 0, 0], [0, 1, 0], [0, 0, 1]] {
        let mut r = scale();
        r.latency[0].lost = lost;
        assert_eq!(latency_met(&r, "0 lost"), Some(false), "{lost:?}");
    }
}

#[test]
fn a_second_route_or_status_write_per_change_misses_the_writes_target() {
    for kind in ["trafficsplit", "status"] {
        let mut r = scale();
        r.latency[0].writes_per_change.insert(kind.into(), 2.0);
        assert_eq!(latency_met(&r, "1 route"), Some(false), "{kind}");
    }
}

#[test]
fn one_write_while_idle_misses_the_idle_target() {
    let mut r = scale();
    r.writes_in_quiet_period = 1.0;
    assert_eq!(latency_met(&r, "0 writes when idle"), Some(false));
}

#[test]
fn every_group_verdict_can_be_missed() {
    let group = |plant: fn(&mut Groups), target: &str| {
        let mut r = scale();
        plant(r.groups.as_mut().expect("groups"));
        find(group_verdicts(&r), target)
    };
    assert_eq!(group(|g| g.latency.p50_ms = 40.0, "p50"), Some(false));
    assert_eq!(group(|g| g.latency.p99_ms = 80.0, "p99"), Some(false));
    assert_eq!(group(|g| g.lost = 1, "0 lost"), Some(false));
    assert_eq!(group(|g| g.floor_lost = 1, "0 lost"), Some(false));
    assert_eq!(
        group(|g| g.route_writes_per_failover = 11.0, "1 route write"),
        Some(false)
    );
}

fn process_met(r: &ScaleResult, target: &str) -> Option<bool> {
    find(process_verdicts(std::slice::from_ref(r)), target)
}

#[test]
fn a_bigger_peak_a_slower_start_or_a_write_on_restart_misses_its_target() {
    let mut r = scale();
    r.peak_rss_mib = 49.0;
    assert_eq!(process_met(&r, "peak RSS"), Some(false));
    let mut r = scale();
    r.cold_start_s = 1.3;
    assert_eq!(process_met(&r, "cold start"), Some(false));
    let mut r = scale();
    r.restart.writes = 1.0;
    assert_eq!(process_met(&r, "restart"), Some(false));
    let mut r = scale();
    r.restart.ready_s = 1.3;
    assert_eq!(process_met(&r, "restart"), Some(false));
}

fn recovery(p99_ms: f64, failed: usize) -> Vec<Option<bool>> {
    let r = Recovery {
        component: "etcd".into(),
        policies: 1000,
        first_change: ms(100.0, p99_ms, p99_ms),
        delivered: ms(50.0, 80.0, 90.0),
        route_written: ms(5.0, 10.0, 12.0),
        back_in: ms(1000.0, 2000.0, 2000.0),
        failed,
    };
    recovery_verdicts(&[r]).into_iter().map(|v| v.met).collect()
}

#[test]
fn a_slow_first_change_or_an_unmeasured_restart_misses_the_recovery_targets() {
    assert_eq!(recovery(900.0, 0), [Some(true), Some(true)]);
    assert_eq!(recovery(1001.0, 0), [Some(false), Some(true)]);
    assert_eq!(recovery(900.0, 1), [Some(true), Some(false)]);
}

#[test]
fn a_slower_segment_or_a_larger_share_of_the_whole_misses_the_traffic_segment_target() {
    let segment = |ours: Percentiles| {
        let t = Traffic {
            rate: 50,
            ours,
            whole: ms(1000.0, 1500.0, 1600.0),
            ..Traffic::default()
        };
        find(traffic_verdicts(&t), "our segment")
    };
    assert_eq!(segment(ms(10.0, 40.0, 45.0)), Some(true));
    assert_eq!(segment(ms(10.0, 51.0, 55.0)), Some(false));
    assert_eq!(segment(ms(60.0, 45.0, 65.0)), Some(false));
}
