//! The write stage of the pipeline: writes what the status step built (only when it differs from what the
//! policy has; in the background, [`status`]), then tells the world: an Event per transition or
//! conflict, a Warning Event when a failure starts, and the per-policy metrics.

pub mod statuses;

use kube::runtime::events::{Event, EventType};
use tracing::info;

use crate::{
    runtime::{policy_metrics::PolicyTable, writer::Writer},
    sources::local::policies::PolicyEntry,
};
use failover_core::{
    api::{
        Condition, FailoverPolicyStatus, Phase,
        conditions::{
            ATTACHED, DRILL, HEALTH_QUERY_FAILED, READY, SCALED_UP, attached, drill, ready, scaling,
        },
    },
    applied::Applied,
    decide::plan::{Announcement, Transition},
    last_status::LastStatus,
    observation::PolicyKey,
    route::RouteTarget,
    status::{Decided, Outcome},
};

/// What a reconcile wrote, and the status it wrote over.
pub struct Written<'a> {
    /// The status built.
    pub status: &'a FailoverPolicyStatus,
    /// The status as last written.
    pub previous: Option<&'a LastStatus>,
    /// Whether the status was new (queued for writing).
    pub wrote: bool,
}

/// Events and metrics (the per-policy series, `metrics`) for what a reconcile did.
pub fn announce(
    writer: &Writer,
    metrics: &PolicyTable,
    policy: &PolicyEntry,
    target: &RouteTarget,
    outcome: &Outcome,
    written: &Written,
) {
    let (status, wrote) = (written.status, written.wrote);
    // A suspended policy publishes no Event.
    let suspended = matches!(outcome, Outcome::Decided(d) if d.policy.suspend);
    if wrote && !suspended {
        warn_failures(writer, policy, status, written.previous);
    }
    let Outcome::Decided(decided) = outcome else {
        return;
    };
    match &decided.applied {
        Applied::Conflict if wrote => {
            let kind = target.kind().as_str();
            publish(
                writer,
                policy,
                EventType::Warning,
                target.kind().conflict_reason(),
                format!("{kind} {} is not owned by this policy", target.name),
            );
        }
        Applied::Unchanged | Applied::Written | Applied::Suspended => {
            if let (Some(announcement), true) = (&decided.plan.transition, wrote) {
                record_transition(writer, metrics, policy, announcement);
            }
            if wrote && !suspended {
                announce_drill(writer, policy, status, written.previous);
            }
            announce_scaling(writer, policy, &decided.scaled);
            record_state(metrics, &policy.key, decided, status);
        }
        Applied::Yielded { claim, holder } if wrote => publish(
            writer,
            policy,
            EventType::Warning,
            failover_core::api::conditions::ready::APEX_CONFLICT,
            format!(
                "{claim} is routed by {}, which claimed it first; this policy writes no route",
                failover_core::route::claim::holder_seen_from(holder, &policy.key.namespace)
            ),
        ),
        Applied::Conflict
        | Applied::Failed(_)
        | Applied::ApiMissing(_)
        | Applied::RouteRefUnfit(_)
        | Applied::Yielded { .. } => {}
    }
}

/// The per-policy metrics of a decision in place: readiness, phase, last move, drill.
fn record_state(
    policies: &PolicyTable,
    key: &PolicyKey,
    decided: &Decided,
    status: &FailoverPolicyStatus,
) {
    let ready = status.backends.iter().filter(|b| b.ready).count();
    policies.set_state(key, ready, status.phase.unwrap_or(Phase::Primary));
    if let Some(last) = status.last_failover_time.max(status.last_failback_time) {
        policies.set_last_transition(key, last.0.timestamp_millis() as f64 / 1000.0);
    }
    let drill_end = drill_running(status)
        .then_some(decided.policy.drill)
        .flatten()
        .map(|d| d.until.timestamp_millis() as f64 / 1000.0);
    policies.set_drill_end(key, drill_end);
    let load = decided.plan.load.as_ref().map(|l| {
        let unserved = f64::from(l.unserved_basis_points) / 10_000.0;
        (l.demand as f64, unserved)
    });
    policies.set_load(key, load);
}

