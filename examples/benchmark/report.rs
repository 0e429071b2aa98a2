//! The figures: percentiles, one result per scale, the tables, and every target of the
//! performance work with its measured value and verdict.

use std::time::Duration;

use crate::{
    groups::Groups,
    latency::Latency,
    memory::PhaseMemory,
    neighbour::{AT_LIMIT_KIB, Neighbour},
    recovery::Recovery,
    startup::Restart,
    traffic::Traffic,
};

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Percentiles {
    pub samples: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

pub fn percentiles(mut samples: Vec<Duration>) -> Percentiles {
    samples.sort();
    let at = |q: f64| {
        if samples.is_empty() {
            return 0.0;
        }
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[i].as_secs_f64() * 1000.0
    };
    Percentiles {
        samples: samples.len(),
        p50_ms: at(0.5),
        p95_ms: at(0.95),
        p99_ms: at(0.99),
        max_ms: at(1.0),
    }
}

/// Everything measured at one scale.
#[derive(Debug, Default, serde::Serialize)]
pub struct ScaleResult {
    pub policies: usize,
    pub latency: Vec<Latency>,
    /// Failover groups, at the scale they were measured.
    pub groups: Option<Groups>,
    pub writes_in_quiet_period: f64,
    pub quiet_seconds: u64,
    pub cold_start_s: f64,
    pub cold_floor_s: f64,
    pub restart: Restart,
    /// Failovers while a restart's start-up pass was under way.
    pub start_pass: crate::pass::PassFailovers,
    pub cpu_s: f64,
    pub peak_rss_mib: f64,
    /// Peak RSS above the idle process, per policy.
    pub kib_per_policy: f64,
    /// The memory of each phase, the restarted process's last.
    pub memory: Vec<PhaseMemory>,
    /// linkerd-failover at this scale, when it is measured here (or why it is not).
    pub peer: Option<crate::peer::PeerScale>,
}

fn ratio(ours: f64, floor: f64) -> f64 {
    ours / floor.max(1e-6)
}

pub fn print_latency(results: &[ScaleResult]) {
    println!("\nLatency (write ack → route change seen by an independent watch), ms:\n");
    println!(
        "| policies | churn/s | p50 | p95 | p99 | max | floor p50 | floor p99 | floor max | p50/floor | p99/floor | max/floor | floor with the same writes p50 / p99 / max | route/status/event writes per change |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in results {
        for l in &r.latency {
            let (c, f, same) = (&l.controller, &l.floor, &l.floor_same_writes);
            let w = |k: &str| l.writes_per_change.get(k).copied().unwrap_or(0.0);
            println!(
                "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} | {:.1} / {:.1} / {:.1} | {:.2} / {:.2} / {:.2} |",
                r.policies,
                l.churn_per_second,
                c.p50_ms,
                c.p95_ms,
                c.p99_ms,
                c.max_ms,
                f.p50_ms,
                f.p99_ms,
                f.max_ms,
                ratio(c.p50_ms, f.p50_ms),
                ratio(c.p99_ms, f.p99_ms),
                ratio(c.max_ms, f.max_ms),
                same.p50_ms,
                same.p99_ms,
                same.max_ms,
                w("trafficsplit"),
                w("status"),
                w("event")
            );
        }
    }
}

/// Failover groups: a group failover, from one member's readiness change to the last member's
/// route, and the spread between the first and last member's route.
pub fn print_groups(results: &[ScaleResult]) {
    let measured: Vec<(usize, &Groups)> = results
        .iter()
        .filter_map(|r| r.groups.as_ref().map(|g| (r.policies, g)))
        .collect();
    if measured.is_empty() {
        return;
    }
    println!(
        "\nFailover groups (a member's readiness write ack → the last member's route change seen), ms:\n"
    );
    println!(
        "| policies | groups × members | failovers | p50 | p99 | max | first → last member p50 / p99 | relay making a move's writes p50 / p99 / max | lost (relay's) | route writes per move | created and settled s |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (policies, g) in measured {
        println!(
            "| {policies} | {} × {} | {} | {:.1} | {:.1} | {:.1} | {:.1} / {:.1} | {:.1} / {:.1} / {:.1} | {} ({}) | {:.2} | {:.1} |",
            g.groups,
            g.members,
            g.latency.samples,
            g.latency.p50_ms,
            g.latency.p99_ms,
            g.latency.max_ms,
            g.spread.p50_ms,
            g.spread.p99_ms,
            g.floor.p50_ms,
            g.floor.p99_ms,
            g.floor.max_ms,
            g.lost,
            g.floor_lost,
            g.route_writes_per_failover,
            g.settled_s
        );
    }
}

pub fn print_process(results: &[ScaleResult], idle_rss: f64) {
    println!(
        "\nStart, restart, writes when idle, CPU and memory (idle process: {idle_rss:.1} MiB):\n"
    );
    println!(
        "| policies | cold start s | same writes, bare client s | ratio | restart: ready s (median) | same lists, bare client s (median) | restart: writes (most) | quiet writes | CPU s | peak RSS MiB | KiB per policy above idle |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        println!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} in {}s | {:.1} | {:.1} | {:.1} |",
            r.policies,
            r.cold_start_s,
            r.cold_floor_s,
            ratio(r.cold_start_s, r.cold_floor_s),
            r.restart.ready_s,
            r.restart.lists_s,
            r.restart.writes,
            r.writes_in_quiet_period,
            r.quiet_seconds,
            r.cpu_s,
            r.peak_rss_mib,
            r.kib_per_policy
        );
    }
}

