//! `what-if`: what the controller would do if backends changed, decided by the controller's own
//! reconcile core (validate, then the core's `intend`, the apply step's action and the status stage's `build`: the
//! functions the controller calls, not a copy) and written nowhere.
//!
//! It reads the policy, its status and the live readiness (a local backend's EndpointSlices
//! counted as the controller's watches count them; a remote backend's and every health reading
//! as the status last recorded them), the route, the Gateways the admin allows (as the status
//! last recorded them) and who holds what the policy claims (the claims table, built from the
//! policies it may list). It changes what the flags say, then steps through time as the
//! controller would: each step is a decision at the instant the previous one asked to be run
//! again (a hold falling due, a ramp step, a drill's end), until a decision asks for nothing more.
//! Every write is imagined to go through; the workloads `capacity.scale` raises stay as recorded.

use std::{
    fmt::Write as _,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::bail;
use chrono::{DateTime, Utc};
use failover_core::{
    api::{Condition, FailoverPolicy, FailoverPolicyStatus, Phase, conditions::READY},
    apis::ApiState,
    claims::Claims,
    decide::{Plan, group::Order},
    last_status::LastStatus,
    observation::{BackendObservation, PolicyKey, Reading, Sample},
    policy::ValidPolicy,
    reconcile::{self as driver, Next, Spec, Subject},
    route::RouteView,
    status::Outcome,
    tenancy::Gateways,
    validate::validate,
};
use kube::{Api, Client, ResourceExt};
use serde::Serialize;

use self::rehearsal::Rehearsal;
use crate::{Format, live};

mod args;
mod rehearsal;

pub use self::args::{parse_at, parse_health, parse_ready};

/// At most this many steps are printed: a ramp has at most 10, and each hold is one.
const MAX_STEPS: usize = 32;

/// The change to imagine.
#[derive(Clone, Debug, Default)]
pub struct Scenario {
    /// Backends whose endpoints all turn not ready.
    pub down: Vec<String>,
    /// Backends whose endpoints all turn ready.
    pub up: Vec<String>,
    /// Backends with this many endpoints ready (their total at least that).
    pub ready: Vec<(String, i32)>,
    /// Backends whose health query reads this value.
    pub health: Vec<(String, f64)>,
    /// How long from now the change happens.
    pub at: Duration,
}

/// What the controller would do, step by step.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct WhatIfReport {
    /// The policy, `namespace/name`.
    pub policy: String,
    /// The change, in words.
    pub changes: Vec<String>,
    /// When the change happens.
    pub from: DateTime<Utc>,
    /// Each decision from the change on.
    pub steps: Vec<Step>,
    /// Whether the last step asks for no further decision.
    pub settled: bool,
}

/// One decision.
#[derive(Serialize, Debug, Clone)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// When it is made.
    pub at: DateTime<Utc>,
    /// Seconds after the change.
    pub after_seconds: i64,
    /// The phase.
    pub phase: Option<Phase>,
    /// The rule that decided (the `Ready` condition's reason).
    pub rule: String,
    /// Each backend's weight and share.
    pub backends: Vec<Weight>,
    /// When the next decision falls due (a hold, a ramp step, a drill's end).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_at: Option<DateTime<Utc>>,
    /// The conditions the status would say.
    pub conditions: Vec<Condition>,
    /// The route the controller would write (`None` while suspended: it writes none).
    pub route: Option<serde_json::Value>,
}

/// A backend's weight in a step.
#[derive(Serialize, Debug, PartialEq, Clone)]
#[serde(rename_all = "camelCase")]
pub struct Weight {
    /// The backend Service.
    pub service: String,
    /// Whether it counts as ready.
    pub ready: bool,
    /// Its weight in the route.
    pub weight: i32,
    /// Its share of the traffic.
    pub share: String,
}

