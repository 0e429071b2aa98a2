//! Traffic as users see it: on a real node with a real proxy (Traefik serving the Gateway
//! `default/edge`), a policy whose HTTPRoute attaches to the Gateway, and steady requests through
//! the proxy. Each round breaks the primary's only Pod (its readiness file removed) and times the
//! failover as the requests saw it, one event after the other, each seen by a watch of this
//! program:
//!
//! probe file removed → kubelet marks the Pod not ready → the EndpointSlice says so → the route is
//! written (the controller: our segment) → the proxy applies it (the first request the secondary
//! answers); and when the primary answered last.
//!
//! Then the primary comes back through a failback ramp, and a pin and an unpin switch traffic on
//! purpose; every failed request of each is counted.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use failover_core::{
    api::FailoverPolicy,
    route::{RouteKind, gateway::RouteSpec},
};
use futures::StreamExt;
use k8s_openapi::api::{core::v1::Pod, discovery::v1::EndpointSlice};
use kube::{
    Api,
    api::{DynamicObject, Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::{
    Options,
    report::{Percentiles, percentiles},
    startup::start_controller_with,
    support::{
        Answer, ControlPlane, Load, Running, TestEnv, install_crds, ok, start_control_plane_with,
    },
};

/// Requests per second through the proxy.
const RATE: u32 = 100;
/// How long a round may take before it counts as failed.
const ROUND_LIMIT: Duration = Duration::from_secs(90);

/// One failover as the requests saw it, each event in milliseconds after the probe file was
/// removed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Round {
    pub kubelet_not_ready_ms: f64,
    pub slice_not_ready_ms: f64,
    pub route_written_ms: f64,
    pub proxy_applied_ms: f64,
    pub last_primary_ms: f64,
    /// Requests that failed, and those among them sent after the proxy applied the route.
    pub failed: usize,
    pub failed_after_proxy: usize,
}

impl Round {
    /// Our segment: the EndpointSlice event to the route written.
    pub fn ours_ms(&self) -> f64 {
        self.route_written_ms - self.slice_not_ready_ms
    }

    /// From the probe file removed to the last of: the proxy applying the route, the primary's
    /// last answer.
    pub fn whole_ms(&self) -> f64 {
        self.proxy_applied_ms.max(self.last_primary_ms)
    }
}

/// Everything the traffic section measured.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Traffic {
    /// Why it was not measured, when it was not.
    pub not_measured: Option<String>,
    pub rate: u32,
    pub rounds: Vec<Round>,
    /// Rounds that did not complete (each said in the log).
    pub failed_rounds: usize,
    /// Failed requests and all requests during failback ramps, and during pins and unpins.
    pub ramp: (usize, usize),
    pub planned: (usize, usize),
    /// Pins and unpins whose write failed or whose traffic never settled on the backend: each
    /// makes the planned switches a failed measurement.
    pub unsettled_switches: usize,
    pub ours: Percentiles,
    pub whole: Percentiles,
    /// The capacity scenario: without capacity, then with capacity and scaling, the unserved
    /// share on the primary and then spread over the secondaries.
    pub capacity: Vec<crate::capacity::CapacityRun>,
}

/// Events of one kind with the instant this program saw each.
type Seen<T> = Arc<Mutex<Vec<(Instant, T)>>>;

