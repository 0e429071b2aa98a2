//! Benchmark: failover latency, API writes, cold start, restart, CPU, memory and recovery after
//! a control-plane restart, each against its floor where one exists, on a local control plane
//! under background churn. Prints every figure with its target and verdict.
//!
//! Run with `hack/bench.sh` (builds the release controller, then this program); `--help` lists
//! the options. What is measured, per scale of `n` policies (3 backends each):
//!
//! - latency: from the acknowledgement of the EndpointSlice write that changes a primary's
//!   readiness to the moment an independent watch sees the TrafficSplit change, against a
//!   minimal relay (one watch, one apply per change) timed the same way in the same run, at 50
//!   changes/s of background churn, and at 150/s from `--high-churn-from` policies up;
//! - at `--peer-at` scales, linkerd-failover (the controller this one replaces) on the same
//!   control plane, policies and churn, timed the same way in turns with the controller (`peer`);
//! - writes per change and in a quiet period, from the controller's own counters;
//! - cold start: controller start → every route and status in place, against the same writes
//!   issued by a bare client at the same concurrency;
//! - restart with everything in place: ready time and writes (none expected); then failovers
//!   made while a restart's start-up pass is under way, against the quiet latency (`pass`);
//! - at `--noisy-neighbour-at` policies, a section of its own under a controller of every
//!   namespace: the latency again, in turns with and without tenants of other namespaces doing
//!   at once all a tenant's policies can cost (policies at every limit, statuses that cannot be
//!   stored, an edit flood, slow health queries, an Event storm), the heap a policy at every
//!   limit adds, and the peak RSS;
//! - at `--groups-at` policies: `--groups` failover groups of 10 of them, and the latency of a
//!   group failover from one member's readiness change to the last member's route (`groups`);
//! - CPU seconds, peak RSS, and KiB per policy above the idle process;
//! - what the controller's writes cost the API server: a TrafficSplit apply by the object's shape
//!   and a status write by the way it is written (`probe`);
//! - what the control plane did during each latency measurement and restart: the API server's
//!   own timing of TrafficSplit applies, its garbage collections and requests, etcd's
//!   compactions, each component's CPU (`apiserver`), and the API server's CPU profile over
//!   each source of changes' turns, by what it was doing (`profile`, `pprof`);
//!
//! and once, at `--recovery-scale`: kube-apiserver and etcd each restarted `--restarts` times,
//! the first readiness change after each restart timed until applied; last, at
//! `--large-scales` (30,000 and 100,000 policies), each on a control plane of its own: the cold
//! start, the memory and live allocations at rest per policy added, the peak against the chart's
//! memory limit, and at `--large-pass-at` failovers during start-up passes (`large`).

// The tests' support; the benchmark uses a part of it.
#[allow(dead_code, unused_imports, unused_macros)]
#[path = "../../tests/it/support/mod.rs"]
mod support;

mod apiserver;
mod capacity;
mod groups;
mod large;
mod latency;
mod memory;
mod neighbour;
mod objects;
mod pass;
mod peer;
mod pprof;
mod probe;
mod profile;
mod recovery;
mod relay;
mod report;
mod startup;
mod traffic;
mod watches;

use std::time::{Duration, Instant};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use serde_json::json;

use crate::{
    report::ScaleResult,
    support::{TestEnv, repo_root},
    watches::{Churn, SplitWatch, StatusWatch},
};