/// Runs `what-if` for one policy and prints the report.
pub async fn run(
    client: Client,
    namespace: &str,
    name: &str,
    scenario: &Scenario,
    format: Format,
) -> anyhow::Result<String> {
    let api: Api<FailoverPolicy> = Api::namespaced(client.clone(), namespace);
    let Some(policy) = api.get_opt(name).await? else {
        bail!("FailoverPolicy {name} not found in namespace {namespace}");
    };
    let valid = match validate(&policy) {
        Ok(valid) => Arc::new(valid),
        Err(problems) => {
            let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
            bail!(
                "{name} is not valid, so the controller decides nothing for it: {}",
                problems.join("; ")
            );
        }
    };
    let live = live::observe(&client, &policy, &valid).await?;
    let route = live::route(&client, &valid).await?;
    let from = Utc::now() + scenario.at;
    let changed = imagine(&valid, &live, scenario, from)?;
    let listeners = live::listeners(&client, namespace).await?;
    let gateways = live::consent(&valid, policy.status.as_ref(), &listeners);
    let claims = live::claims(&client, namespace, &listeners).await?;
    let order = live::group_order(&client, &valid).await?;
    let report = simulate(&Imagined {
        policy: &policy,
        valid,
        before: &live,
        after: &changed,
        route: route.view(),
        api: if matches!(route, live::Route::ApiMissing) {
            ApiState::Missing
        } else {
            ApiState::Served
        },
        gateways,
        claims,
        order,
        now: Utc::now(),
        from,
        changes: describe(scenario),
    })
    .await;
    Ok(match format {
        Format::Json => serde_json::to_string_pretty(&report)? + "\n",
        Format::Yaml => serde_yaml::to_string(&report)?,
        Format::Text => text(&report),
    })
}

/// The observations with the scenario's changes made at `at`.
fn imagine(
    valid: &ValidPolicy,
    live: &[BackendObservation],
    scenario: &Scenario,
    at: DateTime<Utc>,
) -> anyhow::Result<Vec<BackendObservation>> {
    let mut changed = live.to_vec();
    let index = |name: &str| {
        valid
            .backend_names()
            .position(|b| b == name)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "{name} is not a backend of {}; its backends are {}",
                    valid.name,
                    valid.backend_names().collect::<Vec<_>>().join(", ")
                )
            })
    };
    for name in &scenario.down {
        let o = &mut changed[index(name)?];
        o.ready_endpoints = 0;
    }
    for name in &scenario.up {
        let o = &mut changed[index(name)?];
        let endpoints = o.total_endpoints.max(valid.readiness.min_ready_endpoints);
        *o = BackendObservation {
            health: o.health.take(),
            ..BackendObservation::counted(endpoints, endpoints)
        };
    }
    for (name, ready) in &scenario.ready {
        let o = &mut changed[index(name)?];
        *o = BackendObservation {
            health: o.health.take(),
            ..BackendObservation::counted(*ready, o.total_endpoints.max(*ready))
        };
    }
    for (name, value) in &scenario.health {
        let i = index(name)?;
        if valid.health.is_none() {
            bail!(
                "{} has no health query, so --health changes nothing",
                valid.name
            );
        }
        changed[i].health = Some(Reading {
            sample: Some(Sample {
                value: Some(*value),
                read_at: at,
            }),
            ..Reading::default()
        });
    }
    Ok(changed)
}

fn describe(scenario: &Scenario) -> Vec<String> {
    let mut changes: Vec<String> = Vec::new();
    changes.extend(scenario.down.iter().map(|b| format!("{b} down")));
    changes.extend(scenario.up.iter().map(|b| format!("{b} up")));
    changes.extend(
        scenario
            .ready
            .iter()
            .map(|(b, n)| format!("{b} with {n} endpoints ready")),
    );
    changes.extend(
        scenario
            .health
            .iter()
            .map(|(b, v)| format!("{b} health reads {v}")),
    );
    if changes.is_empty() {
        changes.push("no change".into());
    }
    changes
}

/// Everything a simulation starts from.
pub struct Imagined<'a> {
    /// The policy as the cluster has it (its status is the first previous status).
    pub policy: &'a FailoverPolicy,
    /// The policy, validated.
    pub valid: Arc<ValidPolicy>,
    /// What is observed before the change.
    pub before: &'a [BackendObservation],
    /// What is observed from the change on.
    pub after: &'a [BackendObservation],
    /// The route as the cluster has it.
    pub route: Option<&'a RouteView>,
    /// Whether the route's API is served.
    pub api: ApiState,
    /// The Gateways of other namespaces the cluster admin lets the route attach to.
    pub gateways: Gateways,
    /// Who holds what, as the controller's claims table would.
    pub claims: Claims,
    /// The site the policy's failover group routes it to, as the group's status says (kept
    /// through the scenario: what-if imagines one policy, not its group's other members).
    pub order: Option<Order>,
    /// Now.
    pub now: DateTime<Utc>,
    /// When the change happens.
    pub from: DateTime<Utc>,
    /// The change, in words.
    pub changes: Vec<String>,
}