pub fn print_memory(results: &[ScaleResult], idle_rss: f64) {
    println!(
        "\nMemory by phase (peak RSS within the phase; RSS, heap and live allocations at its end; idle process {idle_rss:.1} MiB):\n"
    );
    println!(
        "| policies | phase | peak RSS MiB | RSS MiB | of it file-backed MiB | heap MiB | live allocations | allocations made | KiB per policy above idle (peak) |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        for m in &r.memory {
            println!(
                "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} | {:.2} |",
                r.policies,
                m.phase,
                m.peak_rss_mib,
                m.rss_mib,
                m.rss_file_mib,
                m.heap_mib,
                m.live_allocations,
                m.allocations,
                (m.peak_rss_mib - idle_rss).max(0.0) * 1024.0 / r.policies as f64
            );
        }
    }
}

pub fn print_recovery(recovery: &[Recovery]) {
    if recovery.is_empty() {
        return;
    }
    println!("\nRecovery (first readiness change after /readyz answers ok again), ms:\n");
    println!(
        "| component restarted | policies | restarts | back in p50 | first change p50 | p99 | max | floor: delivered to a new watch p50 | p99 | max | floor: a TrafficSplit written by a bare client p50 | p99 | max |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in recovery {
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
            r.component,
            r.policies,
            r.first_change.samples,
            r.back_in.p50_ms,
            r.first_change.p50_ms,
            r.first_change.p99_ms,
            r.first_change.max_ms,
            r.delivered.p50_ms,
            r.delivered.p99_ms,
            r.delivered.max_ms,
            r.route_written.p50_ms,
            r.route_written.p99_ms,
            r.route_written.max_ms
        );
    }
}

/// One segment of a failover's timeline, from a round.
type Segment = fn(&crate::traffic::Round) -> f64;

pub fn print_traffic(t: &Traffic) {
    if let Some(why) = &t.not_measured {
        println!("\nTraffic through a real proxy: not measured ({why}).");
        return;
    }
    print_capacity(&t.capacity);
    println!(
        "\nTraffic through a real proxy ({} requests/s), each failover in ms after the probe file was removed:\n",
        t.rate
    );
    println!(
        "| round | kubelet: not ready | EndpointSlice: not ready | route written | proxy applied (first answer from the secondary) | last answer from the primary | our segment | failed requests | failed after the proxy applied |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (i, r) in t.rounds.iter().enumerate() {
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1} | {} | {} |",
            i + 1,
            r.kubelet_not_ready_ms,
            r.slice_not_ready_ms,
            r.route_written_ms,
            r.proxy_applied_ms,
            r.last_primary_ms,
            r.ours_ms(),
            r.failed,
            r.failed_after_proxy
        );
    }
    let median = |f: fn(&crate::traffic::Round) -> f64| {
        let mut v: Vec<f64> = t.rounds.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let whole = median(crate::traffic::Round::whole_ms).max(1e-6);
    println!(
        "\nSegments, median over {} rounds (share of the whole {:.0} ms):\n",
        t.rounds.len(),
        whole
    );
    println!("| segment | ms | share |");
    println!("|---|---:|---:|");
    let segments: [(&str, Segment); 4] = [
        ("probe fails → kubelet marks the Pod not ready", |r| {
            r.kubelet_not_ready_ms
        }),
        ("→ the EndpointSlice says so", |r| {
            r.slice_not_ready_ms - r.kubelet_not_ready_ms
        }),
        (
            "→ the route is written (ours)",
            crate::traffic::Round::ours_ms,
        ),
        ("→ the proxy applies it", |r| {
            r.proxy_applied_ms - r.route_written_ms
        }),
    ];
    for (name, f) in segments {
        let m = median(f);
        println!("| {name} | {m:.0} | {:.1}% |", m * 100.0 / whole);
    }
    println!(
        "\nFailed requests: failback ramps {} of {}, pins and unpins {} of {}; rounds not completed: {}.",
        t.ramp.0, t.ramp.1, t.planned.0, t.planned.1, t.failed_rounds
    );
}

