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
    let (flips, gap) = (o.flips, Duration::from_millis(o.gap_ms));
    let slices: Api<EndpointSlice> = env.api();
    let before = writes(controller).await;
    let cpu_before = crate::startup::usage(controller.pid()).0;
    let mut samples = Vec::new();
    let mut picks = Picks::new();
    for _ in 0..flips {
        let name = format!("p{}", picks.next(n));
        for (ready, expected) in [(false, [0i64, 1, 0]), (true, [1i64, 0, 0])] {
            let acked = set_ready(&slices, &name, ready).await;
            let seen = watch
                .wait_for(&name, &expected, Duration::from_secs(30))
                .await
                .expect("TrafficSplit change");
            samples.push(seen.saturating_duration_since(acked));
            pause(gap).await;
        }
    }
    // Let the status writes and Events of the last flip land.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = writes(controller).await;
    let changes = (2 * flips) as f64;
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
    Latency {
        churn_per_second,
        controller: percentiles(samples),
        floor: floor(env, watch, o, false).await,
        floor_same_writes: floor(env, watch, o, true).await,
        cpu_ms_per_change,
        writes_per_change,
    }
}

/// The same number of changes through the relay, on the same control plane, with the controller
/// and the churn still running; with `extra_writes`, the relay also writes what the controller
/// writes after each route.
async fn floor(env: &TestEnv, watch: &SplitWatch, o: &Options, extra_writes: bool) -> Percentiles {
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
    relay.abort();
    if let Some((owner, _)) = target {
        owner.cleanup().await;
    }
    percentiles(samples)
}

/// A copy of policy `p0` (its spec, and the status the controller wrote) in a namespace of its
/// own, for the relay to write the status of.
async fn status_target(env: &TestEnv) -> (TestEnv, StatusTarget) {
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

/// Waits `gap` (nothing at all when it is zero).
async fn pause(gap: Duration) {
    if !gap.is_zero() {
        tokio::time::sleep(gap).await;
    }
}
