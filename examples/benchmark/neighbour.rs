//! The noisy neighbour, a section of its own: `--noisy-neighbour-at` policies under one
//! controller that watches every namespace, as a shared cluster runs it, and tenants of other
//! namespaces (each the chart's edit role in its namespace) doing at once everything a
//! tenant's policies can cost the controller:
//!
//! - policies at every size limit, held throughout (their memory: the heap each one more adds);
//! - policies padded with labels to just under the largest object the API server stores, whose
//!   status can never be stored;
//! - an edit flood: policies whose health query at every cost limit changes at each edit (each
//!   a new generation, checked and parsed again), counted once the edit lands;
//! - slow health queries: policies whose queries a Prometheus holding only a few at once
//!   (`SlotHolder`) keeps for seconds each, and one whose query would hold a real one for
//!   seconds;
//! - an Event storm: fifty policies on one primary whose readiness changes every second (the
//!   most a readiness probe changes a Pod's).
//!
//! The scale's own policies are flipped not ready and ready again in turns, a block with the
//! tenants at work and a block without (the held policies stay, their work stops), ten blocks
//! each, so both share one load window; a change not seen within 30 s counts as lost.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use failover_core::api::FailoverPolicy;
use k8s_openapi::api::{core::v1::Namespace, discovery::v1::EndpointSlice};
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};

use crate::{
    Options,
    latency::{BLOCKS, Phase, Slowest, record, settle, timed},
    memory::status_kib,
    objects::{self, Picks},
    report::{Percentiles, percentiles},
    support::{ControllerProcess, PolicyBuilder, SlotHolder, Tenant, TestEnv, metric},
    watches::{Churn, SplitWatch, StatusWatch},
};

/// What the section measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Neighbour {
    /// The scale's policies (the victims).
    pub policies: usize,
    /// The victims' changes without and with the tenants at work.
    pub quiet: Percentiles,
    pub noisy: Percentiles,
    /// Changes not seen within 30 s, without and with the tenants.
    pub lost: [usize; 2],
    /// The tenants' policies, every class together.
    pub tenant_policies: usize,
    /// Edits of the flooding tenant's policies that landed during the noisy blocks.
    pub edits: usize,
    /// Flaps of the storming tenant's primary during the noisy blocks.
    pub flaps: usize,
    /// Events the controller dropped (a namespace's share of its queue full), and status
    /// writes the API server refused as too large.
    pub events_dropped: f64,
    pub statuses_refused: f64,
    /// The heap each policy at every limit adds while held, in KiB.
    pub at_limit_kib: f64,
    /// The RSS before the tenants came, and the peak RSS from then to the end, in MiB.
    pub rss_before_mib: f64,
    pub peak_rss_mib: f64,
}

/// The documented cost of one policy at every limit while held (docs/security.md).
pub const AT_LIMIT_KIB: f64 = 64.0;

/// Policies at every limit held: the heap is read with the first and with all of them.
const AT_LIMIT: [usize; 2] = [10, 40];
/// The flooding tenant's policies.
const FLOODED: usize = 10;
/// The storming tenant's policies on one primary.
const STORMING: usize = 50;
/// The slow tenant's policies, its queries held by the stand-in Prometheus.
const SLOW: usize = 6;
/// The stand-in's query slots, and how long it holds each of the slow tenant's queries.
const SLOTS: usize = 3;
const HOLD: Duration = Duration::from_secs(8);

/// The tenants: one namespace each, and its author.
struct Tenants {
    limits: (String, Tenant),
    padded: (String, Tenant),
    flood: (String, Tenant),
    slow: (String, Tenant),
    storm: (String, Tenant),
}

impl Tenants {
    fn namespaces(&self) -> [&str; 5] {
        [
            &self.limits.0,
            &self.padded.0,
            &self.flood.0,
            &self.slow.0,
            &self.storm.0,
        ]
    }
}

/// A tenant's namespace next to `env`'s, and its author.
async fn tenant(env: &TestEnv, class: &str) -> (String, Tenant) {
    let other = TestEnv::on(env.cp, &format!("neighbour-{class}"))
        .await
        .expect("a tenant's namespace");
    let author = other.tenant();
    let ns = other.ns.clone();
    // The namespace outlives its TestEnv: the section deletes it at its end.
    std::mem::forget(other);
    (ns, author)
}

