//! Failover latency: readiness flips through the controller, through a relay that makes one
//! write per change (the floor), through a relay that makes the controller's three writes per
//! change, and, where it runs, through linkerd-failover (`peer`), each timed from the
//! acknowledgement of the readiness write to the moment an independent watch sees the
//! TrafficSplit change. They run in turns, a block of changes each, ten blocks, so they share
//! the same load window (the API server's garbage collections, the churn) instead of following
//! each other. A change not seen within 30 s is counted as lost and the run goes on.

use std::{collections::HashMap, time::Duration};

use failover_core::{api::FailoverPolicy, route::trafficsplit::TrafficSplit};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Api, api::PostParams};
use serde_json::json;

use crate::{
    Options,
    apiserver::ControlPlaneLoad,
    objects::{Picks, set_ready},
    peer::{FAILED_OVER, ON_PRIMARY, Peer},
    profile::{Profile, Recording},
    relay,
    report::{Percentiles, percentiles},
    support::{ControllerProcess, TestEnv, api_writes},
    watches::{Churn, SplitWatch, StatusTarget, hold_controller_watches, start_relay},
};

/// How many turns the three sources of changes take.
pub const BLOCKS: usize = 10;
/// How long a change may take before it counts as lost.
const LOST_AFTER: Duration = Duration::from_secs(30);

/// The latency of one churn rate: ours, the floor's, and our writes per change.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Latency {
    pub churn_per_second: u64,
    pub controller: Percentiles,
    pub floor: Percentiles,
    /// The relay writing what the controller writes per change (the route, then a policy's
    /// status applied and one Event created, in the background).
    pub floor_same_writes: Percentiles,
    /// Changes not seen within 30 s: the controller's, the floor's, the same-writes floor's.
    pub lost: [usize; 3],
    /// What the control plane did over the controller's changes, over the relay's, and over the
    /// relay's making the same writes.
    pub control_plane: [ControlPlaneLoad; 3],
    /// The controller's CPU time over its changes (and the churn meanwhile), per change.
    pub cpu_ms_per_change: f64,
    pub writes_per_change: HashMap<String, f64>,
    /// linkerd-failover's changes, in turns with ours, when it runs at this scale.
    pub peer: Option<PeerLatency>,
}

/// linkerd-failover's changes in its turns: timed as ours, on the same policies.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PeerLatency {
    pub latency: Percentiles,
    /// Changes not seen within 30 s.
    pub lost: usize,
    /// Its CPU time over its turns (and the churn meanwhile), per change.
    pub cpu_ms_per_change: f64,
    /// Its writes (TrafficSplit patches and Events) per change.
    pub writes_per_change: f64,
    pub control_plane: ControlPlaneLoad,
}

/// The controller's write counters that matter here.
pub async fn writes(controller: &ControllerProcess) -> HashMap<String, f64> {
    api_writes(controller, &["trafficsplit", "status", "event", "lease"]).await
}

/// Waits until the controller's write counters stop moving (its start-up writes landed).
pub async fn settle(controller: &ControllerProcess) {
    let mut last = writes(controller).await;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = writes(controller).await;
        if now == last {
            return;
        }
        last = now;
    }
}

/// What one source of changes measured over its turns.
#[derive(Default)]
pub struct Phase {
    pub samples: Vec<Duration>,
    pub lost: usize,
    load: Option<ControlPlaneLoad>,
    /// The API server's CPU profile over the turns.
    profile: Profile,
}

/// One turn of a phase under way: the control plane's counts and the API server's profile
/// since it began, which begins with the API server's garbage collected.
struct Turn {
    load: ControlPlaneLoad,
    recording: Recording,
}

impl Turn {
    async fn begin(env: &TestEnv) -> Self {
        crate::profile::collect_garbage(&env.client).await;
        let load = ControlPlaneLoad::now(env).await;
        Self {
            load,
            recording: Recording::start(env.client.clone()),
        }
    }

    /// Ends the turn: its counts and profile are added to `phase`'s.
    async fn end(self, env: &TestEnv, phase: &mut Phase) {
        let load = ControlPlaneLoad::now(env).await.since(self.load);
        phase.load = Some(match phase.load.take() {
            Some(sum) => sum.plus(load),
            None => load,
        });
        phase.profile.add(self.recording.finish().await);
    }
}

