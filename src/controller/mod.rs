//! Wires the watches, caches, index and reconcile loop into one running controller.
//!
//! ```text
//! EndpointSlices ─┐                       ┌─ index: Service → policies ─┐
//! Services ───────┼─ observe (counts) ────┤                             ├─▶ queue ─▶ reconcile
//! TrafficSplits ──┤  (route views)        └─ index: route → policies ───┘     (one per policy
//! HTTPRoutes ─────┘                                                            at a time)
//! FailoverPolicies ─▶ policy table + index ─────────────────────────────────▶
//! ```
//!
//! Every watch goes through [`crate::sources::watch::events`]; each event updates one cache and wakes
//! only the policies that reference what changed. The work queue ([`crate::controller::runner`]) runs
//! [`crate::pipeline::reconcile::reconcile`] at most once at a time per policy.

pub mod admin;
pub mod policies;
pub mod runner;
pub mod telemetry;
pub mod triggers;

use std::{
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{FutureExt, Stream, StreamExt, channel::mpsc, future::BoxFuture};
use kube::Client;
use parking_lot::RwLock;
use tracing::{info, warn};

use self::{
    policies::{PolicyFeed, policy_requests},
    runner::Request,
    triggers::queue_everything,
};
use crate::{
    apis::WatchKind,
    observation::PolicyKey,
    pipeline::{
        reconcile::{Context, Error, reconcile_or_retry},
        write::statuses,
    },
    route::RouteKind,
    runtime::{gate::WriteGate, leader::Leadership, metrics::Metrics},
    sources::{
        Caches,
        health::{Health, Reach},
        local::{
            apis::{Apis, NeededApi},
            feeds::{Feed, feeds},
            index::PolicyIndex,
            policies::PolicyTable,
            synced::Synced,
        },
        remote::Clusters,
        wake::Wake,
        watch::WatchContext,
    },
    tenancy::{Addresses, Gateways},
};

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Watch only this namespace; all namespaces when `None`.
    pub namespace: Option<String>,
    /// Most policies reconciled at once.
    pub concurrency: u16,
    /// Identity of this replica in Events (usually the Pod name).
    pub instance: Option<String>,
    /// Where the Secrets declaring remote clusters are (the controller's namespace).
    pub secret_namespace: String,
    /// The Prometheus that health queries go to when a policy names none.
    pub prometheus_address: Option<String>,
    /// Other addresses a policy may send its health queries to.
    pub prometheus_allowed_addresses: Vec<String>,
    /// The label that scopes every selector of a health query to the policy's namespace
    /// (`None`: queries are sent as written).
    pub prometheus_namespace_label: Option<String>,
    /// The Gateways of other namespaces that policies' HTTPRoutes may attach to.
    pub allowed_gateways: Gateways,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            namespace: None,
            concurrency: 16,
            instance: None,
            secret_namespace: "default".to_string(),
            prometheus_address: None,
            prometheus_allowed_addresses: Vec::new(),
            prometheus_namespace_label: Some("namespace".to_string()),
            allowed_gateways: Gateways::default(),
        }
    }
}

/// The running parts of a controller, for the admin server.
#[derive(Clone)]
pub struct Handle {
    /// The caches, with their sync state.
    pub caches: Caches,
    /// The APIs found missing.
    pub apis: Apis,
    index: Arc<RwLock<PolicyIndex>>,
}

impl Handle {
    /// Empty caches, remote clusters that wake policies through `wake`.
    fn new(settings: &Settings, metrics: &Arc<Metrics>, wake: &Wake) -> Self {
        let remote = {
            let wake = wake.clone();
            Clusters::new(
                settings.secret_namespace.clone(),
                metrics.clone(),
                Arc::new(move |change| wake.remote(change)),
            )
        };
        let health = {
            let wake = wake.clone();
            let reach = Reach {
                default_address: settings.prometheus_address.clone(),
                addresses: Addresses::new(
                    &settings.prometheus_allowed_addresses,
                    settings.prometheus_address.as_deref(),
                ),
                namespace_label: settings.prometheus_namespace_label.clone(),
            };
            Health::new(
                reach,
                metrics.clone(),
                Arc::new(move |policy| wake.policies(vec![policy])),
            )
        };
        Self {
            caches: Caches::new(remote, health),
            apis: Apis::new(metrics.clone()),
            index: wake.index.clone(),
        }
    }

