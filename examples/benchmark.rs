//! Benchmark: failover latency, API writes, CPU and memory at 100, 1,000 and 10,000 policies,
//! against the floor of this setup, on a local control plane under background churn.
//!
//! Run with `hack/bench.sh` (builds the release controller, then this program). Options:
//! `--scales 100,1000,10000`, `--flips 200`, `--churn 50`, `--quiet-seconds 60`,
//! `--out target/bench/results.json`.
//!
//! Latency of one flip: from the acknowledgement of the EndpointSlice write that changes the
//! primary's readiness to the moment an independent watch sees the TrafficSplit change. The floor
//! is a minimal relay (one watch on one EndpointSlice, one patch of one TrafficSplit per change),
//! measured the same way in the same run.

#[path = "../tests/support/mod.rs"]
mod support;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use failover::route::trafficsplit::TrafficSplit;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::{
    core::v1::{Namespace, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;
use support::{ControllerProcess, TestEnv, api_writes, repo_root};
use tokio::sync::Notify;

/// Failover latency, API writes, CPU and memory at several scales, against the floor.
#[derive(clap::Parser, Debug)]
#[command(
    about = "Failover latency, API writes, CPU and memory against the floor, on a local control plane"
)]
struct Options {
    /// Numbers of policies to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
    scales: Vec<usize>,
    /// Readiness flips (each one change down and one back up) per scale.
    #[arg(long, default_value_t = 200)]
    flips: usize,
    /// EndpointSlice updates per second of background churn.
    #[arg(long = "churn", default_value_t = 50)]
    churn_per_second: u64,
    /// Length of the quiet period in which no write is expected, in seconds.
    #[arg(long, default_value_t = 60)]
    quiet_seconds: u64,
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

#[derive(Debug, Clone, serde::Serialize)]
struct Percentiles {
    samples: usize,
    p50_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

fn percentiles(mut samples: Vec<Duration>) -> Percentiles {
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

#[derive(Debug, serde::Serialize)]
struct ScaleResult {
    policies: usize,
    backend_services: usize,
    churn_per_second: u64,
    controller: Percentiles,
    floor: Percentiles,
    p50_ratio: f64,
    p99_ratio: f64,
    writes_per_flip: HashMap<String, f64>,
    writes_in_quiet_period: f64,
    quiet_seconds: u64,
    startup_to_all_correct_s: f64,
    controller_cpu_s: f64,
    controller_peak_rss_mib: f64,
    rss_per_policy_kib: f64,
}

fn slice(service: &str, ready: bool) -> EndpointSlice {
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{service}-bench"), "labels": {
            "kubernetes.io/service-name": service, "endpointslice.kubernetes.io/managed-by": "bench"}},
        "addressType": "IPv4",
        "ports": [{"port": 80}],
        "endpoints": [{"addresses": ["10.9.0.1"], "conditions": {"ready": ready}}],
    }))
    .expect("slice")
}

fn service(name: &str) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"clusterIP": "None", "ports": [{"port": 80}]},
    }))
    .expect("service")
}

/// Creates objects with bounded concurrency, retrying on throttling.
async fn create_all<K>(api: &Api<K>, objects: Vec<K>)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    stream::iter(objects)
        .for_each_concurrent(32, |obj| {
            let api = api.clone();
            async move {
                for attempt in 0..20 {
                    match api.create(&PostParams::default(), &obj).await {
                        Ok(_) => return,
                        Err(kube::Error::Api(e)) if e.code == 409 => return,
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(50 * (attempt + 1))).await
                        }
                    }
                }
                panic!("could not create {}", obj.name_any());
            }
        })
        .await;
}

async fn set_ready(api: &Api<EndpointSlice>, service: &str, ready: bool) -> Instant {
    let patch = slice(service, ready);
    api.patch(
        &format!("{service}-bench"),
        &PatchParams::apply("bench").force(),
        &Patch::Apply(&patch),
    )
    .await
    .expect("patch slice");
    Instant::now()
}

/// Per TrafficSplit: when its weights last changed, and to what.
type SplitChanges = Arc<Mutex<HashMap<String, (Instant, Vec<i64>)>>>;

