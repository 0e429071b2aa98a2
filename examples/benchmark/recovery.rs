//! Recovery: kube-apiserver (then etcd) stopped and started again, repeatedly; after each
//! restart, once `/readyz` answers ok, one readiness change is made and timed until the
//! controller's TrafficSplit has it (read by polling: the benchmark's own watch reconnects at
//! its own pace, which is not what is measured).
//!
//! Two floors are measured with each change: the change delivered to a watch of that one
//! EndpointSlice opened after the restart (when the API server can tell anyone), and a
//! TrafficSplit written by a bare client at the same moment as the change (when the API server
//! can store the route at all: after an etcd restart, a custom resource's writes can wait
//! seconds longer than a built-in kind's, whatever the client does).

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use failover_core::route::trafficsplit::TrafficSplit;
use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams, WatchEvent, WatchParams},
};

use crate::{
    Options,
    latency::settle,
    objects::{Picks, create_scale, set_ready},
    report::{Percentiles, percentiles},
    startup::start_controller,
    support::TestEnv,
    watches::SplitWatch,
};

/// The recovery of one component's restarts.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Recovery {
    pub component: String,
    pub policies: usize,
    /// The first change after each restart, applied this long after it was written.
    pub first_change: Percentiles,
    /// The floor: the same change delivered by the API server to a watch of that one
    /// EndpointSlice opened after the restart, this long after it was written.
    pub delivered: Percentiles,
    /// The other floor: a TrafficSplit written by a bare client at the same moment as the
    /// change, this long until the API server acknowledged it.
    pub route_written: Percentiles,
    /// How long the component took to serve again (`/readyz` ok) after its start.
    pub back_in: Percentiles,
    /// Restarts that could not be measured (the component did not stop or start, the API server
    /// did not come back, the change was never applied), each said in the log.
    pub failed: usize,
}

/// One restart's figures.
struct Sample {
    /// When the change was acknowledged (wall clock, to find it in the controller's log).
    written_at: chrono::DateTime<chrono::Utc>,
    change: Duration,
    delivered: Option<Duration>,
    route_written: Option<Duration>,
    back_in: Duration,
}

/// The TrafficSplit the benchmark writes itself after each restart (no policy owns it).
const PROBE: &str = "recovery-probe";

async fn create_probe(api: &Api<TrafficSplit>) {
    let probe: TrafficSplit = serde_json::from_value(serde_json::json!({
        "apiVersion": "split.smi-spec.io/v1alpha2", "kind": "TrafficSplit",
        "metadata": {"name": PROBE},
        "spec": {"service": PROBE, "backends": [{"service": PROBE, "weight": 1}]}}))
    .expect("probe TrafficSplit");
    api.create(&PostParams::default(), &probe)
        .await
        .expect("the probe TrafficSplit created");
}

/// Writes the probe TrafficSplit (a new annotation each time); how long until acknowledged.
async fn write_probe(api: &Api<TrafficSplit>, n: usize) -> Option<Duration> {
    let started = Instant::now();
    let patch = serde_json::json!({"metadata": {"annotations": {"bench/restart": n.to_string()}}});
    let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
    let write = api.patch(PROBE, &params, &patch);
    match tokio::time::timeout(Duration::from_secs(60), write).await {
        Ok(Ok(_)) => Some(started.elapsed()),
        _ => None,
    }
}

/// A watch of one EndpointSlice opened now (`None` when the API server refuses it); the task
/// it returns ends when the watch sees the slice's endpoint with readiness `ready`.
async fn watch_slice(
    api: &Api<EndpointSlice>,
    name: &str,
    ready: bool,
) -> Option<tokio::task::JoinHandle<Option<Instant>>> {
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    let events = tokio::time::timeout(Duration::from_secs(2), api.watch(&params, "0"))
        .await
        .ok()?
        .ok()?;
    Some(tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            if let Ok(WatchEvent::Added(s) | WatchEvent::Modified(s)) = event {
                let seen = s
                    .endpoints
                    .first()
                    .and_then(|e| e.conditions.as_ref()?.ready);
                if seen == Some(ready) {
                    return Some(Instant::now());
                }
            }
        }
        None
    }))
}