/// The section at `o.noisy_neighbour_at` policies (none at 0).
pub async fn run(o: &Options) -> Option<Neighbour> {
    let n = o.noisy_neighbour_at;
    if n == 0 {
        return None;
    }
    let env = TestEnv::new("bench-neighbour").await?;
    let churn_services = objects::create_scale(&env, n).await;
    let (splits, statuses) = (SplitWatch::start(env.api()), StatusWatch::start(env.api()));
    let slices: Api<EndpointSlice> = env.api();
    let churn = Churn::start(slices.clone(), churn_services, o.churn_per_second);
    let tenants = Tenants {
        limits: tenant(&env, "limits").await,
        padded: tenant(&env, "padded").await,
        flood: tenant(&env, "flood").await,
        slow: tenant(&env, "slow").await,
        storm: tenant(&env, "storm").await,
    };
    // The slow tenant's queries name its namespace (each is scoped to it).
    let prometheus = SlotHolder::start(SLOTS, &tenants.slow.0, HOLD);
    // Every namespace: the tenants' work reaches the controller that routes the scale.
    let controller = ControllerProcess::start_cluster_wide(
        &env,
        &[
            "--log-level",
            &o.controller_log,
            "--concurrency",
            &o.concurrency.to_string(),
            "--prometheus-address",
            &prometheus.url,
        ],
    );
    while splits.count_with(&[1, 0, 0]) < n || statuses.count() < n {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    settle(&controller).await;
    let rss_before_mib = status_kib(controller.pid(), "VmRSS:") / 1024.0;
    reset_peak(controller.pid());
    let at_limit_kib = at_limit(&controller, &tenants.limits.1).await;
    tenants.padded.1.padded_to_the_limit(2);
    let flooding = flooding(&tenants.flood.1).await;
    let storm = storm(&env, &tenants.storm.0).await;
    settle(&controller).await;
    let edits = Arc::new(AtomicUsize::new(0));
    let flaps = Arc::new(AtomicUsize::new(0));
    let (mut quiet, mut noisy) = (Phase::default(), Phase::default());
    let mut picks = Picks::new();
    for block in 0..BLOCKS {
        let flips = o.flips / BLOCKS + usize::from(block < o.flips % BLOCKS);
        for at_work in [false, true] {
            let work = at_work.then(|| {
                tenants.slow.1.apply(&slow_policies());
                [flood(&flooding, &edits), flap(&storm, &flaps)]
            });
            let phase = if at_work { &mut noisy } else { &mut quiet };
            for _ in 0..flips {
                let name = format!("p{}", picks.next(n));
                for (ready, expected) in [(false, [0i64, 1, 0]), (true, [1i64, 0, 0])] {
                    let change = timed(&slices, &splits, &name, ready, &expected).await;
                    record(phase, change, &name, &mut Slowest::default());
                }
            }
            if let Some(work) = work {
                work.iter().for_each(tokio::task::JoinHandle::abort);
                let _ = tenants
                    .slow
                    .1
                    .kubectl(&["delete", "failoverpolicy", "--all"]);
            }
        }
    }
    let (_, text) = controller.admin_get("/metrics").await;
    let counted = |series: &str| metric(&text, series).unwrap_or(0.0);
    let peak_rss_mib = status_kib(controller.pid(), "VmHWM:") / 1024.0;
    drop(churn);
    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    for ns in tenants.namespaces() {
        let _ = namespaces.delete(ns, &DeleteParams::default()).await;
    }
    drop(controller);
    let result = Neighbour {
        policies: n,
        lost: [quiet.lost, noisy.lost],
        quiet: percentiles(quiet.samples),
        noisy: percentiles(noisy.samples),
        tenant_policies: AT_LIMIT[1] + 2 + FLOODED + SLOW + 1 + STORMING,
        edits: edits.load(Ordering::Relaxed),
        flaps: flaps.load(Ordering::Relaxed),
        events_dropped: counted("failover_events_dropped_total"),
        statuses_refused: counted("failover_status_write_failures_total{reason=\"too_large\"}"),
        at_limit_kib,
        rss_before_mib,
        peak_rss_mib,
    };
    eprintln!(
        "[{n}] noisy neighbour: {} tenants' policies; {} edits, {} flaps; {:.0} Events dropped, {:.0} statuses refused; p50 {:.2} / {:.2} ms, p99 {:.2} / {:.2} ms without / with them; a policy at every limit {:.1} KiB; RSS {:.1} MiB before them, peak {:.1} MiB",
        result.tenant_policies,
        result.edits,
        result.flaps,
        result.events_dropped,
        result.statuses_refused,
        result.quiet.p50_ms,
        result.noisy.p50_ms,
        result.quiet.p99_ms,
        result.noisy.p99_ms,
        result.at_limit_kib,
        result.rss_before_mib,
        result.peak_rss_mib,
    );
    let deleted = env.cleanup_and_wait(Duration::from_secs(600)).await;
    eprintln!("[{n}] the neighbour's namespaces deleted in {deleted:.2?}");
    Some(result)
}

/// Resets a process's peak RSS to its current RSS (`clear_refs` 5), where the kernel lets it.
fn reset_peak(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// The controller's heap once the tenant's policies at every limit are taken in and their
/// statuses written: the least of a few readings a second apart.
async fn heap_at_rest(controller: &ControllerProcess) -> f64 {
    settle_quietly(controller).await;
    let mut least = f64::MAX;
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        least = least.min(controller.heap_bytes().await);
    }
    least
}

async fn settle_quietly(controller: &ControllerProcess) {
    tokio::time::sleep(Duration::from_secs(2)).await;
    settle(controller).await;
}

/// The heap each policy at every limit adds (KiB): read with the first and with all of them held.
async fn at_limit(controller: &ControllerProcess, author: &Tenant) -> f64 {
    let policies: Vec<String> = (0..AT_LIMIT[1])
        .map(|i| PolicyBuilder::at_every_limit(&format!("huge-{i}"), None).yaml())
        .collect();
    author.apply(&policies[..AT_LIMIT[0]].join("---\n"));
    let first = heap_at_rest(controller).await;
    author.apply(&policies[AT_LIMIT[0]..].join("---\n"));
    let all = heap_at_rest(controller).await;
    (all - first) / (AT_LIMIT[1] - AT_LIMIT[0]) as f64 / 1024.0
}

/// The slow tenant's policies: queries within every cost limit that the stand-in holds, and one
/// that would hold a real Prometheus for seconds (refused before it is sent).
fn slow_policies() -> String {
    let query = "backend_error_ratio{service=\"{{service}}\"}";
    let mut slow: Vec<String> = (0..SLOW)
        .map(|i| {
            PolicyBuilder::named(&format!("slow-{i}"), "web", &["web-east"])
                .with_health(None, query)
                .yaml()
        })
        .collect();
    slow.push(
        PolicyBuilder::named("costly", "web", &["web-east"])
            .with_health(None, "count_over_time(vector(1)[30d:1s])")
            .yaml(),
    );
    slow.join("---\n")
}

/// The flooding tenant's policies, and its client.
struct Flooding {
    api: Api<FailoverPolicy>,
    shapes: Arc<[String; 3]>,
}

async fn flooding(author: &Tenant) -> Flooding {
    let shapes = Arc::new([
        failover_core::health_query::at_every_limit(),
        failover_core::health_query::behind_a_comment(),
        failover_core::health_query::deepest_at_limit()[3].clone(),
    ]);
    let all: Vec<String> = (0..FLOODED)
        .map(|i| flood_policy(&shapes, i, 0).yaml())
        .collect();
    author.apply(&all.join("---\n"));
    let client = author.client().await;
    let ns = client.default_namespace().to_string();
    Flooding {
        api: Api::namespaced(client, &ns),
        shapes,
    }
}

fn flood_policy(shapes: &[String; 3], i: usize, edit: usize) -> PolicyBuilder {
    PolicyBuilder::named(&format!("flood-{i}"), "web", &["web-east"])
        .with_health(None, &shapes[(i + edit) % shapes.len()])
}

/// Edits the flooding tenant's policies one after another, each a new query, counting those
/// that land, until aborted.
fn flood(flooding: &Flooding, landed: &Arc<AtomicUsize>) -> tokio::task::JoinHandle<()> {
    let (api, shapes, landed) = (
        flooding.api.clone(),
        flooding.shapes.clone(),
        landed.clone(),
    );
    tokio::spawn(async move {
        for edit in 1.. {
            let i = edit % FLOODED;
            let Ok(body) = serde_json::to_value(flood_policy(&shapes, i, edit).policy()) else {
                continue;
            };
            let params = PatchParams::apply("flood").force();
            let name = format!("flood-{i}");
            if api
                .patch(&name, &params, &Patch::Apply(&body))
                .await
                .is_ok()
            {
                landed.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
}

/// The storming tenant's backends (made by the admin, as a Deployment's would be) and its
/// policies on one primary; the primary's slices.
async fn storm(env: &TestEnv, ns: &str) -> Api<EndpointSlice> {
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(env.client.clone(), ns);
    let slices: Api<EndpointSlice> = Api::namespaced(env.client.clone(), ns);
    for name in ["storm", "storm-east"] {
        let _ = services
            .create(&PostParams::default(), &objects::service(name))
            .await;
        let _ = slices
            .create(&PostParams::default(), &objects::slice(name, true))
            .await;
    }
    let policies: Api<FailoverPolicy> = Api::namespaced(env.client.clone(), ns);
    for i in 0..STORMING {
        let policy = PolicyBuilder::named(&format!("storm-{i}"), "storm", &["storm-east"]);
        let _ = policies
            .create(&PostParams::default(), policy.policy())
            .await;
    }
    slices
}

/// Makes the storming tenant's primary not ready and ready again until aborted, a change a
/// second, the most a readiness probe changes a Pod's readiness (its `periodSeconds` is at least
/// 1): each change fails its fifty policies over, or back.
fn flap(slices: &Api<EndpointSlice>, flaps: &Arc<AtomicUsize>) -> tokio::task::JoinHandle<()> {
    let (slices, flaps) = (slices.clone(), flaps.clone());
    tokio::spawn(async move {
        loop {
            for ready in [false, true] {
                objects::set_ready(&slices, "storm", ready).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            flaps.fetch_add(1, Ordering::Relaxed);
        }
    })
}
