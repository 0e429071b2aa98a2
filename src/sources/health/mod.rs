//! Health beyond readiness: each backend of a policy with `health.prometheus` gets its query run
//! against Prometheus every `interval` (one poller per policy: queries are batched per interval,
//! never one per event), and the reading kept here for the gather step. A reading that changes
//! the verdict (healthy or not, data or none, the query failing, failing for another reason, or
//! recovering) wakes the policy; a failing query keeps the last value (fail static).
//!
//! Fail static survives a restart or a change of leader: a poller that starts with no reading
//! of its own takes the last one the policy's status recorded, so a primary failed over for its
//! error rate stays failed over while Prometheus is down. A query that has never answered (no
//! address, or Prometheus down since the start) gives no verdict: routing follows readiness
//! alone, and the `HealthQueryFailed` condition says why.
//!
//! Every query waits for its namespace's turn in the cluster-wide [`budget::Budget`], so no
//! number of policies or backends sends more than the admin's budget to Prometheus, and each
//! namespace gets its share of it; a namespace has at most its own few queries in flight, each
//! with a `timeout` Prometheus enforces, so its slow queries hold its own slots and nobody
//! else's.

pub mod budget;
pub mod prometheus;

use std::{collections::HashMap, num::NonZeroU32, sync::Arc};

use chrono::Utc;
use parking_lot::{Mutex, RwLock};
use tokio::task::AbortHandle;
use tracing::warn;

use self::{
    budget::{Budget, InFlight},
    prometheus::Prometheus,
};
use crate::runtime::metrics::Metrics;
use failover_core::{
    api::{
        FailoverPolicy, conditions::health::ADDRESS_NOT_ALLOWED,
        conditions::health::QUERY_NOT_ALLOWED,
    },
    observation::{PolicyKey, Reading, Sample},
    policy::{self, ValidPolicy},
    tenancy::Addresses,
};

/// The last answer recorded in a policy's status for this backend, to carry the verdict over a
/// restart.
fn recorded_reading(policy: &FailoverPolicy, service: &str) -> Option<Reading> {
    let recorded = policy
        .status
        .as_ref()?
        .backends
        .iter()
        .find(|b| b.service == service)?
        .health
        .as_ref()?;
    Some(Reading {
        sample: Some(Sample {
            value: recorded.value,
            read_at: recorded.read_at.0,
        }),
        failing: None,
        refused: None,
    })
}

/// Why a health query cannot run at all.
const NO_PROMETHEUS: &str = "no Prometheus to ask: set spec.health.prometheus.address or the controller's --prometheus-address";

/// What one policy's poller runs: its query (scoped to the policy's namespace by the admin's
/// label, and filled in for each backend, when its round starts: a policy holds its query's
/// text once, whatever its number of backends), and the backends it is asked for.
#[derive(Clone, Debug, PartialEq)]
struct Plan {
    health: policy::Health,
    address: String,
    namespace: Box<str>,
    label: Option<Box<str>>,
    services: Box<[Box<str>]>,
}

impl Plan {
    /// A backend's query as sent: made when its turn comes, so a poller waiting for its turn
    /// holds no query text (`None` when the query cannot be scoped, which the plan's making
    /// refused already).
    fn query(&self, service: &str) -> Option<String> {
        let scoped = self.health.query.scoped(self.label.as_deref()).ok()?;
        Some(scoped.for_backend(&self.namespace, service))
    }
}

/// Why a policy's queries are not sent: no Prometheus to ask, or a refusal (with the reason of
/// the `HealthQueryFailed` condition).
struct Unasked {
    refused: Option<&'static str>,
    message: String,
}

/// Where health queries may go, what they may read and how many may be sent, as the cluster
/// admin set it.
#[derive(Clone, Debug)]
pub struct Reach {
    /// The Prometheus for policies that name none (`--prometheus-address`).
    pub default_address: Option<String>,
    /// The addresses a policy may name (the default one included).
    pub addresses: Addresses,
    /// The label every selector is scoped by to the policy's namespace (`None`: not scoped).
    pub namespace_label: Option<String>,
    /// The most queries sent a second, every policy's together (`--prometheus-queries-per-second`).
    pub queries_per_second: NonZeroU32,
    /// The most queries in flight at once, in all and per namespace.
    pub in_flight: InFlight,
}

