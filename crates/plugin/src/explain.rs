//! `explain-decision`: why traffic is where it is, in sentences, from the policy's spec and the
//! status the controller wrote (the rule in the `Ready` condition's reason, the backends'
//! readiness, and when a pending hold falls due).

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use failover_core::api::{
    FailoverPolicy, FailoverPolicyStatus, Strategy, WhenNoneReady,
    conditions::{READY, ready},
};
use kube::ResourceExt;
use serde::Serialize;

use crate::{
    Format,
    show::{age, wrap},
};

/// The explanation as scripts read it.
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// The policy.
    pub policy: String,
    /// The rule that decided: the `Ready` condition's reason.
    pub rule: String,
    /// Why, in a sentence.
    pub because: String,
    /// What would change it, in a sentence.
    pub next: String,
    /// When a pending hold falls due.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_until: Option<DateTime<Utc>>,
    /// One line per backend: its readiness and why.
    pub backends: Vec<String>,
}

/// The explanation in the chosen format.
pub fn render(policy: &FailoverPolicy, format: Format) -> anyhow::Result<String> {
    let e = explain(policy, Utc::now());
    Ok(match format {
        Format::Json => serde_json::to_string_pretty(&e)? + "\n",
        Format::Yaml => serde_yaml::to_string(&e)?,
        Format::Text => {
            let mut out = wrap(&format!("{}: {}", e.policy, e.because), "  ");
            out.push_str(&wrap(&format!("Rule: {}.", e.rule), "  "));
            out.push_str(&wrap(&format!("Next: {}", e.next), "  "));
            out.push_str("Backends:\n");
            for b in &e.backends {
                let _ = write!(out, "{}", wrap(&format!("  {b}"), "    "));
            }
            out
        }
    })
}

/// Explains a policy's current decision.
pub fn explain(policy: &FailoverPolicy, now: DateTime<Utc>) -> Explanation {
    let name = format!(
        "{}/{}",
        policy.namespace().unwrap_or_default(),
        policy.name_any()
    );
    let empty = FailoverPolicyStatus::default();
    let status = policy.status.as_ref().unwrap_or(&empty);
    let ready = status.conditions.iter().find(|c| c.type_ == READY);
    let rule = ready.map_or("none yet".to_string(), |c| c.reason.clone());
    let hold_until = status.hold_until.map(|t| t.0);
    let (because, next) = sentences(policy, status, &rule, now);
    let backends = status
        .backends
        .iter()
        .map(|b| {
            let since = b
                .last_transition_time
                .map_or(String::new(), |t| format!(" for {}", age(now, t.0)));
            let state = match (&b.message, b.ready) {
                (_, true) => format!(
                    "ready{since} ({}/{} endpoints)",
                    b.ready_endpoints, b.total_endpoints
                ),
                (Some(why), false) => format!("not ready{since}: {why}"),
                (None, false) => format!("not ready{since}"),
            };
            format!("{} ({:?}, weight {}): {state}", b.service, b.role, b.weight)
        })
        .collect();
    Explanation {
        policy: name,
        rule,
        because,
        next,
        hold_until,
        backends,
    }
}

/// What the sentences of an explanation are made of.
struct Facts<'a> {
    policy: &'a FailoverPolicy,
    primary: &'a str,
    active: String,
    due: String,
    message: String,
}

/// Why traffic is where it is, and what would move it, for the rule that decided.
fn sentences(
    policy: &FailoverPolicy,
    status: &FailoverPolicyStatus,
    rule: &str,
    now: DateTime<Utc>,
) -> (String, String) {
    let facts = Facts {
        policy,
        primary: &policy.spec.primary,
        active: status.active_backends.join(", "),
        due: status
            .hold_until
            .map_or("-".to_string(), |t| format!("{t} (in {})", age(t.0, now))),
        message: status
            .conditions
            .iter()
            .find(|c| c.type_ == READY)
            .map_or(String::new(), |c| c.message.clone()),
    };
    match rule {
        ready::PRIMARY_ACTIVE
        | ready::FAILOVER_PENDING
        | ready::FAILBACK_PENDING
        | ready::FAILED_OVER => readiness_rules(&facts, rule),
        _ => other_rules(&facts, rule),
    }
}

