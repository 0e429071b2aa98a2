//! linkerd-failover, the controller this one replaces, measured beside it in the same run. It is
//! built by `hack/build-peer.sh` from upstream's source at the commit pinned in
//! `hack/versions.env`, unmodified, and runs on the same control plane at the same scale, fed
//! what it reads, in a namespace of its own:
//!
//! - one Endpoints per backend of each of the scale's `n` policies (`p<i>`, `p<i>-a`, `p<i>-b`)
//!   and per churn Service;
//! - one TrafficSplit per policy, labelled for its selector, its primary named by its annotation;
//! - the same churn as the controller's, at the same rate, moved onto those Endpoints for its
//!   turns (and back onto the EndpointSlices after them).
//!
//! Its changes are timed as the controller's are (the write acknowledged → an independent watch
//! sees the TrafficSplit's weights change), on the same policies, in a turn of each block of the
//! latency measurement. Its writes (TrafficSplit patches, Events) are counted by a watch of its
//! namespace; its CPU time and peak RSS are read from `/proc`.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use failover_core::route::trafficsplit::TrafficSplit;
use k8s_openapi::api::core::v1::{Endpoints, Event};
use kube::Api;
use serde_json::json;

use crate::{
    memory::status_kib,
    objects::{Readiness, create_all, set_ready},
    report::{ScaleResult, Verdict, measured_verdict, verdict},
    support::{TestEnv, cpu_seconds, repo_root},
    watches::{Changes, SplitWatch},
};

/// The label the peer selects its TrafficSplits by (its `--selector`), and its value.
const SELECTOR: (&str, &str) = ("failover.linkerd.io/controlled-by", "linkerd-failover");
/// The annotation naming a TrafficSplit's primary backend.
const PRIMARY: &str = "failover.linkerd.io/primary-service";
/// How long the peer may take to answer its first change (its caches filled).
const FIRST_CHANGE: Duration = Duration::from_secs(180);

/// The peer's weights when a policy's primary is not ready (each ready secondary gets 1), and
/// when it is ready again.
pub const FAILED_OVER: [i64; 3] = [0, 1, 1];
pub const ON_PRIMARY: [i64; 3] = [1, 0, 0];

/// The peer's binary, built by `hack/build-peer.sh`, or why it is not measured.
pub fn binary() -> Result<PathBuf, String> {
    let out = Command::new(repo_root().join("hack/build-peer.sh"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("hack/build-peer.sh did not run: {e}"))?;
    let said = String::from_utf8_lossy(&out.stderr);
    let last = said.lines().last().unwrap_or_default().trim().to_string();
    match out.status.code() {
        Some(0) => {
            let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
            eprintln!("peer: linkerd-failover built by hack/build-peer.sh");
            Ok(PathBuf::from(path))
        }
        Some(2) => Err(format!(
            "linkerd-failover's source archive is not here ({})",
            last.trim_start_matches("build-peer: ")
        )),
        _ => Err(format!("linkerd-failover did not build: {last}")),
    }
}

/// The peer at one scale, running.
pub struct Peer {
    env: TestEnv,
    process: Process,
    /// An independent watch of its TrafficSplits.
    pub watch: SplitWatch,
    writes: [Changes; 2],
}

/// The peer's process, killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the peer used over its run at one scale.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PeerScale {
    /// Why the peer was not measured (None: measured).
    pub not_measured: Option<String>,
    pub peak_rss_mib: f64,
    pub cpu_s: f64,
    /// Its writes (TrafficSplits and Events) in the quiet period.
    pub writes_in_quiet_period: usize,
}

impl PeerScale {
    pub fn not_measured(why: &str) -> Self {
        Self {
            not_measured: Some(why.to_string()),
            ..Self::default()
        }
    }
}

impl Peer {
    /// Creates the peer's objects for `n` policies beside `env`'s, starts the peer
    /// and waits until it answered a first change.
    pub async fn start(
        env: &TestEnv,
        binary: &Path,
        n: usize,
        churn_services: &[String],
    ) -> Result<Self, String> {
        let own = TestEnv::on(env.cp, "bench-peer")
            .await
            .ok_or("no namespace for the peer")?;
        let backends: Vec<String> = (0..n)
            .flat_map(|i| [format!("p{i}"), format!("p{i}-a"), format!("p{i}-b")])
            .chain(churn_services.iter().cloned())
            .collect();
        let endpoints: Api<Endpoints> = own.api();
        create_all(
            &endpoints,
            backends.iter().map(|s| Endpoints::of(s, true)).collect(),
            32,
        )
        .await;
        create_all(&own.api(), (0..n).map(split).collect(), 32).await;
        let watch = SplitWatch::start(own.api());
        let writes = [
            Changes::start(own.api::<TrafficSplit>()),
            Changes::start(own.api::<Event>()),
        ];
        let process = Process(launch(binary, &own, n)?);
        let peer = Self {
            env: own,
            process,
            watch,
            writes,
        };
        peer.first_change().await?;
        eprintln!(
            "[{n}] peer: linkerd-failover runs beside the controller ({n} TrafficSplits, {} Endpoints)",
            backends.len()
        );
        Ok(peer)
    }

