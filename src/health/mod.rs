//! Health beyond readiness: each backend of a policy with `health.prometheus` gets its query run
//! against Prometheus every `interval` (one poller per policy: queries are batched per interval,
//! never one per event), and the reading kept here for the gather step. A reading that changes
//! the verdict (healthy or not, or the query failing or recovering) wakes the policy; a failing
//! query keeps the last value (fail static).

pub mod prometheus;

use std::{collections::HashMap, sync::Arc};

use chrono::{DateTime, Utc};
use parking_lot::{Mutex, RwLock};
use tokio::task::AbortHandle;
use tracing::warn;

use self::prometheus::Prometheus;
use crate::{api::FailoverPolicy, metrics::Metrics, observe::index::PolicyKey, validate};

/// The last reading of one backend's health query.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    /// The value (`None`: the query returned no data).
    pub value: Option<f64>,
    /// When it was read.
    pub read_at: DateTime<Utc>,
    /// The error of the latest query, while it fails (the value is then the last good one).
    pub failing: Option<String>,
}

/// Why a health query cannot run at all.
const NO_PROMETHEUS: &str = "no Prometheus to ask: set spec.health.prometheus.address or the controller's --prometheus-address";

/// What one policy's poller runs.
#[derive(Clone, Debug, PartialEq)]
struct Plan {
    health: validate::Health,
    address: String,
    namespace: String,
    services: Vec<String>,
}

/// Every reading, and the pollers that make them.
#[derive(Clone)]
pub struct Health {
    readings: Arc<RwLock<HashMap<(PolicyKey, String), Reading>>>,
    pollers: Arc<Mutex<HashMap<PolicyKey, (Plan, AbortHandle)>>>,
    default_address: Option<String>,
    prometheus: Prometheus,
    metrics: Arc<Metrics>,
    wake: Arc<dyn Fn(PolicyKey) + Send + Sync>,
}

impl Health {
    /// No poller yet; `default_address` serves policies that name no Prometheus.
    pub fn new(
        default_address: Option<String>,
        metrics: Arc<Metrics>,
        wake: Arc<dyn Fn(PolicyKey) + Send + Sync>,
    ) -> Self {
        Self {
            readings: Arc::default(),
            pollers: Arc::default(),
            default_address,
            prometheus: Prometheus::default(),
            metrics,
            wake,
        }
    }

    /// The reading of a backend of a policy, once its query has run.
    pub fn reading(&self, policy: &PolicyKey, service: &str) -> Option<Reading> {
        self.readings
            .read()
            .get(&(policy.clone(), service.to_string()))
            .cloned()
    }

    /// Keeps a policy's poller in step with its spec (`None`: the policy is gone).
    pub fn follow(&self, key: PolicyKey, policy: Option<&FailoverPolicy>) {
        let mut unaddressed = Vec::new();
        let plan = policy
            .filter(|p| p.spec.health.is_some())
            .and_then(|p| validate::validate(p).ok())
            .and_then(|v| {
                let health = v.health?;
                let Some(address) = health.address.clone().or(self.default_address.clone()) else {
                    unaddressed = v.backends;
                    return None;
                };
                Some(Plan {
                    services: v.backends.iter().map(|b| b.service.clone()).collect(),
                    namespace: v.namespace.clone(),
                    address,
                    health,
                })
            });
        let mut pollers = self.pollers.lock();
        match (plan, pollers.get(&key)) {
            (Some(plan), Some((running, _))) if *running == plan => {}
            (Some(plan), _) => {
                let task = tokio::spawn(poll(self.clone(), key.clone(), plan.clone()));
                if let Some((_, old)) = pollers.insert(key, (plan, task.abort_handle())) {
                    old.abort();
                }
            }
            (None, _) => {
                if let Some((_, old)) = pollers.remove(&key) {
                    old.abort();
                }
                if unaddressed.is_empty() {
                    self.readings.write().retain(|(p, _), _| *p != key);
                } else {
                    self.no_prometheus(&key, &unaddressed);
                }
            }
        }
    }

    /// Marks every backend's query as failing when there is no Prometheus to ask, so the policy's
    /// `HealthQueryFailed` condition says so instead of the check being silently skipped.
    fn no_prometheus(&self, key: &PolicyKey, backends: &[validate::Backend]) {
        let mut readings = self.readings.write();
        readings.retain(|(p, _), r| *p != *key || r.failing.as_deref() == Some(NO_PROMETHEUS));
        for b in backends {
            readings
                .entry((key.clone(), b.service.clone()))
                .or_insert_with(|| Reading {
                    value: None,
                    read_at: Utc::now(),
                    failing: Some(NO_PROMETHEUS.to_string()),
                });
        }
    }

    /// Records a query's outcome; returns whether the verdict changed.
    fn record(
        &self,
        key: &PolicyKey,
        service: &str,
        plan: &Plan,
        outcome: Result<Option<f64>, String>,
    ) -> bool {
        let mut readings = self.readings.write();
        let slot = (key.clone(), service.to_string());
        let before = readings.get(&slot).cloned();
        let after = match (outcome, &before) {
            (Ok(value), _) => Reading {
                value,
                read_at: Utc::now(),
                failing: None,
            },
            (Err(error), Some(last)) => Reading {
                failing: Some(error),
                ..last.clone()
            },
            (Err(error), None) => Reading {
                value: None,
                read_at: Utc::now(),
                failing: Some(error),
            },
        };
        let verdict = |r: &Reading| (plan.health.healthy(r.value), r.failing.is_some());
        let changed = before.as_ref().map(verdict) != Some(verdict(&after));
        readings.insert(slot, after);
        changed
    }
}

/// Runs a policy's queries every interval, for ever (until its plan changes). While every query
/// fails, the pause doubles, up to eight intervals, so a Prometheus that is down is not hammered.
async fn poll(health: Health, key: PolicyKey, plan: Plan) {
    let mut failed_rounds = 0u32;
    loop {
        let mut changed = false;
        let mut failures = 0;
        for service in &plan.services {
            let query = plan.health.query_for(&plan.namespace, service);
            let outcome = health.prometheus.query(&plan.address, &query).await;
            if let Err(e) = &outcome {
                failures += 1;
                health.metrics.error("health_query");
                warn!(namespace = %key.namespace, policy = %key.name, service, error = %e, "health query failed; keeping the last verdict");
            }
            changed |= health.record(&key, service, &plan, outcome);
        }
        if changed {
            (health.wake)(key.clone());
        }
        failed_rounds = if failures == plan.services.len() {
            (failed_rounds + 1).min(3)
        } else {
            0
        };
        tokio::time::sleep(plan.health.interval.after * (1 << failed_rounds)).await;
    }
}