/// The controller's decisions from now on, each run when the one before asked to be: those
/// before the change advance the status silently; those from it on are the report.
pub async fn simulate(imagined: &Imagined<'_>) -> WhatIfReport {
    let (policy, valid) = (imagined.policy, &imagined.valid);
    let mut previous = policy.status.as_ref().map(LastStatus::of);
    let (mut at, mut steps, mut settled) = (imagined.now, Vec::new(), false);
    while steps.len() < MAX_STEPS {
        let changed = at >= imagined.from;
        let observations = if changed {
            imagined.after
        } else {
            imagined.before
        };
        let (status, step) = decided(imagined, observations, previous.take(), at).await;
        previous = Some(LastStatus::of(&status));
        if changed {
            steps.push(Step {
                after_seconds: (at - imagined.from).num_seconds(),
                ..step.clone()
            });
        }
        at = match step.next_at {
            Some(next) if !changed => next.min(imagined.from),
            Some(next) => next,
            None if changed => {
                settled = true;
                break;
            }
            None => imagined.from,
        };
    }
    WhatIfReport {
        policy: format!("{}/{}", valid.namespace, valid.name),
        changes: imagined.changes.clone(),
        from: imagined.from,
        steps,
        settled,
    }
}

/// The status the controller would write for one reconcile at `at`, by the controller's own
/// driver over an imagined world, and the step that reports it.
async fn decided(
    imagined: &Imagined<'_>,
    observations: &[BackendObservation],
    previous: Option<LastStatus>,
    at: DateTime<Utc>,
) -> (FailoverPolicyStatus, Step) {
    let (policy, valid) = (imagined.policy, &imagined.valid);
    let world = Rehearsal {
        imagined,
        key: PolicyKey::new(&valid.namespace, &valid.name),
        uid: policy.uid().unwrap_or_default(),
        observations,
        previous,
        written: Mutex::new(None),
    };
    let subject = Subject {
        uid: &world.uid,
        generation: policy.metadata.generation,
        target: &valid.route,
        spec: Spec::Valid(valid),
    };
    let reconciled = match driver::reconcile(&subject, &world, at).await {
        Ok(reconciled) => reconciled,
        Err(never) => match never {},
    };
    let backends = match &reconciled.outcome {
        Outcome::Decided(d) => weights(&d.policy, &d.plan),
        Outcome::Invalid { .. } => Vec::new(),
    };
    let next_at = match reconciled.next {
        Ok(Next::After(after)) => chrono::Duration::from_std(after).ok().map(|n| at + n),
        Ok(Next::Wait) | Err(_) => None,
    };
    let status = reconciled.status;
    let step = Step {
        at,
        after_seconds: 0,
        phase: status.phase,
        rule: status
            .conditions
            .iter()
            .find(|c| c.type_ == READY)
            .map_or_else(String::new, |c| c.reason.clone()),
        backends,
        next_at,
        conditions: status.conditions.clone(),
        route: world
            .written
            .into_inner()
            .unwrap_or_else(|e| e.into_inner()),
    };
    (status, step)
}

/// Each backend's readiness, weight and share in a decision.
fn weights(valid: &ValidPolicy, plan: &Plan) -> Vec<Weight> {
    valid
        .backend_names()
        .zip(&plan.routing.weights)
        .zip(&plan.backends)
        .zip(plan.shares())
        .map(|(((service, weight), b), share)| Weight {
            service: service.to_string(),
            ready: b.ready,
            weight: *weight,
            share,
        })
        .collect()
}

