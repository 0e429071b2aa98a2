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
    num::NonZeroU32,
    sync::{Arc, Weak},
    time::{Duration, Instant},
};

use futures::{FutureExt, Stream, StreamExt, channel::mpsc, future::BoxFuture};
use kube::Client;
use tracing::{info, warn};

use self::{policies::policy_requests, runner::Request, triggers::queue_everything};
use crate::sources::scope::Scaling;
use crate::{
    pipeline::{
        reconcile::{Error, Reconciler, reconcile_or_retry},
        write::statuses,
    },
    runtime::{
        leader::Leadership, metrics::Metrics, notify::NotifySettings, retry::Retries,
        writer::Writer,
    },
    sources::{
        Caches, Context, Scope,
        health::{
            Health, Reach,
            budget::{DEFAULT_QUERIES_PER_SECOND, InFlight},
        },
        local::{apis::Apis, feeds::feeds, synced::Synced},
        remote::Clusters,
        wake::Wake,
    },
};
use failover_core::{
    apis::{NeededApi, WatchKind},
    labels::Selector,
    observation::PolicyKey,
    route::RouteKind,
    tenancy::{Addresses, Gateways},
};

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Watch only this namespace; all namespaces when `None`.
    pub namespace: Option<String>,
    /// Own only the policies of the namespaces this selector picks (`--shard`); all when `None`.
    pub shard: Option<Selector>,
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
    /// The most health queries sent a second, shared by namespace.
    pub prometheus_queries_per_second: NonZeroU32,
    /// The most health queries in flight at once, in all and per namespace.
    pub prometheus_in_flight: InFlight,
    /// The Gateways of other namespaces that policies' HTTPRoutes may attach to.
    pub allowed_gateways: Gateways,
    /// Whether policies may scale their secondaries' workloads (`capacity.scale`).
    pub allow_scaling: bool,
    /// Where alerts go, and which webhook sinks policies may name.
    pub notify: NotifySettings,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            namespace: None,
            shard: None,
            concurrency: 16,
            instance: None,
            secret_namespace: "default".to_string(),
            prometheus_address: None,
            prometheus_allowed_addresses: Vec::new(),
            prometheus_namespace_label: Some("namespace".to_string()),
            prometheus_queries_per_second: DEFAULT_QUERIES_PER_SECOND,
            prometheus_in_flight: InFlight::default(),
            allowed_gateways: Gateways::default(),
            allow_scaling: false,
            notify: NotifySettings::default(),
        }
    }
}

/// The context: every cache empty, the scope the settings give, the writer and the watches'
/// client (each a clone of `client`), and remote clusters and health queries that wake policies
/// through the work queue (`queue`).
/// What a reconcile reads and writes, out of the controller's context.
fn reconciler(ctx: &Context) -> Reconciler<'_> {
    Reconciler {
        caches: &ctx.caches,
        writer: &ctx.writer,
        scope: &ctx.scope,
        wake: &ctx.wake,
        metrics: ctx.metrics(),
    }
}

fn context(
    client: Client,
    settings: &Settings,
    metrics: &Arc<Metrics>,
    leadership: Leadership,
    queue: mpsc::UnboundedSender<PolicyKey>,
) -> Arc<Context> {
    let writer = Writer::new(
        client.clone(),
        leadership,
        metrics.clone(),
        settings.instance.clone(),
        settings.notify.clone(),
    );
    // The remote clusters and the health pollers wake policies through the context they are
    // part of.
    Arc::new_cyclic(|ctx: &Weak<Context>| {
        let (remote_ctx, health_ctx, notify_ctx) = (ctx.clone(), ctx.clone(), ctx.clone());
        writer.notifier.wake_with(move |policy| {
            if let Some(ctx) = notify_ctx.upgrade() {
                ctx.wake.policies([policy]);
            }
        });
        let remote = Clusters::new(
            settings.secret_namespace.clone(),
            metrics.clone(),
            Arc::new(move |change| {
                if let Some(ctx) = remote_ctx.upgrade() {
                    ctx.wake_for_remote(change);
                }
            }),
        );
        let health = Health::new(
            reach(settings),
            metrics.clone(),
            Arc::new(move |policy| {
                if let Some(ctx) = health_ctx.upgrade() {
                    ctx.wake.policies([policy]);
                }
            }),
        );
        Context::new(
            Caches::new(remote, health, metrics.clone(), settings.shard.clone()),
            scope(settings),
            Arc::new(writer),
            client,
            Wake::new(queue),
            metrics.clone(),
        )
    })
}

/// What the cluster admin set, of the settings.
fn scope(settings: &Settings) -> Scope {
    Scope {
        namespace: settings.namespace.clone(),
        sharded: settings.shard.is_some(),
        gateways: settings.allowed_gateways.clone(),
        scaling: Scaling::allowed_if(settings.allow_scaling),
    }
}

/// Where health queries may go, and how fast, of the settings.
fn reach(settings: &Settings) -> Reach {
    Reach {
        default_address: settings.prometheus_address.clone(),
        addresses: Addresses::new(
            &settings.prometheus_allowed_addresses,
            settings.prometheus_address.as_deref(),
        ),
        namespace_label: settings.prometheus_namespace_label.clone(),
        queries_per_second: settings.prometheus_queries_per_second,
        in_flight: settings.prometheus_in_flight,
    }
}

