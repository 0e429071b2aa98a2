//! The per-policy series (`failover_failovers_total`, `failover_failbacks_total`,
//! `failover_ready_backends`, `failover_policy_phase`, `failover_seconds_since_last_transition`),
//! held as one small record per policy and encoded at scrape time.
//!
//! A `Family` per series kept five label sets, five metric objects and five map entries per
//! policy (about 1 KiB at 10,000 policies, twice the policy's own record); this table keeps one
//! key and 32 bytes of numbers, and a scrape writes them out.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{SystemTime, UNIX_EPOCH},
};

use parking_lot::Mutex;
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric},
    metrics::{MetricType, counter::ConstCounter, gauge::ConstGauge},
};

use crate::{api::Phase, observation::PolicyKey};

/// Labels of per-policy series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    /// Namespace of the policy.
    pub namespace: String,
    /// Name of the policy.
    pub policy: String,
}

/// What is exported of one policy.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct PolicyState {
    failovers: u32,
    failbacks: u32,
    ready_backends: u32,
    /// 0 Primary, 1 FailedOver, 2 NoReadyBackend.
    phase: u8,
    /// When traffic last moved (Unix seconds).
    last_transition: Option<f64>,
}

/// Every policy's series, by policy (keyed by the shared namespace and the name; the labels are
/// written out at scrape time).
#[derive(Clone, Debug, Default)]
pub struct PolicyTable {
    policies: Arc<Mutex<HashMap<PolicyKey, PolicyState>>>,
}

impl PolicyTable {
    fn update(&self, labels: &PolicyLabels, change: impl FnOnce(&mut PolicyState)) {
        let key = PolicyKey::new(&labels.namespace, &labels.policy);
        change(self.policies.lock().entry(key).or_default());
    }

    /// Records a policy's current state.
    pub fn set_state(&self, labels: &PolicyLabels, ready_backends: usize, phase: Phase) {
        self.update(labels, |s| {
            s.ready_backends = u32::try_from(ready_backends).unwrap_or(u32::MAX);
            s.phase = match phase {
                Phase::Primary => 0,
                Phase::FailedOver => 1,
                Phase::NoReadyBackend => 2,
            };
        });
    }

    /// Records when a policy's traffic last moved (Unix seconds).
    pub fn set_last_transition(&self, labels: &PolicyLabels, unix_seconds: f64) {
        self.update(labels, |s| s.last_transition = Some(unix_seconds));
    }

    /// Counts a failover of a policy.
    pub fn failed_over(&self, labels: &PolicyLabels) {
        self.update(labels, |s| s.failovers = s.failovers.saturating_add(1));
    }

    /// Counts a failback of a policy.
    pub fn failed_back(&self, labels: &PolicyLabels) {
        self.update(labels, |s| s.failbacks = s.failbacks.saturating_add(1));
    }

    /// Forgets a deleted policy.
    pub fn forget(&self, labels: &PolicyLabels) {
        self.policies
            .lock()
            .remove(&PolicyKey::new(&labels.namespace, &labels.policy));
    }
}

/// One value of a series.
enum Sample {
    Count(u64),
    Whole(i64),
    Seconds(f64),
}

type Value = fn(&PolicyState, f64) -> Option<Sample>;

/// Each series: name, help, type and its value of a policy (`None`: absent) at a time.
const SERIES: [(&str, &str, MetricType, Value); 5] = [
    (
        "failovers",
        "Times traffic left the primary or moved between secondaries, per policy",
        MetricType::Counter,
        |s, _| Some(Sample::Count(u64::from(s.failovers))),
    ),
    (
        "failbacks",
        "Times traffic returned to the primary, per policy",
        MetricType::Counter,
        |s, _| Some(Sample::Count(u64::from(s.failbacks))),
    ),
    (
        "ready_backends",
        "Ready backends per policy",
        MetricType::Gauge,
        |s, _| Some(Sample::Whole(i64::from(s.ready_backends))),
    ),
    (
        "policy_phase",
        "Phase per policy: 0 Primary, 1 FailedOver, 2 NoReadyBackend",
        MetricType::Gauge,
        |s, _| Some(Sample::Whole(i64::from(s.phase))),
    ),
    (
        "seconds_since_last_transition",
        "Seconds since each policy's last failover or failback",
        MetricType::Gauge,
        |s, now| {
            s.last_transition
                .map(|at| Sample::Seconds((now - at).max(0.0)))
        },
    ),
];

impl Collector for PolicyTable {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let policies = self.policies.lock();
        for (name, help, kind, value) in SERIES {
            let mut family = encoder.encode_descriptor(name, help, None, kind)?;
            for (key, state) in policies.iter() {
                let Some(sample) = value(state, now) else {
                    continue;
                };
                let labels = PolicyLabels {
                    namespace: key.namespace.to_string(),
                    policy: key.name.to_string(),
                };
                let metric = family.encode_family(&labels)?;
                match sample {
                    Sample::Count(v) => ConstCounter::new(v).encode(metric)?,
                    Sample::Whole(v) => ConstGauge::new(v).encode(metric)?,
                    Sample::Seconds(v) => ConstGauge::new(v).encode(metric)?,
                }
            }
        }
        Ok(())
    }
}