/// The report for people: one line per step, then the conditions where it settles.
fn text(report: &WhatIfReport) -> String {
    let mut out = format!(
        "What if {} ({}), from {}:\n",
        report.changes.join(", "),
        report.policy,
        failover_core::api::Timestamp(report.from)
    );
    let _ = writeln!(
        out,
        "  {:<6}  {:<14}  {:<22}  {:<6}  TRAFFIC",
        "AFTER", "PHASE", "RULE", "NEXT"
    );
    for step in &report.steps {
        let traffic: Vec<String> = step
            .backends
            .iter()
            .filter(|b| b.weight > 0)
            .map(|b| format!("{} {}", b.service, b.share))
            .collect();
        let phase = step.phase.map_or("-".to_string(), |p| p.to_string());
        // When the next decision falls due (a hold, a ramp step, a drill's end), after the change.
        let next = step.next_at.map_or("-".to_string(), |n| {
            format!("{}s", (n - report.from).num_seconds())
        });
        let _ = writeln!(
            out,
            "  {:<6}  {phase:<14}  {:<22}  {next:<6}  {}",
            format!("{}s", step.after_seconds),
            step.rule,
            traffic.join(", ")
        );
    }
    match (report.settled, report.steps.last()) {
        (true, Some(last)) => {
            out.push_str("Settles with:\n");
            for c in &last.conditions {
                let line = format!("  {} {} {}: {}", c.type_, c.status, c.reason, c.message);
                out.push_str(&crate::show::wrap(&line, "      "));
            }
        }
        _ => {
            let _ = writeln!(out, "Not settled after {MAX_STEPS} steps.");
        }
    }
    out.push_str("Nothing was written to the cluster.\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use failover_core::api::{FailoverPolicySpec, SecondaryBackend};

    fn policy(change: impl FnOnce(&mut FailoverPolicySpec)) -> FailoverPolicy {
        let mut spec = FailoverPolicySpec {
            service: "web".into(),
            primary: "web".into(),
            secondaries: vec![SecondaryBackend::new("web-east")],
            ..Default::default()
        };
        change(&mut spec);
        let mut policy = FailoverPolicy::new("web", spec);
        policy.metadata.namespace = Some("shop".into());
        policy.metadata.uid = Some("uid-1".into());
        policy
    }

    fn report(policy: &FailoverPolicy, after: &[BackendObservation]) -> WhatIfReport {
        let valid = Arc::new(validate(policy).expect("valid"));
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default();
        let before = [
            BackendObservation::counted(1, 1),
            BackendObservation::counted(1, 1),
        ];
        futures::executor::block_on(simulate(&Imagined {
            policy,
            valid,
            before: &before,
            after,
            route: None,
            api: ApiState::Served,
            gateways: Gateways::default(),
            claims: Claims::default(),
            order: None,
            now,
            from: now,
            changes: vec![],
        }))
    }

    #[test]
    fn a_failover_hold_is_one_step_and_the_failover_the_next() {
        let p = policy(|s| s.failover_after = "30s".into());
        let down = [
            BackendObservation::counted(0, 1),
            BackendObservation::counted(1, 1),
        ];
        let r = report(&p, &down);
        let rules: Vec<(&str, i64)> = r
            .steps
            .iter()
            .map(|s| (s.rule.as_str(), s.after_seconds))
            .collect();
        assert!(r.settled);
        // The first decision records the primary as ready (no status yet), so the failure starts
        // at the change.
        assert_eq!(rules, vec![("FailoverPending", 0), ("FailedOver", 30)]);
        let last = &r.steps[1].backends;
        assert_eq!((last[0].weight, last[1].weight), (0, 1));
        assert_eq!(last[1].share, "100%");
        assert!(r.steps[1].route.is_some());
    }

    #[test]
    fn a_ramp_is_one_step_each_until_all_traffic_is_back() {
        let p = policy(|s| {
            s.failback = Some(failover_core::api::FailbackSpec {
                ramp: Some(failover_core::api::RampSpec {
                    steps: vec![25, 50, 100],
                    every: "10s".into(),
                }),
            });
        });
        // Failed over first (the primary down from the start), then the primary comes back.
        let valid = Arc::new(validate(&p).expect("valid"));
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default();
        let down = [
            BackendObservation::counted(0, 1),
            BackendObservation::counted(1, 1),
        ];
        let up = [
            BackendObservation::counted(1, 1),
            BackendObservation::counted(1, 1),
        ];
        let r = futures::executor::block_on(simulate(&Imagined {
            policy: &p,
            valid,
            before: &down,
            after: &up,
            route: None,
            api: ApiState::Served,
            gateways: Gateways::default(),
            claims: Claims::default(),
            order: None,
            now,
            from: now + chrono::Duration::seconds(5),
            changes: vec![],
        }));
        let primary: Vec<String> = r
            .steps
            .iter()
            .map(|s| s.backends[0].share.clone())
            .collect();
        assert_eq!(primary, vec!["25%", "50%", "100%"]);
        assert!(r.settled);
    }
}