/// The capacity scenario: every failure a client saw and the time to all traffic served, each
/// run.
fn print_capacity(runs: &[crate::capacity::CapacityRun]) {
    println!(
        "\nCapacity through the proxy ({} requests/s; primary 3 Pods, secondary 1 Pod with an HPA; each Pod serves {} requests/s, above that it answers 503 overloaded); requests sent within {} s of the primary's failure:\n",
        crate::capacity::RATE,
        crate::capacity::POD_RATE,
        crate::capacity::COUNTED.as_secs()
    );
    println!(
        "| policy | requests | failed (all a client saw) | share | of them overloaded | failed otherwise (no ready Pod, no answer) | all traffic served after | failures sent at (s after the failure) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|");
    for r in runs {
        let served = r.all_served_ms.map_or("not within 60 s".to_string(), |ms| {
            format!("{:.1} s", ms / 1000.0)
        });
        let at = if r.policy == crate::capacity::Policy::NoCapacity {
            "(throughout)".to_string()
        } else {
            spans(&r.failed_at_ms)
        };
        println!(
            "| {} | {} | {} | {:.2}% | {} | {} | {served} | {at} |",
            r.policy.label(),
            r.sent,
            r.client_failures(),
            r.client_failures_percent(),
            r.overloaded,
            r.failed
        );
    }
}

/// Times in ms as the spans of seconds they fall in ("1.2–3.4 (17)"), or "none".
fn spans(at_ms: &[f64]) -> String {
    match (at_ms.first(), at_ms.last()) {
        (Some(first), Some(last)) => format!(
            "{:.1}–{:.1} ({})",
            first / 1000.0,
            last / 1000.0,
            at_ms.len()
        ),
        _ => "none".into(),
    }
}

/// The capacity targets, one per place of the unserved share.
const CAPACITY_TARGETS: [(crate::capacity::Policy, &str); 2] = [
    (
        crate::capacity::Policy::UnservedOnPrimary,
        "capacity, unserved on the primary: client failures ≤ 1/5 of those without capacity, all traffic served within 60 s",
    ),
    (
        crate::capacity::Policy::UnservedOnSecondaries,
        "capacity, unserved spread over the secondaries: client failures ≤ 1/5 of those without capacity, all traffic served within 60 s",
    ),
];

/// With capacity and scaling, every request a client saw fail is at most a fifth of those of
/// the run without capacity, over the same span, and all traffic is served in the end.
fn capacity_verdicts(t: &Traffic) -> Vec<Verdict> {
    let without = t
        .capacity
        .iter()
        .find(|r| r.policy == crate::capacity::Policy::NoCapacity && r.not_measured.is_none());
    CAPACITY_TARGETS
        .iter()
        .map(|(policy, target)| {
            let sized = t.capacity.iter().find(|r| r.policy == *policy);
            match (sized, without) {
                (Some(r), Some(w)) if r.not_measured.is_none() => verdict(
                    *target,
                    format!(
                        "{} of {} failed ({} overloaded, {} otherwise) against {} of {} without ({:.2}x); all served after {}",
                        r.client_failures(),
                        r.sent,
                        r.overloaded,
                        r.failed,
                        w.client_failures(),
                        w.sent,
                        r.client_failures() as f64 / w.client_failures().max(1) as f64,
                        r.all_served_ms
                            .map_or("never".into(), |ms| format!("{:.1} s", ms / 1000.0)),
                    ),
                    r.client_failures() * 5 <= w.client_failures() && r.all_served_ms.is_some(),
                ),
                _ => Verdict {
                    target: (*target).into(),
                    measured: sized
                        .and_then(|r| r.not_measured.clone())
                        .unwrap_or_else(|| "not run (or no run without capacity)".into()),
                    met: None,
                },
            }
        })
        .collect()
}

fn traffic_verdicts(t: &Traffic) -> Vec<Verdict> {
    if let Some(why) = &t.not_measured {
        return [
            "traffic: our segment (EndpointSlice event → route written) p99 ≤ 50 ms and ≤ 5% of the whole",
            "traffic: 0 failed requests on planned switches and ramps",
            "traffic: unplanned failover loses no request after the proxy applied the route",
        ]
        .into_iter()
        .chain(CAPACITY_TARGETS.iter().map(|(_, target)| *target))
        .map(|target| Verdict {
            target: target.into(),
            measured: why.clone(),
            met: None,
        })
        .collect();
    }
    let whole_median = t.whole.p50_ms.max(1e-6);
    let share = t.ours.p50_ms * 100.0 / whole_median;
    let after: usize = t.rounds.iter().map(|r| r.failed_after_proxy).sum();
    let total: usize = t.rounds.iter().map(|r| r.failed).sum();
    let mut verdicts = vec![
        measured_verdict(
            format!(
                "traffic: our segment (EndpointSlice event → route written) p99 ≤ 50 ms and ≤ 5% of the whole ({} rounds)",
                t.rounds.len()
            ),
            &[&t.ours, &t.whole],
            || {
                format!(
                    "p99 {:.1} ms, max {:.1} ms; {share:.2}% of the whole ({:.0} ms median)",
                    t.ours.p99_ms, t.ours.max_ms, t.whole.p50_ms
                )
            },
            || t.ours.p99_ms <= 50.0 && share <= 5.0,
        ),
        verdict(
            "traffic: 0 failed requests on planned switches and ramps",
            format!(
                "pins and unpins {} of {} ({} switches not written or never settled), ramps {} of {}",
                t.planned.0, t.planned.1, t.unsettled_switches, t.ramp.0, t.ramp.1
            ),
            t.planned.0 == 0
                && t.ramp.0 == 0
                && t.unsettled_switches == 0
                && t.planned.1 > 0
                && t.ramp.1 > 0,
        ),
        verdict(
            "traffic: unplanned failover loses no request after the proxy applied the route",
            format!(
                "{after} after, {total} in all over {} rounds ({} not completed)",
                t.rounds.len(),
                t.failed_rounds
            ),
            after == 0 && t.failed_rounds == 0 && !t.rounds.is_empty(),
        ),
    ];
    verdicts.extend(capacity_verdicts(t));
    verdicts
}

