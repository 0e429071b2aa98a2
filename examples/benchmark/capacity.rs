//! Capacity under real traffic, on the traffic section's node and proxy: backends whose Pods
//! each answer 503 `<name> overloaded` above [`POD_RATE`] requests in a second, a primary of 3
//! Pods, a secondary of 1 (with an HorizontalPodAutoscaler, min 1, max 5), and a load that needs
//! 3. The primary fails (every Pod's probe), once with a policy without capacity, then with
//! `capacity` (8 requests/s declared per Pod) and `scale`, once for each place the unserved share
//! may go (`capacity.unserved`). Each run counts, over the same [`COUNTED`] from the failure,
//! every request a client saw fail (overloaded, failed otherwise, no answer), and the time from
//! the failure to all traffic served.

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
pub const LIMIT: Duration = Duration::from_secs(60);
/// The requests counted: those sent within this long of the primary's failure, the same span
/// in every run, so their failures compare as counts.
pub const COUNTED: Duration = Duration::from_secs(30);

/// A run's policy: without capacity, or with it and the unserved share on the primary or
/// spread over the secondaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Policy {
    NoCapacity,
    UnservedOnPrimary,
    UnservedOnSecondaries,
}

impl Policy {
    pub const ALL: [Self; 3] = [
        Self::NoCapacity,
        Self::UnservedOnPrimary,
        Self::UnservedOnSecondaries,
    ];

    /// How the report names it.
    pub fn label(self) -> &'static str {
        match self {
            Self::NoCapacity => "no capacity",
            Self::UnservedOnPrimary => "capacity and scaling, unserved on the primary (default)",
            Self::UnservedOnSecondaries => {
                "capacity and scaling, unserved spread over the secondaries"
            }
        }
    }

    fn namespace(self) -> &'static str {
        match self {
            Self::NoCapacity => "bench-capacity-none",
            Self::UnservedOnPrimary => "bench-capacity-primary",
            Self::UnservedOnSecondaries => "bench-capacity-spread",
        }
    }
}

/// One run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CapacityRun {
    pub policy: Policy,
    /// Requests sent within [`COUNTED`] of the primary's failure.
    pub sent: usize,
    /// Of them, answered 503 overloaded by a backend Pod.
    pub overloaded: usize,
    /// Of them, failed otherwise: an error answer other than overloaded (sent where no ready
    /// Pod serves), or no answer at all (refused, reset, timed out).
    pub failed: usize,
    /// From the primary's failure to a whole second of requests all served by the secondary;
    /// `None`: not within [`LIMIT`].
    pub all_served_ms: Option<f64>,
    /// When each failed request was sent, in ms from the primary's failure (with capacity
    /// only).
    pub failed_at_ms: Vec<f64>,
    /// Why the run did not complete, if it did not.
    pub not_measured: Option<String>,
}

impl CapacityRun {
    /// Every request a client saw fail.
    pub fn client_failures(&self) -> usize {
        self.overloaded + self.failed
    }

    /// Their share of the requests, in percent.
    pub fn client_failures_percent(&self) -> f64 {
        self.client_failures() as f64 * 100.0 / self.sent.max(1) as f64
    }
}

/// The runs, each in a namespace of its own on `cp`.
pub async fn measure(cp: &'static ControlPlane, o: &Options) -> Vec<CapacityRun> {
    let mut runs = Vec::new();
    for policy in Policy::ALL {
        let Some(env) = TestEnv::on(cp, policy.namespace()).await else {
            continue;
        };
        let run = one(&env, o, policy).await;
        eprintln!("[capacity] {run:?}");
        runs.push(run);
        let _ = env.cleanup_and_wait(LIMIT).await;
    }
    runs
}

async fn one(env: &TestEnv, o: &Options, policy: Policy) -> CapacityRun {
    let mut run = CapacityRun {
        policy,
        sent: 0,
        overloaded: 0,
        failed: 0,
        all_served_ms: None,
        failed_at_ms: Vec::new(),
        not_measured: None,
    };
    let host = format!("{}.bench.test", env.ns);
    scene(env, &host, policy).await;
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
    // Every request of the counted span has had its answer (or its timeout) by then.
    let settled = COUNTED + Duration::from_secs(5);
    tokio::time::sleep(settled.saturating_sub(failed_at.elapsed())).await;
    let answers = load.stop().await;
    count(&mut run, &answers, failed_at);
    drop(controller);
    run
}

/// Counts the requests sent within [`COUNTED`] of `failed_at`, by how they failed.
fn count(run: &mut CapacityRun, answers: &[Answer], failed_at: Instant) {
    let sent: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.sent >= failed_at && a.sent < failed_at + COUNTED)
        .collect();
    run.sent = sent.len();
    run.overloaded = sent.iter().filter(|a| a.overloaded).count();
    run.failed = sent.iter().filter(|a| a.failed() && !a.overloaded).count();
    // Each one's time where they are few (with capacity); without, most answers are.
    if run.policy != Policy::NoCapacity {
        run.failed_at_ms = sent
            .iter()
            .filter(|a| a.failed())
            .map(|a| (a.sent - failed_at).as_secs_f64() * 1000.0)
            .collect();
    }
}

/// The backends, the HPA, and the policy for `host`.
async fn scene(env: &TestEnv, host: &str, policy: Policy) {
    env.backend_at_rate("web", 3, POD_RATE);
    env.backend_at_rate("web-east", 1, POD_RATE);
    env.wait_ready_replicas("web", 3, LIMIT).await;
    env.wait_ready_replicas("web-east", 1, LIMIT).await;
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web-east", "annotations": {"failover.dev/policies": "web"}},
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
    if policy != Policy::NoCapacity {
        spec["capacity"] = json!({"perEndpoint": 8, "scale": {"deadline": "2m", "maxReplicas": 5}});
        if policy == Policy::UnservedOnSecondaries {
            spec["capacity"]["unserved"] = json!("Secondaries");
        }
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
