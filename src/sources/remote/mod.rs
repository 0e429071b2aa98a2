//! Remote clusters: readiness read from the cluster that runs a backend, and clusters that go
//! silent noticed.
//!
//! - [`secrets`]: clusters are declared by Secrets labelled `failover.dev/cluster: <name>` in the
//!   controller's namespace, holding a kubeconfig (`kubeconfig`) and, optionally, the annotation
//!   `failover.dev/stale-after` (default 30s) and `failover.dev/namespaces` (which policy
//!   namespaces may read which namespaces there; default: each its namesake, see
//!   [`failover_core::tenancy`]). One client per cluster, created, rotated and
//!   dropped as those Secrets change. The Secrets are watched only once a policy reads from a
//!   remote cluster.
//! - [`cluster`]: a cluster at run time: watches of exactly the namespaces policies read from
//!   (EndpointSlices and Services), a periodic probe, the counts.
//! - [`health`]: its liveness, and what that means for the readiness read from it.
//!
//! [`Clusters::observe`] is what the gather step reads for a backend with `readinessFrom`.

pub mod cluster;
pub mod health;
pub mod secrets;

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use kube::Client;
use parking_lot::RwLock;

use self::cluster::{Cluster, Wake};
use crate::runtime::metrics::Metrics;
use failover_core::{
    backend::BackendKey,
    observation::{Availability, BackendObservation, RemoteService},
    tenancy::NamespaceGrants,
};

/// What a running cluster's watches know of a remote Service: its counts, or why they cannot be
/// trusted (the cluster silent, or not read yet).
fn observe_running(cluster: &Cluster, remote: &RemoteService) -> BackendObservation {
    let shared = &cluster.shared;
    let health = shared.health.lock();
    match health.unavailable(&remote.cluster) {
        Some(why) => {
            let as_of = health.as_of();
            BackendObservation {
                availability: if health.awaiting() {
                    Availability::Awaiting { why, as_of }
                } else {
                    Availability::Unavailable { why, as_of }
                },
                ..Default::default()
            }
        }
        None => shared
            .readiness
            .read()
            .observe(&BackendKey::service(&remote.namespace, &remote.service)),
    }
}

/// The label that declares a cluster Secret, and names the cluster.
pub const CLUSTER_LABEL: &str = "failover.dev/cluster";
/// The Secret annotation that sets how long a cluster may be silent before its backends count as
/// not ready.
pub const STALE_AFTER_ANNOTATION: &str = "failover.dev/stale-after";
/// `staleAfter` when the Secret does not set it.
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(30);

/// The namespaces of one cluster that policies read from, with the namespace of each reader:
/// (policy namespace, remote namespace).
pub type Wanted = BTreeSet<(String, String)>;

/// What a cluster Secret declares besides its client.
#[derive(Clone, Debug, PartialEq)]
pub struct Declared {
    /// How long the cluster may be silent before its backends count as not ready.
    pub stale_after: Duration,
    /// Which policy namespaces may read which of its namespaces
    /// ([`failover_core::tenancy::NAMESPACES_ANNOTATION`]).
    pub grants: NamespaceGrants,
}

/// A declared cluster: running, or its Secret unusable (and why).
enum Entry {
    Running {
        cluster: Cluster,
        secret_version: String,
        /// Which policy namespaces may read which of its namespaces.
        grants: NamespaceGrants,
    },
    Broken {
        error: String,
        /// The namespaces it grants, when its Secret says so readably: only those are told why
        /// it cannot be used.
        grants: Option<NamespaceGrants>,
    },
}

/// Every declared remote cluster, by name.
#[derive(Clone)]
pub struct Clusters {
    entries: Arc<RwLock<HashMap<String, Entry>>>,
    /// The namespaces policies read from, per cluster: (policy namespace, remote namespace).
    wanted: Arc<RwLock<BTreeMap<String, Wanted>>>,
    /// Where the cluster Secrets are.
    pub secret_namespace: String,
    metrics: Arc<Metrics>,
    wake: Wake,
    secrets_started: Arc<std::sync::Once>,
    /// The cluster Secrets have been listed once (or waited for `DEFAULT_STALE_AFTER`): until
    /// then a cluster not declared yet may be declared by a Secret not read yet.
    secrets_read: Arc<AtomicBool>,
}

impl Clusters {
    /// No cluster yet; Secrets are read from `secret_namespace`.
    pub fn new(secret_namespace: String, metrics: Arc<Metrics>, wake: Wake) -> Self {
        Self {
            entries: Arc::default(),
            wanted: Arc::default(),
            secret_namespace,
            metrics,
            wake,
            secrets_started: Arc::new(std::sync::Once::new()),
            secrets_read: Arc::default(),
        }
    }

    /// The cluster Secrets have been listed (or waited for long enough): a cluster with no Secret
    /// is now not declared, and the policies reading from the clusters hear about it.
    pub fn secrets_read(&self) {
        if self.secrets_read.swap(true, Ordering::AcqRel) {
            return;
        }
        let wanted: Vec<String> = self.wanted.read().keys().cloned().collect();
        for cluster in wanted {
            (self.wake)(cluster::RemoteChange::Cluster(cluster));
        }
    }