/// One target: what it asks, what was measured, whether it is met (`None`: not measured, for
/// want of samples; that is no pass).
pub struct Verdict {
    pub target: String,
    pub measured: String,
    pub met: Option<bool>,
}

pub fn verdict(target: impl Into<String>, measured: impl Into<String>, met: bool) -> Verdict {
    Verdict {
        target: target.into(),
        measured: measured.into(),
        met: Some(met),
    }
}

/// A target that needs samples: judged only when every set it compares has some.
pub fn measured_verdict(
    target: impl Into<String>,
    sets: &[&Percentiles],
    measured: impl FnOnce() -> String,
    met: impl FnOnce() -> bool,
) -> Verdict {
    if sets.iter().any(|p| p.samples == 0) {
        return Verdict {
            target: target.into(),
            measured: "no samples".into(),
            met: None,
        };
    }
    verdict(target, measured(), met())
}

/// The latency targets judge the controller against the relay that holds its watches and makes
/// its writes (what the API server does for any client doing the controller's job), so the ratio
/// measures the controller; the bare relay's ratio is printed beside it.
fn latency_verdicts(results: &[ScaleResult]) -> Vec<Verdict> {
    let mut v = Vec::new();
    for r in results {
        for l in &r.latency {
            let (c, f, same) = (&l.controller, &l.floor, &l.floor_same_writes);
            let at = format!("{} policies, {}/s churn", r.policies, l.churn_per_second);
            let sets = [c, f, same];
            let pick = [
                ("p50", 1.2, c.p50_ms, same.p50_ms, f.p50_ms),
                ("p99", 1.5, c.p99_ms, same.p99_ms, f.p99_ms),
                ("max", 3.0, c.max_ms, same.max_ms, f.max_ms),
            ];
            for (name, bound, ours, floor, bare) in pick {
                let judged = ratio(ours, floor);
                v.push(measured_verdict(
                    format!(
                        "{name} ≤ {bound}x the relay with the controller's watches and writes ({at})"
                    ),
                    &sets,
                    || {
                        format!(
                            "{judged:.2}x ({ours:.1} / {floor:.1} ms; {:.2}x the bare relay, {bare:.1} ms)",
                            ratio(ours, bare)
                        )
                    },
                    || judged <= bound,
                ));
            }
            v.push(verdict(
                format!("0 lost changes ({at})"),
                format!(
                    "{} of {} (the floors lost {} and {})",
                    l.lost[0],
                    c.samples + l.lost[0],
                    l.lost[1],
                    l.lost[2]
                ),
                l.lost == [0, 0, 0],
            ));
            let route = l
                .writes_per_change
                .get("trafficsplit")
                .copied()
                .unwrap_or(0.0);
            let status = l.writes_per_change.get("status").copied().unwrap_or(0.0);
            v.push(verdict(
                format!("1 route + 1 status write per change ({at})"),
                format!("{route:.2} + {status:.2}"),
                (route - 1.0).abs() < 0.01 && (status - 1.0).abs() < 0.01,
            ));
        }
        v.push(verdict(
            format!("0 writes when idle ({} policies)", r.policies),
            format!("{} in {} s", r.writes_in_quiet_period, r.quiet_seconds),
            r.writes_in_quiet_period == 0.0,
        ));
    }
    v
}

/// The memory targets were set at 10,000 policies: the peak is judged there (at the largest
/// scale when 10,000 was not run); start and restart at every scale from 1,000 up.
fn process_verdicts(results: &[ScaleResult]) -> Vec<Verdict> {
    let mut v = Vec::new();
    let Some(judged) = results
        .iter()
        .find(|r| r.policies == 10_000)
        .or_else(|| results.iter().max_by_key(|r| r.policies))
    else {
        return v;
    };
    let peak_phase = judged
        .memory
        .iter()
        .max_by(|a, b| a.peak_rss_mib.total_cmp(&b.peak_rss_mib))
        .map_or("no phase measured", |m| m.phase.as_str());
    v.push(verdict(
        format!(
            "peak RSS ≤ 48 MiB in every phase at {} policies (target set at 10,000)",
            judged.policies
        ),
        format!("{:.1} MiB ({peak_phase})", judged.peak_rss_mib),
        !judged.memory.is_empty() && judged.peak_rss_mib <= 48.0,
    ));
    v.extend(cost_verdicts(results));
    let largest = results.iter().map(|r| r.policies).max().unwrap_or(0);
    for r in results
        .iter()
        .filter(|r| r.policies >= 1000 || r.policies == largest)
    {
        v.extend(start_verdicts(r));
        let quiet = r.latency.first().map(|l| &l.controller);
        v.push(pass_verdict(r.policies, &r.start_pass, quiet));
    }
    v
}