    /// Waits until the peer moved `p0` away from its primary and back.
    async fn first_change(&self) -> Result<(), String> {
        for (ready, weights) in [(false, FAILED_OVER), (true, ON_PRIMARY)] {
            set_ready(&self.endpoints(), "p0", ready).await;
            if self
                .watch
                .wait_for("p0", &weights, FIRST_CHANGE)
                .await
                .is_none()
            {
                return Err(format!(
                    "linkerd-failover did not move p0 to {weights:?} within {FIRST_CHANGE:?}"
                ));
            }
        }
        Ok(())
    }

    pub fn endpoints(&self) -> Api<Endpoints> {
        self.env.api()
    }

    /// Its writes so far: TrafficSplit changes and Events.
    pub fn writes(&self) -> usize {
        self.writes.iter().map(Changes::count).sum()
    }

    pub fn cpu_s(&self) -> f64 {
        cpu_seconds(self.process.0.id())
    }

    /// Stops the peer and deletes its objects; what it used over its run.
    pub async fn finish(self, writes_in_quiet_period: usize) -> PeerScale {
        let pid = self.process.0.id();
        let measured = PeerScale {
            not_measured: None,
            peak_rss_mib: status_kib(pid, "VmHWM:") / 1024.0,
            cpu_s: cpu_seconds(pid),
            writes_in_quiet_period,
        };
        drop((self.process, self.watch, self.writes));
        self.env.cleanup_and_wait(Duration::from_secs(600)).await;
        measured
    }
}

/// TrafficSplit `p<i>` as the peer's README has it: labelled for its selector, the primary
/// named, all weight on the primary.
fn split(i: usize) -> TrafficSplit {
    let name = format!("p{i}");
    serde_json::from_value(json!({
        "apiVersion": "split.smi-spec.io/v1alpha2", "kind": "TrafficSplit",
        "metadata": {"name": name, "labels": {SELECTOR.0: SELECTOR.1},
                     "annotations": {PRIMARY: name}},
        "spec": {"service": name, "backends": [
            {"service": name, "weight": 1},
            {"service": format!("{name}-a"), "weight": 0},
            {"service": format!("{name}-b"), "weight": 0}]},
    }))
    .expect("traffic split")
}

/// Starts the peer on `env`'s control plane, its admin server on a free loopback port, its log
/// in the system's temporary directory.
fn launch(binary: &Path, env: &TestEnv, n: usize) -> Result<Child, String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no port for the peer's admin server: {e}"))?
        .port();
    let log = std::env::temp_dir().join(format!("bench-linkerd-failover-{n}.log"));
    let file = std::fs::File::create(&log).map_err(|e| format!("the peer's log: {e}"))?;
    let err = file
        .try_clone()
        .map_err(|e| format!("the peer's log: {e}"))?;
    Command::new(binary)
        .args(["--admin-addr", &format!("127.0.0.1:{port}")])
        .args(["--selector", &format!("{}={}", SELECTOR.0, SELECTOR.1)])
        .args(["--log-level", "warn"])
        .env("KUBECONFIG", &env.cp.kubeconfig)
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("linkerd-failover did not start: {e}"))
}

/// The scales at which the controller is judged against the peer.
const JUDGED_AT: [usize; 2] = [1_000, 10_000];
/// Ours at most this share of the peer's p50 and p99.
const LATENCY_SHARE: f64 = 0.8;
/// Our peak RSS at most this share of the peer's.
const RSS_SHARE: f64 = 0.2;