/// Latency, writes, start, memory and recovery against their floors and targets.
#[derive(clap::Parser, Debug)]
#[command(
    about = "Failover latency, writes, start, memory and recovery against the floor, on a local control plane"
)]
pub struct Options {
    /// Numbers of policies to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
    scales: Vec<usize>,
    /// Larger numbers of policies, each on a control plane of its own, measured only for what
    /// size shows: cold start, memory and allocations at rest, failovers (`large`).
    #[arg(long, value_delimiter = ',', default_value = "30000,100000")]
    large_scales: Vec<usize>,
    /// The large scales at which failovers during restarts' start-up passes are measured.
    #[arg(long, value_delimiter = ',', default_value = "30000")]
    large_pass_at: Vec<usize>,
    /// Readiness flips (each one change down and one back up) per scale and churn rate.
    #[arg(long, default_value_t = 200)]
    flips: usize,
    /// Pause after each change is seen before the next one is written, in milliseconds (0:
    /// back to back, each change's status and Event writes overlapping the next change).
    #[arg(long, default_value_t = 0)]
    gap_ms: u64,
    /// EndpointSlice updates per second of background churn.
    #[arg(long = "churn", default_value_t = 50)]
    churn_per_second: u64,
    /// The higher churn rate measured as well at the larger scales.
    #[arg(long, default_value_t = 150)]
    high_churn: u64,
    /// From this many policies up, latency is measured at the higher churn rate too.
    #[arg(long, default_value_t = 10_000)]
    high_churn_from: usize,
    /// Length of the quiet period in which no write is expected, in seconds.
    #[arg(long, default_value_t = 60)]
    quiet_seconds: u64,
    /// The controller's --concurrency (and the cold-start floor's).
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Restarts of kube-apiserver, then of etcd, in the recovery scenario (0: skip it).
    #[arg(long, default_value_t = 10)]
    restarts: usize,
    /// The components restarted in the recovery scenario, in this order.
    #[arg(long, value_delimiter = ',', default_value = "kube-apiserver,etcd")]
    recovery_components: Vec<String>,
    /// Policies under the controller during the recovery scenario.
    #[arg(long, default_value_t = 1000)]
    recovery_scale: usize,
    /// Restarts in place per scale; the tables show their medians (the memory table the
    /// first), the log every one.
    #[arg(long, default_value_t = 3)]
    restarts_in_place: usize,
    /// The scale of the noisy neighbour's section (tenants of other namespaces at work beside
    /// it, under one controller of every namespace); 0: not measured.
    #[arg(long, default_value_t = 1000)]
    noisy_neighbour_at: usize,
    /// The scale at which failover groups are measured (`--groups` groups of 10 of its
    /// policies); 0: not measured.
    #[arg(long, default_value_t = 10_000)]
    groups_at: usize,
    /// Failover groups of 10 policies at `--groups-at`.
    #[arg(long, default_value_t = 1000)]
    groups: usize,
    /// Group failovers timed (each a member's primary down, then up again), and as many
    /// through the relay making the controller's writes, in turns.
    #[arg(long, default_value_t = 200)]
    group_flips: usize,
    /// The controller's --log-level (e.g. `info,failover=debug` to follow one change through
    /// it; its log is written to the system's temporary directory).
    #[arg(long, default_value = "warn")]
    controller_log: String,
    /// Forces a relist of every watched kind at each scale (kube-apiserver restarted under the
    /// running controller) and measures its memory.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    relist: bool,
    /// The scales at which linkerd-failover is measured beside the controller (`peer`), built by
    /// hack/build-peer.sh from the archive LINKERD_FAILOVER_ARCHIVE names; empty: never.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    peer_at: Vec<usize>,
    /// Failover rounds through a real proxy on a real node (0: skip the traffic section).
    #[arg(long, default_value_t = 5)]
    traffic_rounds: usize,
    /// The controller binary to measure (default: this checkout's release build), e.g. an
    /// earlier build to compare with.
    #[arg(long)]
    controller_binary: Option<std::path::PathBuf>,
    /// Exit 0 even when a target is missed or not measured (the default exits 1 then).
    #[arg(long)]
    report_only: bool,
    /// Where the results are written as JSON.
    #[arg(long, default_value = "target/bench/results.json")]
    out: std::path::PathBuf,
}

fn options() -> Options {
    let mut o = <Options as clap::Parser>::parse();
    if o.out.is_relative() {
        o.out = repo_root().join(&o.out);
    }
    o
}