/// Watches TrafficSplits and records when each one's spec last changed.
struct SplitWatch {
    changes: SplitChanges,
    notify: Arc<Notify>,
}

impl SplitWatch {
    fn start(api: Api<TrafficSplit>) -> Self {
        let changes = Arc::new(Mutex::new(HashMap::new()));
        let notify = Arc::new(Notify::new());
        let (sink, wake) = (changes.clone(), notify.clone());
        tokio::spawn(async move {
            // Errors are retried with backoff; the stream itself never ends.
            let mut s = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(event) = s.next().await {
                let Ok(ts) = event else {
                    eprintln!("TrafficSplit watch error (retrying): {event:?}");
                    continue;
                };
                let weights: Vec<i64> = ts.spec.backends.iter().map(|b| b.weight).collect();
                if let Ok(mut c) = sink.lock() {
                    let entry = c
                        .entry(ts.name_any())
                        .or_insert((Instant::now(), Vec::new()));
                    if entry.1 != weights {
                        *entry = (Instant::now(), weights);
                    }
                }
                wake.notify_waiters();
            }
        });
        Self { changes, notify }
    }

    /// Waits until `name` has `weights`; returns when the watch saw it.
    async fn wait_for(&self, name: &str, weights: &[i64], timeout: Duration) -> Option<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.notify.notified();
            if let Some((at, w)) = self.changes.lock().ok()?.get(name).cloned()
                && w == weights
            {
                return Some(at);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            let _ = tokio::time::timeout(left.min(Duration::from_millis(200)), notified).await;
        }
    }

    fn count_correct(&self, expected: &[i64]) -> usize {
        self.changes
            .lock()
            .map(|c| c.values().filter(|(_, w)| w == expected).count())
            .unwrap_or(0)
    }
}

/// Background churn: EndpointSlice updates on Services no policy references.
fn start_churn(
    api: Api<EndpointSlice>,
    services: Vec<String>,
    per_second: u64,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if per_second == 0 || services.is_empty() {
            return;
        }
        let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / per_second));
        let mut i = 0usize;
        loop {
            tick.tick().await;
            let svc = services[i % services.len()].clone();
            let api = api.clone();
            let ready = (i / services.len()).is_multiple_of(2);
            tokio::spawn(async move {
                let _ = api
                    .patch(
                        &format!("{svc}-bench"),
                        &PatchParams::apply("bench").force(),
                        &Patch::Apply(&slice(&svc, ready)),
                    )
                    .await;
            });
            i += 1;
        }
    })
}

/// The floor: one watch on one EndpointSlice; each change patches one TrafficSplit.
fn start_relay(client: Client, ns: &str) -> tokio::task::JoinHandle<()> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let splits: Api<TrafficSplit> = Api::namespaced(client, ns);
    tokio::spawn(async move {
        let cfg = watcher::Config::default().fields("metadata.name=relay-bench");
        let mut s = watcher(slices, cfg).applied_objects().boxed();
        while let Ok(Some(es)) = s.try_next().await {
            let ready = es
                .endpoints
                .iter()
                .any(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true));
            let patch = json!({"apiVersion": "split.smi-spec.io/v1alpha2", "kind": "TrafficSplit", "metadata": {"name": "relay"},
                "spec": {"service": "relay", "backends": [{"service": "relay", "weight": i64::from(ready)}, {"service": "relay-b", "weight": i64::from(!ready)}]}});
            let _ = splits
                .patch(
                    "relay",
                    &PatchParams::apply("relay").force(),
                    &Patch::Apply(&patch),
                )
                .await;
        }
    })
}

