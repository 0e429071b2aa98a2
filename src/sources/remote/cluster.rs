//! One remote cluster at run time: its client, the watches of the namespaces policies read from
//! (EndpointSlices and Services, nothing else), its readiness counts, and a cheap periodic probe
//! of its API. Every task of a cluster ends when its [`Cluster`] is dropped (Secret deleted or
//! replaced).

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::{Api, Client, core::PartialObjectMeta, runtime::watcher};
use parking_lot::{Mutex, RwLock};
use tokio::task::AbortHandle;

use super::health::{CountsChange, Health, State};
use crate::{
    runtime::{api_client, metrics::Metrics},
    sources::{
        local::readiness::ReadinessStore,
        watch::{WatchReport, describe, events},
    },
};
use failover_core::{
    apis::WatchKind,
    backend::{BackendKey, BackendKind},
};

/// What a remote cluster tells the controller: readiness that changed, or a change of liveness
/// that every policy reading from it must hear about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RemoteChange {
    /// These Services' counts changed.
    Services(String, Vec<BackendKey>),
    /// Readiness from the cluster now counts, or no longer does.
    Cluster(String),
}

/// Where a cluster's changes go.
pub type Wake = Arc<dyn Fn(RemoteChange) + Send + Sync>;

/// The part of a cluster its tasks share.
pub struct Shared {
    /// The cluster's name.
    pub name: String,
    /// Its liveness.
    pub health: Mutex<Health>,
    /// Its readiness counts.
    pub readiness: RwLock<ReadinessStore>,
    client: Client,
    /// The namespaces watched.
    namespaces: Mutex<Vec<String>>,
    /// For each watch (namespace and kind), whether it has listed since the watches last started.
    listed: Mutex<BTreeMap<(String, WatchKind), bool>>,
    /// The probe first, then the watches.
    tasks: Mutex<Vec<AbortHandle>>,
    metrics: Arc<Metrics>,
    wake: Wake,
}

impl Shared {
    /// Records a change of liveness: metrics, a wake-up when decisions are concerned, and fresh
    /// watches (so every count is re-read) when the cluster answers again after going stale.
    fn changed(self: &Arc<Self>, change: CountsChange) {
        let rereading = {
            let health = self.health.lock();
            self.metrics.set_cluster_state(
                &self.name,
                health.state == State::Fresh,
                health.last_seen.map(|(_, at)| at),
            );
            health.state == State::Rereading
        };
        if change == CountsChange::Counts {
            if rereading {
                let namespaces = self.namespaces.lock().clone();
                self.restart(&namespaces);
            }
            (self.wake)(RemoteChange::Cluster(self.name.clone()));
        }
    }

    /// (Re)starts the watches of these namespaces; each relists.
    fn restart(self: &Arc<Self>, namespaces: &[String]) {
        let mut tasks = self.tasks.lock();
        for task in tasks.drain(1..) {
            task.abort();
        }
        {
            let mut listed = self.listed.lock();
            listed.clear();
            for ns in namespaces {
                for kind in WatchKind::DECISION_INPUTS {
                    listed.insert((ns.clone(), kind), false);
                }
            }
        }
        for ns in namespaces {
            let task = tokio::spawn(watch_namespace(self.clone(), ns.clone()));
            tasks.push(task.abort_handle());
        }
    }

    fn all_listed(&self) -> bool {
        self.listed.lock().values().all(|l| *l)
    }
}

/// A watch of the cluster reports to its liveness.
struct ClusterReport {
    shared: Arc<Shared>,
    namespace: String,
}

impl WatchReport for ClusterReport {
    fn event(&self, _kind: WatchKind) {
        let change = self.shared.health.lock().answered();
        self.shared.changed(change);
    }

    fn listed(&self, kind: WatchKind) {
        self.shared
            .listed
            .lock()
            .insert((self.namespace.clone(), kind), true);
        if self.shared.all_listed() {
            let change = self.shared.health.lock().reread();
            self.shared.changed(change);
        }
    }

    fn failed(&self, _kind: WatchKind, error: &watcher::Error) {
        self.shared.metrics.cluster_watch_restart(&self.shared.name);
        let change = self.shared.health.lock().failed(describe(error));
        self.shared.changed(change);
    }
}

