//! What the benchmark watches and writes besides the controller: an independent watch of the
//! TrafficSplits (when each one's weights changed) and of the policies (which have a status),
//! the background churn, the relay that is the floor, and the controller's watches held again
//! for the relay that makes the controller's writes.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use failover::sources::watch::{WatchReport, events, scoped};
use failover_core::{
    api::FailoverPolicy,
    apis::WatchKind,
    route::{RouteKind, RouteObject, trafficsplit::TrafficSplit},
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::{
    core::v1::{Endpoints, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams},
    core::PartialObjectMeta,
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;
use tokio::{sync::Notify, task::JoinHandle};

/// How many lists a watch has completed (its first list, then one per relist).
pub type Lists = Arc<AtomicUsize>;

/// Runs `f` on every object a watch of `api` delivers, for as long as the task lives; errors are
/// retried with backoff, so the stream itself never ends. Each list the watch completes is
/// counted in the returned [`Lists`].
fn on_each<K>(api: Api<K>, mut f: impl FnMut(K) + Send + 'static) -> (JoinHandle<()>, Lists)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let lists = Lists::default();
    let listed = lists.clone();
    let task = tokio::spawn(async move {
        let mut s = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = s.next().await {
            match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => f(o),
                Ok(watcher::Event::InitDone) => {
                    listed.fetch_add(1, Ordering::SeqCst);
                }
                _ => {}
            }
        }
    });
    (task, lists)
}

/// Waits, at most `timeout`, until each of `lists` has completed more lists than `before` says;
/// returns whether they all did.
pub async fn relisted(lists: &[&Lists], before: &[usize], timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let done = lists
            .iter()
            .zip(before)
            .all(|(l, b)| l.load(Ordering::SeqCst) > *b);
        if done || Instant::now() >= deadline {
            return done;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Per TrafficSplit: when its weights last changed, and to what.
type SplitChanges = Arc<Mutex<HashMap<String, (Instant, Vec<i64>)>>>;

/// Watches TrafficSplits and records when each one's spec last changed.
pub struct SplitWatch {
    changes: SplitChanges,
    notify: Arc<Notify>,
    task: JoinHandle<()>,
    pub lists: Lists,
}

impl Drop for SplitWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SplitWatch {
    pub fn start(api: Api<TrafficSplit>) -> Self {
        let changes: SplitChanges = Arc::default();
        let notify = Arc::new(Notify::new());
        let (sink, wake) = (changes.clone(), notify.clone());
        let (task, lists) = on_each(api, move |ts: TrafficSplit| {
            let weights: Vec<i64> = ts.spec.backends.iter().map(|b| b.weight).collect();
            let mut c = sink.lock().unwrap_or_else(PoisonError::into_inner);
            let entry = c
                .entry(ts.name_any())
                .or_insert((Instant::now(), Vec::new()));
            if entry.1 != weights {
                *entry = (Instant::now(), weights);
            }
            drop(c);
            wake.notify_waiters();
        });
        Self {
            changes,
            notify,
            task,
            lists,
        }
    }

    /// Waits until `name` has `weights`; returns when the watch saw it.
    pub async fn wait_for(
        &self,
        name: &str,
        weights: &[i64],
        timeout: Duration,
    ) -> Option<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.notify.notified();
            let seen = self
                .changes
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(name)
                .cloned();
            if let Some((at, w)) = seen
                && w == weights
            {
                return Some(at);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            let _ = tokio::time::timeout(left.min(Duration::from_millis(200)), notified).await;
        }
    }

    pub fn count_with(&self, expected: &[i64]) -> usize {
        self.changes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .filter(|(_, w)| w == expected)
            .count()
    }
}

/// Counts the changes (creations and updates) a watch delivers after its first list: another
/// client's writes to the objects it watches.
pub struct Changes {
    count: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Drop for Changes {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Changes {
    pub fn start<K>(api: Api<K>) -> Self
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        let count = Arc::new(AtomicUsize::new(0));
        let seen = count.clone();
        let task = tokio::spawn(async move {
            let mut s = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = s.next().await {
                if let Ok(watcher::Event::Apply(_)) = event {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        Self { count, task }
    }

    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }
}

/// Watches the policies and records which ones have a status with a phase.
pub struct StatusWatch {
    with_status: Arc<Mutex<HashSet<String>>>,
    task: JoinHandle<()>,
    pub lists: Lists,
}

impl Drop for StatusWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StatusWatch {
    pub fn start(api: Api<FailoverPolicy>) -> Self {
        let with_status: Arc<Mutex<HashSet<String>>> = Arc::default();
        let sink = with_status.clone();
        let (task, lists) = on_each(api, move |p: FailoverPolicy| {
            if p.status.as_ref().is_some_and(|s| s.phase.is_some()) {
                sink.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(p.name_any());
            }
        });
        Self {
            with_status,
            task,
            lists,
        }
    }

    pub fn count(&self) -> usize {
        self.with_status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// At most this many churn updates in flight: a tick that finds them all waiting on the API
/// server is skipped, so a slow API server cannot pile up connections.
const CHURN_IN_FLIGHT: usize = 64;

/// Background churn: readiness updates of Services no policy references, `per_second` of them
/// (fewer while [`CHURN_IN_FLIGHT`] are unanswered), on the controller's EndpointSlices or,
/// during linkerd-failover's turns, on its Endpoints: each side is measured under the same churn,
/// and the API server never carries both. Ended when dropped.
pub struct Churn {
    task: JoinHandle<()>,
    /// Where the churn goes now: the peer's Endpoints, or (None) the EndpointSlices.
    to_peer: Arc<Mutex<Option<Api<Endpoints>>>>,
}

impl Churn {
    pub fn start(slices: Api<EndpointSlice>, services: Vec<String>, per_second: u64) -> Self {
        let to_peer: Arc<Mutex<Option<Api<Endpoints>>>> = Arc::default();
        let target = to_peer.clone();
        let task = tokio::spawn(async move {
            if per_second == 0 || services.is_empty() {
                return;
            }
            let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / per_second));
            let in_flight = Arc::new(tokio::sync::Semaphore::new(CHURN_IN_FLIGHT));
            let mut i = 0usize;
            loop {
                tick.tick().await;
                let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                    continue;
                };
                let svc = services[i % services.len()].clone();
                let ready = (i / services.len()).is_multiple_of(2);
                let peer = target
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                let slices = slices.clone();
                tokio::spawn(async move {
                    let _ = match peer {
                        Some(endpoints) => crate::objects::try_set_ready(&endpoints, &svc, ready)
                            .await
                            .map(drop),
                        None => crate::objects::try_set_ready(&slices, &svc, ready)
                            .await
                            .map(drop),
                    };
                    drop(permit);
                });
                i += 1;
            }
        });
        Self { task, to_peer }
    }

    /// From now on the churn goes to the peer's `endpoints` (None: to the EndpointSlices).
    pub fn turn_to(&self, endpoints: Option<Api<Endpoints>>) {
        *self.to_peer.lock().unwrap_or_else(PoisonError::into_inner) = endpoints;
    }
}

impl Drop for Churn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A FailoverPolicy in a namespace of its own (no controller watches it), whose status the
/// status probe writes in each way it compares.
#[derive(Clone)]
pub struct StatusTarget {
    pub api: Api<FailoverPolicy>,
    /// A status the controller wrote, applied with a new `observedGeneration` each time.
    pub status: serde_json::Value,
}

/// The floor: one watch on one EndpointSlice (`<name>-bench`); each change is one server-side
/// apply of one TrafficSplit (`<name>`). The least any controller can do, on the same control
/// plane.
pub fn start_relay(client: Client, ns: &str, name: &'static str) -> JoinHandle<()> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let splits: Api<TrafficSplit> = Api::namespaced(client, ns);
    tokio::spawn(async move {
        let cfg = watcher::Config::default().fields(&format!("metadata.name={name}-bench"));
        let mut s = watcher(slices, cfg).applied_objects().boxed();
        while let Ok(Some(es)) = s.try_next().await {
            let ready = es
                .endpoints
                .iter()
                .any(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true));
            let patch = json!({"apiVersion": "split.smi-spec.io/v1alpha2", "kind": "TrafficSplit", "metadata": {"name": name},
                "spec": {"service": name, "backends": [{"service": name, "weight": i64::from(ready)}, {"service": format!("{name}-b"), "weight": i64::from(!ready)}]}});
            let _ = splits
                .patch(
                    name,
                    &PatchParams::apply("relay").force(),
                    &Patch::Apply(&patch),
                )
                .await;
        }
    })
}

/// Watch reports nobody reads: the relay's watches are held for their cost only.
pub struct Unreported;

impl WatchReport for Unreported {
    fn listed(&self, _kind: WatchKind) {}
    fn failed(&self, _kind: WatchKind, _error: &watcher::Error) {}
}

/// Reads every event of `events` and drops it, for as long as the task lives.
fn drain<K: Send + 'static>(
    events: impl futures::Stream<Item = watcher::Event<K>> + Send + 'static,
) -> JoinHandle<()> {
    tokio::spawn(events.for_each(|_| async {}))
}

/// The controller's watches besides its EndpointSlice watch (which triggers the relay making
/// its writes), held as it holds them (the same helper, kinds, selectors and initial list),
/// their events read and dropped: Services (metadata only) in `ns`, the controller's scope; and
/// the policies and routes of each kind in `own_ns`, where the relay's own writes land, as the
/// controller's watches receive its own writes.
pub fn hold_controller_watches(client: &Client, ns: &str, own_ns: &str) -> Vec<JoinHandle<()>> {
    let report: Arc<dyn WatchReport> = Arc::new(Unreported);
    let mut held = vec![
        drain(events(
            scoped::<PartialObjectMeta<Service>>(client, Some(ns)),
            WatchKind::Service,
            watcher::Config::default(),
            report.clone(),
        )),
        drain(events(
            scoped::<FailoverPolicy>(client, Some(own_ns)),
            WatchKind::FailoverPolicy,
            watcher::Config::default(),
            report.clone(),
        )),
    ];
    for kind in RouteKind::ALL {
        let api: Api<RouteObject> =
            Api::namespaced_with(client.clone(), own_ns, &kind.spec().resource());
        held.push(drain(events(
            api,
            kind.watch(),
            watcher::Config::default(),
            report.clone(),
        )));
    }
    held
}
