//! Wires the watches, caches, index and reconcile loop into one running controller.
//!
//! ```text
//! EndpointSlices ─┐                       ┌─ index: Service → policies ─┐
//! Services ───────┼─ observe (counts) ────┤                             ├─▶ queue ─▶ reconcile
//! TrafficSplits ──┤  (route views)        └─ index: route → policies ───┘     (one per policy
//! HTTPRoutes ─────┘                                                            at a time)
//! FailoverPolicies ─▶ policy store + index ─────────────────────────────────▶
//! ```
//!
//! Every watch goes through [`crate::watch::events`]; each event updates one cache and wakes
//! only the policies that reference what changed. The work queue ([`crate::runner`]) runs
//! [`crate::reconcile::reconcile`] at most once at a time per policy.

use std::{future::Future, sync::Arc};

use futures::{FutureExt, Stream, StreamExt, channel::mpsc};
use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::{
    Api, Client, ResourceExt,
    core::PartialObjectMeta,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef},
        watcher,
    },
};
use parking_lot::RwLock;
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use crate::{
    api::FailoverPolicy,
    gather::Caches,
    health::Health,
    leader::{Leadership, Role},
    metrics::{Metrics, PolicyLabels},
    observe::{
        apis::{Apis, NeededApi},
        index::{PolicyIndex, PolicyKey},
        readiness::SERVICE_NAME_LABEL,
        synced::Synced,
    },
    reconcile::{Context, Error, RESYNC, reconcile_or_retry},
    remote::{Clusters, secrets},
    route::{
        RouteKey, RouteKind, RouteView,
        httproute::{self, HttpRoute},
        trafficsplit::{self, TrafficSplit},
    },
    runner::{self, Request},
    wake::Wake,
    watch::{WatchContext, events, map_event, slim},
    write::status,
    writer::Writer,
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
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            namespace: None,
            concurrency: 16,
            instance: None,
            secret_namespace: "default".to_string(),
            prometheus_address: None,
        }
    }
}

fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
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
            Health::new(
                settings.prometheus_address.clone(),
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

    /// Why the controller is not ready to serve, if it is not: a missing CRD that it needs
    /// (named, with how to install it), or watches that have not listed yet.
    pub fn not_ready(&self) -> Option<String> {
        let used: Vec<RouteKind> = RouteKind::ALL
            .into_iter()
            .filter(|k| self.index.read().uses(*k))
            .collect();
        let needed: Vec<NeededApi> = std::iter::once(NeededApi::FailoverPolicy)
            .chain(used.iter().map(|k| NeededApi::of_route(*k)))
            .collect();
        let missing = self.apis.missing_among(&needed);
        if !missing.is_empty() {
            return Some(missing.join("; "));
        }
        // A route watch matters only while a policy outputs that kind.
        let waiting = self.caches.synced.pending().into_iter().any(|kind| {
            RouteKind::of_watch(kind).is_none_or(|k| used.contains(&k))
                && NeededApi::of_watch(kind).is_none_or(|api| !self.apis.is_missing(api))
        });
        waiting.then(|| "caches not synced".to_string())
    }
}

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
    let watch = WatchContext {
        metrics: metrics.clone(),
        synced: handle.caches.synced.clone(),
        apis: handle.apis.clone(),
    };
    let feeds = feeds(Feed {
        client: client.clone(),
        settings: settings.clone(),
        caches: handle.caches.clone(),
        wake,
        watch: Arc::new(watch.clone()),
    });
    let ns = settings.namespace.as_deref();
    let policies = policy_stream(&client, ns, &handle, &watch);
    let (writer, statuses) = Writer::new(
        client,
        leadership.clone(),
        metrics,
        settings.instance.clone(),
    );
    let writer = Arc::new(writer);
    let statuses = status::run(writer.clone(), statuses, usize::from(settings.concurrency));
    let (caches, apis) = (handle.caches.clone(), handle.apis.clone());
    let context = Arc::new(Context::new(caches, writer.clone(), apis.clone()));
    let (policy_events, store) = policies;
    let requests = futures::stream::select_all([
        policy_events
            .filter_map(|p| async move { Some(Request::One(ObjectRef::from_obj(&p.ok()?))) })
            .boxed(),
        queued.map(Request::One).boxed(),
        queue_everything(&leadership, &apis)
            .map(|()| Request::All)
            .boxed(),
    ]);
    let controller = runner::run(
        store,
        requests,
        usize::from(settings.concurrency),
        move |policy| reconcile_or_retry(policy, context.clone()),
        shutdown.clone(),
    );
    let never_listed = stopped_before_policies_listed(shutdown, handle.caches.synced.clone());
    let flushed = async move { writer.statuses.flushed().await };
    let work = running(controller, feeds, never_listed, flushed);
    (handle, run_beside(work, statuses))
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
        _ = helper => warn!("the status writer stopped"),
    }
}