/// The controller and the peer side by side, at each scale the peer ran at.
pub fn print(results: &[ScaleResult]) {
    let with_peer: Vec<&ScaleResult> = results.iter().filter(|r| r.peer.is_some()).collect();
    if with_peer.is_empty() {
        return;
    }
    println!(
        "\nlinkerd-failover beside the controller (same control plane, churn and policies, in turns; write ack → TrafficSplit change seen), ms:\n"
    );
    println!(
        "| policies | churn/s | controller | p50 | p95 | p99 | max | lost | writes per change | CPU ms per change | writes while idle | peak RSS MiB |"
    );
    println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in with_peer {
        let Some(scale) = &r.peer else { continue };
        if let Some(why) = &scale.not_measured {
            println!(
                "| {} | | linkerd-failover | not measured: {why} | | | | | | | | |",
                r.policies
            );
            continue;
        }
        for l in &r.latency {
            let Some(p) = &l.peer else { continue };
            let ours: f64 = ["trafficsplit", "status", "event"]
                .iter()
                .map(|k| l.writes_per_change.get(*k).copied().unwrap_or(0.0))
                .sum();
            let rows = [
                (
                    "this one",
                    &l.controller,
                    l.lost[0],
                    ours,
                    l.cpu_ms_per_change,
                    r.writes_in_quiet_period,
                    r.peak_rss_mib,
                ),
                (
                    "linkerd-failover",
                    &p.latency,
                    p.lost,
                    p.writes_per_change,
                    p.cpu_ms_per_change,
                    scale.writes_in_quiet_period as f64,
                    scale.peak_rss_mib,
                ),
            ];
            for (who, lat, lost, writes, cpu, idle, rss) in rows {
                println!(
                    "| {} | {} | {who} | {:.1} | {:.1} | {:.1} | {:.1} | {lost} | {writes:.2} | {cpu:.2} | {idle} | {rss:.1} |",
                    r.policies, l.churn_per_second, lat.p50_ms, lat.p95_ms, lat.p99_ms, lat.max_ms,
                );
            }
        }
    }
}

/// Ours against the peer's at each of [`JUDGED_AT`]: p50 and p99 at most [`LATENCY_SHARE`] of
/// its own, none lost by either, our peak RSS at most [`RSS_SHARE`] of its own; "not measured",
/// and why, where the peer did not run.
pub fn verdicts(results: &[ScaleResult]) -> Vec<Verdict> {
    let mut v = Vec::new();
    for n in JUDGED_AT {
        let r = results.iter().find(|r| r.policies == n);
        let why = match r.map(|r| &r.peer) {
            None => Some(format!("{n} policies not run (--scales)")),
            Some(None) => Some(format!(
                "linkerd-failover not run at {n} policies (--peer-at)"
            )),
            Some(Some(scale)) => scale.not_measured.clone(),
        };
        let targets = targets(n, r);
        match (r, why) {
            (Some(r), None) => v.extend(judged(r)),
            (_, why) => {
                let why = why.unwrap_or_default();
                v.extend(targets.into_iter().map(|target| Verdict {
                    target,
                    measured: format!("not measured: {why}"),
                    met: None,
                }));
            }
        }
    }
    v
}

/// The targets at scale `n`: per churn rate measured there (the base rate when none was).
fn targets(n: usize, r: Option<&ScaleResult>) -> Vec<String> {
    let rates: Vec<u64> = r
        .map(|r| r.latency.iter().map(|l| l.churn_per_second).collect())
        .unwrap_or_default();
    let rates = if rates.is_empty() { vec![0] } else { rates };
    let mut t = Vec::new();
    for rate in rates {
        let at = at(n, rate);
        t.push(format!("p50 ≤ {LATENCY_SHARE}x linkerd-failover's ({at})"));
        t.push(format!("p99 ≤ {LATENCY_SHARE}x linkerd-failover's ({at})"));
        t.push(format!(
            "0 lost changes, ours and linkerd-failover's ({at})"
        ));
    }
    t.push(format!(
        "peak RSS ≤ {RSS_SHARE}x linkerd-failover's ({n} policies)"
    ));
    t
}

fn at(n: usize, rate: u64) -> String {
    if rate == 0 {
        format!("{n} policies")
    } else {
        format!("{n} policies, {rate}/s churn")
    }
}