/// The rules that follow the primary's readiness, with their holds.
fn readiness_rules(f: &Facts, rule: &str) -> (String, String) {
    let (spec, primary, active, due) = (&f.policy.spec, f.primary, &f.active, &f.due);
    match rule {
        ready::PRIMARY_ACTIVE => (
            format!("the primary {primary} is ready, so it takes all traffic."),
            format!(
                "when {primary} is not ready for failoverAfter ({}), traffic moves to the secondaries.",
                spec.failover_after
            ),
        ),
        ready::FAILOVER_PENDING => (
            format!(
                "the primary {primary} is not ready, but failoverAfter ({}) keeps traffic on it.",
                spec.failover_after
            ),
            format!("traffic moves to the secondaries at {due}, unless {primary} is ready before."),
        ),
        ready::FAILBACK_PENDING => (
            format!(
                "the primary {primary} is ready again, but failbackAfter ({}) keeps traffic on {active}.",
                spec.failback_after
            ),
            format!("traffic returns to {primary} at {due}, unless it turns not ready before."),
        ),
        _ => (
            format!(
                "the primary {primary} is not ready, so traffic goes to {active}: {}.",
                strategy(spec.strategy)
            ),
            format!(
                "traffic returns to {primary} once it has been ready for failbackAfter ({}).",
                spec.failback_after
            ),
        ),
    }
}

/// Spillover, nothing ready, a pin, and whatever else the controller reported.
fn other_rules(f: &Facts, rule: &str) -> (String, String) {
    let (primary, active, message) = (f.primary, &f.active, &f.message);
    match rule {
        ready::FAILBACK_RAMP => (
            format!("traffic is coming back to the primary {primary} in steps: {message}."),
            "each step lasts while the primary stays ready; a failure sends traffic back to the secondaries at once.".to_string(),
        ),
        ready::SPILLOVER => (
            format!("strategy Proportional shares traffic by the backends' health: {message}."),
            "shares follow the ready endpoints of each backend continuously.".to_string(),
        ),
        ready::NO_READY_BACKEND => (
            match f.policy.spec.when_none_ready {
                WhenNoneReady::KeepLast => format!(
                    "no backend is ready, so the weights stay as they were (traffic stays on {active})."
                ),
                WhenNoneReady::Primary => format!(
                    "no backend is ready, so all traffic goes to the primary {primary} (whenNoneReady: Primary)."
                ),
            },
            "traffic moves as soon as any backend is ready.".to_string(),
        ),
        ready::SUSPENDED => (
            format!(
                "suspended: {}.",
                message.trim_start_matches("spec.suspend is set: ")
            ),
            format!(
                "kubectl failover resume {} lets the controller write the route again.",
                f.policy.name_any()
            ),
        ),
        ready::PINNED | ready::PINNED_BACKEND_NOT_READY => (
            format!("spec.pin sends all traffic to {active}, whatever its readiness."),
            format!(
                "kubectl failover unpin {} lets traffic follow readiness again.",
                f.policy.name_any()
            ),
        ),
        ready::FAILBACK_BY_CAPACITY => (
            format!("the primary {primary} is back and takes what its ready endpoints serve: {message}."),
            "its share grows as its endpoints become ready; a failure sends traffic back to the secondaries at once.".to_string(),
        ),
        ready::SPILLOVER_BY_CAPACITY => (
            format!("the primary {primary} is ready but short of endpoints, so it keeps only what they serve: {message}."),
            "the secondaries take the rest within their capacity; it all returns to the primary once its endpoints serve the demand.".to_string(),
        ),
        ready::DRILL | ready::DRILL_BACKEND_NOT_READY => (
            format!("{message}, whatever the primary's readiness (spec.drill)."),
            format!(
                "the controller ends the drill by itself at its end time; kubectl failover drill {} --abort ends it now.",
                f.policy.name_any()
            ),
        ),
        _ => (
            format!("the controller reports {rule}: {message}"),
            "see the conditions in kubectl failover status.".to_string(),
        ),
    }
}

fn strategy(strategy: Strategy) -> &'static str {
    match strategy {
        Strategy::Ordered => {
            "strategy Ordered sends it all to the first ready secondary in list order"
        }
        Strategy::Equal => "strategy Equal splits it equally among the ready secondaries",
        Strategy::Weighted => {
            "strategy Weighted splits it among the ready secondaries by their weight"
        }
        Strategy::Proportional => "strategy Proportional shares it by health",
    }
}
