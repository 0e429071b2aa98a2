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

use crate::pipeline::finalize::Finalizer;
use crate::sources::scope::Scaling;
use crate::{
    pipeline::{finalize, gather, scale, write},
    sources::{Context, local::policies::PolicyEntry},
};
use failover_core::{
    api::FailoverPolicy,
    applied::{ScaleProblem, Scaled},
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

/// Restores what the deleted policy raised and removes its finalizer.
pub async fn finalize(policy: &PolicyEntry, ctx: &Context) -> Finalized {
    let writer = &ctx.writer;
    let previous = gather::previous_status(policy, writer);
    let records = previous.map(|l| l.scaled.to_vec()).unwrap_or_default();
    let scaled = if ctx.scope.scaling == Scaling::Allowed {
        restore_all(ctx, policy, records).await
    } else {
        Scaled {
            problem: (!records.is_empty()).then(|| {
                ScaleProblem::failed(
                    "the cluster admin does not let the controller scale workloads (--allow-scaling)",
                )
            }),
            workloads: records,
            changes: Vec::new(),
        }
    };
    let retry = ctx.scope.scaling == Scaling::Allowed
        && !scaled.workloads.is_empty()
        && !overdue(policy, ctx).await;
    let removed = if retry {
        Ok(())
    } else {
        finalize::set(writer, policy, Finalizer::Release).await
    };
    match (retry, removed) {
        (false, Ok(())) => {
            info!(left_raised = scaled.workloads.len(), "finalizer removed");
            write::announce_scaling(writer, policy, &scaled);
            Finalized::Done
        }
        (_, removed) => {
            let problem = removed
                .err()
                .or(scaled.problem.as_ref().map(ToString::to_string))
                .unwrap_or_default();
            warn!(
                problem,
                "the deleted policy's workloads or finalizer: retrying"
            );
            let changes = Scaled {
                problem: None,
                ..scaled
            };
            write::announce_scaling(writer, policy, &changes);
            Finalized::Retry
        }
    }
}

/// Whether the policy's deletion was asked [`GIVE_UP_AFTER`] ago or more (read from the API
/// server: only a policy whose restore failed asks); a policy that cannot be read is not.
async fn overdue(policy: &PolicyEntry, ctx: &Context) -> bool {
    let policies = ctx
        .writer
        .namespaced::<FailoverPolicy>(&policy.key.namespace, "finalizer");
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
async fn restore_all(
    ctx: &Context,
    policy: &PolicyEntry,
    records: Vec<failover_core::api::ScaledWorkload>,
) -> Scaled {
    let mut scaled = Scaled::default();
    let workloads = scale::Workloads {
        writer: &ctx.writer,
        namespace: &policy.key.namespace,
        policy: &policy.key.name,
    };
    for record in records {
        let why = "as the policy is deleted";
        match workloads.restore_one(&record, why).await {
            Ok(change) => scaled.changes.extend(change),
            Err(problem) => {
                scaled.workloads.push(record);
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
