//! The decision history: each transition, as the decision that made it saw it, appended to the
//! status that reports it, and which of them the webhook sinks still wait for.
//!
//! An entry's id is one more than the last one the previous status recorded, and a transition
//! is one the previous status did not yet report (the decide step compares with it): so a
//! status built again from the same previous status (a failed write retried, a new leader, a
//! restart) records the same transition under the same id, never twice.

use crate::{
    api::{HistoryEntry, Timestamp, conditions::NOTIFIED, conditions::notified},
    decide::{Plan, Rule, verdict::Verdict},
    last_status::LastStatus,
    policy::ValidPolicy,
};

/// What the notifier says of a policy's webhook sinks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Notices {
    /// The last history entry every sink acknowledged, as far as this replica delivered.
    pub delivered: Option<u64>,
    /// The sinks (by index in `spec.notifications.webhooks`) the cluster admin does not allow.
    pub refused: Vec<usize>,
}

/// The history a decision in place leaves: the previous one, with this decision's transition
/// (when it made one) last, at most the policy's limit long.
pub fn record(
    policy: &ValidPolicy,
    plan: &Plan,
    previous: Option<&LastStatus>,
) -> Vec<HistoryEntry> {
    let kept = previous.map(LastStatus::history).unwrap_or_default();
    let mut history = kept.to_vec();
    if let Some(announcement) = &plan.transition {
        let id = kept.last().map_or(1, |e| e.id + 1);
        history.push(HistoryEntry {
            id,
            time: Timestamp(plan.now),
            transition: announcement.transition.reason().to_string(),
            from: weights(policy, |i, name| {
                previous
                    .and_then(|p| p.backend(name))
                    .map_or(if i == 0 { 1 } else { 0 }, |b| b.weight)
            }),
            to: weights(policy, |i, _| {
                plan.routing.weights.get(i).copied().unwrap_or(0)
            }),
            trigger: crate::message::line(&trigger(policy, plan, previous)),
            reason: crate::message::line(&announcement.message),
        });
    }
    let limit = policy
        .notifications
        .as_ref()
        .map_or(crate::api::DEFAULT_HISTORY as usize, |n| n.history_limit());
    let excess = history.len().saturating_sub(limit);
    history.drain(..excess);
    history
}

/// The last entry no webhook sink waits for: the last one recorded while the policy names no
/// sink (entries made before a sink was named are never sent), else the last every sink
/// acknowledged, never going back.
pub fn notified_through(
    policy: &ValidPolicy,
    history: &[HistoryEntry],
    previous: Option<&LastStatus>,
    notices: &Notices,
) -> Option<u64> {
    let before = previous.and_then(|p| p.notified_through);
    let sinks = policy
        .notifications
        .as_ref()
        .is_some_and(|n| !n.webhooks.is_empty());
    if !sinks {
        return history.last().map(|e| e.id).max(before);
    }
    before.max(notices.delivered)
}

/// `Notified=False` while a sink is refused, naming it.
pub fn verdict(policy: &ValidPolicy, notices: &Notices) -> Option<Verdict> {
    let webhooks = &policy.notifications.as_ref()?.webhooks;
    let refused: Vec<String> = notices
        .refused
        .iter()
        .filter_map(|&i| {
            let url = &webhooks.get(i)?.url;
            Some(format!("spec.notifications.webhooks[{i}].url {url}"))
        })
        .collect();
    (!refused.is_empty()).then(|| {
        Verdict::new(
            NOTIFIED,
            false,
            notified::WEBHOOK_NOT_ALLOWED,
            format!(
                "{} is not a URL the cluster admin allows (--notification-allowed-urls); it is never contacted",
                refused.join(", ")
            ),
        )
    })
}

/// The weights in short form: `service=weight` joined by commas, primary first, in one
/// bounded line (as every text of an entry: an entry stays under a kilobyte whatever the spec).
fn weights(policy: &ValidPolicy, weight: impl Fn(usize, &str) -> i32) -> String {
    let all = policy
        .backend_names()
        .enumerate()
        .map(|(i, name)| format!("{name}={}", weight(i, name)))
        .collect::<Vec<_>>()
        .join(",");
    crate::message::line(&all)
}