    /// What is known of a remote Service, for a policy of `policy_namespace`: its counts, or why
    /// they cannot be trusted, or which rule refuses the policy that namespace.
    pub fn observe(&self, policy_namespace: &str, remote: &RemoteService) -> BackendObservation {
        let entries = self.entries.read();
        let not_counted = |availability| BackendObservation {
            availability,
            ..Default::default()
        };
        let unavailable = |why| not_counted(Availability::Unavailable { why, as_of: None });
        match entries.get(&remote.cluster) {
            None if !self.secrets_read.load(Ordering::Acquire) => {
                not_counted(Availability::Awaiting {
                    why: "the cluster Secrets have not been read yet".to_string(),
                    as_of: None,
                })
            }
            None => unavailable(format!(
                "cluster {} is not declared: no Secret labelled {CLUSTER_LABEL}={} in namespace {}",
                remote.cluster, remote.cluster, self.secret_namespace
            )),
            Some(Entry::Broken {
                grants: Some(grants),
                ..
            })
            | Some(Entry::Running { grants, .. })
                if !grants.allows(policy_namespace, &remote.namespace) =>
            {
                not_counted(Availability::Refused(format!(
                    "cluster {} does not grant namespace {policy_namespace} its namespace {} ({})",
                    remote.cluster,
                    remote.namespace,
                    grants.rule()
                )))
            }
            // What is wrong with the cluster's Secret is said only to namespaces it grants: with
            // no grant that can be read, to none.
            Some(Entry::Broken { grants: None, .. }) => unavailable(format!(
                "cluster {} cannot be used: its Secret is the cluster admin's to mend (the controller's log says why)",
                remote.cluster
            )),
            Some(Entry::Broken { error, .. }) => {
                unavailable(format!("cluster {}: {error}", remote.cluster))
            }
            Some(Entry::Running { cluster, .. }) => observe_running(cluster, remote),
        }
    }

    /// The namespaces policies read from now, per cluster: each cluster watches exactly those it
    /// grants to a reader. The first time any is wanted, the cluster Secrets start being watched
    /// (`start_secrets`).
    pub fn want(&self, wanted: BTreeMap<String, Wanted>, start_secrets: impl FnOnce()) {
        if wanted.is_empty() && self.wanted.read().is_empty() {
            return;
        }
        if *self.wanted.read() == wanted {
            return;
        }
        *self.wanted.write() = wanted;
        self.secrets_started.call_once(start_secrets);
        for (name, entry) in self.entries.read().iter() {
            if let Entry::Running {
                cluster, grants, ..
            } = entry
            {
                cluster.watch(&self.namespaces_of(name, grants));
            }
        }
    }

    /// The namespaces of `cluster` wanted by a policy whose namespace it grants them: a refused
    /// namespace is never watched.
    fn namespaces_of(&self, cluster: &str, grants: &NamespaceGrants) -> Vec<String> {
        let namespaces: BTreeSet<String> = self
            .wanted
            .read()
            .get(cluster)
            .into_iter()
            .flatten()
            .filter(|(reader, remote)| grants.allows(reader, remote))
            .map(|(_, remote)| remote.clone())
            .collect();
        namespaces.into_iter().collect()
    }

    /// Declares (or re-declares, after a change of its Secret) a cluster with this client.
    pub fn run(&self, name: &str, client: Client, declared: Declared, secret_version: &str) {
        let carried = match self.entries.read().get(name) {
            Some(Entry::Running {
                secret_version: v, ..
            }) if v == secret_version => return,
            Some(Entry::Running { cluster, .. }) => Some(cluster.carry()),
            _ => None,
        };
        let cluster = Cluster::start(
            name,
            client,
            declared.stale_after,
            carried,
            self.metrics.clone(),
            self.wake.clone(),
        );
        cluster.watch(&self.namespaces_of(name, &declared.grants));
        self.entries.write().insert(
            name.to_string(),
            Entry::Running {
                cluster,
                secret_version: secret_version.to_string(),
                grants: declared.grants,
            },
        );
        (self.wake)(cluster::RemoteChange::Cluster(name.to_string()));
    }

    /// A cluster's Secret cannot be used: the cluster stays declared (its reachability metric at
    /// 0, so an alert fires) and its backends say why, to the namespaces it `grants` (when its
    /// Secret says so readably).
    pub fn broken(&self, name: &str, error: String, grants: Option<NamespaceGrants>) {
        self.entries
            .write()
            .insert(name.to_string(), Entry::Broken { error, grants });
        self.metrics.cluster_unusable(name);
        (self.wake)(cluster::RemoteChange::Cluster(name.to_string()));
    }

    /// A cluster's Secret is gone.
    pub fn remove(&self, name: &str) {
        if self.entries.write().remove(name).is_some() {
            self.metrics.forget_cluster(name);
            (self.wake)(cluster::RemoteChange::Cluster(name.to_string()));
        }
    }

    /// The names of the declared clusters.
    pub fn names(&self) -> Vec<String> {
        self.entries.read().keys().cloned().collect()
    }
}
