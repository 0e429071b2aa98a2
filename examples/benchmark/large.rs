//! The large scales (`--large-scales`): what only size shows. Each runs on a control plane of its
//! own, stopped when the scale ends rather than emptied (deleting the objects of 100,000 policies
//! would take longer than measuring them), with the same objects and controller settings as the
//! other scales but none of their phases: the objects created, the cold start, the memory and
//! the live allocations at rest, a few failovers in the quiet, and at `--large-pass-at` the
//! failovers made during restarts' start-up passes (`pass`), judged against those quiet ones.

use std::time::{Duration, Instant};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;

use crate::{
    Options, latency,
    memory::{COLD_START, PhaseMemory, Phases},
    objects,
    pass::{self, PassFailovers},
    report::{Percentiles, ScaleResult, Verdict, pass_verdict, percentiles, verdict},
    startup,
    support::{TestEnv, repo_root},
    watches::{SplitWatch, StatusWatch},
};

/// Policies flipped (down, then up) in the quiet, spread over the scale.
const QUIET_FLIPS: usize = 12;

/// The cold start's limit per policy: a scale that has not every route and status in place by
/// then is reported as such, and measured no further.
const COLD_START_PER_POLICY: Duration = Duration::from_millis(20);

/// One large scale's figures.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LargeScale {
    pub policies: usize,
    /// Services, EndpointSlices and policies created, in seconds.
    pub created_s: f64,
    /// Controller start → every route and status in place; `None` when not within the limit.
    pub cold_start_s: Option<f64>,
    /// The cold start's memory: its peak, and at its end (at rest, once settled) the RSS, the
    /// heap and the live allocations.
    pub at_rest: Option<PhaseMemory>,
    /// Failovers and failbacks with nothing else under way.
    pub quiet: Percentiles,
    /// Failovers during start-up passes, where measured.
    pub start_pass: Option<PassFailovers>,
}

/// Every `--large-scales` scale in turn.
pub async fn run(o: &Options) -> Vec<LargeScale> {
    let mut measured = Vec::new();
    for &n in &o.large_scales {
        match TestEnv::dedicated(&format!("bench-{n}")).await {
            Some(env) => measured.push(measure(env, n, o).await),
            None => eprintln!("[{n}] large scale: no control plane"),
        }
    }
    measured
}

async fn measure(env: TestEnv, n: usize, o: &Options) -> LargeScale {
    let created = Instant::now();
    objects::create_scale(&env, n).await;
    let mut scale = LargeScale {
        policies: n,
        created_s: created.elapsed().as_secs_f64(),
        ..Default::default()
    };
    let (splits, statuses) = (SplitWatch::start(env.api()), StatusWatch::start(env.api()));
    let limit = (COLD_START_PER_POLICY * n as u32).max(Duration::from_secs(900));
    let (controller, cold) =
        startup::cold_start_within(&env, n, &splits, &statuses, o, limit).await;
    let Some(cold) = cold else {
        eprintln!(
            "[{n}] not all routes and statuses in place after {limit:.0?}: measured no further"
        );
        return scale;
    };
    scale.cold_start_s = Some(cold.as_secs_f64());
    latency::settle(&controller).await;
    let mut phases = Phases::of(&controller);
    phases.end(&controller, n, COLD_START).await;
    scale.at_rest = phases.measured.pop();
    scale.quiet = quiet_flips(&env, &splits, n).await;
    if o.large_pass_at.contains(&n) {
        let (controller, failovers) = pass::measure(&env, controller, &splits, n, o).await;
        scale.start_pass = Some(failovers);
        drop(controller);
    }
    scale
}

/// [`QUIET_FLIPS`] policies spread over the scale, each made not ready and ready again, timed as
/// the latency phases time their changes.
async fn quiet_flips(env: &TestEnv, splits: &SplitWatch, n: usize) -> Percentiles {
    let slices: Api<EndpointSlice> = env.api();
    let mut samples = Vec::new();
    for flip in 0..QUIET_FLIPS {
        let name = format!("p{}", flip * n / QUIET_FLIPS + 1);
        for (ready, expected) in [
            (false, latency::WEIGHTS_FAILED_OVER),
            (true, latency::WEIGHTS_ON_PRIMARY),
        ] {
            if let Some((took, _)) = latency::timed(&slices, splits, &name, ready, &expected).await
            {
                samples.push(took);
            }
        }
    }
    let quiet = percentiles(samples);
    eprintln!(
        "[{n}] failovers in the quiet: p50 {:.1} ms, p99 {:.1} ms over {} changes",
        quiet.p50_ms, quiet.p99_ms, quiet.samples
    );
    quiet
}