/// Runs `f` on every object a watch of `api` delivers, recording what it returns.
fn record<K, T>(api: Api<K>, config: watcher::Config, f: fn(&K) -> T) -> (Seen<T>, JoinHandle<()>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    T: Send + 'static,
{
    let seen: Seen<T> = Arc::default();
    let into = seen.clone();
    let task = tokio::spawn(async move {
        let mut s = watcher(api, config)
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(event) = s.next().await {
            if let Ok(object) = event {
                let value = f(&object);
                into.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((Instant::now(), value));
            }
        }
    });
    (seen, task)
}

/// When a recorded value first satisfied `pred` at or after `from`.
fn first<T>(seen: &Seen<T>, from: Instant, pred: impl Fn(&T) -> bool) -> Option<Instant> {
    seen.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .find(|(at, v)| *at >= from && pred(v))
        .map(|(at, _)| *at)
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

fn slice_ready(slice: &EndpointSlice) -> usize {
    slice
        .endpoints
        .iter()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .count()
}

fn route_weights(route: &DynamicObject) -> Vec<i32> {
    serde_json::from_value::<RouteSpec>(route.data["spec"].clone())
        .unwrap_or_default()
        .rules
        .first()
        .map(|r| {
            r.backend_refs
                .iter()
                .map(|b| b.weight.unwrap_or(1))
                .collect()
        })
        .unwrap_or_default()
}

/// The traffic section: `o.traffic_rounds` failovers, each with a failback ramp, then as many
/// pins and unpins; "not measured" where this machine cannot host a node.
pub async fn run(o: &Options) -> Traffic {
    if o.traffic_rounds == 0 {
        return not_measured("skipped (--traffic-rounds 0)".into());
    }
    let check =
        std::process::Command::new(crate::support::repo_root().join("hack/control-plane.sh"))
            .arg("check-node")
            .output();
    if let Ok(out) = &check
        && !out.status.success()
    {
        return not_measured(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    let cp: &'static ControlPlane =
        Box::leak(Box::new(start_control_plane_with(&["--node", "--proxy"])));
    install_crds(cp);
    let env = TestEnv::on(cp, "bench-traffic").await.expect("namespace");
    let mut traffic = measure(&env, o).await;
    drop(env);
    traffic.capacity = crate::capacity::measure(cp, o).await;
    let _ = cp.script(&["stop", cp.dir.to_str().unwrap_or_default()]);
    traffic
}

fn not_measured(why: String) -> Traffic {
    eprintln!("[traffic] not measured: {why}");
    Traffic {
        not_measured: Some(why),
        ..Default::default()
    }
}

async fn measure(env: &TestEnv, o: &Options) -> Traffic {
    env.backend("web", 1);
    env.backend("web-east", 1);
    env.wait_ready_replicas("web", 1, ROUND_LIMIT).await;
    env.wait_ready_replicas("web-east", 1, ROUND_LIMIT).await;
    // The Gateway is in another namespace: the cluster admin allows it, as the chart would.
    let controller = start_controller_with(env, o, &["--allowed-gateways", "default/edge"]);
    let policy = json!({"apiVersion": "failover.dev/v1alpha1", "kind": "FailoverPolicy",
        "metadata": {"name": "web"},
        "spec": {"service": "web", "primary": "web", "secondaries": [{"service": "web-east"}],
            "output": "HTTPRoute", "httpRoute": {"port": 80, "gateways": [{"name": "edge", "namespace": "default"}]},
            "failback": {"ramp": {"steps": [25, 50, 100], "every": "3s"}}}});
    ok(
        &env.kubectl_stdin(&["apply", "-f", "-"], &policy.to_string()),
        "applying the policy",
    );
    let (pods, pod_task) = record(
        env.api::<Pod>(),
        watcher::Config::default().labels("app=web"),
        pod_ready,
    );
    let (slices, slice_task) = record(
        env.api::<EndpointSlice>(),
        watcher::Config::default().labels("kubernetes.io/service-name=web"),
        slice_ready,
    );
    let (routes, route_task) = record(
        Api::<DynamicObject>::namespaced_with(
            env.client.clone(),
            &env.ns,
            &RouteKind::HttpRoute.resource(),
        ),
        watcher::Config::default(),
        route_weights,
    );
    let load = Load::new(&env.proxy_url(), RATE, Duration::from_secs(1800))
        .start()
        .expect("load");
    let mut t = Traffic {
        rate: RATE,
        ..Default::default()
    };
    if settle(&load, "web").await {
        rounds(env, &load, (&pods, &slices, &routes), o, &mut t).await;
        (t.planned, t.unsettled_switches) = pins(env, &load, o.traffic_rounds).await;
    } else {
        t.failed_rounds = o.traffic_rounds;
        eprintln!("[traffic] the proxy never answered from web");
    }
    load.stop().await;
    for task in [pod_task, slice_task, route_task] {
        task.abort();
    }
    drop(controller);
    let ours: Vec<Duration> = t.rounds.iter().map(|r| ms(r.ours_ms())).collect();
    let whole: Vec<Duration> = t.rounds.iter().map(|r| ms(r.whole_ms())).collect();
    t.ours = percentiles(ours);
    t.whole = percentiles(whole);
    t
}

fn ms(value: f64) -> Duration {
    Duration::from_secs_f64(value.max(0.0) / 1000.0)
}

/// Waits until the last second of requests was all answered by `backend`; false after the limit.
async fn settle(load: &Running, backend: &str) -> bool {
    let started = Instant::now();
    while started.elapsed() < ROUND_LIMIT {
        let answers = load.answers();
        let last: Vec<&Answer> = answers.iter().rev().take(RATE as usize).collect();
        if last.len() == RATE as usize && last.iter().all(|a| a.backend.as_deref() == Some(backend))
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// The failover rounds, each followed by its failback ramp.
async fn rounds(
    env: &TestEnv,
    load: &Running,
    (pods, slices, routes): (&Seen<bool>, &Seen<usize>, &Seen<Vec<i32>>),
    o: &Options,
    t: &mut Traffic,
) {
    for n in 0..o.traffic_rounds {
        let pod = env.pods("web").await.into_iter().next().unwrap_or_default();
        ok(
            &env.kubectl(&["exec", &pod, "--", "rm", "-f", "/www/ready"]),
            "failing the probe",
        );
        let removed = Instant::now();
        if !settle(load, "web-east").await {
            t.failed_rounds += 1;
            eprintln!("[traffic] round {n}: requests never settled on web-east");
            continue;
        }
        let answers = load.answers();
        let events = (
            first(pods, removed, |ready| !ready),
            first(slices, removed, |ready| *ready == 0),
            first(routes, removed, |w| w.first() == Some(&0)),
            answers
                .iter()
                .filter(|a| a.sent >= removed && a.backend.as_deref() == Some("web-east"))
                .map(|a| a.sent)
                .min(),
        );
        let last_primary = answers
            .iter()
            .filter(|a| a.backend.as_deref() == Some("web"))
            .map(|a| a.sent)
            .max();
        let (Some(kubelet), Some(slice), Some(route), Some(proxy)) = events else {
            t.failed_rounds += 1;
            eprintln!("[traffic] round {n}: an event was not seen: {events:?}");
            continue;
        };
        let after = |at: Instant| at.saturating_duration_since(removed).as_secs_f64() * 1000.0;
        let failed: Vec<&Answer> = answers
            .iter()
            .filter(|a| a.sent >= removed && a.failed())
            .collect();
        let round = Round {
            kubelet_not_ready_ms: after(kubelet),
            slice_not_ready_ms: after(slice),
            route_written_ms: after(route),
            proxy_applied_ms: after(proxy),
            last_primary_ms: last_primary.map_or(0.0, after),
            failed: failed.len(),
            failed_after_proxy: failed.iter().filter(|a| a.sent > proxy).count(),
        };
        eprintln!("[traffic] round {n}: {round:?}");
        t.rounds.push(round);
        // Back through the ramp: every request of it counted.
        ok(
            &env.kubectl(&["exec", &pod, "--", "touch", "/www/ready"]),
            "passing the probe",
        );
        let back = Instant::now();
        let settled = settle(load, "web").await;
        let during: Vec<Answer> = load
            .answers()
            .into_iter()
            .filter(|a| a.sent >= back)
            .collect();
        t.ramp.0 += during.iter().filter(|a| a.failed()).count();
        t.ramp.1 += during.len();
        if !settled {
            t.failed_rounds += 1;
            eprintln!("[traffic] round {n}: the ramp never brought traffic back to web");
        }
    }
}

/// Pins the policy to web-east and unpins it, `n` times, counting the requests of the switches.
/// `n` pins to web-east and unpins; returns (failed requests, requests) during them, and how
/// many switches failed to be written or never settled.
async fn pins(env: &TestEnv, load: &Running, n: usize) -> ((usize, usize), usize) {
    let api: Api<FailoverPolicy> = env.api();
    let params = PatchParams::apply("bench-pin").force();
    let started = Instant::now();
    let mut unsettled = 0;
    for _ in 0..n {
        for (pin, backend) in [
            (json!("web-east"), "web-east"),
            (serde_json::Value::Null, "web"),
        ] {
            let patch = json!({"apiVersion": "failover.dev/v1alpha1", "kind": "FailoverPolicy",
                "metadata": {"name": "web"}, "spec": {"pin": pin}});
            let body = if pin.is_null() {
                json!({"apiVersion": "failover.dev/v1alpha1", "kind": "FailoverPolicy", "metadata": {"name": "web"}})
            } else {
                patch
            };
            if let Err(e) = api.patch("web", &params, &Patch::Apply(&body)).await {
                eprintln!("[traffic] pinning failed: {e}");
                unsettled += 1;
            } else if !settle(load, backend).await {
                eprintln!("[traffic] the pin to {backend} never settled");
                unsettled += 1;
            }
        }
    }
    let during: Vec<Answer> = load
        .answers()
        .into_iter()
        .filter(|a| a.sent >= started)
        .collect();
    (
        (during.iter().filter(|a| a.failed()).count(), during.len()),
        unsettled,
    )
}
