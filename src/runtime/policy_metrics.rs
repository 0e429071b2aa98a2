//! The per-policy series (`failover_failovers_total`, `failover_failbacks_total`,
//! `failover_ready_backends`, `failover_policy_phase`, `failover_seconds_since_last_transition`,
//! `failover_drill_end_timestamp_seconds`, `failover_demand_requests_per_second`,
//! `failover_unserved_ratio`),
//! held as one small record per policy and encoded at scrape time.
//!
//! A `Family` per series would keep a label set, a metric object and a map entry per series
//! and policy, more than the policy's own record; this table keeps one key and a few numbers per
//! policy, and a scrape writes them out.
//!
//! A scrape writes them a chunk of [`CHUNK`] policies at a time, each chunk encoded when the
//! response asks for it, so the whole text is never held at once (built at once, it was the
//! process's peak). The table is ordered by namespace and name, so a chunk resumes after the
//! last policy of the one before, whatever changed in between.

use std::{
    collections::BTreeMap,
    ops::Bound,
    sync::Arc,
    time::{SystemTime, UNIX_EPOCH},
};

use parking_lot::Mutex;
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, text::encode_registry},
    metrics::{MetricType, counter::ConstCounter, gauge::ConstGauge},
    registry::Registry,
};

use failover_core::{api::Phase, observation::PolicyKey};

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
    /// Index of the phase in [`PHASES`].
    phase: u8,
    /// When traffic last moved (Unix seconds).
    last_transition: Option<f64>,
    /// When the running drill ends (Unix seconds).
    drill_end: Option<f64>,
    /// With `spec.capacity`: the demand (requests/s) and its unserved share (0 to 1).
    load: Option<(f64, f64)>,
}

/// Every policy's series, by policy (keyed by the shared namespace and the name; the labels are
/// written out at scrape time).
#[derive(Clone, Debug, Default)]
pub struct PolicyTable {
    policies: Arc<Mutex<BTreeMap<PolicyKey, PolicyState>>>,
}

/// Policies per chunk of a scrape (about 45 KB of text).
pub const CHUNK: usize = 500;

/// Seconds since the Unix epoch.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl PolicyTable {
    /// Changes a policy's state; a policy first seen is kept under a clone of its key (which
    /// shares the table's name of its namespace).
    fn update(&self, key: &PolicyKey, change: impl FnOnce(&mut PolicyState)) {
        let mut policies = self.policies.lock();
        match policies.get_mut(key) {
            Some(state) => change(state),
            None => change(policies.entry(key.clone()).or_default()),
        }
    }

    /// Records a policy's current state.
    pub fn set_state(&self, key: &PolicyKey, ready_backends: usize, phase: Phase) {
        self.update(key, |s| {
            s.ready_backends = u32::try_from(ready_backends).unwrap_or(u32::MAX);
            s.phase = PHASES
                .iter()
                .position(|p| *p == phase)
                .and_then(|i| u8::try_from(i).ok())
                .unwrap_or(0);
        });
    }

    /// Records when a policy's traffic last moved (Unix seconds).
    pub fn set_last_transition(&self, key: &PolicyKey, unix_seconds: f64) {
        self.update(key, |s| s.last_transition = Some(unix_seconds));
    }

    /// Records when a policy's running drill ends (Unix seconds; `None`: no drill runs).
    pub fn set_drill_end(&self, key: &PolicyKey, unix_seconds: Option<f64>) {
        self.update(key, |s| s.drill_end = unix_seconds);
    }

    /// Records a policy's demand (requests/s) and the share of it unserved (`None`: no
    /// capacity, or the demand unknown).
    pub fn set_load(&self, key: &PolicyKey, load: Option<(f64, f64)>) {
        self.update(key, |s| s.load = load);
    }

    /// Counts a failover of a policy.
    pub fn failed_over(&self, key: &PolicyKey) {
        self.update(key, |s| s.failovers = s.failovers.saturating_add(1));
    }

    /// Counts a failback of a policy.
    pub fn failed_back(&self, key: &PolicyKey) {
        self.update(key, |s| s.failbacks = s.failbacks.saturating_add(1));
    }

    /// Forgets a deleted policy.
    pub fn forget(&self, key: &PolicyKey) {
        self.policies.lock().remove(key);
    }
}

/// One value of a series.
enum Sample {
    Count(u64),
    Whole(i64),
    /// A number with a fraction: seconds, a time, a rate, a ratio.
    Real(f64),
    /// A state set: one sample per state, 1 for this one (by its index in [`PHASES`]), 0 for
    /// the others.
    State(u8),
}

/// The phases, in the order `PolicyState::phase` numbers them.
const PHASES: [Phase; 3] = [Phase::Primary, Phase::FailedOver, Phase::NoReadyBackend];

/// Labels of a state-set sample: the policy and one of its possible states.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    namespace: String,
    policy: String,
    phase: String,
}

type Value = fn(&PolicyState, f64) -> Option<Sample>;

/// Each series: name, help, type and its value of a policy (`None`: absent) at a time.
const SERIES: [(&str, &str, MetricType, Value); 8] = [
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
        "Phase per policy, as a state set: 1 for the phase label the policy is in, 0 for the others (Primary, FailedOver, NoReadyBackend)",
        MetricType::Gauge,
        |s, _| Some(Sample::State(s.phase)),
    ),
    (
        "seconds_since_last_transition",
        "Seconds since each policy's last failover or failback",
        MetricType::Gauge,
        |s, now| {
            s.last_transition
                .map(|at| Sample::Real((now - at).max(0.0)))
        },
    ),
    (
        "drill_end_timestamp_seconds",
        "When each policy's running drill (spec.drill) ends, as Unix time; absent while none runs",
        MetricType::Gauge,
        |s, _| s.drill_end.map(Sample::Real),
    ),
    (
        "demand_requests_per_second",
        "With spec.capacity: the requests per second each policy has to serve",
        MetricType::Gauge,
        |s, _| s.load.map(|(demand, _)| Sample::Real(demand)),
    ),
    (
        "unserved_ratio",
        "With spec.capacity: the share of each policy's demand no ready backend serves (0 to 1)",
        MetricType::Gauge,
        |s, _| s.load.map(|(_, unserved)| Sample::Real(unserved)),
    ),
];