/// Waits until the API server's `/readyz` answers ok; false when it does not within 180 s.
pub async fn api_ready(env: &TestEnv) -> bool {
    let started = Instant::now();
    loop {
        let request = http::Request::get("/readyz")
            .body(Vec::new())
            .expect("request");
        if env
            .client
            .request_text(request)
            .await
            .is_ok_and(|t| t.trim() == "ok")
        {
            return true;
        }
        if started.elapsed() > Duration::from_secs(180) {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The weights of policy `name`'s TrafficSplit, if it can be read now.
async fn weights(api: &Api<TrafficSplit>, name: &str) -> Option<Vec<i64>> {
    let ts = api.get(name).await.ok()?;
    Some(ts.spec.backends.iter().map(|b| b.weight).collect())
}

/// One restart of `component`, then one timed readiness change of policy `name`; why it could
/// not be measured, when it could not.
async fn one(
    env: &TestEnv,
    component: &str,
    name: &str,
    ready: bool,
    n: usize,
) -> Result<Sample, String> {
    let dir = env.cp.dir.to_string_lossy().to_string();
    for action in ["stop-component", "start-component"] {
        let out = env.cp.script(&[action, &dir, component]);
        if !out.status.success() {
            return Err(format!(
                "{action} {component} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    let started = Instant::now();
    if !api_ready(env).await {
        return Err(format!(
            "the API server did not serve again within 180 s after {component} restarted"
        ));
    }
    let back_in = started.elapsed();
    let slices: Api<EndpointSlice> = env.api();
    let routes: Api<TrafficSplit> = env.api();
    let delivery = watch_slice(&slices, &format!("{name}-bench"), ready).await;
    // The first write after a restart may meet a pooled connection the old server closed.
    let change = async {
        for _ in 0..50 {
            let attempt =
                tokio::time::timeout(Duration::from_secs(2), set_ready(&slices, name, ready));
            if let Ok(at) = attempt.await {
                return Some(at);
            }
        }
        None
    };
    let (acked, route_written) = tokio::join!(change, write_probe(&routes, n));
    let acked = acked.ok_or("the readiness change could not be written within 100 s")?;
    let written_at = chrono::Utc::now() - acked.elapsed();
    let expected = if ready { vec![1, 0, 0] } else { vec![0, 1, 0] };
    while weights(&routes, name).await.as_ref() != Some(&expected) {
        if acked.elapsed() > Duration::from_secs(120) {
            return Err(format!("{name}'s route never changed (lost change)"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let change = acked.elapsed();
    let delivered = match delivery {
        Some(task) => tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .ok()
            .and_then(Result::ok)
            .flatten()
            .map(|seen| seen.saturating_duration_since(acked)),
        None => None,
    };
    Ok(Sample {
        written_at,
        change,
        delivered,
        route_written,
        back_in,
    })
}

/// `o.restarts` restarts of kube-apiserver, then of etcd, under a controller of
/// `o.recovery_scale` policies.
pub async fn run(o: &Options) -> Vec<Recovery> {
    let n = o.recovery_scale;
    let env = TestEnv::new(&format!("bench-recovery-{n}"))
        .await
        .expect("control plane");
    create_scale(&env, n).await;
    let splits = SplitWatch::start(env.api());
    let controller = start_controller(&env, o);
    while splits.count_with(&[1, 0, 0]) < n {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(splits);
    create_probe(&env.api()).await;
    settle(&controller).await;
    let mut picks = Picks::new();
    let mut down: HashSet<usize> = HashSet::new();
    let mut results = Vec::new();
    for component in &o.recovery_components {
        let (mut changes, mut delivered, mut written, mut backs) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut failed = 0;
        for restart in 0..o.restarts {
            let i = picks.next(n);
            let ready = down.contains(&i);
            let sample = match one(&env, component, &format!("p{i}"), ready, restart).await {
                Ok(sample) => sample,
                Err(why) => {
                    failed += 1;
                    eprintln!("[recovery {n}] {component} restart {restart} not measured: {why}");
                    api_ready(&env).await;
                    continue;
                }
            };
            if ready {
                down.remove(&i)
            } else {
                down.insert(i)
            };
            eprintln!(
                "[recovery {n}] {component} back in {:.2?}; first change (p{i}, written {}) applied in {:.2?}, delivered to a new watch of its slice in {:.2?}, a bare TrafficSplit write acknowledged in {:.2?}",
                sample.back_in,
                sample.written_at.format("%H:%M:%S%.3f"),
                sample.change,
                sample.delivered,
                sample.route_written
            );
            changes.push(sample.change);
            delivered.extend(sample.delivered);
            written.extend(sample.route_written);
            backs.push(sample.back_in);
        }
        results.push(Recovery {
            component: component.to_string(),
            policies: n,
            first_change: percentiles(changes),
            delivered: percentiles(delivered),
            route_written: percentiles(written),
            back_in: percentiles(backs),
            failed,
        });
    }
    drop(controller);
    drop(env);
    results
}