async fn run_scale(
    n: usize,
    o: &Options,
    idle_rss: f64,
    peer_binary: &Result<std::path::PathBuf, String>,
) -> ScaleResult {
    let env = TestEnv::new(&format!("bench-{n}"))
        .await
        .expect("control plane");
    let churn_services = objects::create_scale(&env, n).await;
    let (splits, statuses) = (SplitWatch::start(env.api()), StatusWatch::start(env.api()));
    let slices: Api<EndpointSlice> = env.api();
    let mut churn = Churn::start(slices.clone(), churn_services.clone(), o.churn_per_second);
    let (controller, cold) = startup::cold_start(&env, n, &splits, &statuses, o).await;
    latency::settle(&controller).await;
    let mut phases = memory::Phases::of(&controller);
    phases.end(&controller, n, memory::COLD_START).await;
    probe::run(&env, n).await;
    let cold_floor = startup::cold_floor(&env, n, o).await;
    let (mut peer, mut peer_scale) = start_peer(&env, n, o, &churn_services, peer_binary).await;
    let mut latency = vec![
        latency::measure(
            &env,
            &controller,
            &splits,
            n,
            o,
            o.churn_per_second,
            peer.as_ref().map(|p| (p, &churn)),
        )
        .await,
    ];
    phases
        .end(&controller, n, &format!("churn {}/s", o.churn_per_second))
        .await;
    if n >= o.high_churn_from {
        churn = Churn::start(slices.clone(), churn_services.clone(), o.high_churn);
        latency.push(
            latency::measure(
                &env,
                &controller,
                &splits,
                n,
                o,
                o.high_churn,
                peer.as_ref().map(|p| (p, &churn)),
            )
            .await,
        );
        churn = Churn::start(slices, churn_services.clone(), o.churn_per_second);
        phases
            .end(&controller, n, &format!("churn {}/s", o.high_churn))
            .await;
    }
    let groups = if n == o.groups_at {
        let measured =
            groups::measure(&env, &controller, &splits, n, o.groups, o.group_flips).await;
        phases.end(&controller, n, memory::GROUPS).await;
        Some(measured)
    } else {
        None
    };
    let quiet_before = latency::writes(&controller).await;
    let peer_quiet_before = peer.as_ref().map_or(0, peer::Peer::writes);
    tokio::time::sleep(Duration::from_secs(o.quiet_seconds)).await;
    if let Some(peer) = peer.take() {
        let quiet = peer.writes() - peer_quiet_before;
        peer_scale = Some(peer.finish(quiet).await);
    }
    let quiet_writes: Vec<(String, f64)> = latency::writes(&controller)
        .await
        .into_iter()
        .map(|(k, v)| {
            let before = quiet_before.get(&k).copied().unwrap_or(0.0);
            (k, v - before)
        })
        .filter(|(_, w)| *w > 0.0)
        .collect();
    if !quiet_writes.is_empty() {
        eprintln!("[{n}] writes in the quiet period, by kind: {quiet_writes:?}");
    }
    // A float sum of nothing is -0.0, which would print as "-0".
    let quiet: f64 = quiet_writes.iter().map(|(_, w)| w).sum::<f64>() + 0.0;
    phases.end(&controller, n, "quiet").await;
    if o.relist {
        startup::relist(&env, &controller, n, &[&splits.lists, &statuses.lists]).await;
        phases
            .end(
                &controller,
                n,
                "relist of every kind (API server restarted)",
            )
            .await;
    }
    let (cpu_s, _) = startup::usage(controller.pid());
    let (mut controller, restart) = startup::restart_in_place(&env, controller, n, o).await;
    let mut restarted = memory::Phases::of(&controller);
    restarted
        .end(&controller, n, "restart with everything in place")
        .await;
    let mut memory = phases.measured;
    memory.extend(restarted.measured);
    let peak_rss_mib = memory.iter().map(|m| m.peak_rss_mib).fold(0.0, f64::max);
    let mut restarts = vec![restart];
    for _ in 1..o.restarts_in_place {
        let (next, restart) = startup::restart_in_place(&env, controller, n, o).await;
        controller = next;
        restarts.push(restart);
    }
    let restart = startup::Restart::median(&restarts);
    let (controller, start_pass) = pass::measure(&env, controller, &splits, n, o).await;
    drop(churn);
    drop(controller);
    // The next scale (or the recovery scenario) starts once this one's objects are deleted.
    let deleted = env.cleanup_and_wait(Duration::from_secs(600)).await;
    eprintln!("[{n}] namespace deleted in {deleted:.2?}");
    ScaleResult {
        policies: n,
        latency,
        groups,
        writes_in_quiet_period: quiet,
        quiet_seconds: o.quiet_seconds,
        cold_start_s: cold.as_secs_f64(),
        cold_floor_s: cold_floor.as_secs_f64(),
        restart,
        start_pass,
        cpu_s,
        peak_rss_mib,
        kib_per_policy: (peak_rss_mib - idle_rss).max(0.0) * 1024.0 / n as f64,
        memory,
        peer: peer_scale,
    }
}