/// What triggered a transition: the rule's own cause, else the first backend (in priority
/// order) whose readiness differs from the previous status's, read through its health query
/// when that is what says it is not ready.
fn trigger(policy: &ValidPolicy, plan: &Plan, previous: Option<&LastStatus>) -> String {
    match plan.routing.rule {
        Rule::Pinned(_) => return "spec.pin".to_string(),
        Rule::Drill { .. } => return "spec.drill".to_string(),
        Rule::Following => {
            if let Some(order) = &plan.following {
                return format!("group {} (site {})", order.group, order.site);
            }
        }
        Rule::FailbackRamp { step, steps, .. } => {
            return format!("failback ramp (step {} of {steps})", step + 1);
        }
        _ => {}
    }
    let changed = plan.backends.iter().find(|b| {
        previous
            .and_then(|p| p.backend(&b.backend.name))
            .is_none_or(|was| was.ready != b.ready)
    });
    let Some(backend) = changed else {
        return format!("readiness of {}", policy.primary());
    };
    let unhealthy = policy
        .health
        .as_ref()
        .zip(backend.observation.health.as_ref())
        .and_then(|(h, r)| Some(!h.healthy(r.sample.as_ref()?.value)))
        .unwrap_or(false);
    let what = if unhealthy { "health" } else { "readiness" };
    let now = if backend.ready { "ready" } else { "not ready" };
    format!("{what} of {} ({now})", backend.backend.name)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::{
        api::{NotificationsSpec, SecretKeyRef, Strategy, WebhookSink},
        decide::tests::{decide, spec},
        observation::BackendObservation,
    };

    fn at(second: i64) -> chrono::DateTime<chrono::Utc> {
        chrono::Utc
            .timestamp_opt(1_700_000_000 + second, 0)
            .unwrap()
    }

    fn readiness(primary: bool) -> [BackendObservation; 2] {
        [
            BackendObservation::counted(i32::from(primary), 1),
            BackendObservation::counted(1, 1),
        ]
    }

    #[test]
    fn each_transition_is_recorded_once_with_its_weights_trigger_and_the_next_id() {
        let spec = spec(Strategy::Ordered, &[("web-secondary", None)]);
        let first = decide(&spec, &readiness(true), None, at(0)).status;
        assert!(first.history.is_empty(), "a first decision moves nothing");
        let over = decide(&spec, &readiness(false), Some(&first), at(1)).status;
        let [entry] = &over.history[..] else {
            panic!("one entry: {:?}", over.history)
        };
        assert_eq!(entry.id, 1);
        assert_eq!(entry.transition, "FailedOver");
        assert_eq!(entry.time, Timestamp(at(1)));
        assert_eq!(entry.from, "web-primary=1,web-secondary=0");
        assert_eq!(entry.to, "web-primary=0,web-secondary=1");
        assert_eq!(entry.trigger, "readiness of web-primary (not ready)");
        assert_eq!(
            entry.reason,
            "primary web-primary is not ready; traffic moved to web-secondary"
        );
        // Built again from the same status (a write retried, a new leader): the same id, once.
        let again = decide(&spec, &readiness(false), Some(&first), at(2)).status;
        assert_eq!(again.history.iter().map(|e| e.id).collect::<Vec<_>>(), [1]);
        // Nothing moved: nothing recorded.
        let still = decide(&spec, &readiness(false), Some(&over), at(3)).status;
        assert_eq!(still.history, over.history);
        let back = decide(&spec, &readiness(true), Some(&still), at(4)).status;
        let ids: Vec<u64> = back.history.iter().map(|e| e.id).collect();
        assert_eq!(ids, [1, 2]);
        assert_eq!(back.history[1].transition, "FailedBack");
        assert_eq!(back.history[1].trigger, "readiness of web-primary (ready)");
        // No sink named: nothing waits.
        assert_eq!(back.notified_through, Some(2));
    }

    #[test]
    fn the_history_keeps_the_newest_entries_up_to_its_limit_and_sinks_wait_for_new_ones() {
        let mut spec = spec(Strategy::Ordered, &[("web-secondary", None)]);
        spec.notifications = Some(NotificationsSpec {
            history: Some(1),
            webhooks: vec![WebhookSink {
                url: "http://hooks.example/in".into(),
                secret_ref: SecretKeyRef {
                    name: "hook".into(),
                    key: "key".into(),
                },
            }],
            ..NotificationsSpec::default()
        });
        let first = decide(&spec, &readiness(true), None, at(0)).status;
        let over = decide(&spec, &readiness(false), Some(&first), at(1)).status;
        let back = decide(&spec, &readiness(true), Some(&over), at(2)).status;
        assert_eq!(back.history.len(), 1);
        assert_eq!(back.history[0].id, 2);
        // A sink is named and has acknowledged nothing: both entries wait.
        assert_eq!(back.notified_through, None);
    }

    #[test]
    fn an_entry_stays_under_a_kilobyte_whatever_the_spec() {
        let names: Vec<String> = (0..32)
            .map(|i| format!("s{i:02}{}", "s".repeat(60)))
            .collect();
        let secondaries: Vec<(&str, Option<i32>)> =
            names.iter().map(|n| (n.as_str(), None)).collect();
        let mut spec = spec(Strategy::Ordered, &secondaries);
        spec.primary = "p".repeat(63);
        let mut observations = vec![BackendObservation::counted(1, 1); 33];
        let first = decide(&spec, &observations, None, at(0)).status;
        observations[0] = BackendObservation::counted(0, 1);
        let over = decide(&spec, &observations, Some(&first), at(1)).status;
        let entry = serde_json::to_string(&over.history[0]).expect("JSON");
        assert!(entry.len() < 1024, "{} bytes: {entry}", entry.len());
    }
}