/// What each policy above 1,000 adds to the peak: from the run at 1,000 to each larger one.
fn cost_verdicts(results: &[ScaleResult]) -> [Verdict; 1] {
    let base = results.iter().find(|r| r.policies == 1000);
    let added: Vec<(usize, f64)> = results
        .iter()
        .filter(|r| r.policies > 1000)
        .filter_map(|r| {
            let base = base?;
            let mib = r.peak_rss_mib - base.peak_rss_mib;
            Some((
                r.policies,
                mib * 1024.0 / (r.policies - base.policies) as f64,
            ))
        })
        .collect();
    let target = "KiB per policy ≤ 1.5 from 1,000 up (the peak's growth from 1,000 policies, per policy added)";
    if added.is_empty() {
        return [Verdict {
            target: target.into(),
            measured: "no run at 1,000 policies and above it".into(),
            met: None,
        }];
    }
    let measured: Vec<String> = added
        .iter()
        .map(|(n, kib)| format!("{kib:.2} from 1,000 to {n}"))
        .collect();
    let above_idle: Vec<String> = results
        .iter()
        .map(|r| format!("{:.1} at {}", r.kib_per_policy, r.policies))
        .collect();
    [verdict(
        target,
        format!(
            "{} (above the idle process: {})",
            measured.join(", "),
            above_idle.join(", ")
        ),
        added.iter().all(|(_, kib)| *kib <= 1.5),
    )]
}

/// A failover made during a start-up pass lands within 1.5x the quiet p50 at the same scale
/// (the first latency phase's, or the large scale's quiet failovers): the pass does not hold it
/// up.
pub fn pass_verdict(
    policies: usize,
    pass: &crate::pass::PassFailovers,
    quiet: Option<&Percentiles>,
) -> Verdict {
    let target = format!(
        "failover during a restart's start-up pass: p50 ≤ 1.5x the quiet p50 ({policies} policies)"
    );
    let Some(quiet) = quiet.filter(|q| q.samples > 0).map(|q| q.p50_ms) else {
        return Verdict {
            target,
            measured: "no quiet latency at this scale".into(),
            met: None,
        };
    };
    let times = ratio(pass.latency.p50_ms, quiet);
    verdict(
        target,
        format!(
            "{times:.2}x ({:.1} / {quiet:.1} ms; p99 {:.1} ms; {} of {} changes made while the pass was under way, {} lost)",
            pass.latency.p50_ms,
            pass.latency.p99_ms,
            pass.during_pass,
            pass.latency.samples + pass.lost,
            pass.lost
        ),
        times <= 1.5 && pass.lost == 0 && pass.latency.samples > 0,
    )
}

fn start_verdicts(r: &ScaleResult) -> [Verdict; 2] {
    let at = format!("at {} policies", r.policies);
    let cold = ratio(r.cold_start_s, r.cold_floor_s);
    let restart = &r.restart;
    let restart_ratio = ratio(restart.ready_s, restart.lists_s);
    [
        verdict(
            format!("cold start ≤ 1.2x the bare client's writes {at}"),
            format!(
                "{cold:.2}x ({:.1} / {:.1} s)",
                r.cold_start_s, r.cold_floor_s
            ),
            cold <= 1.2,
        ),
        verdict(
            format!("restart with all in place: 0 writes, ready ≤ 1.2x the bare list {at}"),
            format!(
                "{} writes, ready in {:.2} s, {restart_ratio:.2}x a bare client's lists of the same ({:.2} s); medians of {} restarts",
                restart.writes, restart.ready_s, restart.lists_s, restart.restarts
            ),
            restart.writes == 0.0 && restart_ratio <= 1.2,
        ),
    ]
}

/// A group failover costs little beyond its writes: p50 and p99 within 1.5x the relay making
/// the writes of a group move (every member's route at once, then statuses and Events); none
/// lost by either; one route write per member per move.
fn group_verdicts(r: &ScaleResult) -> Vec<Verdict> {
    let Some(g) = r.groups.as_ref() else {
        return Vec::new();
    };
    let at = format!(
        "{} groups of {} at {} policies",
        g.groups, g.members, r.policies
    );
    let pick = [
        ("p50", g.latency.p50_ms, g.floor.p50_ms),
        ("p99", g.latency.p99_ms, g.floor.p99_ms),
    ];
    let mut v: Vec<Verdict> = pick
        .into_iter()
        .map(|(name, ours, floor)| {
            measured_verdict(
                format!(
                    "group failover {name} ≤ 1.5x the relay making a move's writes ({} routes at once, then statuses and Events; {at})",
                    g.members
                ),
                &[&g.latency, &g.floor],
                || format!("{:.2}x ({ours:.1} / {floor:.1} ms)", ratio(ours, floor)),
                || ratio(ours, floor) <= 1.5,
            )
        })
        .collect();
    v.push(verdict(
        format!("0 lost group failovers ({at})"),
        format!(
            "{} of {} (the relay lost {})",
            g.lost,
            g.latency.samples + g.lost,
            g.floor_lost
        ),
        g.lost == 0 && g.floor_lost == 0,
    ));
    v.push(verdict(
        format!("1 route write per member per group move ({at})"),
        format!(
            "{:.2} per move of {}",
            g.route_writes_per_failover, g.members
        ),
        (g.route_writes_per_failover - g.members as f64).abs() < 0.01,
    ));
    v
}

