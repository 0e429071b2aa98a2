//! The controller's process: started cold (no route yet) and timed until every route and status
//! is in place, against a bare client making the same writes; restarted with everything in
//! place; its CPU and memory.

use std::{
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use failover::sources::watch::LIST_PAGE_SIZE;
use failover_core::{api::FailoverPolicy, route::trafficsplit::TrafficSplit};
use futures::{StreamExt, stream};
use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Api, Resource, ResourceExt,
    api::{ListParams, ObjectList, Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::{
    Options,
    apiserver::ControlPlaneLoad,
    latency::writes,
    memory::status_kib,
    objects::{create_all, policy},
    support::{ControllerProcess, TestEnv, metric, repo_root},
    watches::{Lists, SplitWatch, StatusWatch, relisted},
};

/// The release controller (or `--controller-binary`) for `env`'s namespace.
pub fn start_controller(env: &TestEnv, o: &Options) -> ControllerProcess {
    start_controller_with(env, o, &[])
}

/// The same, with more arguments.
pub fn start_controller_with(env: &TestEnv, o: &Options, extra: &[&str]) -> ControllerProcess {
    let binary = o
        .controller_binary
        .clone()
        .unwrap_or_else(|| repo_root().join("target/release/failover-controller"));
    let concurrency = o.concurrency.to_string();
    ControllerProcess::start_binary(
        &binary,
        env,
        &env.cp.kubeconfig,
        &[
            &[
                "--log-level",
                &o.controller_log,
                "--concurrency",
                &concurrency,
            ],
            extra,
        ]
        .concat(),
    )
}

/// CPU seconds and peak RSS (MiB) of a process.
pub fn usage(pid: u32) -> (f64, f64) {
    (
        crate::support::cpu_seconds(pid),
        status_kib(pid, "VmHWM:") / 1024.0,
    )
}

/// Waits until the controller's `/readyz` answers 200; returns how long that took.
async fn ready(controller: &ControllerProcess, since: Instant) -> Duration {
    while controller.admin_get("/readyz").await.0 != 200 {
        assert!(since.elapsed() < Duration::from_secs(300), "never ready");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    since.elapsed()
}

/// The peak RSS of a controller with nothing to do (an empty namespace), in MiB.
pub async fn idle_rss(o: &Options) -> f64 {
    let env = TestEnv::new("bench-idle").await.expect("control plane");
    let controller = start_controller(&env, o);
    ready(&controller, Instant::now()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, rss) = usage(controller.pid());
    eprintln!(
        "idle process: peak RSS {rss:.1} MiB, of it {:.1} MiB file-backed",
        status_kib(controller.pid(), "RssFile:") / 1024.0
    );
    drop(controller);
    drop(env);
    rss
}

/// Starts the controller with no route in place; returns it and the time until every
/// TrafficSplit has its weights and every policy its status.
pub async fn cold_start(
    env: &TestEnv,
    n: usize,
    splits: &SplitWatch,
    statuses: &StatusWatch,
    o: &Options,
) -> (ControllerProcess, Duration) {
    let limit = Duration::from_secs(900);
    let (controller, took) = cold_start_within(env, n, splits, statuses, o, limit).await;
    let took = took.expect("not all routes and statuses in place after 15 minutes");
    (controller, took)
}

/// [`cold_start`], waiting at most `limit`: `None` when not every route and status was in place
/// by then.
pub async fn cold_start_within(
    env: &TestEnv,
    n: usize,
    splits: &SplitWatch,
    statuses: &StatusWatch,
    o: &Options,
    limit: Duration,
) -> (ControllerProcess, Option<Duration>) {
    let start = Instant::now();
    let controller = start_controller(env, o);
    while splits.count_with(&[1, 0, 0]) < n || statuses.count() < n {
        if start.elapsed() > limit {
            return (controller, None);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = start.elapsed();
    eprintln!("[{n}] all routes and statuses in place {took:.2?} after the controller started");
    (controller, Some(took))
}

/// The cold start's floor: the writes the controller made at start (each route created, then
/// each status applied), made again by a bare client at the same concurrency, in a namespace of
/// their own with the same policies. Returns how long the API server took for them.
pub async fn cold_floor(env: &TestEnv, n: usize, o: &Options) -> Duration {
    let floor = TestEnv::on(env.cp, &format!("bench-floor-{n}"))
        .await
        .expect("namespace");
    create_all(&floor.api(), (0..n).map(policy).collect(), 32).await;
    let writes = floor_writes(env, &floor).await;
    let (routes, policies): (Api<TrafficSplit>, Api<FailoverPolicy>) = (floor.api(), floor.api());
    let started = Instant::now();
    stream::iter(writes)
        .for_each_concurrent(o.concurrency, |(ts, status)| {
            let (routes, policies) = (routes.clone(), policies.clone());
            async move {
                let name = ts.name_any();
                routes
                    .create(&PostParams::default(), &ts)
                    .await
                    .expect("route");
                let params = PatchParams::apply("bench-floor").force();
                policies
                    .patch_status(&name, &params, &Patch::Apply(&status))
                    .await
                    .expect("status");
            }
        })
        .await;
    let took = started.elapsed();
    eprintln!("[{n}] the same writes by a bare client: {took:.2?}");
    // The deletions must not load the API server while the latency is measured.
    let deleted = floor.cleanup_and_wait(Duration::from_secs(600)).await;
    eprintln!("[{n}] the floor's namespace deleted in {deleted:.2?}");
    took
}

/// The routes and statuses the controller wrote in `env`, made out for the same policies in
/// `floor`'s namespace (each route owned by the policy of the same name there).
async fn floor_writes(env: &TestEnv, floor: &TestEnv) -> Vec<(TrafficSplit, serde_json::Value)> {
    let made: Vec<TrafficSplit> = env
        .api::<TrafficSplit>()
        .list(&Default::default())
        .await
        .expect("routes")
        .items;
    let statuses: Vec<FailoverPolicy> = env
        .api::<FailoverPolicy>()
        .list(&Default::default())
        .await
        .expect("policies")
        .items;
    let uids: std::collections::HashMap<String, String> = floor
        .api::<FailoverPolicy>()
        .list(&Default::default())
        .await
        .expect("floor policies")
        .items
        .into_iter()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect();
    made.into_iter()
        .filter_map(|ts| {
            let name = ts.name_any();
            let status = statuses.iter().find(|p| p.name_any() == name)?.status.clone()?;
            let mut owner = ts.owner_references().first()?.clone();
            owner.uid = uids.get(&name)?.clone();
            let metadata = ObjectMeta {
                name: Some(name),
                labels: ts.metadata.labels.clone(),
                owner_references: Some(vec![owner]),
                ..Default::default()
            };
            let body = json!({"apiVersion": FailoverPolicy::api_version(&()), "kind": FailoverPolicy::kind(&()), "status": status});
            Some((TrafficSplit { metadata, ..ts }, body))
        })
        .collect()
}

/// Restarts kube-apiserver under the running controller: the new server's watch cache starts
/// at the current version, so every watch resumed from an older one is told it is gone and lists
/// its kind again. Returns once the controller is ready, the relists have had 15 s and the
/// benchmark's own watches (`own`) have listed again, so that their relists, which wait out a
/// backoff of up to 30 s after the server went away, do not fall into the next phase.
pub async fn relist(env: &TestEnv, controller: &ControllerProcess, n: usize, own: &[&Lists]) {
    let before: Vec<usize> = own.iter().map(|l| l.load(Ordering::SeqCst)).collect();
    let dir = env.cp.dir.to_string_lossy().to_string();
    for action in ["stop-component", "start-component"] {
        let out = env.cp.script(&[action, &dir, "kube-apiserver"]);
        assert!(
            out.status.success(),
            "{action} kube-apiserver: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    assert!(
        crate::recovery::api_ready(env).await,
        "the API server did not serve again after its restart"
    );
    let load_before = ControlPlaneLoad::now(env).await;
    ready(controller, Instant::now()).await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let waited = Instant::now();
    if !relisted(own, &before, Duration::from_secs(120)).await {
        eprintln!("[{n}] the benchmark's own watches had not listed again after 120 s");
    }
    let load = ControlPlaneLoad::now(env).await.since(load_before);
    eprintln!(
        "[{n}] relist after the API server restarted (the benchmark's own watches listed again {:.1?} after the controller's 15 s), {}",
        waited.elapsed(),
        load.describe()
    );
}

/// A restart with everything in place.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Restart {
    /// From the new process's start to `/readyz` 200.
    pub ready_s: f64,
    /// The floor: a bare client listing what the controller lists at start (the same kinds,
    /// Services as metadata only, pages of the same size, all kinds at once).
    pub lists_s: f64,
    /// Route, status and Event writes until it had reconciled every policy once.
    pub writes: f64,
    /// Restarts this stands for (see [`Restart::median`]).
    pub restarts: usize,
}

impl Restart {
    /// The median ready time and the median bare list of several restarts, and the most writes
    /// any of them made. One restart's ratio ranged from 0.59x to 1.42x within one run
    /// (docs/bench-runs, 20261125-2218): the two times are each a few seconds of a shared,
    /// busy API server, so a single pair says little.
    pub fn median(all: &[Restart]) -> Restart {
        let middle = |f: fn(&Restart) -> f64| {
            let mut v: Vec<f64> = all.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            match v.len() {
                0 => 0.0,
                n if n % 2 == 1 => v[n / 2],
                n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
            }
        };
        Restart {
            ready_s: middle(|r| r.ready_s),
            lists_s: middle(|r| r.lists_s),
            writes: all.iter().map(|r| r.writes).fold(0.0, f64::max),
            restarts: all.len(),
        }
    }
}

/// Stops the controller (SIGTERM) and starts a new one with every route and status in place.
pub async fn restart_in_place(
    env: &TestEnv,
    mut controller: ControllerProcess,
    n: usize,
    o: &Options,
) -> (ControllerProcess, Restart) {
    controller.signal("TERM");
    drop(controller);
    let load_before = ControlPlaneLoad::now(env).await;
    let start = Instant::now();
    let controller = start_controller(env, o);
    let ready_s = ready(&controller, start).await.as_secs_f64();
    let load = ControlPlaneLoad::now(env).await.since(load_before);
    eprintln!(
        "[{n}] until the restarted controller was ready, {}",
        load.describe()
    );
    // Every policy reconciled once (the start-up pass), then its writes counted.
    loop {
        let text = controller.admin_get("/metrics").await.1;
        if metric(&text, "failover_reconciles_total").unwrap_or(0.0) >= n as f64 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "start-up pass never ended"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let w = writes(&controller).await;
    let writes = ["trafficsplit", "status", "event"]
        .iter()
        .map(|k| w.get(*k).copied().unwrap_or(0.0))
        .sum();
    let load_before = ControlPlaneLoad::now(env).await;
    let lists_s = list_floor(env).await.as_secs_f64();
    let load = ControlPlaneLoad::now(env).await.since(load_before);
    eprintln!("[{n}] over the bare client's lists, {}", load.describe());
    eprintln!(
        "[{n}] restarted with everything in place: ready in {ready_s:.2}s, {writes} writes; the same lists by a bare client: {lists_s:.2}s"
    );
    (
        controller,
        Restart {
            ready_s,
            lists_s,
            writes,
            restarts: 1,
        },
    )
}

/// How long a new bare client takes to list what the controller's readiness waits for
/// (EndpointSlices, Services as metadata, FailoverPolicies), while it also lists TrafficSplits
/// alongside, as the controller's route watch does at the same time (readiness does not wait
/// for it, but the API server serves it meanwhile). The client is made in the timed window, as
/// the restarted controller makes its own, so the floor pays its own connections and TLS
/// handshakes too.
async fn list_floor(env: &TestEnv) -> Duration {
    let started = Instant::now();
    let (client, ns) = (env.cp.client().await, env.ns.as_str());
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let policies: Api<FailoverPolicy> = Api::namespaced(client.clone(), ns);
    let routes = tokio::spawn(list_all(Api::<TrafficSplit>::namespaced(client, ns)));
    tokio::join!(
        list_all(slices),
        paged(|p| {
            let api = services.clone();
            async move { api.list_metadata(&p).await }
        }),
        list_all(policies),
    );
    let took = started.elapsed();
    let _ = routes.await;
    took
}

/// Every page of the full objects of `api`; returns the number of objects.
async fn list_all<K>(api: Api<K>) -> usize
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    paged(|p| {
        let api = api.clone();
        async move { api.list(&p).await }
    })
    .await
}

/// Every page of one list, in pages of the controller's size; returns the number of objects.
async fn paged<T: Clone, F: Future<Output = kube::Result<ObjectList<T>>>>(
    list: impl Fn(ListParams) -> F,
) -> usize {
    let mut params = ListParams::default().limit(LIST_PAGE_SIZE);
    let mut listed = 0;
    loop {
        let page = list(params.clone()).await.expect("list");
        listed += page.items.len();
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return listed,
        }
    }
}