/// The controller's counters over its own turns.
#[derive(Default)]
struct Counters {
    writes: HashMap<String, f64>,
    cpu_s: f64,
}

/// `flips` random policies made not ready and ready again through the controller, and as many
/// changes through each relay, in turns.
pub async fn measure(
    env: &TestEnv,
    controller: &ControllerProcess,
    watch: &SplitWatch,
    n: usize,
    o: &Options,
    churn_per_second: u64,
    peer: Option<(&Peer, &Churn)>,
) -> Latency {
    let relays = Relays::start(env, watch).await;
    let slices: Api<EndpointSlice> = env.api();
    let gap = Duration::from_millis(o.gap_ms);
    let (mut ours, mut relay, mut same) = (Phase::default(), Phase::default(), Phase::default());
    let mut counters = Counters::default();
    let mut slowest = Slowest::default();
    let mut picks = Picks::new();
    let mut theirs = PeerTurns::default();
    for block in 0..BLOCKS {
        let flips = o.flips / BLOCKS + usize::from(block < o.flips % BLOCKS);
        let (writes_before, cpu_before) = (writes(controller).await, cpu(controller));
        let turn = Turn::begin(env).await;
        for _ in 0..flips {
            let name = format!("p{}", picks.next(n));
            for (ready, expected) in [(false, WEIGHTS_FAILED_OVER), (true, WEIGHTS_ON_PRIMARY)] {
                let change = timed(&slices, watch, &name, ready, &expected).await;
                record(&mut ours, change, &name, &mut slowest);
                pause(gap).await;
            }
        }
        // Let the status writes and Events of the block's last flip land.
        tokio::time::sleep(Duration::from_secs(1)).await;
        turn.end(env, &mut ours).await;
        counters.add(
            &writes_before,
            &writes(controller).await,
            cpu(controller) - cpu_before,
        );
        let turns: [(&mut Phase, &str, &SplitWatch, [&[i64]; 2]); 2] = [
            (&mut relay, Relays::ONE, watch, [&[0, 1], &[1, 0]]),
            (
                &mut same,
                Relays::SAME,
                &relays.same,
                [&WEIGHTS_FAILED_OVER, &WEIGHTS_ON_PRIMARY],
            ),
        ];
        for (phase, name, seen_by, weights) in turns {
            relay_turn(env, seen_by, phase, name, flips, gap, weights).await;
        }
        if let Some((peer, churn)) = peer {
            churn.turn_to(Some(peer.endpoints()));
            theirs.turn(env, peer, n, flips, gap).await;
            churn.turn_to(None);
        }
    }
    relays.stop().await;
    slowest.print(n);
    crate::profile::report(
        n,
        churn_per_second,
        &o.out,
        [
            ("controller", &ours.profile),
            ("relay", &relay.profile),
            ("relay-same", &same.profile),
        ],
    );
    let mut latency = report(
        n,
        churn_per_second,
        (2 * o.flips) as f64,
        [ours, relay, same],
        counters,
    );
    latency.peer = peer.map(|_| theirs.report(n));
    latency
}

/// linkerd-failover's turns: its changes, writes and CPU time over them.
#[derive(Default)]
struct PeerTurns {
    phase: Phase,
    picks: Option<Picks>,
    writes: usize,
    cpu_s: f64,
}