impl Default for Reach {
    fn default() -> Self {
        Self {
            default_address: None,
            addresses: Addresses::default(),
            namespace_label: None,
            queries_per_second: budget::DEFAULT_QUERIES_PER_SECOND,
            in_flight: InFlight::default(),
        }
    }
}

/// Every reading, and the pollers that make them.
#[derive(Clone)]
pub struct Health {
    /// Per policy, per backend Service: one map per policy, so a lookup allocates nothing and a
    /// policy's readings go in one step.
    readings: Arc<RwLock<HashMap<PolicyKey, HashMap<String, Reading>>>>,
    pollers: Arc<Mutex<HashMap<PolicyKey, (Plan, AbortHandle)>>>,
    reach: Arc<Reach>,
    prometheus: Prometheus,
    budget: Budget,
    metrics: Arc<Metrics>,
    wake: Arc<dyn Fn(PolicyKey) + Send + Sync>,
}

impl Health {
    /// No poller yet; queries go where `reach` allows.
    pub fn new(
        reach: Reach,
        metrics: Arc<Metrics>,
        wake: Arc<dyn Fn(PolicyKey) + Send + Sync>,
    ) -> Self {
        Self {
            readings: Arc::default(),
            pollers: Arc::default(),
            budget: Budget::new(reach.queries_per_second, reach.in_flight),
            reach: Arc::new(reach),
            prometheus: Prometheus::default(),
            metrics,
            wake,
        }
    }

    /// What a valid policy's poller would run, or why nothing is sent.
    fn plan(&self, v: &ValidPolicy, health: policy::Health) -> Result<Plan, Unasked> {
        let address = health
            .address
            .clone()
            .or(self.reach.default_address.clone())
            .ok_or_else(|| Unasked {
                refused: None,
                message: NO_PROMETHEUS.to_string(),
            })?;
        if !self.reach.addresses.allows(&address) {
            return Err(Unasked {
                refused: Some(ADDRESS_NOT_ALLOWED),
                message: self.reach.addresses.refusal(&address),
            });
        }
        // Checked here; scoped again, with each backend's names filled in, as each round starts.
        health
            .query
            .scoped(self.reach.namespace_label.as_deref())
            .map_err(|message| Unasked {
                refused: Some(QUERY_NOT_ALLOWED),
                message: failover_core::message::line(&message),
            })?;
        let services = v
            .backends
            .iter()
            .map(|b| b.reference.name.as_str().into())
            .collect();
        Ok(Plan {
            health,
            address,
            namespace: v.namespace.as_str().into(),
            label: self.reach.namespace_label.as_deref().map(Into::into),
            services,
        })
    }

    /// The reading of a backend of a policy, once its query has run.
    pub fn reading(&self, policy: &PolicyKey, service: &str) -> Option<Reading> {
        self.readings.read().get(policy)?.get(service).cloned()
    }

    /// Keeps a policy's poller in step with its spec: `valid` is the policy as the validate step
    /// made it (`None`: the policy is gone, or invalid).
    pub fn follow(
        &self,
        key: PolicyKey,
        policy: Option<&FailoverPolicy>,
        valid: Option<&ValidPolicy>,
    ) {
        let mut unasked = None;
        let plan = valid.and_then(|v| {
            let health = policy::Health::clone(v.health.as_deref()?);
            self.plan(v, health)
                .map_err(|why| unasked = Some((v.backends.clone(), why)))
                .ok()
        });
        let mut pollers = self.pollers.lock();
        match (plan, pollers.get(&key)) {
            (Some(plan), Some((running, _))) if *running == plan => {}
            (Some(plan), _) => {
                if let Some(policy) = policy {
                    let services: Vec<&str> = plan.services.iter().map(|s| &**s).collect();
                    self.seed(&key, policy, &services);
                }
                let task = tokio::spawn(poll(self.clone(), key.clone(), plan.clone()));
                if let Some((_, old)) = pollers.insert(key, (plan, task.abort_handle())) {
                    old.abort();
                }
            }
            (None, _) => {
                if let Some((_, old)) = pollers.remove(&key) {
                    old.abort();
                }
                match unasked {
                    None => {
                        self.readings.write().remove(&key);
                    }
                    Some((backends, why)) => self.unasked(&key, &backends, why),
                }
            }
        }
    }

