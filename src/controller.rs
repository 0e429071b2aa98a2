//! Wires the watches, caches, indexes and the reconcile loop into one running controller.
//!
//! Data flow: EndpointSlice and Service watch events update the [`ReadinessStore`]; each Service
//! whose readiness changed is looked up in the [`PolicyIndex`] and only the policies that
//! reference it are queued. Policy and TrafficSplit watches feed kube-runtime's `Controller`,
//! which runs [`reconcile`] at most once at a time per policy.

use std::{
    future::Future,
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::{StreamExt, channel::mpsc};
use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::{
    Api, Client, ResourceExt,
    api::DynamicObject,
    core::PartialObjectMeta,
    runtime::{
        Controller, WatchStreamExt,
        controller::Config as ControllerConfig,
        events::{Recorder, Reporter},
        reflector,
        reflector::ObjectRef,
        watcher,
    },
};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::{
    api::FailoverPolicy,
    index::PolicyIndex,
    leader::LeaderState,
    metrics::{Metrics, PolicyLabels},
    readiness::{ReadinessStore, SERVICE_NAME_LABEL, ServiceKey},
    reconcile::{Caches, Context, FIELD_MANAGER, error_policy, reconcile},
    trafficsplit::TrafficSplit,
};

/// Retry delay of a failed watch: 250 ms doubling to 3 s, with up to 10% jitter, so watches
/// reconnect within seconds of an API server's return (client-go's default waits up to 30 s).
#[derive(Debug, Default)]
pub struct WatchBackoff {
    next: Option<Duration>,
}

impl WatchBackoff {
    const FIRST: Duration = Duration::from_millis(250);
    const MAX: Duration = Duration::from_secs(3);
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.next.unwrap_or(Self::FIRST);
        self.next = Some((delay * 2).min(Self::MAX));
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        Some(delay + delay.mul_f64(f64::from(nanos % 1000) / 10_000.0))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = None;
    }
}

/// Watch settings: initial lists in pages of 100 objects, so the start-up peak of memory (one
/// page of JSON and its decoded objects at a time) stays small; the cost is a few more list
/// requests at start.
fn list_config() -> watcher::Config {
    watcher::Config::default().page_size(100)
}

/// Drops what the controller never reads from cached objects (managed fields and the
/// client-side-apply copy of the whole object), which is most of their size.
fn slim<K: kube::Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
    if let Some(annotations) = obj.meta_mut().annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// Feeds one readiness watch (EndpointSlices or Services) into the [`ReadinessStore`], keeps
/// the synced flag current, and wakes the policies whose backends changed.
struct Feed<W> {
    kind: &'static str,
    readiness: Arc<RwLock<ReadinessStore>>,
    metrics: Arc<Metrics>,
    synced: watch::Sender<bool>,
    wake: W,
}

impl<W: Fn(Vec<ServiceKey>)> Feed<W> {
    async fn run<K>(
        self,
        stream: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
        apply: fn(&mut ReadinessStore, watcher::Event<K>) -> Vec<ServiceKey>,
    ) {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => {
                    let (changed, synced) = match self.readiness.write() {
                        Ok(mut r) => (apply(&mut r, event), r.is_synced()),
                        Err(_) => continue,
                    };
                    self.synced
                        .send_if_modified(|s| std::mem::replace(s, synced) != synced);
                    (self.wake)(changed);
                }
                Err(e) => {
                    self.metrics.watch_restart(self.kind);
                    warn!(kind = self.kind, error = %e, "watch failed; retrying");
                }
            }
        }
    }
}

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Watch only this namespace; all namespaces when `None`.
    pub namespace: Option<String>,
    /// Most policies reconciled at once.
    pub concurrency: u16,
    /// Identity of this replica in Events (usually the Pod name).
    pub instance: Option<String>,
    /// Watch Gateway API HTTPRoutes (only when the cluster serves them).
    pub http_routes: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            namespace: None,
            concurrency: 16,
            instance: None,
            http_routes: false,
        }
    }
}

/// Readiness of the controller's caches, for `/readyz`.
#[derive(Clone, Debug)]
pub struct CacheState {
    readiness_synced: watch::Receiver<bool>,
    stores_ready: Arc<AtomicBool>,
}