impl PolicyTable {
    /// The text of every per-policy series under `prefix`, series by series, a chunk of
    /// [`CHUNK`] policies at a time, each encoded when the iterator is advanced.
    pub fn exposition(&self, prefix: &'static str) -> impl Iterator<Item = String> + Send + use<> {
        let (table, now) = (self.clone(), unix_now());
        (0..SERIES.len()).flat_map(move |series| Chunks {
            table: table.clone(),
            prefix,
            series,
            now,
            after: None,
            first: true,
            done: false,
        })
    }
}

/// One series' chunks: each takes the next [`CHUNK`] policies after the last one written.
struct Chunks {
    table: PolicyTable,
    prefix: &'static str,
    series: usize,
    now: f64,
    after: Option<PolicyKey>,
    first: bool,
    done: bool,
}

impl Iterator for Chunks {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        if self.done {
            return None;
        }
        let rows: Vec<(PolicyKey, PolicyState)> = {
            let policies = self.table.policies.lock();
            let from = self
                .after
                .as_ref()
                .map_or(Bound::Unbounded, Bound::Excluded);
            policies
                .range((from, Bound::Unbounded))
                .take(CHUNK)
                .map(|(key, state)| (key.clone(), *state))
                .collect()
        };
        self.done = rows.len() < CHUNK;
        if rows.is_empty() && !self.first {
            return None;
        }
        self.after = rows.last().map(|(key, _)| key.clone());
        let mut registry = Registry::with_prefix(self.prefix);
        registry.register_collector(Box::new(Rows {
            series: self.series,
            rows,
            now: self.now,
        }));
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = encode_registry(&mut text, &registry);
        if !std::mem::take(&mut self.first) {
            // The series' HELP and TYPE lines belong to its first chunk only.
            let descriptor = text
                .split_inclusive('\n')
                .take_while(|line| line.starts_with("# "))
                .map(str::len)
                .sum::<usize>();
            text.drain(..descriptor);
        }
        Some(text)
    }
}

/// Some policies' samples of one series.
#[derive(Debug)]
struct Rows {
    series: usize,
    rows: Vec<(PolicyKey, PolicyState)>,
    now: f64,
}

impl Collector for Rows {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (name, help, kind, value) = SERIES[self.series];
        let mut family = encoder.encode_descriptor(name, help, None, kind)?;
        for (key, state) in &self.rows {
            let Some(sample) = value(state, self.now) else {
                continue;
            };
            let labels = PolicyLabels {
                namespace: key.namespace.to_string(),
                policy: key.name.to_string(),
            };
            if let Sample::State(current) = sample {
                for (i, phase) in PHASES.iter().enumerate() {
                    let labels = StateLabels {
                        namespace: labels.namespace.clone(),
                        policy: labels.policy.clone(),
                        phase: phase.to_string(),
                    };
                    let on = i64::from(usize::from(current) == i);
                    ConstGauge::new(on).encode(family.encode_family(&labels)?)?;
                }
                continue;
            }
            let metric = family.encode_family(&labels)?;
            match sample {
                Sample::Count(v) => ConstCounter::new(v).encode(metric)?,
                Sample::Whole(v) => ConstGauge::new(v).encode(metric)?,
                Sample::Real(v) => ConstGauge::new(v).encode(metric)?,
                Sample::State(_) => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(name: &str) -> PolicyKey {
        PolicyKey::new("ns", name)
    }

    #[test]
    fn a_scrape_in_chunks_writes_each_series_once_and_each_policy_once_per_series() {
        let table = PolicyTable::default();
        let policies = 2 * CHUNK + 1;
        for i in 0..policies {
            table.set_state(&labels(&format!("p{i:04}")), 2, Phase::Primary);
        }
        table.set_last_transition(&labels("p0007"), 1.0);
        let chunks: Vec<String> = table.exposition("failover").collect();
        assert_eq!(
            chunks.len(),
            SERIES.len() * 3,
            "500, 500 and 1 policies per series"
        );
        let text = chunks.concat();
        for (name, ..) in SERIES {
            let help = format!("# HELP failover_{name} ");
            assert_eq!(text.matches(&help).count(), 1, "{name}");
        }
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("failover_policy_phase{"))
                .count(),
            3 * policies,
            "one sample per phase"
        );
        assert!(text.contains(
            "failover_policy_phase{namespace=\"ns\",policy=\"p0001\",phase=\"Primary\"} 1\n"
        ));
        assert!(text.contains(
            "failover_policy_phase{namespace=\"ns\",policy=\"p0001\",phase=\"FailedOver\"} 0\n"
        ));
        assert!(text.contains("failover_ready_backends{namespace=\"ns\",policy=\"p1000\"} 2\n"));
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("failover_seconds_since_last_transition{"))
                .count(),
            1
        );
        assert!(
            !text.contains("# EOF"),
            "the end marker is the registry's to write"
        );
    }

    #[test]
    fn an_empty_table_still_describes_every_series() {
        let text: String = PolicyTable::default().exposition("failover").collect();
        assert_eq!(text.matches("# TYPE ").count(), SERIES.len());
    }
}