/// The share of the chart's memory limit the peak at 100,000 policies may reach: the rest is
/// the room a burst (a relist, a group move) needs.
const CHART_LIMIT_SHARE: f64 = 0.75;

/// The scale judged against the chart's memory limit.
const JUDGED_AGAINST_THE_LIMIT: usize = 100_000;

/// The policies from which the cost per policy added is measured.
const BASE: usize = 1_000;

pub fn print(large: &[LargeScale], idle_rss: f64) {
    if large.is_empty() {
        return;
    }
    println!(
        "\nLarge scales, each on a control plane of its own (idle process {idle_rss:.1} MiB; at rest: the end of the cold start, settled):\n"
    );
    println!(
        "| policies | objects created s | cold start s | peak RSS MiB | RSS at rest MiB | heap MiB | live allocations | quiet failover p50 ms | failover during a start-up pass p50 ms |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for l in large {
        let cold = l
            .cold_start_s
            .map_or("not all in place".to_string(), |s| format!("{s:.1}"));
        let memory = l.at_rest.as_ref().map_or("| | | |".to_string(), |m| {
            format!(
                "{:.1} | {:.1} | {:.1} | {:.0} |",
                m.peak_rss_mib, m.rss_mib, m.heap_mib, m.live_allocations
            )
        });
        let pass = l
            .start_pass
            .as_ref()
            .map_or("not measured".to_string(), |p| {
                format!("{:.1}", p.latency.p50_ms)
            });
        println!(
            "| {} | {:.1} | {cold} | {memory} {:.1} | {pass} |",
            l.policies, l.created_s, l.quiet.p50_ms
        );
    }
}

/// The memory at rest of every scale measured, small and large: (policies, the cold start's
/// phase).
fn at_rest<'a>(
    results: &'a [ScaleResult],
    large: &'a [LargeScale],
) -> Vec<(usize, &'a PhaseMemory)> {
    let small = results.iter().filter_map(|r| {
        let m = r.memory.iter().find(|m| m.phase == COLD_START)?;
        Some((r.policies, m))
    });
    let large = large
        .iter()
        .filter_map(|l| Some((l.policies, l.at_rest.as_ref()?)));
    let mut all: Vec<_> = small.chain(large).collect();
    all.sort_by_key(|(n, _)| *n);
    all
}

/// What each policy above [`BASE`] adds at rest, by `figure` of the phase (RSS in KiB, live
/// allocations), judged against `at_most`.
fn added_verdict(
    target: &str,
    rest: &[(usize, &PhaseMemory)],
    figure: impl Fn(&PhaseMemory) -> f64,
    at_most: f64,
) -> Verdict {
    let Some((_, base)) = rest.iter().find(|(n, _)| *n == BASE) else {
        return Verdict {
            target: target.into(),
            measured: "no run at 1,000 policies".into(),
            met: None,
        };
    };
    let added: Vec<(usize, f64)> = rest
        .iter()
        .filter(|(n, _)| *n > BASE)
        .map(|(n, m)| (*n, (figure(m) - figure(base)) / (n - BASE) as f64))
        .collect();
    if added.is_empty() {
        return Verdict {
            target: target.into(),
            measured: "no run above 1,000 policies".into(),
            met: None,
        };
    }
    let measured: Vec<String> = added
        .iter()
        .map(|(n, per)| format!("{per:.2} to {n}"))
        .collect();
    verdict(
        target,
        format!("{} (from 1,000)", measured.join(", ")),
        added.iter().all(|(_, per)| *per <= at_most),
    )
}