/// A remote cluster: the owner of its shared state; dropping it ends all its tasks.
pub struct Cluster {
    /// What its tasks share.
    pub shared: Arc<Shared>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for task in self.shared.tasks.lock().drain(..) {
            task.abort();
        }
    }
}

impl Cluster {
    /// Starts a cluster: its probe now, its watches as [`Cluster::watch`] asks. `carried` is the
    /// state of the cluster this one replaces (a rotated Secret), so readiness does not flap.
    pub fn start(
        name: &str,
        client: Client,
        stale_after: Duration,
        carried: Option<(Health, ReadinessStore)>,
        metrics: Arc<Metrics>,
        wake: Wake,
    ) -> Self {
        let (mut health, readiness) =
            carried.unwrap_or_else(|| (Health::new(stale_after), ReadinessStore::default()));
        health.stale_after = stale_after;
        let shared = Arc::new(Shared {
            name: name.to_string(),
            health: Mutex::new(health),
            readiness: RwLock::new(readiness),
            client,
            namespaces: Mutex::new(Vec::new()),
            listed: Mutex::new(BTreeMap::new()),
            tasks: Mutex::new(Vec::new()),
            metrics,
            wake,
        });
        let probe = tokio::spawn(probe(shared.clone())).abort_handle();
        shared.tasks.lock().push(probe);
        Self { shared }
    }

    /// Watches exactly these namespaces (restarting every watch when the set changes, so each
    /// relists and the counts are re-read).
    pub fn watch(&self, namespaces: &[String]) {
        {
            let mut current = self.shared.namespaces.lock();
            if *current == namespaces {
                return;
            }
            *current = namespaces.to_vec();
        }
        self.shared.restart(namespaces);
    }

    /// What the cluster's state is now, to carry into a replacement.
    pub fn carry(&self) -> (Health, ReadinessStore) {
        let readiness = std::mem::take(&mut *self.shared.readiness.write());
        (self.shared.health.lock().clone(), readiness)
    }
}

/// Probes the cluster's API every third of `staleAfter` (between 200 ms and 5 s), and notices
/// staleness on time even when nothing else happens.
async fn probe(shared: Arc<Shared>) {
    loop {
        let every = (shared.health.lock().stale_after / 3)
            .clamp(Duration::from_millis(200), Duration::from_secs(5));
        tokio::time::sleep(every).await;
        let answer = tokio::time::timeout(every, shared.client.apiserver_version()).await;
        let change = {
            let mut health = shared.health.lock();
            match answer {
                Ok(Ok(_)) => {
                    let change = health.answered();
                    match (change, shared.all_listed()) {
                        (CountsChange::None, true) => health.reread(),
                        (change, _) => change,
                    }
                }
                Ok(Err(e)) => {
                    let error = api_client::describe(&e);
                    tracing::debug!(cluster = %shared.name, %error, "probe failed");
                    health.failed(error)
                }
                Err(_) => health.failed(format!("no answer within {}ms", every.as_millis())),
            }
        };
        shared.changed(change);
    }
}

/// EndpointSlices and Services (metadata) of one remote namespace → the cluster's counts.
async fn watch_namespace(shared: Arc<Shared>, namespace: String) {
    let client = shared.client.clone();
    let report: Arc<dyn WatchReport> = Arc::new(ClusterReport {
        shared: shared.clone(),
        namespace: namespace.clone(),
    });
    let slices = events(
        Api::<EndpointSlice>::namespaced(client.clone(), &namespace),
        WatchKind::EndpointSlice,
        watcher::Config::default().labels(BackendKind::Service.spec().slice_label),
        report.clone(),
    )
    .for_each(|event| {
        let changed = shared.readiness.write().apply_slice_event(event);
        if !changed.is_empty() {
            (shared.wake)(RemoteChange::Services(shared.name.clone(), changed));
        }
        async {}
    });
    let services = events(
        Api::<PartialObjectMeta<Service>>::namespaced(client, &namespace),
        WatchKind::Service,
        watcher::Config::default(),
        report,
    )
    .for_each(|event| {
        let changed = shared.readiness.write().apply_service_event(event);
        if !changed.is_empty() {
            (shared.wake)(RemoteChange::Services(shared.name.clone(), changed));
        }
        async {}
    });
    futures::join!(slices, services);
}