/// The verdicts of a scale the peer was measured at.
fn judged(r: &ScaleResult) -> Vec<Verdict> {
    let mut v = Vec::new();
    let mut targets = targets(r.policies, Some(r)).into_iter();
    for l in &r.latency {
        let theirs = l.peer.clone().unwrap_or_default();
        for (ours, peers) in [
            (l.controller.p50_ms, theirs.latency.p50_ms),
            (l.controller.p99_ms, theirs.latency.p99_ms),
        ] {
            v.push(measured_verdict(
                targets.next().unwrap_or_default(),
                &[&l.controller, &theirs.latency],
                || format!("{:.2}x ({ours:.1} / {peers:.1} ms)", ours / peers.max(1e-6)),
                || ours <= LATENCY_SHARE * peers,
            ));
        }
        v.push(verdict(
            targets.next().unwrap_or_default(),
            format!("{} and {}", l.lost[0], theirs.lost),
            l.lost[0] == 0 && theirs.lost == 0 && l.peer.is_some(),
        ));
    }
    let theirs = r.peer.as_ref().map_or(0.0, |p| p.peak_rss_mib);
    v.push(verdict(
        targets.next().unwrap_or_default(),
        format!(
            "{:.2}x ({:.1} / {theirs:.1} MiB)",
            r.peak_rss_mib / theirs.max(1e-6),
            r.peak_rss_mib
        ),
        r.peak_rss_mib <= RSS_SHARE * theirs,
    ));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        latency::{Latency, PeerLatency},
        report::Percentiles,
    };

    fn ms(p50_ms: f64, p99_ms: f64) -> Percentiles {
        Percentiles {
            samples: 400,
            p50_ms,
            p95_ms: p99_ms,
            p99_ms,
            max_ms: p99_ms,
        }
    }

    /// What one scale measured of both: p50 and p99, changes lost, peak RSS (ours first).
    #[derive(Clone, Copy)]
    struct Figures {
        ours: (f64, f64),
        theirs: (f64, f64),
        lost: [usize; 2],
        rss: (f64, f64),
    }

    /// Figures that meet every target.
    const GOOD: Figures = Figures {
        ours: (8.0, 20.0),
        theirs: (12.0, 40.0),
        lost: [0, 0],
        rss: (30.0, 200.0),
    };

    fn scale(n: usize, f: Figures) -> ScaleResult {
        ScaleResult {
            policies: n,
            latency: vec![Latency {
                churn_per_second: 50,
                controller: ms(f.ours.0, f.ours.1),
                lost: [f.lost[0], 0, 0],
                peer: Some(PeerLatency {
                    latency: ms(f.theirs.0, f.theirs.1),
                    lost: f.lost[1],
                    ..PeerLatency::default()
                }),
                ..Latency::default()
            }],
            peak_rss_mib: f.rss.0,
            peer: Some(PeerScale {
                peak_rss_mib: f.rss.1,
                ..PeerScale::default()
            }),
            ..ScaleResult::default()
        }
    }

    /// The verdicts at both judged scales, each measured with `f`.
    fn met(f: Figures) -> Vec<Option<bool>> {
        let results: Vec<ScaleResult> = JUDGED_AT.iter().map(|&n| scale(n, f)).collect();
        verdicts(&results).into_iter().map(|v| v.met).collect()
    }

    #[test]
    fn faster_than_four_fifths_of_the_peer_with_a_fifth_of_its_memory_is_met() {
        assert_eq!(met(GOOD), vec![Some(true); 8]);
    }

    #[test]
    fn a_p50_or_p99_over_four_fifths_of_the_peers_is_missed() {
        let slow_p50 = met(Figures {
            ours: (10.0, 20.0),
            ..GOOD
        });
        assert_eq!(slow_p50[..2], [Some(false), Some(true)]);
        let slow_p99 = met(Figures {
            ours: (8.0, 33.0),
            ..GOOD
        });
        assert_eq!(slow_p99[..2], [Some(true), Some(false)]);
    }

    #[test]
    fn a_change_lost_by_either_is_missed() {
        for lost in [[1, 0], [0, 1]] {
            assert_eq!(met(Figures { lost, ..GOOD })[2], Some(false), "{lost:?}");
        }
    }

    #[test]
    fn a_peak_rss_over_a_fifth_of_the_peers_is_missed() {
        let heavy = Figures {
            rss: (41.0, 200.0),
            ..GOOD
        };
        assert_eq!(met(heavy)[3], Some(false));
    }

    #[test]
    fn without_the_peer_every_target_says_not_measured_and_why() {
        let mut results: Vec<ScaleResult> = JUDGED_AT.iter().map(|&n| scale(n, GOOD)).collect();
        results[0].peer = Some(PeerScale::not_measured("no archive"));
        results[1].peer = None;
        let v = verdicts(&results);
        assert!(v.iter().all(|v| v.met.is_none()));
        assert!(v[0].measured.contains("no archive"));
        assert!(v[4].measured.contains("--peer-at"));
        assert!(
            verdicts(&[])
                .iter()
                .all(|v| v.met.is_none() && v.measured.contains("--scales"))
        );
    }
}