/// The chart's memory limit in MiB, as its values set it.
fn chart_memory_limit_mib() -> Result<f64, String> {
    let path = repo_root().join("charts/failover-controller/values.yaml");
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("reading the chart's values: {e}"))?;
    let values: serde_yaml::Value =
        serde_yaml::from_str(&text).map_err(|e| format!("the chart's values: {e}"))?;
    let limit = values["resources"]["limits"]["memory"]
        .as_str()
        .ok_or("the chart's values set no resources.limits.memory")?;
    limit
        .strip_suffix("Mi")
        .and_then(|mib| mib.parse().ok())
        .or_else(|| Some(limit.strip_suffix("Gi")?.parse::<f64>().ok()? * 1024.0))
        .ok_or_else(|| format!("the chart's memory limit {limit} is not in Mi or Gi"))
}

fn limit_verdict(large: &[LargeScale]) -> Verdict {
    let target = format!(
        "peak RSS at {JUDGED_AGAINST_THE_LIMIT} policies ≤ {:.0}% of the chart's memory limit",
        CHART_LIMIT_SHARE * 100.0
    );
    let peak = large
        .iter()
        .find(|l| l.policies == JUDGED_AGAINST_THE_LIMIT)
        .and_then(|l| l.at_rest.as_ref())
        .map(|m| m.peak_rss_mib);
    match (peak, chart_memory_limit_mib()) {
        (Some(peak), Ok(limit)) => verdict(
            target,
            format!(
                "{peak:.1} MiB of {limit:.0} MiB ({:.0}%)",
                peak / limit * 100.0
            ),
            peak <= limit * CHART_LIMIT_SHARE,
        ),
        (None, _) => Verdict {
            target,
            measured: format!("no cold start completed at {JUDGED_AGAINST_THE_LIMIT} policies"),
            met: None,
        },
        (_, Err(why)) => Verdict {
            target,
            measured: why,
            met: None,
        },
    }
}

/// The large scales' targets, with the cost per policy added measured over every scale.
pub fn verdicts(results: &[ScaleResult], large: &[LargeScale]) -> Vec<Verdict> {
    let rest = at_rest(results, large);
    let mut v = vec![
        added_verdict(
            "memory at rest ≤ 1.5 KiB per policy added from 1,000 policies up (RSS at the end of the cold start, KiB per policy)",
            &rest,
            |m| m.rss_mib * 1024.0,
            1.5,
        ),
        added_verdict(
            "≤ 3 live allocations per policy added at rest from 1,000 policies up",
            &rest,
            |m| m.live_allocations,
            3.0,
        ),
        limit_verdict(large),
    ];
    for l in large {
        if let Some(pass) = &l.start_pass {
            v.push(pass_verdict(l.policies, pass, Some(&l.quiet)));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(policies: usize, rss_mib: f64, live_allocations: f64) -> LargeScale {
        LargeScale {
            policies,
            at_rest: Some(PhaseMemory {
                phase: COLD_START.into(),
                peak_rss_mib: rss_mib,
                rss_mib,
                rss_file_mib: 0.0,
                heap_mib: 0.0,
                live_allocations,
                allocations: 0.0,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_cost_at_rest_is_the_growth_from_1000_policies_per_policy_added() {
        // 29,000 more policies: 40 MiB more is 1.41 KiB each (met), 45 MiB 1.59 (missed);
        // 87,000 more live allocations is 3 each (met).
        let met = |rss: f64| {
            verdicts(&[], &[at(1_000, 20.0, 10_000.0), at(30_000, rss, 97_000.0)])
                .into_iter()
                .map(|v| v.met)
                .take(2)
                .collect::<Vec<_>>()
        };
        assert_eq!(met(60.0), [Some(true), Some(true)]);
        assert_eq!(met(65.0), [Some(false), Some(true)]);
        assert_eq!(verdicts(&[], &[at(30_000, 60.0, 0.0)])[0].met, None);
    }

    #[test]
    fn the_peak_at_100000_policies_is_judged_against_the_charts_limit() {
        assert_eq!(chart_memory_limit_mib(), Ok(256.0));
        let met = |peak: f64| limit_verdict(&[at(100_000, peak, 0.0)]).met;
        assert_eq!(met(192.0), Some(true));
        assert_eq!(met(193.0), Some(false));
        assert_eq!(limit_verdict(&[at(30_000, 100.0, 0.0)]).met, None);
    }
}