fn proc_stats(pid: u32) -> (f64, f64) {
    let ticks = 100.0;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let cpu = fields
        .get(11)
        .and_then(|u| u.parse::<f64>().ok())
        .unwrap_or(0.0)
        + fields
            .get(12)
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(0.0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let hwm_kib = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    (cpu / ticks, hwm_kib / 1024.0)
}

async fn writes(controller: &ControllerProcess) -> HashMap<String, f64> {
    api_writes(controller, &["trafficsplit", "status", "event", "lease"]).await
}

async fn run_scale(n: usize, o: &Options) -> ScaleResult {
    let env = TestEnv::new(&format!("bench-{n}"))
        .await
        .expect("control plane");
    let client = env.client.clone();
    eprintln!(
        "[{n}] creating {} Services, {} EndpointSlices and {n} policies",
        3 * n + 200,
        3 * n + 200
    );
    let services: Api<Service> = env.api();
    let slices: Api<EndpointSlice> = env.api();
    let mut names: Vec<String> = (0..n)
        .flat_map(|i| [format!("p{i}"), format!("p{i}-a"), format!("p{i}-b")])
        .collect();
    let churn: Vec<String> = (0..200).map(|i| format!("churn{i}")).collect();
    names.extend(churn.iter().cloned());
    names.extend(["relay".to_string(), "relay-b".to_string()]);
    let started = Instant::now();
    create_all(&services, names.iter().map(|s| service(s)).collect()).await;
    create_all(&slices, names.iter().map(|s| slice(s, true)).collect()).await;
    let policies: Api<failover::api::FailoverPolicy> = env.api();
    let policy_objects: Vec<failover::api::FailoverPolicy> = (0..n)
        .map(|i| {
            serde_json::from_value(json!({
                "apiVersion": "failover.dev/v1alpha1", "kind": "FailoverPolicy", "metadata": {"name": format!("p{i}")},
                "spec": {"service": format!("p{i}"), "primary": format!("p{i}"), "secondaries": [{"service": format!("p{i}-a")}, {"service": format!("p{i}-b")}]},
            }))
            .expect("policy")
        })
        .collect();
    create_all(&policies, policy_objects).await;
    eprintln!("[{n}] created in {:.1}s", started.elapsed().as_secs_f64());

    let split_api: Api<TrafficSplit> = env.api();
    let watch = SplitWatch::start(split_api.clone());
    let churn_task = start_churn(slices.clone(), churn, o.churn_per_second);

    // Controller start to every TrafficSplit correct.
    let binary = repo_root().join("target/release/failover-controller");
    let start = Instant::now();
    let controller = ControllerProcess::start_binary(
        &binary,
        &env,
        &env.cp.kubeconfig,
        &["--log-level", "warn", "--concurrency", "32"],
    );
    let primary = [1i64, 0, 0];
    loop {
        if watch.count_correct(&primary) >= n {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(900),
            "not all TrafficSplits correct after 15 minutes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let startup = start.elapsed();
    eprintln!(
        "[{n}] all {n} TrafficSplits correct {:.2}s after controller start",
        startup.as_secs_f64()
    );
    // Let the status writes of the start-up settle.
    let mut last = writes(&controller).await;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = writes(&controller).await;
        if now == last {
            break;
        }
        last = now;
    }

    // Flips through the controller.
    let before = writes(&controller).await;
    let mut samples = Vec::new();
    let mut rng = 0x2545F4914F6CDD1Du64;
    for _ in 0..o.flips {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let i = (rng % n as u64) as usize;
        let name = format!("p{i}");
        for (ready, expected) in [(false, [0i64, 1, 0]), (true, [1i64, 0, 0])] {
            let acked = set_ready(&slices, &name, ready).await;
            let seen = watch
                .wait_for(&name, &expected, Duration::from_secs(30))
                .await
                .expect("TrafficSplit change");
            samples.push(seen.saturating_duration_since(acked));
        }
    }
    // Let the status writes and Events of the last flip land.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = writes(&controller).await;
    let transitions = (2 * o.flips) as f64;
    let writes_per_flip: HashMap<String, f64> = after
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                (v - before.get(k).copied().unwrap_or(0.0)) / transitions,
            )
        })
        .collect();

    // The floor, in the same run, same control plane, churn and controller still running.
    let relay_split: TrafficSplit = serde_json::from_value(json!({"apiVersion": "split.smi-spec.io/v1alpha2", "kind": "TrafficSplit",
        "metadata": {"name": "relay"}, "spec": {"service": "relay", "backends": [{"service": "relay", "weight": 1}, {"service": "relay-b", "weight": 0}]}})).expect("ts");
    let _ = split_api.create(&PostParams::default(), &relay_split).await;
    let relay = start_relay(client.clone(), &env.ns);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _ = watch
        .wait_for("relay", &[1, 0], Duration::from_secs(10))
        .await;
    let mut floor = Vec::new();
    for _ in 0..o.flips {
        for (ready, expected) in [(false, [0i64, 1]), (true, [1i64, 0])] {
            let acked = set_ready(&slices, "relay", ready).await;
            let seen = watch
                .wait_for("relay", &expected, Duration::from_secs(30))
                .await
                .expect("relay change");
            floor.push(seen.saturating_duration_since(acked));
        }
    }
    relay.abort();

    // A quiet period: churn only, no flips. The controller must write nothing.
    let quiet_before = writes(&controller).await;
    tokio::time::sleep(Duration::from_secs(o.quiet_seconds)).await;
    let quiet_after = writes(&controller).await;
    let quiet_writes: f64 = quiet_after
        .iter()
        .map(|(k, v)| v - quiet_before.get(k).copied().unwrap_or(0.0))
        .sum();
    churn_task.abort();

    let (cpu, rss) = proc_stats(controller.pid());
    drop(controller);
    let controller_p = percentiles(samples);
    let floor_p = percentiles(floor);
    let result = ScaleResult {
        policies: n,
        backend_services: 3 * n,
        churn_per_second: o.churn_per_second,
        p50_ratio: controller_p.p50_ms / floor_p.p50_ms.max(1e-6),
        p99_ratio: controller_p.p99_ms / floor_p.p99_ms.max(1e-6),
        controller: controller_p,
        floor: floor_p,
        writes_per_flip,
        writes_in_quiet_period: quiet_writes,
        quiet_seconds: o.quiet_seconds,
        startup_to_all_correct_s: startup.as_secs_f64(),
        controller_cpu_s: cpu,
        controller_peak_rss_mib: rss,
        rss_per_policy_kib: rss * 1024.0 / n as f64,
    };
    // Deleting the namespace frees the control plane for the next scale.
    let namespaces: Api<Namespace> = Api::all(client);
    let _ = namespaces.delete(&env.ns, &Default::default()).await;
    result
}

