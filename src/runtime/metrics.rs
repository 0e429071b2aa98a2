//! Prometheus metrics. Labels stay bounded: per-policy series carry only the policy's namespace
//! and name, and are removed when the policy goes away; nothing is labelled per endpoint.

mod clusters;

use std::{
    collections::HashMap,
    sync::{
        OnceLock,
        atomic::{AtomicI64, AtomicU64},
    },
    time::Duration,
};

use prometheus_client::{
    encoding::{
        EncodeLabelSet,
        text::{encode_eof, encode_registry},
    },
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

use parking_lot::Mutex;

use crate::runtime::policy_metrics::{self, PolicyTable};
use failover_core::{
    apis::{NeededApi, WatchKind},
    observation::PolicyKey,
    route::RouteKind,
};

/// The prefix of every series name.
const PREFIX: &str = "failover";

/// Every kind of API write besides a route's (which its kind's metric label names), as
/// `api_writes` labels it.
pub const OTHER_WRITE_KINDS: [&str; 6] = [
    "status",
    "group_status",
    "event",
    "lease",
    "scale",
    "finalizer",
];

/// Why a status write failed, as `status_write_failures` labels it: every value there is.
pub const STATUS_WRITE_FAILURES: [&str; 5] =
    ["too_large", "invalid", "forbidden", "unavailable", "other"];

/// What can happen to a notification, as `failover_notifications_total` counts it.
pub const NOTIFICATION_KINDS: [&str; 5] = [
    "alerts_posted",
    "alerts_failed",
    "webhook_delivered",
    "webhook_failed",
    "webhook_deferred",
];

/// Labels of a series counted by reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// The reason.
    pub reason: String,
}

/// Labels of a series counted by kind (of error, of write, of watch).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// The kind.
    pub kind: String,
}

/// Every metric the controller exports.
pub struct Metrics {
    registry: Registry,
    /// Reconciles run.
    pub reconciles: Counter,
    /// Duration of each reconcile.
    pub reconcile_duration: Histogram,
    /// Failed reconciles, by error kind (the controller's own errors).
    pub reconcile_errors: Family<KindLabels, Counter>,
    /// Health queries sent to Prometheus, every policy's.
    pub health_queries: Counter,
    /// Failed health queries: tenants' queries, apart from the controller's own errors.
    pub health_query_errors: Counter,
    /// Policies waiting in the work queue for a reconcile to start.
    pub workqueue_depth: Gauge,
    /// How long a policy waited in the work queue before its reconcile started.
    pub workqueue_queue_duration: Histogram,
    /// The per-policy series: failovers, failbacks, ready backends, phase, time since the last
    /// transition.
    pub policies: PolicyTable,
    /// API writes made, by kind (`trafficsplit`, `status`, `event`, `lease`).
    pub api_writes: Family<KindLabels, Counter>,
    /// Status writes that failed, by reason ([`STATUS_WRITE_FAILURES`]).
    pub status_write_failures: Family<ReasonLabels, Counter>,
    /// Events not published: their namespace's share of the publisher's queue was full.
    pub events_dropped: Counter,
    /// Watch streams restarted after an error, by watched kind.
    pub watch_restarts: Family<KindLabels, Counter>,
    /// Watch events that only delivered this replica's own write, by kind of write: no
    /// reconcile ran for them.
    pub echoes: Family<KindLabels, Counter>,
    /// Notifications sent or not, by what happened ([`NOTIFICATION_KINDS`]).
    pub notifications: Family<KindLabels, Counter>,
    /// 1 while this replica holds the leader lease.
    pub leader: Gauge<i64, AtomicI64>,
    /// 1 while a CRD the controller needs is not installed, by CRD name.
    pub missing_api: Family<CrdLabels, Gauge>,
    /// 1 while a remote cluster's readiness counts (it answers and has been read).
    pub cluster_reachable: Family<ClusterLabels, Gauge>,
    /// Seconds since a remote cluster last answered, computed at scrape time.
    pub cluster_data_age: Family<ClusterLabels, Gauge<f64, AtomicU64>>,
    /// Watches of a remote cluster restarted after an error.
    pub cluster_watch_restarts: Family<ClusterLabels, Counter>,
    cluster_seen: Mutex<HashMap<String, f64>>,
    /// Bytes on the heap and live allocations, read at scrape time.
    heap: [Gauge; 2],
    /// Allocations made since the start, read at scrape time (one scrape at a time catches the
    /// counter up with the allocator's count).
    heap_allocations: Mutex<Counter>,
    heap_source: OnceLock<fn() -> Heap>,
}