/// Tenants at work in other namespaces slow no one and cost what the documentation says: the
/// scale's failovers' p50 and p99 within 1.2x the same changes without them, none lost; a policy
/// at every limit at most [`AT_LIMIT_KIB`] while held; the peak RSS within the RSS before them
/// plus that much for each of their policies.
fn neighbour_verdicts(nb: Option<&Neighbour>) -> Vec<Verdict> {
    let Some(nb) = nb else {
        return Vec::new();
    };
    let (p50, p99) = (
        ratio(nb.noisy.p50_ms, nb.quiet.p50_ms),
        ratio(nb.noisy.p99_ms, nb.quiet.p99_ms),
    );
    let latency = measured_verdict(
        format!(
            "noisy neighbour at {} policies: p50 and p99 within 1.2x the same changes without the tenants, none lost",
            nb.policies
        ),
        &[&nb.quiet, &nb.noisy],
        || {
            format!(
                "p50 {:.1} / {:.1} ms ({p50:.2}x), p99 {:.1} / {:.1} ms ({p99:.2}x) without / with {} tenants' policies at work ({} edits, {} flaps, {:.0} Events dropped, {:.0} statuses refused); lost {:?}",
                nb.quiet.p50_ms,
                nb.noisy.p50_ms,
                nb.quiet.p99_ms,
                nb.noisy.p99_ms,
                nb.tenant_policies,
                nb.edits,
                nb.flaps,
                nb.events_dropped,
                nb.statuses_refused,
                nb.lost
            )
        },
        || p50 <= 1.2 && p99 <= 1.2 && nb.lost == [0, 0],
    );
    let at_limit = verdict(
        format!("a policy at every limit costs ≤ {AT_LIMIT_KIB:.0} KiB while held"),
        format!("{:.1} KiB (the heap each one more adds)", nb.at_limit_kib),
        nb.at_limit_kib > 0.0 && nb.at_limit_kib <= AT_LIMIT_KIB,
    );
    let bound = nb.rss_before_mib + nb.tenant_policies as f64 * AT_LIMIT_KIB / 1024.0;
    let peak = verdict(
        format!(
            "the tenants' peak within {AT_LIMIT_KIB:.0} KiB per policy of theirs ({} policies)",
            nb.tenant_policies
        ),
        format!(
            "peak RSS {:.1} MiB, bound {bound:.1} MiB ({:.1} before them)",
            nb.peak_rss_mib, nb.rss_before_mib
        ),
        nb.peak_rss_mib > 0.0 && nb.peak_rss_mib <= bound,
    );
    vec![latency, at_limit, peak]
}