/// linkerd-failover beside the controller at scale `n`, when it is measured there: the peer
/// running, or why it is not measured.
async fn start_peer(
    env: &TestEnv,
    n: usize,
    o: &Options,
    churn_services: &[String],
    binary: &Result<std::path::PathBuf, String>,
) -> (Option<peer::Peer>, Option<peer::PeerScale>) {
    if !o.peer_at.contains(&n) {
        return (None, None);
    }
    let started = match binary {
        Ok(binary) => peer::Peer::start(env, binary, n, churn_services).await,
        Err(why) => Err(why.clone()),
    };
    match started {
        Ok(peer) => (Some(peer), None),
        Err(why) => {
            eprintln!("[{n}] peer: not measured: {why}");
            (None, Some(peer::PeerScale::not_measured(&why)))
        }
    }
}

fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| Some(m.lines().next()?.split_whitespace().nth(1)?.to_string()))
        .unwrap_or_default();
    format!("{cores} cores, {memory} kB RAM")
}

#[tokio::main]
async fn main() {
    let o = options();
    let binary = o
        .controller_binary
        .clone()
        .unwrap_or_else(|| repo_root().join("target/release/failover-controller"));
    assert!(
        binary.exists(),
        "{} is missing: build the release controller first, cargo build --release --bin failover-controller (hack/bench.sh does)",
        binary.display()
    );
    let peer_binary = if o.peer_at.is_empty() {
        Err("not asked for (--peer-at is empty)".to_string())
    } else {
        peer::binary()
    };
    let started = Instant::now();
    let idle_rss = startup::idle_rss(&o).await;
    let mut results = Vec::new();
    for &n in &o.scales {
        results.push(run_scale(n, &o, idle_rss, &peer_binary).await);
        report::print_latency(&results[results.len() - 1..]);
    }
    let neighbour = neighbour::run(&o).await;
    let recovery = if o.restarts > 0 {
        recovery::run(&o).await
    } else {
        Vec::new()
    };
    let traffic = traffic::run(&o).await;
    // Last: each large scale starts a control plane of its own and leaves the machine busier.
    let large = large::run(&o).await;
    println!(
        "\nAll scales ({:.1} min, {}):",
        started.elapsed().as_secs_f64() / 60.0,
        machine()
    );
    report::print_latency(&results);
    report::print_groups(&results);
    peer::print(&results);
    report::print_neighbour(neighbour.as_ref());
    report::print_process(&results, idle_rss);
    report::print_memory(&results, idle_rss);
    large::print(&large, idle_rss);
    report::print_recovery(&recovery);
    report::print_traffic(&traffic);
    let failed = report::print_targets(&results, &large, neighbour.as_ref(), &recovery, &traffic);
    if let Some(dir) = o.out.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let json = json!({"machine": machine(), "flips": o.flips, "idle_rss_mib": idle_rss, "results": results, "large": large, "neighbour": neighbour, "recovery": recovery, "traffic": traffic});
    std::fs::write(
        &o.out,
        serde_json::to_string_pretty(&json).unwrap_or_default(),
    )
    .expect("writing results");
    // Printed relative to the repository: the log is kept in it.
    let root = repo_root();
    let shown = o.out.strip_prefix(&root).unwrap_or(&o.out);
    println!("results written to {}", shown.display());
    if failed > 0 && !o.report_only {
        std::process::exit(1);
    }
}
