//! Capacity under real traffic, on the traffic section's node and proxy: backends whose Pods
//! each answer 503 `<name> overloaded` above [`POD_RATE`] requests in a second, a primary of 3
//! Pods, a secondary of 1 (with an HorizontalPodAutoscaler, min 1, max 5), and a load that needs
//! 3. The primary fails (every Pod's probe), once with a policy without capacity, once with
//! `capacity` (8 requests/s declared per Pod) and `scale`; each prints the overload answers and
//! the time from the primary's failure to all traffic served.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::{
    Options,
    startup::start_controller_with,
    support::{Answer, ControlPlane, Load, Running, TestEnv, ok, wait_until},
};

/// Requests per second: more than two Pods serve, at most three (7 each, 70% of what one
/// serves).
pub const RATE: u32 = 21;
/// What one Pod serves.
pub const POD_RATE: u32 = 10;
/// How long a run waits for all traffic to be served again.
const LIMIT: Duration = Duration::from_secs(60);

/// One run: with or without capacity.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CapacityRun {
    pub with_capacity: bool,
    /// Requests sent from the primary's failure on.
    pub sent: usize,
    /// Answered 503 overloaded by a backend Pod.
    pub overloaded: usize,
    /// Failed otherwise (sent to the failed primary while the secondary grew, or no answer).
    pub failed: usize,
    /// From the primary's failure to a whole second of requests all served by the secondary;
    /// `None`: not within [`LIMIT`].
    pub all_served_ms: Option<f64>,
    /// When each overload answer's request was sent, in ms from the primary's failure (with
    /// capacity only).
    pub overloaded_at_ms: Vec<f64>,
    /// Why the run did not complete, if it did not.
    pub not_measured: Option<String>,
}

impl CapacityRun {
    /// The overload answers' share of the requests, in percent.
    pub fn overloaded_percent(&self) -> f64 {
        self.overloaded as f64 * 100.0 / self.sent.max(1) as f64
    }
}

/// Both runs, each in a namespace of its own on `cp`.
pub async fn measure(cp: &'static ControlPlane, o: &Options) -> Vec<CapacityRun> {
    let mut runs = Vec::new();
    for with_capacity in [false, true] {
        let name = if with_capacity {
            "bench-capacity-sized"
        } else {
            "bench-capacity-none"
        };
        let Some(env) = TestEnv::on(cp, name).await else {
            continue;
        };
        let run = one(&env, o, with_capacity).await;
        eprintln!("[capacity] {run:?}");
        runs.push(run);
        let _ = env.cleanup_and_wait(LIMIT).await;
    }
    runs
}

async fn one(env: &TestEnv, o: &Options, with_capacity: bool) -> CapacityRun {
    let mut run = CapacityRun {
        with_capacity,
        sent: 0,
        overloaded: 0,
        failed: 0,
        all_served_ms: None,
        overloaded_at_ms: Vec::new(),
        not_measured: None,
    };
    let host = format!("{}.bench.test", env.ns);
    scene(env, &host, with_capacity).await;
    let controller = start_controller_with(
        env,
        o,
        &["--allowed-gateways", "default/edge", "--allow-scaling"],
    );
    let mut load = Load::new(&env.proxy_url(), RATE, Duration::from_secs(300));
    load.host = Some(host);
    let load = load.start().expect("load");
    if !last_second(&load, |a| a.backend.as_deref() == Some("web")).await {
        run.not_measured = Some("the proxy never answered from web".into());
        load.stop().await;
        return run;
    }
    let failed_at = Instant::now();
    env.set_backend_ready("web", false).await;
    // All served again: a whole second of answers, none from the failed primary, none failed.
    if last_second(&load, |a| {
        !a.failed() && a.backend.as_deref() != Some("web")
    })
    .await
    {
        run.all_served_ms = Some(failed_at.elapsed().as_secs_f64() * 1000.0);
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let answers = load.stop().await;
    let sent: Vec<&Answer> = answers.iter().filter(|a| a.sent >= failed_at).collect();
    run.sent = sent.len();
    run.overloaded = sent.iter().filter(|a| a.overloaded).count();
    // Each one's time where they are few (with capacity); without, most answers are.
    run.overloaded_at_ms = sent
        .iter()
        .filter(|a| with_capacity && a.overloaded)
        .map(|a| (a.sent - failed_at).as_secs_f64() * 1000.0)
        .collect();
    run.failed = sent.iter().filter(|a| a.failed() && !a.overloaded).count();
    drop(controller);
    run
}

/// The backends, the HPA, and the policy for `host`, with capacity and scaling or without.
async fn scene(env: &TestEnv, host: &str, with_capacity: bool) {
    env.backend_at_rate("web", 3, POD_RATE);
    env.backend_at_rate("web-east", 1, POD_RATE);
    env.wait_ready_replicas("web", 3, LIMIT).await;
    env.wait_ready_replicas("web-east", 1, LIMIT).await;
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web-east"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web-east"},
            "minReplicas": 1, "maxReplicas": 5}});
    ok(
        &env.kubectl_stdin(&["apply", "-f", "-"], &hpa.to_string()),
        "applying the HPA",
    );
    let mut secondary = json!({"service": "web-east"});
    let mut spec = json!({"service": "web", "primary": "web",
        "output": "HTTPRoute",
        "httpRoute": {"port": 80, "hostnames": [host], "gateways": [{"name": "edge", "namespace": "default"}]}});
    if with_capacity {
        spec["capacity"] = json!({"perEndpoint": 8, "scale": {"deadline": "2m", "maxReplicas": 5}});
        secondary["scaleTarget"] = json!({"kind": "HorizontalPodAutoscaler", "name": "web-east"});
    }
    spec["secondaries"] = json!([secondary]);
    let policy = json!({"apiVersion": "failover.dev/v1alpha1", "kind": "FailoverPolicy",
        "metadata": {"name": "web"}, "spec": spec});
    ok(
        &env.kubectl_stdin(&["apply", "-f", "-"], &policy.to_string()),
        "applying the policy",
    );
}

/// Waits until a whole second of answers satisfied `pred`; false after [`LIMIT`].
async fn last_second(load: &Running, pred: impl Fn(&Answer) -> bool) -> bool {
    wait_until(LIMIT, || async {
        let answers = load.answers();
        let last: Vec<&Answer> = answers.iter().rev().take(RATE as usize).collect();
        last.len() == RATE as usize && last.iter().all(|a| pred(a))
    })
    .await
}