/// Prints what the noisy neighbour's section measured.
pub fn print_neighbour(nb: Option<&Neighbour>) {
    let Some(nb) = nb else {
        return;
    };
    println!(
        "
Noisy neighbour ({} policies, {} tenants' policies in other namespaces), ms:
",
        nb.policies, nb.tenant_policies
    );
    println!("| tenants | changes | p50 | p95 | p99 | max | lost |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (what, p, lost) in [
        ("idle", &nb.quiet, nb.lost[0]),
        ("at work", &nb.noisy, nb.lost[1]),
    ] {
        println!(
            "| {what} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {lost} |",
            p.samples, p.p50_ms, p.p95_ms, p.p99_ms, p.max_ms
        );
    }
}

fn recovery_verdicts(recovery: &[Recovery]) -> Vec<Verdict> {
    recovery
        .iter()
        .flat_map(|r| {
            let p99 = r.first_change.p99_ms;
            let every = verdict(
                format!("{} restart: every restart measured", r.component),
                format!(
                    "{} of {} not measured",
                    r.failed,
                    r.failed + r.first_change.samples
                ),
                r.failed == 0,
            );
            let change = measured_verdict(
                format!(
                    "{} restart: first change applied ≤ 1 s (p99 of {})",
                    r.component, r.first_change.samples
                ),
                &[&r.first_change],
                || format!(
                    "p99 {p99:.0} ms, max {:.0} ms (the API server delivered it to a new watch: p99 {:.0} ms, max {:.0} ms; it acknowledged a bare client's TrafficSplit write: p99 {:.0} ms, max {:.0} ms)",
                    r.first_change.max_ms,
                    r.delivered.p99_ms,
                    r.delivered.max_ms,
                    r.route_written.p99_ms,
                    r.route_written.max_ms
                ),
                || p99 <= 1000.0,
            );
            [change, every]
        })
        .collect()
}

/// Prints every target with its measured value and verdict; returns how many were missed or
/// not measured.
pub fn print_targets(
    results: &[ScaleResult],
    large: &[crate::large::LargeScale],
    neighbour: Option<&Neighbour>,
    recovery: &[Recovery],
    traffic: &Traffic,
) -> usize {
    let mut all = latency_verdicts(results);
    all.extend(crate::peer::verdicts(results));
    all.extend(neighbour_verdicts(neighbour));
    all.extend(results.iter().flat_map(group_verdicts));
    all.extend(process_verdicts(results));
    all.extend(crate::large::verdicts(results, large));
    all.extend(recovery_verdicts(recovery));
    all.extend(traffic_verdicts(traffic));
    println!("\nTargets:\n");
    println!("| target | measured | verdict |");
    println!("|---|---|---|");
    for v in &all {
        println!(
            "| {} | {} | {} |",
            v.target,
            v.measured,
            match v.met {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "NOT MEASURED",
            }
        );
    }
    let missed = all.iter().filter(|v| v.met == Some(false)).count();
    let unmeasured = all.iter().filter(|v| v.met.is_none()).count();
    println!(
        "\n{} of {} targets met, {missed} missed, {unmeasured} not measured.",
        all.len() - missed - unmeasured,
        all.len()
    );
    missed + unmeasured
}

#[cfg(test)]
#[path = "planted.rs"]
mod planted;

#[cfg(test)]
mod tests {
    use super::*;

    fn measured_traffic() -> Traffic {
        Traffic {
            rate: 50,
            ramp: (0, 900),
            planned: (0, 1200),
            ..Default::default()
        }
    }

    fn planned(t: &Traffic) -> Option<bool> {
        traffic_verdicts(t)
            .into_iter()
            .find(|v| v.target.contains("planned switches"))
            .and_then(|v| v.met)
    }

    fn capacity_run(
        policy: crate::capacity::Policy,
        overloaded: usize,
        failed: usize,
        all_served_ms: Option<f64>,
    ) -> crate::capacity::CapacityRun {
        crate::capacity::CapacityRun {
            policy,
            sent: 630,
            overloaded,
            failed,
            all_served_ms,
            failed_at_ms: Vec::new(),
            not_measured: None,
        }
    }

    /// The capacity verdicts (unserved on the primary, spread), with the run without capacity
    /// failing 300 requests and each run with capacity failing `failed` (half of them
    /// overloaded), all served after `served`.
    fn capacity(failed: [usize; 2], served: Option<f64>) -> Vec<Option<bool>> {
        use crate::capacity::Policy;
        let mut t = measured_traffic();
        t.capacity = vec![
            capacity_run(Policy::NoCapacity, 290, 10, None),
            capacity_run(Policy::UnservedOnPrimary, 0, failed[0], served),
            capacity_run(Policy::UnservedOnSecondaries, failed[1], 0, served),
        ];
        capacity_verdicts(&t).into_iter().map(|v| v.met).collect()
    }

    #[test]
    fn capacity_verdicts_count_every_failure_a_client_saw_not_only_overload_answers() {
        assert_eq!(capacity([60, 60], Some(4000.0)), [Some(true), Some(true)]);
        // No overload answer, but more requests failed on the primary than a fifth of those
        // without capacity: missed.
        assert_eq!(capacity([61, 10], Some(4000.0)), [Some(false), Some(true)]);
        assert_eq!(capacity([10, 61], Some(4000.0)), [Some(true), Some(false)]);
    }

    #[test]
    fn capacity_verdicts_are_missed_when_traffic_is_never_all_served() {
        assert_eq!(capacity([0, 0], None), [Some(false), Some(false)]);
    }

    #[test]
    fn capacity_verdicts_are_not_measured_without_a_run_without_capacity() {
        let mut t = measured_traffic();
        t.capacity = vec![capacity_run(
            crate::capacity::Policy::UnservedOnPrimary,
            0,
            0,
            Some(1.0),
        )];
        let met: Vec<Option<bool>> = capacity_verdicts(&t).into_iter().map(|v| v.met).collect();
        assert_eq!(met, [None, None]);
    }

    fn at_scale(policies: usize, peak_rss_mib: f64) -> ScaleResult {
        ScaleResult {
            policies,
            peak_rss_mib,
            ..Default::default()
        }
    }

    #[test]
    fn the_cost_per_policy_is_the_peaks_growth_from_1000_policies_per_policy_added() {
        // 13.5 MiB more for 9,000 more policies: 1.54 KiB each, missed; 12 MiB: 1.37, met.
        let met = |peak: f64| cost_verdicts(&[at_scale(1000, 25.0), at_scale(10_000, peak)])[0].met;
        assert_eq!(met(38.5), Some(false));
        assert_eq!(met(37.0), Some(true));
        assert_eq!(cost_verdicts(&[at_scale(10_000, 30.0)])[0].met, None);
    }

    fn met(t: &Traffic, target: &str) -> Option<bool> {
        traffic_verdicts(t)
            .into_iter()
            .find(|v| v.target.contains(target))
            .and_then(|v| v.met)
    }

    #[test]
    fn a_request_failed_after_the_proxy_applied_the_route_makes_the_unplanned_verdict_missed() {
        let mut t = measured_traffic();
        t.rounds = vec![crate::traffic::Round {
            kubelet_not_ready_ms: 600.0,
            slice_not_ready_ms: 610.0,
            route_written_ms: 630.0,
            proxy_applied_ms: 800.0,
            last_primary_ms: 780.0,
            failed: 5,
            failed_after_proxy: 0,
        }];
        assert_eq!(met(&t, "unplanned failover"), Some(true));
        t.rounds[0].failed_after_proxy = 1;
        assert_eq!(met(&t, "unplanned failover"), Some(false));
        t.rounds[0].failed_after_proxy = 0;
        t.failed_rounds = 1;
        assert_eq!(met(&t, "unplanned failover"), Some(false));
    }

    #[test]
    fn a_request_failed_during_a_failback_ramp_makes_the_planned_verdict_missed() {
        let mut t = measured_traffic();
        t.ramp = (1, 900);
        assert_eq!(met(&t, "planned switches and ramps"), Some(false));
        t.ramp = (0, 0);
        assert_eq!(met(&t, "planned switches and ramps"), Some(false));
    }

    fn percentiles(p50_ms: f64, p99_ms: f64) -> Percentiles {
        Percentiles {
            samples: 400,
            p50_ms,
            p95_ms: p99_ms,
            p99_ms,
            max_ms: p99_ms,
        }
    }

    /// The latency verdicts (p50, p99, max) of the controller against a relay with its watches
    /// and writes at `same`, the bare relay at 2 / 4 ms.
    fn latency(ours: (f64, f64), same: (f64, f64)) -> Vec<Option<bool>> {
        let r = ScaleResult {
            policies: 1000,
            latency: vec![crate::latency::Latency {
                controller: percentiles(ours.0, ours.1),
                floor: percentiles(2.0, 4.0),
                floor_same_writes: percentiles(same.0, same.1),
                ..Default::default()
            }],
            ..Default::default()
        };
        latency_verdicts(&[r])
            .into_iter()
            .take(3)
            .map(|v| v.met)
            .collect()
    }

    #[test]
    fn latency_is_judged_against_the_relay_with_the_controllers_watches_and_writes() {
        // Twice the bare relay, but within the relay doing the controller's job: met.
        assert_eq!(latency((6.0, 12.0), (5.5, 10.0)), [Some(true); 3]);
        // A controller slower than that relay: p50 and p99 missed, the max within 3x.
        assert_eq!(
            latency((7.0, 16.0), (5.5, 10.0)),
            [Some(false), Some(false), Some(true)]
        );
    }

    fn neighbour() -> Neighbour {
        Neighbour {
            policies: 1000,
            quiet: percentiles(5.0, 20.0),
            noisy: percentiles(5.5, 22.0),
            lost: [0, 0],
            tenant_policies: 100,
            edits: 500,
            flaps: 50,
            events_dropped: 10.0,
            statuses_refused: 4.0,
            at_limit_kib: 50.0,
            rss_before_mib: 20.0,
            peak_rss_mib: 24.0,
        }
    }

    fn neighbour_met(nb: &Neighbour) -> Vec<Option<bool>> {
        neighbour_verdicts(Some(nb))
            .into_iter()
            .map(|v| v.met)
            .collect()
    }

    #[test]
    fn the_tenants_work_put_on_the_victims_path_makes_the_neighbour_verdicts_missed() {
        assert_eq!(neighbour_met(&neighbour()), [Some(true); 3]);
        // Validations on the watch stream: the victims' p99 doubles.
        let mut slowed = neighbour();
        slowed.noisy = percentiles(5.5, 40.0);
        assert_eq!(neighbour_met(&slowed)[0], Some(false));
        // A status writer held by refused statuses: a change lost.
        let mut lost = neighbour();
        lost.lost = [0, 1];
        assert_eq!(neighbour_met(&lost)[0], Some(false));
        // Claims held as text: a policy at every limit costs a MiB.
        let mut heavy = neighbour();
        heavy.at_limit_kib = 1024.0;
        heavy.peak_rss_mib = 120.0;
        assert_eq!(neighbour_met(&heavy)[1..], [Some(false), Some(false)]);
        // Nothing measured is nothing met.
        let mut unmeasured = neighbour();
        unmeasured.at_limit_kib = 0.0;
        assert_eq!(neighbour_met(&unmeasured)[1], Some(false));
        assert!(neighbour_verdicts(None).is_empty());
    }

    #[test]
    fn a_pin_that_never_settles_makes_the_planned_switch_verdict_missed() {
        let mut t = measured_traffic();
        assert_eq!(planned(&t), Some(true));
        t.unsettled_switches = 1;
        assert_eq!(planned(&t), Some(false));
    }
}