impl PeerTurns {
    /// One turn: `flips` of the policies the controller's turns flip (the same sequence), down
    /// and up again, through the peer's Endpoints.
    async fn turn(&mut self, env: &TestEnv, peer: &Peer, n: usize, flips: usize, gap: Duration) {
        let endpoints = peer.endpoints();
        let picks = self.picks.get_or_insert_with(Picks::new);
        let (writes_before, cpu_before) = (peer.writes(), peer.cpu_s());
        let turn = Turn::begin(env).await;
        for _ in 0..flips {
            let name = format!("p{}", picks.next(n));
            for (ready, expected) in [(false, FAILED_OVER), (true, ON_PRIMARY)] {
                let change = timed(&endpoints, &peer.watch, &name, ready, &expected).await;
                record(&mut self.phase, change, &name, &mut Slowest::default());
                pause(gap).await;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        turn.end(env, &mut self.phase).await;
        self.writes += peer.writes() - writes_before;
        self.cpu_s += peer.cpu_s() - cpu_before;
    }

    fn report(self, n: usize) -> PeerLatency {
        let changes = (self.phase.samples.len() + self.phase.lost).max(1) as f64;
        let load = self.phase.load.unwrap_or_default();
        eprintln!("[{n}] over linkerd-failover's changes, {}", load.describe());
        PeerLatency {
            latency: percentiles(self.phase.samples),
            lost: self.phase.lost,
            cpu_ms_per_change: self.cpu_s * 1000.0 / changes,
            writes_per_change: self.writes as f64 / changes,
            control_plane: load,
        }
    }
}

/// One turn of relay `name`: `flips` changes down and up again, seen by `watch` as `weights`
/// (failed over, on the primary).
async fn relay_turn(
    env: &TestEnv,
    watch: &SplitWatch,
    phase: &mut Phase,
    name: &str,
    flips: usize,
    gap: Duration,
    weights: [&[i64]; 2],
) {
    let slices: Api<EndpointSlice> = env.api();
    let turn = Turn::begin(env).await;
    for _ in 0..flips {
        for (ready, expected) in [(false, weights[0]), (true, weights[1])] {
            let change = timed(&slices, watch, name, ready, expected).await;
            record(phase, change, name, &mut Slowest::default());
            pause(gap).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    turn.end(env, phase).await;
}

/// The figures of the three phases.
fn report(
    n: usize,
    churn_per_second: u64,
    changes: f64,
    [ours, relay, same]: [Phase; 3],
    counters: Counters,
) -> Latency {
    let lost = [ours.lost, relay.lost, same.lost];
    let loads = [ours.load, relay.load, same.load].map(Option::unwrap_or_default);
    for (load, whose) in loads.iter().zip([
        "the controller's changes",
        "the relay's changes",
        "the changes of the relay making the same writes",
    ]) {
        eprintln!("[{n}] over {whose}, {}", load.describe());
    }
    let cpu_ms_per_change = counters.cpu_s * 1000.0 / changes;
    eprintln!(
        "[{n}] the controller's CPU time per change: {cpu_ms_per_change:.2} ms (churn {churn_per_second}/s included); lost changes: {lost:?}"
    );
    Latency {
        churn_per_second,
        controller: percentiles(ours.samples),
        floor: percentiles(relay.samples),
        floor_same_writes: percentiles(same.samples),
        lost,
        control_plane: loads,
        cpu_ms_per_change,
        writes_per_change: counters
            .writes
            .into_iter()
            .map(|(k, v)| (k, v / changes))
            .collect(),
        peer: None,
    }
}

impl Counters {
    fn add(&mut self, before: &HashMap<String, f64>, after: &HashMap<String, f64>, cpu_s: f64) {
        for (k, v) in after {
            *self.writes.entry(k.clone()).or_default() += v - before.get(k).copied().unwrap_or(0.0);
        }
        self.cpu_s += cpu_s;
    }
}

fn cpu(controller: &ControllerProcess) -> f64 {
    crate::startup::usage(controller.pid()).0
}

/// One change: written, then waited for; `None` when it was not seen within [`LOST_AFTER`].
pub async fn timed<K: crate::objects::Readiness>(
    slices: &Api<K>,
    watch: &SplitWatch,
    name: &str,
    ready: bool,
    expected: &[i64],
) -> Option<(Duration, chrono::DateTime<chrono::Utc>)> {
    let acked = set_ready(slices, name, ready).await;
    let acked_at = chrono::Utc::now();
    let seen = watch.wait_for(name, expected, LOST_AFTER).await?;
    Some((seen.saturating_duration_since(acked), acked_at))
}

pub fn record(
    phase: &mut Phase,
    change: Option<(Duration, chrono::DateTime<chrono::Utc>)>,
    name: &str,
    slowest: &mut Slowest,
) {
    match change {
        Some((took, at)) => {
            slowest.offer(took, at, name);
            phase.samples.push(took);
        }
        None => {
            phase.lost += 1;
            eprintln!("lost change: {name} not seen within {LOST_AFTER:?}");
        }
    }
}

/// The two relays: one makes one write per change (the bare floor); the other (`relay`) the
/// controller's writes, triggered by the controller's EndpointSlice watch, and holds its other
/// watches, from the start of the measurement to its end, in every phase's turns as the
/// controller's own are.
struct Relays {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    same_writes: relay::Running,
    /// The namespace of the relay making the controller's writes: its policy and route.
    own: TestEnv,
    /// An independent watch of its route.
    same: SplitWatch,
}

impl Relays {
    const ONE: &'static str = "relay";
    const SAME: &'static str = "relay-same";

    async fn start(env: &TestEnv, watch: &SplitWatch) -> Self {
        let splits: Api<TrafficSplit> = env.api();
        let slices: Api<EndpointSlice> = env.api();
        let split: TrafficSplit = serde_json::from_value(json!({"apiVersion": "split.smi-spec.io/v1alpha2", "kind": "TrafficSplit",
            "metadata": {"name": Self::ONE}, "spec": {"service": Self::ONE, "backends": [{"service": Self::ONE, "weight": 1}, {"service": format!("{}-b", Self::ONE), "weight": 0}]}})).expect("ts");
        let _ = splits.create(&PostParams::default(), &split).await;
        set_ready(&slices, Self::ONE, true).await;
        for backend in ["", "-a", "-b"] {
            set_ready(&slices, &format!("{}{backend}", Self::SAME), true).await;
        }
        let own = TestEnv::on(env.cp, "bench-relay").await.expect("namespace");
        let target = relay::Target {
            members: vec![relay::Member::create(&own, Self::SAME).await],
            group: None,
            written: relay::controller_writes(env, watch, "p0", &["p0".into()], None).await,
        };
        let mut tasks = hold_controller_watches(&env.client, &env.ns, &own.ns);
        tasks.push(start_relay(env.client.clone(), &env.ns, Self::ONE));
        let same_writes = relay::start(env.client.clone(), &env.ns, Self::SAME, target);
        let same = SplitWatch::start(own.api());
        let _ = watch
            .wait_for(Self::ONE, &[1, 0], Duration::from_secs(10))
            .await;
        let _ = same
            .wait_for(Self::SAME, &WEIGHTS_ON_PRIMARY, Duration::from_secs(10))
            .await;
        Self {
            tasks,
            same_writes,
            own,
            same,
        }
    }

    async fn stop(self) {
        for task in self.tasks {
            task.abort();
        }
        drop((self.same, self.same_writes));
        self.own.cleanup_and_wait(Duration::from_secs(60)).await;
    }
}

/// The controller's weights, as the watch reads them: on the primary, failed over.
pub const WEIGHTS_ON_PRIMARY: [i64; 3] = [1, 0, 0];
pub const WEIGHTS_FAILED_OVER: [i64; 3] = [0, 1, 0];

/// A copy of policy `p0` (its spec, and the status the controller wrote) in a namespace of its
/// own, for the relay to write the status of.
pub async fn status_target(env: &TestEnv) -> (TestEnv, StatusTarget) {
    let original = env
        .api::<FailoverPolicy>()
        .get("p0")
        .await
        .expect("policy p0");
    let own = TestEnv::on(env.cp, "bench-relay-status")
        .await
        .expect("namespace");
    let api: Api<FailoverPolicy> = own.api();
    let copy = FailoverPolicy::new("relay", original.spec.clone());
    api.create(&PostParams::default(), &copy)
        .await
        .expect("relay policy");
    let status = serde_json::to_value(&original.status).expect("status");
    (own, StatusTarget { api, status })
}

/// The slowest changes of a run, with the wall-clock time their write was acknowledged, to find
/// them in the controller's log.
#[derive(Default)]
pub struct Slowest(Vec<(Duration, chrono::DateTime<chrono::Utc>, String)>);

impl Slowest {
    const KEPT: usize = 3;

    fn offer(&mut self, took: Duration, acked_at: chrono::DateTime<chrono::Utc>, name: &str) {
        self.0.push((took, acked_at, name.to_string()));
        self.0.sort_by_key(|s| std::cmp::Reverse(s.0));
        self.0.truncate(Self::KEPT);
    }

    fn print(&self, n: usize) {
        for (took, at, name) in &self.0 {
            eprintln!(
                "[{n}] slow change: {name}, written {}, seen after {:.2} ms",
                at.format("%H:%M:%S%.6f"),
                took.as_secs_f64() * 1000.0
            );
        }
    }
}

/// Waits `gap` (nothing at all when it is zero).
async fn pause(gap: Duration) {
    if !gap.is_zero() {
        tokio::time::sleep(gap).await;
    }
}