/// Why the controller is not ready to serve, if it is not: the FailoverPolicy CRD missing, or
/// the watches every decision reads (FailoverPolicies, EndpointSlices, Services) not listed
/// yet. What policies ask for never counts: a route kind (its CRD missing, or its watch
/// refused) is the concern of the policies that output it (their `Ready` condition, a log line,
/// the `failover_missing_api` metric), so no tenant's policy takes a replica out of rotation.
pub fn not_ready(caches: &Caches) -> Option<String> {
    let missing = caches.apis.missing_among(&[NeededApi::FailoverPolicy]);
    if !missing.is_empty() {
        return Some(missing.join("; "));
    }
    let pending = pending_lists(caches, &[], Groups::Unwatched);
    (!pending.is_empty()).then(|| {
        let pending: Vec<&str> = pending.iter().map(|k| k.as_str()).collect();
        format!("caches not synced (not listed yet: {})", pending.join(", "))
    })
}

/// Whether the group watch counts among the watches a pass waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Groups {
    /// It counts: the start-up pass waits for it.
    Count,
    /// It does not: readiness never waits for groups.
    Unwatched,
}

/// The watches that have not listed yet, of those that matter: a route watch only while a
/// policy outputs that kind (`used`) and its API is not missing (it never lists then); the group
/// watch only when `groups` says it counts (the start-up pass, not readiness).
fn pending_lists(caches: &Caches, used: &[RouteKind], groups: Groups) -> Vec<WatchKind> {
    caches
        .synced
        .pending()
        .into_iter()
        .filter(|kind| match kind.route() {
            None if *kind == WatchKind::FailoverGroup => {
                groups == Groups::Count && !caches.apis.is_missing(NeededApi::FailoverGroup)
            }
            None => true,
            Some(route) => {
                used.contains(&route) && !caches.apis.is_missing(NeededApi::of_route(route))
            }
        })
        .collect()
}

/// Whether the start-up pass should wait: a watch that matters has not listed yet, for at most
/// [`START_WAIT`] after `started`. The group watch matters here: a member reconciled before its
/// group is known decides alone, and after a restart would move its route away from the group's
/// site and back. It never holds readiness back: groups are what some policies ask for, as route
/// kinds are, and a group watch that cannot list (not granted, say) stops nothing past the
/// start-up wait; its members decide alone until it lists, then move together.
fn start_waits(caches: &Caches, started: Instant) -> bool {
    started.elapsed() < START_WAIT
        && !pending_lists(caches, &used_route_kinds(caches), Groups::Count).is_empty()
}

/// The route kinds some policy outputs.
fn used_route_kinds(caches: &Caches) -> Vec<RouteKind> {
    let index = caches.index.read();
    RouteKind::ALL
        .into_iter()
        .filter(|k| index.uses(*k))
        .collect()
}

/// What holds reconciles back: for a pass over every policy, the statuses waiting to be written
/// at their limit; for any, for at most [`START_WAIT`] after the start, a watch that matters not
/// listed yet.
struct StartUp {
    ctx: Arc<Context>,
    started: Instant,
}

impl runner::HoldBack for StartUp {
    fn holds(&self, lane: runner::Lane) -> bool {
        (lane == runner::Lane::Bulk && self.ctx.writer.statuses.full())
            || start_waits(&self.ctx.caches, self.started)
    }

    fn released(&self) -> BoxFuture<'static, ()> {
        let left = self.ctx.writer.statuses.left();
        if self.started.elapsed() >= START_WAIT {
            // Past the start, only the statuses waiting hold reconciles back (a deadline already
            // passed would wake the work queue at once, again and again).
            return Box::pin(left);
        }
        let listed = self.ctx.caches.synced.changed();
        let apis = self.ctx.caches.apis.changed();
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
/// has listed, the start-up pass would take the single thread the remaining lists need and
/// delay them. Bounded, so a route watch that cannot list (forbidden, say) stops nothing.
const START_WAIT: Duration = Duration::from_secs(10);

/// Starts the controller; returns its context (for the admin server) and a future that runs until `shutdown` resolves
/// and in-flight reconciles finish.
pub fn start(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    leadership: Leadership,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> (Arc<Context>, impl Future<Output = ()>) {
    metrics.register_error_kinds(&Error::KINDS);
    let shutdown = shutdown.shared();
    let (queue, queued) = mpsc::unbounded();
    let ctx = context(client, &settings, &metrics, leadership.clone(), queue);
    let concurrency = usize::from(settings.concurrency);
    let status_writer = statuses::run(ctx.writer.clone(), ctx.metrics().clone(), concurrency);
    let requests = requests(
        policy_requests(ctx.clone()),
        queued,
        leadership,
        ctx.caches.apis.clone(),
    );
    let held_back = StartUp {
        ctx: ctx.clone(),
        started: Instant::now(),
    };
    // The work queue's retries: the backoff of each failing policy, kept by the reconciles it runs.
    let (reconciling, retries) = (ctx.clone(), Arc::new(Retries::default()));
    let controller = runner::run(
        ctx.clone(),
        requests,
        concurrency,
        held_back,
        move |policy| {
            let (ctx, retries) = (reconciling.clone(), retries.clone());
            async move { reconcile_or_retry(policy, reconciler(&ctx), &retries).await }
        },
        shutdown.clone(),
    );
    let never_listed = stopped_before_policies_listed(shutdown, ctx.caches.synced.clone());
    let flushing = ctx.clone();
    let flushed = async move {
        let writer = &flushing.writer;
        futures::join!(writer.statuses.flushed(), writer.group_statuses.flushed());
    };
    let work = running(controller, feeds(ctx.clone()), never_listed, flushed);
    let notifier = ctx.writer.notifier.clone().run();
    (ctx, run_beside(work, status_writer, notifier))
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

/// Runs `work` to its end with the status writer and the notifier beside it (neither ends
/// first on its own).
async fn run_beside(
    work: impl Future<Output = ()>,
    status_writer: impl Future<Output = ()>,
    notifier: impl Future<Output = ()>,
) {
    tokio::select! {
        _ = work => {}
        _ = status_writer => warn!("the status writer stopped"),
        _ = notifier => warn!("the notifier stopped"),
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