/// A Warning Event for each failure the status says and the previous status did not (the same
/// condition with the same status and reason): raised once as the failure starts, not at every
/// reconcile while it lasts.
fn warn_failures(
    writer: &Writer,
    policy: &PolicyEntry,
    status: &FailoverPolicyStatus,
    previous: Option<&LastStatus>,
) {
    for c in status.conditions.iter().filter(|c| is_failure(c)) {
        let known = previous.is_some_and(|p| {
            p.has_reason(&c.type_, &c.reason)
                && p.condition(&c.type_)
                    .is_some_and(|l| l.status == (c.status == "True"))
        });
        if !known {
            publish(
                writer,
                policy,
                EventType::Warning,
                &c.reason,
                c.message.clone(),
            );
        }
    }
}

/// A Normal Event for each workload raised or restored, and (a deleted policy's last restores)
/// a Warning for a workload that could not be restored.
pub fn announce_scaling(
    writer: &Writer,
    policy: &PolicyEntry,
    scaled: &failover_core::applied::Scaled,
) {
    for change in &scaled.changes {
        let reason = if change.raised {
            scaling::SCALED_UP
        } else {
            scaling::SCALE_RESTORED
        };
        publish(
            writer,
            policy,
            EventType::Normal,
            reason,
            change.note.clone(),
        );
    }
    if let Some(problem) = &scaled.problem
        && !scaled.workloads.is_empty()
        && policy.identity.lifecycle.deleting()
    {
        let note = format!("not restored before the policy was deleted: {problem}");
        publish(
            writer,
            policy,
            EventType::Warning,
            scaling::SCALING_FAILED,
            note,
        );
    }
}

/// Whether the status says a drill sends the traffic.
fn drill_running(status: &FailoverPolicyStatus) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == DRILL && c.status == "True")
}

/// `DrillStarted` when a drill starts moving traffic, `DrillEnded` when it stops (its end time,
/// its backend no longer ready, a pin, or the drill removed from the spec).
fn announce_drill(
    writer: &Writer,
    policy: &PolicyEntry,
    status: &FailoverPolicyStatus,
    previous: Option<&LastStatus>,
) {
    let was = previous.is_some_and(|p| p.condition(DRILL).is_some_and(|c| c.status));
    let condition = status.conditions.iter().find(|c| c.type_ == DRILL);
    let note = condition.map(|c| c.message.clone());
    match (was, drill_running(status)) {
        (false, true) => publish(
            writer,
            policy,
            EventType::Normal,
            drill::STARTED,
            note.unwrap_or_default(),
        ),
        (true, false) => publish(
            writer,
            policy,
            EventType::Normal,
            drill::ENDED,
            note.unwrap_or_else(|| {
                "the drill was removed from the spec; traffic follows the ordinary rules".into()
            }),
        ),
        _ => {}
    }
}

/// Whether a condition says something is wrong that no transition or conflict Event announces.
/// `ClustersReachable=False` is not one: after every restart or change of leader each remote
/// cluster is read anew and reads as not answering until it does.
fn is_failure(c: &Condition) -> bool {
    match (c.type_.as_str(), c.status.as_str()) {
        (READY, "False") => ready::is_failure(&c.reason),
        (HEALTH_QUERY_FAILED, "True") => true,
        // No answer yet is how every route starts; a refusal is a failure.
        (ATTACHED, "False") => c.reason != attached::NO_ANSWER,
        (SCALED_UP, _) => c.reason == scaling::SCALING_FAILED,
        _ => false,
    }
}

fn record_transition(
    writer: &Writer,
    metrics: &PolicyTable,
    policy: &PolicyEntry,
    announcement: &Announcement,
) {
    let transition = announcement.transition;
    match transition {
        Transition::FailedOver => metrics.failed_over(&policy.key),
        Transition::FailedBack => metrics.failed_back(&policy.key),
        Transition::NoReadyBackend
        | Transition::Recovered
        | Transition::PinnedBackendNotReady
        | Transition::FailbackStep => {}
    };
    let event_type = if transition.is_warning() {
        EventType::Warning
    } else {
        EventType::Normal
    };
    info!(transition = transition.reason(), note = %announcement.message, "traffic moved");
    publish(
        writer,
        policy,
        event_type,
        transition.reason(),
        announcement.message.clone(),
    );
}

/// Sends an Event in the background, through the writer: Events are best effort, never hold up
/// the next reconcile of this policy, and a lost Event never blocks routing.
fn publish(writer: &Writer, policy: &PolicyEntry, type_: EventType, reason: &str, note: String) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(failover_core::message::line(&note)),
        action: "Route".to_string(),
        secondary: None,
    };
    writer.publish(event, policy.object_reference());
}