/// The heap as the process's allocator counts it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Heap {
    /// Bytes allocated and not freed.
    pub bytes: i64,
    /// Allocations not freed.
    pub live_allocations: i64,
    /// Allocations (and reallocations) made since the start.
    pub allocations: i64,
}

/// Labels of `build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    /// The controller's version.
    pub version: String,
}

/// Labels of a series about one remote cluster.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    /// The cluster, as its Secret names it.
    pub cluster: String,
}

/// Labels of a series about one CRD.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CrdLabels {
    /// The CRD's name, e.g. `trafficsplits.split.smi-spec.io`.
    pub crd: String,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric under the `failover_` prefix.
    pub fn new() -> Self {
        let mut m = Self {
            reconciles: Counter::default(),
            reconcile_duration: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            reconcile_errors: Family::default(),
            health_queries: Counter::default(),
            health_query_errors: Counter::default(),
            workqueue_depth: Gauge::default(),
            workqueue_queue_duration: Histogram::new(exponential_buckets(0.0001, 4.0, 10)),
            policies: PolicyTable::default(),
            api_writes: Family::default(),
            status_write_failures: Family::default(),
            events_dropped: Counter::default(),
            watch_restarts: Family::default(),
            echoes: Family::default(),
            notifications: Family::default(),
            leader: Gauge::default(),
            missing_api: Family::default(),
            cluster_reachable: Family::default(),
            cluster_data_age: Family::default(),
            cluster_watch_restarts: Family::default(),
            cluster_seen: Mutex::new(HashMap::new()),
            heap: Default::default(),
            heap_allocations: Mutex::default(),
            heap_source: OnceLock::new(),
            registry: Registry::with_prefix(PREFIX),
        };
        m.register_all();
        m.register_gauges();
        // Known bounded series start at zero, so rates and alerts work before the first event.
        for kind in WatchKind::LOCAL {
            m.watch_restart_counter(kind);
        }
        for api in NeededApi::all() {
            m.set_missing_api(api.crd(), false);
        }
        for reason in STATUS_WRITE_FAILURES {
            let _ = m.status_write_failures.get_or_create_owned(&ReasonLabels {
                reason: reason.to_string(),
            });
        }
        let route_writes = RouteKind::ALL.map(RouteKind::metric_label);
        for kind in route_writes.into_iter().chain(OTHER_WRITE_KINDS) {
            let _ = m.api_writes.get_or_create_owned(&KindLabels {
                kind: kind.to_string(),
            });
        }
        for kind in NOTIFICATION_KINDS {
            let _ = m.notifications.get_or_create_owned(&KindLabels {
                kind: kind.to_string(),
            });
        }
        for kind in route_writes.into_iter().chain(["status"]) {
            let _ = m.echoes.get_or_create_owned(&KindLabels {
                kind: kind.to_string(),
            });
        }
        m
    }

    fn register_all(&mut self) {
        let r = &mut self.registry;
        r.register("reconciles", "Reconciles run", self.reconciles.clone());
        r.register(
            "reconcile_duration_seconds",
            "Duration of each reconcile",
            self.reconcile_duration.clone(),
        );
        r.register(
            "health_queries",
            "Health queries sent to Prometheus, within the --prometheus-queries-per-second budget",
            self.health_queries.clone(),
        );
        r.register(
            "health_query_errors",
            "Failed health queries (tenants' queries; not the controller's own errors)",
            self.health_query_errors.clone(),
        );
        r.register(
            "workqueue_depth",
            "Policies waiting in the work queue for a reconcile to start",
            self.workqueue_depth.clone(),
        );
        r.register(
            "workqueue_queue_duration_seconds",
            "How long a policy waited in the work queue before its reconcile started",
            self.workqueue_queue_duration.clone(),
        );
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: failover_core::VERSION.to_string(),
            })
            .set(1);
        r.register(
            "build_info",
            "Always 1, labelled with the controller's version",
            build,
        );
        self.register_by_kind();
        self.register_tenant_costs();
    }

    /// The counters by kind.
    fn register_by_kind(&mut self) {
        let by_kind = [
            (
                "reconcile_errors",
                "Failed reconciles by error kind",
                &self.reconcile_errors,
            ),
            ("api_writes", "API writes made, by kind", &self.api_writes),
            (
                "watch_restarts",
                "Watch streams restarted after an error, by kind",
                &self.watch_restarts,
            ),
            (
                "echoes",
                "Watch events that only delivered the controller's own write, by kind of write; they run no reconcile",
                &self.echoes,
            ),
            (
                "notifications",
                "Notifications by what happened: alerts_posted, alerts_failed (to Alertmanager), webhook_delivered, webhook_failed (a try; tried again), webhook_deferred (its namespace's queue was full; queued again once it is empty)",
                &self.notifications,
            ),
        ];
        for (name, help, family) in by_kind {
            self.registry.register(name, help, family.clone());
        }
    }

    /// The counts of what tenants' objects cost the controller's writers.
    fn register_tenant_costs(&mut self) {
        let r = &mut self.registry;
        r.register(
            "status_write_failures",
            "Status writes that failed, by reason (too_large, invalid: refused for what the status or its object is; tried again after up to 5 minutes)",
            self.status_write_failures.clone(),
        );
        r.register(
            "events_dropped",
            "Events not published because their namespace's share of the publisher's queue was full",
            self.events_dropped.clone(),
        );
    }

    fn register_gauges(&mut self) {
        let r = &mut self.registry;
        r.register(
            "leader",
            "1 while this replica holds the leader lease",
            self.leader.clone(),
        );
        r.register(
            "missing_api",
            "1 while a CRD the controller needs is not installed",
            self.missing_api.clone(),
        );
        r.register(
            "cluster_reachable",
            "1 while a remote cluster answers and its readiness has been read",
            self.cluster_reachable.clone(),
        );
        r.register(
            "cluster_data_age_seconds",
            "Seconds since a remote cluster last answered",
            self.cluster_data_age.clone(),
        );
        let heap = [
            ("heap_bytes", "Bytes on the heap"),
            ("heap_live_allocations", "Heap allocations not freed"),
        ];
        for ((name, help), gauge) in heap.into_iter().zip(&self.heap) {
            r.register(name, help, gauge.clone());
        }
        r.register(
            "heap_allocations",
            "Heap allocations made since the start",
            self.heap_allocations.lock().clone(),
        );
        r.register(
            "cluster_watch_restarts",
            "Watches of a remote cluster restarted after an error",
            self.cluster_watch_restarts.clone(),
        );
    }

    fn watch_restart_counter(&self, kind: WatchKind) -> Counter {
        self.watch_restarts.get_or_create_owned(&KindLabels {
            kind: kind.as_str().to_string(),
        })
    }

    /// Starts the error series of every error kind at zero.
    pub fn register_error_kinds(&self, kinds: &[&str]) {
        for kind in kinds {
            let _ = self.reconcile_errors.get_or_create_owned(&KindLabels {
                kind: kind.to_string(),
            });
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        self.exposition().collect()
    }

    /// The text exposition in chunks, each encoded when the iterator is advanced: the
    /// controller's own series first, then the per-policy ones (see
    /// [`PolicyTable::exposition`]), then the end marker.
    pub fn exposition(&self) -> impl Iterator<Item = String> + Send + use<> {
        let now = policy_metrics::unix_now();
        for (cluster, at) in self.cluster_seen.lock().iter() {
            let labels = ClusterLabels {
                cluster: cluster.clone(),
            };
            self.cluster_data_age
                .get_or_create(&labels)
                .set((now - at).max(0.0));
        }
        if let Some(read) = self.heap_source.get() {
            let heap = read();
            for (gauge, value) in self.heap.iter().zip([heap.bytes, heap.live_allocations]) {
                gauge.set(value);
            }
            // The allocator's count only grows; the counter catches up with it.
            let made = u64::try_from(heap.allocations).unwrap_or(0);
            let counter = self.heap_allocations.lock();
            counter.inc_by(made.saturating_sub(counter.get()));
        }
        let (mut head, mut tail) = (String::new(), String::new());
        // Writing into a String cannot fail.
        let _ = encode_registry(&mut head, &self.registry);
        let _ = encode_eof(&mut tail);
        std::iter::once(head)
            .chain(self.policies.exposition(PREFIX))
            .chain(std::iter::once(tail))
    }

    /// Reads the heap with `read` at each scrape (the binary owns the allocator that counts).
    pub fn read_heap_with(&self, read: fn() -> Heap) {
        let _ = self.heap_source.set(read);
    }

    /// Records whether a CRD the controller needs is missing.
    pub fn set_missing_api(&self, crd: &str, missing: bool) {
        self.missing_api
            .get_or_create(&CrdLabels {
                crd: crd.to_string(),
            })
            .set(i64::from(missing));
    }

    /// Counts one API write of a kind.
    pub fn write(&self, kind: &str) {
        count(&self.api_writes, kind);
    }

    /// Counts one watch event that only delivered this replica's own write of a kind.
    pub fn echo(&self, kind: &str) {
        count(&self.echoes, kind);
    }

    /// Counts a notification sent or not, by what happened ([`NOTIFICATION_KINDS`]).
    pub fn notification(&self, kind: &str) {
        count(&self.notifications, kind);
    }

    /// Counts one failed status write.
    pub fn status_write_failure(&self, reason: &str) {
        self.status_write_failures
            .get_or_create(&ReasonLabels {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Counts one reconcile error of a kind.
    pub fn error(&self, kind: &str) {
        count(&self.reconcile_errors, kind);
    }

    /// Counts one health query sent.
    pub fn health_query(&self) {
        self.health_queries.inc();
    }

    /// Counts one failed health query (a tenant's query, not the controller's error).
    pub fn health_query_error(&self) {
        self.health_query_errors.inc();
    }

    /// Records the work queue's depth.
    pub fn queue_depth(&self, depth: usize) {
        self.workqueue_depth
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// Records how long a policy waited in the work queue.
    pub fn queue_waited(&self, waited: Duration) {
        self.workqueue_queue_duration.observe(waited.as_secs_f64());
    }

    /// Counts one watch restart of a kind.
    pub fn watch_restart(&self, kind: WatchKind) {
        self.watch_restarts
            .get_or_create(&KindLabels {
                kind: kind.as_str().to_string(),
            })
            .inc();
    }

    /// Records a reconcile's duration.
    pub fn observe_reconcile(&self, took: Duration) {
        self.reconciles.inc();
        self.reconcile_duration.observe(took.as_secs_f64());
    }

    /// Forgets every series of a deleted policy.
    pub fn forget_policy(&self, policy: &PolicyKey) {
        self.policies.forget(policy);
    }
}

/// Counts one in `family`'s series of `kind`.
fn count(family: &Family<KindLabels, Counter>, kind: &str) {
    family
        .get_or_create(&KindLabels {
            kind: kind.to_string(),
        })
        .inc();
}