impl CacheState {
    /// Every cache has received its initial list.
    pub fn is_synced(&self) -> bool {
        *self.readiness_synced.borrow() && self.stores_ready.load(Ordering::SeqCst)
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

/// Starts the controller; returns its cache state and a future that runs until `shutdown`
/// resolves and in-flight reconciles finish.
pub fn start(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    leader: LeaderState,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> (CacheState, impl Future<Output = ()>) {
    let ns = settings.namespace.as_deref();
    metrics.register_error_kinds(&crate::reconcile::Error::KINDS);
    let readiness = Arc::new(RwLock::new(ReadinessStore::default()));
    let index = Arc::new(RwLock::new(PolicyIndex::default()));
    let (synced_tx, synced_rx) = watch::channel(false);
    let (trigger_tx, trigger_rx) = mpsc::unbounded::<ObjectRef<FailoverPolicy>>();

    // Queues the policies that reference the given Services.
    let wake = {
        let index = index.clone();
        move |changed: Vec<ServiceKey>| {
            if changed.is_empty() {
                return;
            }
            let Ok(index) = index.read() else { return };
            debug!(services = changed.len(), "readiness changed");
            for service in changed {
                for policy in index.policies_for_service(&service) {
                    let _ = trigger_tx
                        .unbounded_send(ObjectRef::new(&policy.name).within(&policy.namespace));
                }
            }
        }
    };

    // EndpointSlices → readiness counts; Services (metadata only) → whether each backend exists.
    let feed = |kind: &'static str| Feed {
        kind,
        readiness: readiness.clone(),
        metrics: metrics.clone(),
        synced: synced_tx.clone(),
        wake: wake.clone(),
    };
    let slices_task = feed("endpointslice").run(
        watcher(
            scoped::<EndpointSlice>(&client, ns),
            list_config().labels(SERVICE_NAME_LABEL),
        )
        .backoff(WatchBackoff::default()),
        ReadinessStore::apply_slice_event,
    );
    let services_task = feed("service").run(
        watcher(
            scoped::<PartialObjectMeta<Service>>(&client, ns),
            list_config(),
        )
        .backoff(WatchBackoff::default()),
        ReadinessStore::apply_service_event,
    );

    // Policies → the controller's store and the Service → policy index.
    let (policy_store, policy_writer) = reflector::store::<FailoverPolicy>();
    let policy_stream = {
        let index = index.clone();
        let metrics = metrics.clone();
        reflector(
            policy_writer,
            watcher(scoped(&client, ns), list_config())
                .backoff(WatchBackoff::default())
                .modify(slim::<FailoverPolicy>),
        )
        .inspect(move |event| match event {
            Ok(event) => {
                if let Ok(mut index) = index.write() {
                    index.apply_event(event);
                }
                if let watcher::Event::Delete(p) = event {
                    metrics.forget_policy(&PolicyLabels {
                        namespace: p.namespace().unwrap_or_default(),
                        policy: p.name_any(),
                    });
                }
            }
            Err(e) => {
                metrics.watch_restart("failoverpolicy");
                warn!(error = %e, "FailoverPolicy watch failed; retrying");
            }
        })
        .applied_objects()
    };

    // TrafficSplits → a store, and a trigger for their owner (or the policy naming them).
    let (split_store, split_writer) = reflector::store::<TrafficSplit>();
    let split_stream = {
        let metrics = metrics.clone();
        reflector(
            split_writer,
            watcher(scoped(&client, ns), list_config())
                .backoff(WatchBackoff::default())
                .modify(slim::<TrafficSplit>),
        )
        .inspect(move |event| {
            if let Err(e) = event {
                metrics.watch_restart("trafficsplit");
                debug!(error = %e, "TrafficSplit watch failed; retrying");
            }
        })
        .touched_objects()
    };
    // A route wakes its owner, and any policy that names it (to resolve a conflict).
    let route_owners = {
        let index = index.clone();
        move |meta: &kube::api::ObjectMeta| {
            let namespace = meta.namespace.clone().unwrap_or_default();
            let mut refs: Vec<ObjectRef<FailoverPolicy>> = meta
                .owner_references
                .as_deref()
                .unwrap_or_default()
                .iter()
                .filter(|o| o.controller == Some(true) && o.kind == "FailoverPolicy")
                .map(|o| ObjectRef::new(&o.name).within(&namespace))
                .collect();
            if let Ok(index) = index.read() {
                let name = meta.name.clone().unwrap_or_default();
                refs.extend(
                    index
                        .policies_for_route(&ServiceKey::new(&namespace, &name))
                        .into_iter()
                        .map(|p| ObjectRef::new(&p.name).within(&p.namespace)),
                );
            }
            refs
        }
    };
    let split_mapper = {
        let route_owners = route_owners.clone();
        move |split: TrafficSplit| route_owners(&split.metadata)
    };

    // HTTPRoutes, when the Gateway API is served: a store and the same trigger.
    let http_route_resource = crate::reconcile::http_route_resource();
    let (http_route_store, http_route_stream) = if settings.http_routes {
        let writer = reflector::store::Writer::<DynamicObject>::new(http_route_resource.clone());
        let store = writer.as_reader();
        let api: Api<DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &http_route_resource),
            None => Api::all_with(client.clone(), &http_route_resource),
        };
        let metrics = metrics.clone();
        let stream = reflector(
            writer,
            watcher(api, list_config())
                .backoff(WatchBackoff::default())
                .modify(slim::<DynamicObject>),
        )
        .inspect(move |event| {
            if let Err(e) = event {
                metrics.watch_restart("httproute");
                debug!(error = %e, "HTTPRoute watch failed; retrying");
            }
        })
        .touched_objects();
        (Some(store), Some(stream))
    } else {
        (None, None)
    };

    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: FIELD_MANAGER.to_string(),
            instance: settings.instance.clone(),
        },
    );
    let caches = Caches {
        readiness,
        readiness_synced: synced_rx.clone(),
        traffic_splits: split_store.clone(),
        http_routes: http_route_store,
    };
    let context = Arc::new(Context::new(
        client,
        caches,
        recorder,
        metrics,
        leader.clone(),
    ));

    // Every gain of leadership queues every policy: the new leader converges at once.
    let leadership_gained = futures::stream::unfold(leader.subscribe(), |mut rx| async move {
        loop {
            rx.changed().await.ok()?;
            if *rx.borrow_and_update() {
                return Some(((), rx));
            }
        }
    });

    let stores_ready = Arc::new(AtomicBool::new(false));
    // The safety-net resync of every policy.
    let resync = futures::stream::unfold((), |()| async {
        tokio::time::sleep(crate::reconcile::RESYNC).await;
        Some(((), ()))
    });

    let cache_state = CacheState {
        readiness_synced: synced_rx,
        stores_ready: stores_ready.clone(),
    };
    let stores_ready_task = {
        let (policies, splits) = (policy_store.clone(), split_store);
        async move {
            let _ = policies.wait_until_ready().await;
            let _ = splits.wait_until_ready().await;
            stores_ready.store(true, Ordering::SeqCst);
            info!("policy and TrafficSplit caches synced");
            std::future::pending::<()>().await
        }
    };

    let run = async move {
        let mut controller = Controller::for_stream(policy_stream, policy_store)
            .with_config(ControllerConfig::default().concurrency(settings.concurrency))
            .watches_stream(split_stream, split_mapper);
        if let Some(stream) = http_route_stream {
            let mapper = move |route: DynamicObject| route_owners(&route.metadata);
            controller = controller.watches_stream_with(stream, mapper, http_route_resource);
        }
        let controller = controller
            .reconcile_on(trigger_rx)
            .reconcile_all_on(futures::stream::select(leadership_gained, resync))
            .graceful_shutdown_on(shutdown)
            .run(reconcile, error_policy, context)
            .for_each(|result| async move {
                if let Err(e) = result {
                    debug!(error = %e, "reconcile request not completed");
                }
            });
        info!("controller started");
        tokio::select! {
            _ = controller => info!("controller stopped"),
            _ = slices_task => warn!("EndpointSlice watch ended"),
            _ = services_task => warn!("Service watch ended"),
            _ = stores_ready_task => {},
        }
        // Give watches a moment to be dropped cleanly.
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    (cache_state, run)
}