/// Resolves on shutdown while the policies have never been listed (their CRD missing, say):
/// no reconcile can be in flight then, and kube-runtime's controller would wait for a store
/// that never fills.
async fn stopped_before_policies_listed(shutdown: impl Future<Output = ()>, synced: Synced) {
    shutdown.await;
    if !synced.pending().contains(&"failoverpolicy") {
        std::future::pending::<()>().await;
    }
}

/// What every watch feeding a cache needs.
#[derive(Clone)]
struct Feed {
    client: Client,
    settings: Settings,
    caches: Caches,
    wake: Wake,
    watch: Arc<WatchContext>,
}

/// Every watch that feeds a cache, run together.
async fn feeds(feed: Feed) {
    futures::join!(readiness_feeds(feed.clone()), route_feeds(feed));
}

/// EndpointSlices → readiness counts; Services (metadata only) → whether each backend exists.
async fn readiness_feeds(feed: Feed) {
    let ns = feed.settings.namespace.as_deref();
    let (client, caches, wake, watch) = (&feed.client, &feed.caches, &feed.wake, &feed.watch);
    let slices = events(
        scoped::<EndpointSlice>(client, ns),
        "endpointslice",
        watcher::Config::default().labels(SERVICE_NAME_LABEL),
        watch.clone(),
    )
    .for_each(|event| {
        let changed = caches.readiness.write().apply_slice_event(event);
        wake.services(changed);
        async {}
    });
    let services = events(
        scoped::<PartialObjectMeta<Service>>(client, ns),
        "service",
        watcher::Config::default(),
        watch.clone(),
    )
    .for_each(|event| {
        let changed = caches.readiness.write().apply_service_event(event);
        wake.services(changed);
        async {}
    });
    futures::join!(slices, services);
}

/// TrafficSplits and HTTPRoutes → route views (a watch whose CRD is missing retries until it is
/// installed); a change wakes the policy that
/// names the route, to revert a hand edit or resolve a conflict.
async fn route_feeds(feed: Feed) {
    let ns = feed.settings.namespace.as_deref();
    let (client, caches, wake, watch) = (&feed.client, &feed.caches, &feed.wake, &feed.watch);
    let splits = feed_routes(
        events(
            scoped::<TrafficSplit>(client, ns),
            "trafficsplit",
            Default::default(),
            watch.clone(),
        ),
        RouteKind::TrafficSplit,
        |s: TrafficSplit| RouteView::new(&s.metadata, Some(trafficsplit::rules(&s))),
        caches,
        wake,
    );
    let routes = feed_routes(
        events(
            scoped::<HttpRoute>(client, ns),
            "httproute",
            Default::default(),
            watch.clone(),
        ),
        RouteKind::HttpRoute,
        |r: HttpRoute| RouteView::new(&r.metadata, httproute::rules(&r)),
        caches,
        wake,
    );
    futures::join!(splits, routes);
}