    /// Takes the last answers the policy's status recorded for backends with no reading yet.
    fn seed(&self, key: &PolicyKey, policy: &FailoverPolicy, services: &[&str]) {
        let mut readings = self.readings.write();
        let readings = readings.entry(key.clone()).or_default();
        for service in services {
            if !readings.contains_key(*service)
                && let Some(recorded) = recorded_reading(policy, service)
            {
                readings.insert(service.to_string(), recorded);
            }
        }
    }

    /// Marks every backend's query as failing when it is not sent (no Prometheus to ask, or
    /// refused), so the policy's `HealthQueryFailed` condition says why instead of the check being
    /// silently skipped. With no answer, there is no verdict: routing follows readiness alone.
    fn unasked(&self, key: &PolicyKey, backends: &[policy::Backend], why: Unasked) {
        let mut readings = self.readings.write();
        let readings = readings.entry(key.clone()).or_default();
        readings.retain(|_, r| r.failing.as_deref() == Some(&why.message));
        for b in backends {
            readings
                .entry(b.reference.name.to_string())
                .or_insert_with(|| Reading {
                    sample: None,
                    failing: Some(why.message.clone()),
                    refused: why.refused,
                });
        }
    }

    /// Records a query's outcome; returns whether the verdict (or why the query fails) changed.
    fn record(
        &self,
        key: &PolicyKey,
        service: &str,
        plan: &Plan,
        outcome: Result<Option<f64>, String>,
    ) -> bool {
        let mut readings = self.readings.write();
        let readings = readings.entry(key.clone()).or_default();
        let before = readings.get(service).cloned();
        let after = match outcome {
            Ok(value) => Reading {
                sample: Some(Sample {
                    value,
                    read_at: Utc::now(),
                }),
                failing: None,
                refused: None,
            },
            Err(error) => Reading {
                sample: before.as_ref().and_then(|last| last.sample.clone()),
                failing: Some(error),
                refused: None,
            },
        };
        // A failure that changes its reason is news too: the condition must say the current one;
        // so is data appearing or going away (the status shows a value, or that there is none).
        let verdict = |r: &Reading| {
            let healthy = r.sample.as_ref().map(|s| plan.health.healthy(s.value));
            let data = r.sample.as_ref().map(|s| s.value.is_some());
            (healthy, data, r.failing.clone())
        };
        let changed = before.as_ref().map(verdict) != Some(verdict(&after));
        readings.insert(service.to_string(), after);
        changed
    }
}

