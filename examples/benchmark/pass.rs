//! Failovers while a restarted controller's start-up pass is under way: the pass queues every
//! policy, and a readiness change must not wait behind it (the work queue's two lanes: changes
//! first, passes with what is left). Each change is timed as the latency phases time theirs, and
//! judged against the same scale's quiet p50.

use std::time::{Duration, Instant};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;

use crate::{
    Options,
    latency::{WEIGHTS_FAILED_OVER, WEIGHTS_ON_PRIMARY, timed},
    report::{Percentiles, percentiles},
    startup::start_controller,
    support::{ControllerProcess, TestEnv, metric},
    watches::SplitWatch,
};

/// Policies made not ready and ready again in each pass.
const FLIPS: usize = 4;

/// Restarts measured, each with its own pass.
const PASSES: usize = 3;

/// The failovers and failbacks made during start-up passes.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PassFailovers {
    /// Every change timed, write acknowledged → route changed.
    pub latency: Percentiles,
    /// Changes written while the pass had not reconciled every policy yet.
    pub during_pass: usize,
    /// Changes not seen within the latency phases' limit.
    pub lost: usize,
}

/// Restarts the controller [`PASSES`] times; right when each is ready, flips [`FLIPS`] policies
/// spread over the scale and back, each change timed.
pub async fn measure(
    env: &TestEnv,
    mut controller: ControllerProcess,
    splits: &SplitWatch,
    n: usize,
    o: &Options,
) -> (ControllerProcess, PassFailovers) {
    let slices: Api<EndpointSlice> = env.api();
    let (mut samples, mut during_pass, mut lost) = (Vec::new(), 0, 0);
    for pass in 0..PASSES {
        controller.signal("TERM");
        drop(controller);
        controller = start_controller(env, o);
        while controller.admin_get("/readyz").await.0 != 200 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for flip in 0..FLIPS {
            let name = format!("p{}", (pass * FLIPS + flip) * n / (PASSES * FLIPS));
            for (ready, expected) in [(false, WEIGHTS_FAILED_OVER), (true, WEIGHTS_ON_PRIMARY)] {
                during_pass += usize::from(reconciled(&controller).await < n as f64);
                match timed(&slices, splits, &name, ready, &expected).await {
                    Some((took, _)) => samples.push(took),
                    None => lost += 1,
                }
            }
        }
        pass_over(&controller, n).await;
    }
    let failovers = PassFailovers {
        latency: percentiles(samples),
        during_pass,
        lost,
    };
    eprintln!(
        "[{n}] failovers during the start-up pass: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {} of {} changes made while the pass was under way, {} lost",
        failovers.latency.p50_ms,
        failovers.latency.p99_ms,
        failovers.latency.max_ms,
        failovers.during_pass,
        PASSES * FLIPS * 2,
        failovers.lost
    );
    (controller, failovers)
}

/// Reconciles the controller has run since it started.
async fn reconciled(controller: &ControllerProcess) -> f64 {
    let text = controller.admin_get("/metrics").await.1;
    metric(&text, "failover_reconciles_total").unwrap_or(0.0)
}

/// Waits until the pass has reconciled every policy (or 10 minutes, reported).
async fn pass_over(controller: &ControllerProcess, n: usize) {
    let since = Instant::now();
    while reconciled(controller).await < n as f64 {
        if since.elapsed() > Duration::from_secs(600) {
            eprintln!("[{n}] the start-up pass did not end within 10 minutes");
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