    /// Why the controller is not ready to serve, if it is not: the FailoverPolicy CRD missing,
    /// or the watches every decision reads (FailoverPolicies, EndpointSlices, Services) not
    /// listed yet. What policies ask for never counts: a route kind (its CRD missing, or its
    /// watch refused) is the concern of the policies that output it (their `Ready` condition,
    /// a log line, the `failover_missing_api` metric), so no tenant's policy takes a replica
    /// out of rotation.
    pub fn not_ready(&self) -> Option<String> {
        let missing = self.apis.missing_among(&[NeededApi::FailoverPolicy]);
        if !missing.is_empty() {
            return Some(missing.join("; "));
        }
        let pending = self.pending_lists(&[]);
        (!pending.is_empty()).then(|| {
            let pending: Vec<&str> = pending.iter().map(|k| k.as_str()).collect();
            format!("caches not synced (not listed yet: {})", pending.join(", "))
        })
    }

    /// The watches that have not listed yet, of those that matter: a route watch only while a
    /// policy outputs that kind (`used`) and its API is not missing (it never lists then).
    fn pending_lists(&self, used: &[RouteKind]) -> Vec<WatchKind> {
        self.caches
            .synced
            .pending()
            .into_iter()
            .filter(|kind| match kind.route() {
                None => true,
                Some(route) => {
                    used.contains(&route) && !self.apis.is_missing(NeededApi::of_route(route))
                }
            })
            .collect()
    }

    /// Whether the start-up pass should wait: a watch that matters has not listed yet, for at
    /// most [`START_WAIT`] after `started`.
    fn start_waits(&self, started: Instant) -> bool {
        started.elapsed() < START_WAIT && !self.pending_lists(&self.used_route_kinds()).is_empty()
    }

    /// The route kinds some policy outputs.
    fn used_route_kinds(&self) -> Vec<RouteKind> {
        let index = self.index.read();
        RouteKind::ALL
            .into_iter()
            .filter(|k| index.uses(*k))
            .collect()
    }
}

/// What holds reconciles back: the statuses waiting to be written at their limit, or, for at most
/// [`START_WAIT`] after the start, a watch that matters not listed yet.
struct StartUp {
    gate: Arc<WriteGate>,
    handle: Handle,
    started: Instant,
}

impl runner::HoldBack for StartUp {
    fn holds(&self) -> bool {
        self.gate.statuses.full() || self.handle.start_waits(self.started)
    }

    fn released(&self) -> BoxFuture<'static, ()> {
        let left = self.gate.statuses.left();
        let listed = self.handle.caches.synced.changed();
        let apis = self.handle.apis.changed();
        let deadline = tokio::time::Instant::from_std(self.started + START_WAIT);
        Box::pin(async move {
            tokio::select! {
                () = left => {}
                () = listed => {}
                () = apis => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        })
    }
}

/// How long the first reconciles wait for every watch to list. They read the readiness counts
/// (each reconcile waits for those anyway) and the route views: started before the route watch
/// has listed, the start-up pass took the single thread the remaining lists need, and a restart
/// with everything in place was ready in 4.20 s against a bare client's 2.86 s (docs/bench-runs,
/// 20261125-1752). Bounded, so a route watch that cannot list (forbidden, say) stops nothing.
const START_WAIT: Duration = Duration::from_secs(10);

