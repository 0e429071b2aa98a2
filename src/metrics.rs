//! Prometheus metrics. Labels stay bounded: per-policy series carry only the policy's namespace
//! and name, and are removed when the policy goes away; nothing is labelled per endpoint.

use std::{
    collections::HashMap,
    sync::{
        Mutex,
        atomic::{AtomicI64, AtomicU64},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

use crate::api::Phase;

/// Labels of per-policy series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    /// Namespace of the policy.
    pub namespace: String,
    /// Name of the policy.
    pub policy: String,
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
    /// Failed reconciles, by error kind.
    pub reconcile_errors: Family<KindLabels, Counter>,
    /// Traffic leaving the primary (or moving between secondaries), per policy.
    pub failovers: Family<PolicyLabels, Counter>,
    /// Traffic returning to the primary, per policy.
    pub failbacks: Family<PolicyLabels, Counter>,
    /// Ready backends per policy.
    pub ready_backends: Family<PolicyLabels, Gauge>,
    /// Phase per policy: 0 Primary, 1 FailedOver, 2 NoReadyBackend.
    pub phase: Family<PolicyLabels, Gauge>,
    /// Seconds since each policy's last failover or failback, computed at scrape time.
    pub since_last_transition: Family<PolicyLabels, Gauge<f64, AtomicU64>>,
    transition_times: Mutex<HashMap<PolicyLabels, f64>>,
    /// API writes made, by kind (`trafficsplit`, `status`, `event`, `lease`).
    pub api_writes: Family<KindLabels, Counter>,
    /// Watch streams restarted after an error, by watched kind.
    pub watch_restarts: Family<KindLabels, Counter>,
    /// 1 while this replica holds the leader lease.
    pub leader: Gauge<i64, AtomicI64>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric under the `failover_` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("failover");
        let m = Self {
            reconciles: Counter::default(),
            reconcile_duration: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            reconcile_errors: Family::default(),
            failovers: Family::default(),
            failbacks: Family::default(),
            ready_backends: Family::default(),
            phase: Family::default(),
            since_last_transition: Family::default(),
            transition_times: Mutex::new(HashMap::new()),
            api_writes: Family::default(),
            watch_restarts: Family::default(),
            leader: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register("reconciles", "Reconciles run", m.reconciles.clone());
        registry.register(
            "reconcile_duration_seconds",
            "Duration of each reconcile",
            m.reconcile_duration.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed reconciles by error kind",
            m.reconcile_errors.clone(),
        );
        registry.register(
            "failovers",
            "Times traffic left the primary or moved between secondaries, per policy",
            m.failovers.clone(),
        );
        registry.register(
            "failbacks",
            "Times traffic returned to the primary, per policy",
            m.failbacks.clone(),
        );
        registry.register(
            "ready_backends",
            "Ready backends per policy",
            m.ready_backends.clone(),
        );
        registry.register(
            "policy_phase",
            "Phase per policy: 0 Primary, 1 FailedOver, 2 NoReadyBackend",
            m.phase.clone(),
        );
        registry.register(
            "seconds_since_last_transition",
            "Seconds since each policy's last failover or failback",
            m.since_last_transition.clone(),
        );
        registry.register(
            "api_writes",
            "API writes made, by kind",
            m.api_writes.clone(),
        );
        registry.register(
            "watch_restarts",
            "Watch streams restarted after an error, by kind",
            m.watch_restarts.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader lease",
            m.leader.clone(),
        );
        // Known bounded series start at zero, so rates and alerts work before the first event.
        for kind in [
            "endpointslice",
            "service",
            "failoverpolicy",
            "trafficsplit",
            "httproute",
        ] {
            m.watch_restart_counter(kind);
        }
        for kind in ["trafficsplit", "httproute", "status", "event", "lease"] {
            let _ = m.api_writes.get_or_create_owned(&KindLabels {
                kind: kind.to_string(),
            });
        }
        Self { registry, ..m }
    }

    fn watch_restart_counter(&self, kind: &str) -> Counter {
        self.watch_restarts.get_or_create_owned(&KindLabels {
            kind: kind.to_string(),
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
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        if let Ok(times) = self.transition_times.lock() {
            for (labels, at) in times.iter() {
                self.since_last_transition
                    .get_or_create(labels)
                    .set((now - at).max(0.0));
            }
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }

    /// Counts one API write of a kind.
    pub fn write(&self, kind: &str) {
        self.api_writes
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }

    /// Counts one reconcile error of a kind.
    pub fn error(&self, kind: &str) {
        self.reconcile_errors
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }

    /// Counts one watch restart of a kind.
    pub fn watch_restart(&self, kind: &str) {
        self.watch_restarts
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }

    /// Records a reconcile's duration.
    pub fn observe_reconcile(&self, took: Duration) {
        self.reconciles.inc();
        self.reconcile_duration.observe(took.as_secs_f64());
    }

    /// Records a policy's current state.
    pub fn set_policy_state(&self, labels: &PolicyLabels, ready_backends: usize, phase: Phase) {
        let _ = self.failovers.get_or_create_owned(labels);
        let _ = self.failbacks.get_or_create_owned(labels);
        self.ready_backends
            .get_or_create(labels)
            .set(i64::try_from(ready_backends).unwrap_or(i64::MAX));
        self.phase.get_or_create(labels).set(match phase {
            Phase::Primary => 0,
            Phase::FailedOver => 1,
            Phase::NoReadyBackend => 2,
        });
    }

    /// Records when a policy's traffic last moved (Unix seconds).
    pub fn set_last_transition(&self, labels: &PolicyLabels, unix_seconds: f64) {
        if let Ok(mut times) = self.transition_times.lock() {
            times.insert(labels.clone(), unix_seconds);
        }
    }

    /// Forgets every series of a deleted policy.
    pub fn forget_policy(&self, labels: &PolicyLabels) {
        if let Ok(mut times) = self.transition_times.lock() {
            times.remove(labels);
        }
        self.since_last_transition.remove(labels);
        self.failovers.remove(labels);
        self.failbacks.remove(labels);
        self.ready_backends.remove(labels);
        self.phase.remove(labels);
    }
}