async fn feed_routes<K: kube::Resource>(
    stream: impl Stream<Item = watcher::Event<K>>,
    kind: RouteKind,
    view: impl Fn(K) -> RouteView,
    caches: &Caches,
    wake: &Wake,
) {
    stream
        .for_each(|event| {
            let keyed = map_event(event, |object: K| {
                let key = RouteKey {
                    kind,
                    namespace: object.meta().namespace.clone().unwrap_or_default(),
                    name: object.meta().name.clone().unwrap_or_default(),
                };
                (key, view(object))
            });
            let changed = caches.routes.write().apply(kind, keyed);
            wake.routes(changed);
            async {}
        })
        .await;
}

/// Policies → the controller's store, and the Service and route index.
fn policy_stream(
    client: &Client,
    ns: Option<&str>,
    handle: &Handle,
    watch: &WatchContext,
) -> (
    impl Stream<Item = Result<FailoverPolicy, watcher::Error>> + Send + 'static + use<>,
    reflector::Store<FailoverPolicy>,
) {
    let (store, writer) = reflector::store::<FailoverPolicy>();
    let metrics = watch.metrics.clone();
    let (index, remote) = (handle.index.clone(), handle.caches.remote.clone());
    let health = handle.caches.health.clone();
    let client = client.clone();
    let events = events(
        scoped(&client, ns),
        "failoverpolicy",
        Default::default(),
        Arc::new(watch.clone()),
    )
    .map(|event| Ok(event.modify(slim::<FailoverPolicy>)));
    let stream = reflector::reflector(writer, events)
        .inspect(move |event| {
            if let Ok(event) = event {
                index.write().apply_event(event);
                // Remote clusters watch exactly the namespaces policies read from; the cluster
                // Secrets are watched once any policy reads from a remote cluster.
                let wanted = index.read().remote_namespaces();
                remote.want(wanted, || {
                    tokio::spawn(secrets::feed(
                        client.clone(),
                        remote.clone(),
                        metrics.clone(),
                    ));
                });
                follow_health(&health, event);
                if let watcher::Event::Delete(p) = event {
                    metrics.forget_policy(&PolicyLabels {
                        namespace: p.namespace().unwrap_or_default(),
                        policy: p.name_any(),
                    });
                }
            }
        })
        .applied_objects();
    (stream, store)
}

/// When every policy is queued: on gaining leadership, every resync period, and when a missing
/// CRD turns up.
fn queue_everything(
    leadership: &Leadership,
    apis: &Apis,
) -> impl Stream<Item = ()> + Send + 'static + use<> {
    futures::stream::select_all([
        leadership_gained(leadership).boxed(),
        resync().boxed(),
        apis_returned(apis).boxed(),
    ])
}

/// Each policy with a health query gets a poller; a changed or deleted policy's follows.
fn follow_health(health: &Health, event: &watcher::Event<FailoverPolicy>) {
    let key =
        |p: &FailoverPolicy| PolicyKey::new(&p.namespace().unwrap_or_default(), &p.name_any());
    match event {
        watcher::Event::Apply(p) | watcher::Event::InitApply(p) => health.follow(key(p), Some(p)),
        watcher::Event::Delete(p) => health.follow(key(p), None),
        watcher::Event::Init | watcher::Event::InitDone => {}
    }
}

/// Every gain of leadership queues every policy: the new leader converges at once.
fn leadership_gained(leadership: &Leadership) -> impl Stream<Item = ()> + Send + 'static + use<> {
    futures::stream::unfold(leadership.subscribe(), |mut rx| async move {
        loop {
            rx.changed().await.ok()?;
            if *rx.borrow_and_update() == Role::Leader {
                return Some(((), rx));
            }
        }
    })
}

/// A missing CRD that turns up queues every policy: those that waited for it act at once.
fn apis_returned(apis: &Apis) -> impl Stream<Item = ()> + Send + 'static + use<> {
    futures::stream::unfold(apis.returned(), |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    })
}

/// The safety-net resync of every policy.
fn resync() -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold((), |()| async {
        tokio::time::sleep(RESYNC).await;
        Some(((), ()))
    })
}