fn print_table(results: &[ScaleResult]) {
    println!();
    println!(
        "| policies | p50 ms | p95 ms | p99 ms | max ms | floor p50 | floor p99 | p50 ratio | p99 ratio | TS writes/flip | status writes/flip | events/flip | quiet writes | startup s | CPU s | peak RSS MiB |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        let w = |k: &str| r.writes_per_flip.get(k).copied().unwrap_or(0.0);
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} in {}s | {:.2} | {:.1} | {:.1} |",
            r.policies,
            r.controller.p50_ms,
            r.controller.p95_ms,
            r.controller.p99_ms,
            r.controller.max_ms,
            r.floor.p50_ms,
            r.floor.p99_ms,
            r.p50_ratio,
            r.p99_ratio,
            w("trafficsplit"),
            w("status"),
            w("event"),
            r.writes_in_quiet_period,
            r.quiet_seconds,
            r.startup_to_all_correct_s,
            r.controller_cpu_s,
            r.controller_peak_rss_mib
        );
    }
}

#[tokio::main]
async fn main() {
    let o = options();
    assert!(
        repo_root()
            .join("target/release/failover-controller")
            .exists(),
        "build the release controller first: cargo build --release --bin failover-controller (hack/bench.sh does)"
    );
    let started = Instant::now();
    let mut results = Vec::new();
    for &n in &o.scales {
        let r = run_scale(n, &o).await;
        print_table(std::slice::from_ref(&r));
        results.push(r);
    }
    println!(
        "\nAll scales ({:.1} min):",
        started.elapsed().as_secs_f64() / 60.0
    );
    print_table(&results);
    if let Some(dir) = o.out.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let machine = format!(
        "{} cores, {}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| m.lines().next().map(|l| l
                .split_whitespace()
                .nth(1)
                .unwrap_or("?")
                .to_string()
                + " kB RAM"))
            .unwrap_or_default()
    );
    let json = json!({"machine": machine, "flips_per_scale": o.flips, "results": results});
    std::fs::write(
        &o.out,
        serde_json::to_string_pretty(&json).unwrap_or_default(),
    )
    .expect("writing results");
    println!("results written to {}", o.out.display());
}
