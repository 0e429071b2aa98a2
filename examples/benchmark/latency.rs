//! Failover latency: readiness flips through the controller, and the same flips through the
//! relay (the floor), timed from the acknowledgement of the EndpointSlice write to the moment the
//! independent watch sees the TrafficSplit change.

use std::{collections::HashMap, time::Duration};

use failover::{api::FailoverPolicy, route::trafficsplit::TrafficSplit};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Api, api::PostParams};
use serde_json::json;

use crate::{
    Options,
    apiserver::ControlPlaneLoad,
    objects::{Picks, set_ready},
    report::{Percentiles, percentiles},
    support::{ControllerProcess, TestEnv, api_writes},
    watches::{SplitWatch, StatusTarget, start_relay},
};

/// The latency of one churn rate: ours, the floor's, and our writes per change.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Latency {
    pub churn_per_second: u64,
    pub controller: Percentiles,
    pub floor: Percentiles,
    /// The relay writing what the controller writes per change (the route, then a policy's
    /// status applied and one Event created, in the background).
    pub floor_same_writes: Percentiles,
    /// What the control plane did over the controller's changes, over the relay's, and over the
    /// relay's making the same writes.
    pub control_plane: [ControlPlaneLoad; 3],
    /// The controller's CPU time over the changes (and the churn meanwhile), per change.
    pub cpu_ms_per_change: f64,
    pub writes_per_change: HashMap<String, f64>,
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

/// `flips` random policies made not ready and ready again, through the controller; then the same
/// number of changes through the relay.
pub async fn measure(
    env: &TestEnv,
    controller: &ControllerProcess,
    watch: &SplitWatch,
    n: usize,
    o: &Options,
    churn_per_second: u64,
) -> Latency {
    let before = writes(controller).await;
    let cpu_before = crate::startup::usage(controller.pid()).0;
    let server_before = ControlPlaneLoad::now(env).await;
    let samples = controller_changes(env, watch, n, o).await;
    // Let the status writes and Events of the last flip land.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = writes(controller).await;
    let server = ControlPlaneLoad::now(env).await.since(server_before);
    eprintln!("[{n}] over the controller's changes, {}", server.describe());
    let changes = (2 * o.flips) as f64;
    let cpu_ms_per_change =
        (crate::startup::usage(controller.pid()).0 - cpu_before) * 1000.0 / changes;
    eprintln!(
        "[{n}] the controller's CPU time per change: {cpu_ms_per_change:.2} ms (churn {churn_per_second}/s included)"
    );
    let writes_per_change = after
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                (v - before.get(k).copied().unwrap_or(0.0)) / changes,
            )
        })
        .collect();
    let (one_write, floor_server) = floor(env, watch, o, false).await;
    let (floor_same_writes, same_server) = floor(env, watch, o, true).await;
    eprintln!(
        "[{n}] over the relay's changes, {}",
        floor_server.describe()
    );
    eprintln!(
        "[{n}] over the changes of the relay making the same writes, {}",
        same_server.describe()
    );
    Latency {
        churn_per_second,
        controller: percentiles(samples),
        floor: one_write,
        floor_same_writes,
        control_plane: [server, floor_server, same_server],
        cpu_ms_per_change,
        writes_per_change,
    }
}

/// `flips` random policies made not ready and ready again, each change timed from the write's
/// acknowledgement to the route change; the slowest are printed with the time of their write.
async fn controller_changes(
    env: &TestEnv,
    watch: &SplitWatch,
    n: usize,
    o: &Options,
) -> Vec<Duration> {
    let slices: Api<EndpointSlice> = env.api();
    let mut samples = Vec::new();
    let mut slowest = Slowest::default();
    let mut picks = Picks::new();
    for _ in 0..o.flips {
        let name = format!("p{}", picks.next(n));
        for (ready, expected) in [(false, [0i64, 1, 0]), (true, [1i64, 0, 0])] {
            let acked = set_ready(&slices, &name, ready).await;
            let acked_at = chrono::Utc::now();
            let seen = watch
                .wait_for(&name, &expected, Duration::from_secs(30))
                .await
                .expect("TrafficSplit change");
            let took = seen.saturating_duration_since(acked);
            slowest.offer(took, acked_at, &name);
            samples.push(took);
            pause(Duration::from_millis(o.gap_ms)).await;
        }
    }
    slowest.print(n);
    samples
}

/// The same number of changes through the relay, on the same control plane, with the controller
/// and the churn still running; with `extra_writes`, the relay also writes what the controller
/// writes after each route.
async fn floor(
    env: &TestEnv,
    watch: &SplitWatch,
    o: &Options,
    extra_writes: bool,
) -> (Percentiles, ControlPlaneLoad) {
    let (flips, gap) = (o.flips, Duration::from_millis(o.gap_ms));
    let splits: Api<TrafficSplit> = env.api();
    let slices: Api<EndpointSlice> = env.api();
    let relay_split: TrafficSplit = serde_json::from_value(json!({"apiVersion": "split.smi-spec.io/v1alpha2", "kind": "TrafficSplit",
        "metadata": {"name": "relay"}, "spec": {"service": "relay", "backends": [{"service": "relay", "weight": 1}, {"service": "relay-b", "weight": 0}]}})).expect("ts");
    let _ = splits.create(&PostParams::default(), &relay_split).await;
    set_ready(&slices, "relay", true).await;
    let target = if extra_writes {
        Some(status_target(env).await)
    } else {
        None
    };
    let relay = start_relay(
        env.client.clone(),
        &env.ns,
        target.as_ref().map(|(_, t)| t.clone()),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _ = watch
        .wait_for("relay", &[1, 0], Duration::from_secs(10))
        .await;
    let server_before = ControlPlaneLoad::now(env).await;
    let mut samples = Vec::new();
    for _ in 0..flips {
        for (ready, expected) in [(false, [0i64, 1]), (true, [1i64, 0])] {
            let acked = set_ready(&slices, "relay", ready).await;
            let seen = watch
                .wait_for("relay", &expected, Duration::from_secs(30))
                .await
                .expect("relay change");
            samples.push(seen.saturating_duration_since(acked));
            pause(gap).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let server = ControlPlaneLoad::now(env).await.since(server_before);
    relay.abort();
    if let Some((owner, _)) = target {
        owner.cleanup().await;
    }
    (percentiles(samples), server)
}

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
struct Slowest(Vec<(Duration, chrono::DateTime<chrono::Utc>, String)>);

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