/// Starts the controller; returns its handle and a future that runs until `shutdown` resolves
/// and in-flight reconciles finish.
pub fn start(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    leadership: Leadership,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> (Handle, impl Future<Output = ()>) {
    metrics.register_error_kinds(&Error::KINDS);
    let shutdown = shutdown.shared();
    let index: Arc<RwLock<PolicyIndex>> = Arc::default();
    let (queue, queued) = mpsc::unbounded();
    let wake = Wake { index, queue };
    let handle = Handle::new(&settings, &metrics, &wake);
    let watch = watch_context(&metrics, &handle);
    let (gate, queue_of_statuses) = WriteGate::new(
        client.clone(),
        leadership.clone(),
        metrics,
        settings.instance.clone(),
    );
    let gate = Arc::new(gate);
    let (feeds, policy_requests, table) = watches(&client, &settings, &handle, wake, watch, &gate);
    let status_writer = statuses::run(
        gate.clone(),
        queue_of_statuses,
        usize::from(settings.concurrency),
    );
    let (caches, apis) = (handle.caches.clone(), handle.apis.clone());
    let context = Arc::new(Context::new(
        caches,
        gate.clone(),
        apis.clone(),
        settings.allowed_gateways.clone(),
    ));
    let requests = requests(policy_requests, queued, leadership, apis);
    let held_back = StartUp {
        gate: gate.clone(),
        handle: handle.clone(),
        started: Instant::now(),
    };
    let controller = runner::run(
        table,
        requests,
        usize::from(settings.concurrency),
        held_back,
        move |policy| reconcile_or_retry(policy, context.clone()),
        shutdown.clone(),
    );
    let never_listed = stopped_before_policies_listed(shutdown, handle.caches.synced.clone());
    let flushed = async move { gate.statuses.flushed().await };
    let work = running(controller, feeds, never_listed, flushed);
    (handle, run_beside(work, status_writer))
}

/// The watches: each cache's feed, and the policy table with the work the policy watch asks for.
fn watches(
    client: &Client,
    settings: &Settings,
    handle: &Handle,
    wake: Wake,
    watch: WatchContext,
    gate: &Arc<WriteGate>,
) -> (
    impl Future<Output = ()> + use<>,
    impl Stream<Item = Request> + Send + 'static + use<>,
    Arc<RwLock<PolicyTable>>,
) {
    let feeds = feeds(Feed {
        client: client.clone(),
        namespace: settings.namespace.clone(),
        caches: handle.caches.clone(),
        wake,
        watch: Arc::new(watch.clone()),
        gate: gate.clone(),
    });
    let table: Arc<RwLock<PolicyTable>> = Arc::default();
    let policy_requests = policy_requests(
        client,
        settings.namespace.as_deref(),
        PolicyFeed {
            table: table.clone(),
            index: handle.index.clone(),
            caches: handle.caches.clone(),
            watch,
            gate: gate.clone(),
        },
    );
    (feeds, policy_requests, table)
}

/// What every watch reports to: the metrics, the sync state and the APIs found missing.
fn watch_context(metrics: &Arc<Metrics>, handle: &Handle) -> WatchContext {
    WatchContext {
        metrics: metrics.clone(),
        synced: handle.caches.synced.clone(),
        apis: handle.apis.clone(),
    }
}

/// The runner's work: each policy that changed or was woken, and every policy when something
/// queues them all.
fn requests(
    policy_requests: impl Stream<Item = Request> + Send + 'static,
    queued: mpsc::UnboundedReceiver<PolicyKey>,
    leadership: Leadership,
    apis: Apis,
) -> impl Stream<Item = Request> + Send + 'static {
    futures::stream::select_all([
        policy_requests.boxed(),
        queued.map(Request::One).boxed(),
        queue_everything(&leadership, &apis)
            .map(|()| Request::All)
            .boxed(),
    ])
}

/// The controller until it stops (or its watches end, or it stops before listing anything),
/// then until the statuses it queued are written.
async fn running(
    controller: impl Future<Output = ()>,
    feeds: impl Future<Output = ()>,
    never_listed: impl Future<Output = ()>,
    flushed: impl Future<Output = ()>,
) {
    info!("controller started");
    tokio::select! {
        _ = controller => info!("controller stopped"),
        _ = feeds => warn!("watches ended"),
        _ = never_listed => info!("stopped before any policy was listed"),
    }
    flushed.await;
}

/// Runs `work` to its end with `helper` beside it (a helper never ends first on its own).
async fn run_beside(work: impl Future<Output = ()>, helper: impl Future<Output = ()>) {
    tokio::select! {
        _ = work => {}
        _ = helper => warn!("the status gate stopped"),
    }
}

/// Resolves on shutdown while the policies have never been listed (their CRD missing, say):
/// no reconcile can be in flight then, and kube-runtime's controller would wait for a store
/// that never fills.
async fn stopped_before_policies_listed(shutdown: impl Future<Output = ()>, synced: Synced) {
    shutdown.await;
    if !synced.pending().contains(&WatchKind::FailoverPolicy) {
        std::future::pending::<()>().await;
    }
}
