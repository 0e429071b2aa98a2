//! Recovery: kube-apiserver (then etcd) stopped and started again, repeatedly; after each
//! restart, once `/readyz` answers ok, one readiness change is made and timed until the
//! controller's TrafficSplit has it (read by polling: the benchmark's own watch reconnects at
//! its own pace, which is not what is measured).

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use failover::route::trafficsplit::TrafficSplit;
use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{
    Api,
    api::{WatchEvent, WatchParams},
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
    /// How long the component took to serve again (`/readyz` ok) after its start.
    pub back_in: Percentiles,
}

/// One restart's figures.
struct Sample {
    change: Duration,
    delivered: Option<Duration>,
    back_in: Duration,
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

/// Waits until the API server's `/readyz` answers ok.
async fn api_ready(env: &TestEnv) {
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
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "the API server never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The weights of policy `name`'s TrafficSplit, if it can be read now.
async fn weights(api: &Api<TrafficSplit>, name: &str) -> Option<Vec<i64>> {
    let ts = api.get(name).await.ok()?;
    Some(ts.spec.backends.iter().map(|b| b.weight).collect())
}

/// One restart of `component`, then one timed readiness change of policy `name`.
async fn one(env: &TestEnv, component: &str, name: &str, ready: bool) -> Sample {
    let dir = env.cp.dir.to_string_lossy().to_string();
    env.cp.script(&["stop-component", &dir, component]);
    env.cp.script(&["start-component", &dir, component]);
    let started = Instant::now();
    api_ready(env).await;
    let back_in = started.elapsed();
    let slices: Api<EndpointSlice> = env.api();
    let routes: Api<TrafficSplit> = env.api();
    let delivery = watch_slice(&slices, &format!("{name}-bench"), ready).await;
    // The first write after a restart may meet a pooled connection the old server closed.
    let mut acked = None;
    for _ in 0..50 {
        let attempt = tokio::time::timeout(Duration::from_secs(2), set_ready(&slices, name, ready));
        if let Ok(at) = attempt.await {
            acked = Some(at);
            break;
        }
    }
    let acked = acked.expect("the readiness change was written");
    let expected = if ready { vec![1, 0, 0] } else { vec![0, 1, 0] };
    while weights(&routes, name).await.as_ref() != Some(&expected) {
        assert!(
            acked.elapsed() < Duration::from_secs(120),
            "{name} never changed"
        );
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
    Sample {
        change,
        delivered,
        back_in,
    }
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
    settle(&controller).await;
    let mut picks = Picks::new();
    let mut down: HashSet<usize> = HashSet::new();
    let mut results = Vec::new();
    for component in ["kube-apiserver", "etcd"] {
        let (mut changes, mut delivered, mut backs) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..o.restarts {
            let i = picks.next(n);
            let ready = down.contains(&i);
            let sample = one(&env, component, &format!("p{i}"), ready).await;
            if ready {
                down.remove(&i)
            } else {
                down.insert(i)
            };
            eprintln!(
                "[recovery {n}] {component} back in {:.2?}; first change applied in {:.2?}, delivered to a new watch of its slice in {:.2?}",
                sample.back_in, sample.change, sample.delivered
            );
            changes.push(sample.change);
            delivered.extend(sample.delivered);
            backs.push(sample.back_in);
        }
        results.push(Recovery {
            component: component.to_string(),
            policies: n,
            first_change: percentiles(changes),
            delivered: percentiles(delivered),
            back_in: percentiles(backs),
        });
    }
    drop(controller);
    env.cleanup().await;
    results
}
