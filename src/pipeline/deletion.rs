//! A deleted policy that holds the finalizer ([`failover_core::api::SCALE_FINALIZER`]): every workload
//! recorded in its `status.scaled` is restored (unless someone changed it since, or it no
//! longer exists), then the finalizer is removed and the policy goes.
//!
//! A deletion is never held for good: without `--allow-scaling` nothing can be restored and
//! the finalizer is removed at once; a restore that keeps failing (the workload's API refuses,
//! RBAC was narrowed) is retried with backoff until [`GIVE_UP_AFTER`] from the deletion, then
//! the finalizer is removed with a Warning Event naming what stays raised. A namespace being
//! deleted deletes the workloads too: a workload gone has nothing to restore.

use std::time::Duration;

use chrono::Utc;
use tracing::{info, warn};

use crate::{
    pipeline::{
        finalize::{self, Finalizer},
        scale, write,
    },
    runtime::writer::Writer,
    sources::{local::policies::PolicyEntry, scope::Scaling},
};
use failover_core::{
    api::{FailoverPolicy, ScaledWorkload},
    applied::{ScaleProblem, Scaled},
    reconcile::{self as driver, Cleaned, Restored, World},
};

/// How long after its deletion a policy's restores are retried before the finalizer is
/// removed anyway.
pub const GIVE_UP_AFTER: Duration = Duration::from_secs(300);

/// What became of a deleted policy's finalizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finalized {
    /// Removed: the policy goes.
    Done,
    /// Kept: a restore failed and the deletion is younger than [`GIVE_UP_AFTER`], or the
    /// finalizer could not be removed; try again with backoff.
    Retry,
}

/// The core driver's cleanup state, and what it did told: the log and an Event per workload
/// restored.
pub async fn finalize<W: World>(policy: &PolicyEntry, writer: &Writer, world: &W) -> Finalized {
    match driver::cleanup(world).await {
        Cleaned::Done(scaled) => {
            info!(left_raised = scaled.workloads.len(), "finalizer removed");
            write::announce_scaling(writer, policy, &scaled);
            Finalized::Done
        }
        Cleaned::Retry { scaled, problem } => {
            warn!(
                problem,
                "the deleted policy's workloads or finalizer: retrying"
            );
            write::announce_scaling(writer, policy, &scaled);
            Finalized::Retry
        }
    }
}

/// Restores the recorded workloads when the cluster admin lets the controller scale; else keeps
/// every record, saying why.
pub async fn restore(
    writer: &Writer,
    scaling: Scaling,
    policy: &PolicyEntry,
    records: &[ScaledWorkload],
) -> Restored {
    if scaling == Scaling::Forbidden {
        return Restored::Forbidden(Scaled {
            problem: (!records.is_empty()).then(|| {
                ScaleProblem::failed(
                    "the cluster admin does not let the controller scale workloads (--allow-scaling)",
                )
            }),
            workloads: records.to_vec(),
            changes: Vec::new(),
        });
    }
    Restored::Tried(restore_all(writer, policy, records).await)
}

/// Removes the deleted policy's finalizer.
pub async fn release(writer: &Writer, policy: &PolicyEntry) -> Result<(), String> {
    finalize::set(writer, policy, Finalizer::Release).await
}

/// Whether the policy's deletion was asked [`GIVE_UP_AFTER`] ago or more (read from the API
/// server: only a policy whose restore failed asks); a policy that cannot be read is not.
pub async fn overdue(writer: &Writer, policy: &PolicyEntry) -> bool {
    let policies = writer.namespaced::<FailoverPolicy>(&policy.key.namespace, "finalizer");
    let Ok(Some(current)) = policies.get_opt(&policy.key.name).await else {
        return false;
    };
    current
        .metadata
        .deletion_timestamp
        .is_some_and(|t| past_giving_up(t.0.as_second(), Utc::now().timestamp()))
}

/// Whether a deletion asked at `deleted` (seconds) is [`GIVE_UP_AFTER`] old or more at `now`.
fn past_giving_up(deleted: i64, now: i64) -> bool {
    now.saturating_sub(deleted) >= GIVE_UP_AFTER.as_secs() as i64
}

/// Restores every recorded workload; what could not be restored stays in `workloads`, with
/// the first problem.
async fn restore_all(writer: &Writer, policy: &PolicyEntry, records: &[ScaledWorkload]) -> Scaled {
    let mut scaled = Scaled::default();
    let workloads = scale::Workloads {
        writer,
        namespace: &policy.key.namespace,
        policy: &policy.key.name,
    };
    for record in records {
        let why = "as the policy is deleted";
        match workloads.restore_one(record, why).await {
            Ok(change) => scaled.changes.extend(change),
            Err(problem) => {
                scaled.workloads.push(record.clone());
                scaled.problem.get_or_insert(problem.problem());
            }
        }
    }
    scaled
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restores_are_retried_until_the_deletion_is_old_enough_to_give_up() {
        let bound = GIVE_UP_AFTER.as_secs() as i64;
        assert!(!past_giving_up(1_000, 1_000));
        assert!(!past_giving_up(1_000, 1_000 + bound - 1));
        assert!(past_giving_up(1_000, 1_000 + bound));
        assert!(!past_giving_up(1_000, 900), "a clock behind the server's");
    }
}