/// Runs a policy's queries every interval, for ever (until its plan changes), each when the
/// budget gives its namespace a turn. While every query fails (Prometheus down, or an answer
/// that is not one number), the pause doubles, up to eight intervals, so Prometheus is not
/// hammered.
async fn poll(health: Health, key: PolicyKey, plan: Plan) {
    let mut failed_rounds = 0u32;
    loop {
        let mut changed = false;
        let mut failures = 0;
        for service in plan.services.iter().map(|s| &**s) {
            let slot = health.budget.turn(&key.namespace).await;
            let Some(query) = plan.query(service) else {
                continue;
            };
            health.metrics.health_query();
            let outcome = health.prometheus.query(&plan.address, &query).await;
            drop((slot, query));
            if let Err(e) = &outcome {
                failures += 1;
                health.metrics.health_query_error();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(status: serde_json::Value) -> FailoverPolicy {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "failover.dev/v1alpha1",
            "kind": "FailoverPolicy",
            "metadata": { "name": "web", "namespace": "prod" },
            "spec": {
                "service": "web",
                "primary": "web-primary",
                "secondaries": [{ "service": "web-east" }],
                "health": { "prometheus": {
                    "address": "http://127.0.0.1:9",
                    "query": "errors{service=\"{{service}}\"}",
                    "max": 0.05,
                } },
            },
            "status": status,
        }))
        .expect("policy")
    }

    fn store() -> Health {
        let reach = Reach {
            addresses: Addresses::new(&["http://127.0.0.1:9".into()], None),
            namespace_label: Some("namespace".into()),
            ..Reach::default()
        };
        Health::new(reach, Arc::new(Metrics::new()), Arc::new(|_| {}))
    }

    fn plan(p: &FailoverPolicy) -> Plan {
        let v = failover_core::validate::validate(p).expect("valid");
        let health = *v.health.clone().expect("health");
        store()
            .plan(&v, health)
            .unwrap_or_else(|why| panic!("{}", why.message))
    }

    #[test]
    fn each_backends_query_is_scoped_to_the_policys_namespace() {
        let plan = plan(&policy(serde_json::Value::Null));
        assert_eq!(
            plan.services
                .iter()
                .map(|s| (s.to_string(), plan.query(s).unwrap_or_default()))
                .collect::<Vec<_>>(),
            [
                (
                    "web-primary".to_string(),
                    r#"errors{namespace="prod",service="web-primary"}"#.to_string()
                ),
                (
                    "web-east".to_string(),
                    r#"errors{namespace="prod",service="web-east"}"#.to_string()
                ),
            ]
        );
    }

    #[test]
    fn an_address_the_admin_did_not_allow_is_refused_before_any_query() {
        let mut p = policy(serde_json::Value::Null);
        if let Some(h) = p.spec.health.as_mut().and_then(|h| h.prometheus.as_mut()) {
            h.address = Some("http://169.254.169.254".into());
        }
        let health = store();
        health.follow(
            key(),
            Some(&p),
            failover_core::validate::validate(&p).ok().as_ref(),
        );
        assert!(health.pollers.lock().is_empty(), "no poller, so no request");
        let reading = health.reading(&key(), "web-primary").expect("reading");
        assert_eq!(reading.refused, Some(ADDRESS_NOT_ALLOWED));
        assert!(reading.failing.is_some_and(|m| {
            m.starts_with("spec.health.prometheus.address http://169.254.169.254 is not")
        }));
    }

    fn key() -> PolicyKey {
        PolicyKey {
            namespace: "prod".into(),
            name: "web".into(),
        }
    }

    #[test]
    fn a_new_poller_keeps_the_verdict_the_status_recorded_while_prometheus_is_down() {
        let p = policy(serde_json::json!({ "backends": [{
            "service": "web-primary", "role": "Primary", "ready": false,
            "readyEndpoints": 3, "totalEndpoints": 3, "weight": 0,
            "health": { "value": 0.4, "threshold": "at most 0.05", "healthy": false,
                        "readAt": "2026-11-24T10:00:00.000Z" },
        }] }));
        let health = store();
        health.seed(&key(), &p, &["web-primary", "web-east"]);
        let changed = health.record(&key(), "web-primary", &plan(&p), Err("refused".into()));
        assert!(changed, "the failure itself is news (HealthQueryFailed)");
        let reading = health.reading(&key(), "web-primary").expect("reading");
        assert_eq!(reading.sample.and_then(|s| s.value), Some(0.4));
        assert_eq!(reading.failing.as_deref(), Some("refused"));
        assert_eq!(health.reading(&key(), "web-east"), None, "nothing recorded");
    }

    #[test]
    fn a_query_that_never_answered_has_no_sample_and_an_answer_replaces_it() {
        let p = policy(serde_json::Value::Null);
        let (health, plan) = (store(), plan(&p));
        health.record(&key(), "web-east", &plan, Err("refused".into()));
        let reading = health.reading(&key(), "web-east").expect("reading");
        assert_eq!((reading.sample, reading.failing.is_some()), (None, true));
        assert!(health.record(&key(), "web-east", &plan, Ok(Some(0.01))));
        let reading = health.reading(&key(), "web-east").expect("reading");
        assert_eq!(reading.sample.and_then(|s| s.value), Some(0.01));
        assert!(
            !health.record(&key(), "web-east", &plan, Ok(Some(0.02))),
            "same verdict, no wake-up"
        );
    }

    #[test]
    fn data_appearing_wakes_the_policy_although_the_verdict_stays_healthy() {
        let p = policy(serde_json::Value::Null);
        let (health, plan) = (store(), plan(&p));
        assert!(health.record(&key(), "web-east", &plan, Ok(None)));
        assert!(
            health.record(&key(), "web-east", &plan, Ok(Some(0.01))),
            "no data, then a value: the status must show it"
        );
        assert!(health.record(&key(), "web-east", &plan, Ok(None)));
    }

    #[test]
    fn a_failure_wakes_the_policy_when_its_reason_changes_and_not_when_it_repeats() {
        let p = policy(serde_json::Value::Null);
        let (health, plan) = (store(), plan(&p));
        assert!(health.record(&key(), "web-east", &plan, Err("refused".into())));
        assert!(!health.record(&key(), "web-east", &plan, Err("refused".into())));
        assert!(health.record(&key(), "web-east", &plan, Err("more than 1 MiB".into())));
    }
}
