//! The policy's finalizer ([`SCALE_FINALIZER`]): added before the first workload is raised,
//! removed once every workload recorded in `status.scaled` is restored or let go of, so that
//! deleting a policy never leaves a workload raised.
//!
//! Only policies that scale something carry it: a policy without `capacity.scale`, or one that
//! never raised a workload, is never written to here. Each change reads the policy and writes
//! its whole list of finalizers back with its resource version (a merge patch under the field
//! manager [`FIELD_MANAGER`]): a concurrent change to the list is a conflict, retried, never
//! overwritten.

use kube::ResourceExt;
use serde_json::json;

use crate::{
    runtime::{api_client::describe, writer::Writer},
    sources::local::policies::PolicyEntry,
};
use failover_core::api::{FailoverPolicy, SCALE_FINALIZER};

/// The field manager of the controller's changes to a policy's finalizers.
pub const FIELD_MANAGER: &str = "failover-controller-finalizer";

/// What the policy's finalizer should be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finalizer {
    /// In place: the policy holds a raised workload, or is about to.
    Hold,
    /// Gone: nothing is left to restore.
    Release,
}

/// Adds ([`Finalizer::Hold`]) or removes the finalizer on the policy, unless it already is as
/// asked; a policy gone, or replaced by another object of its name, is left alone. Adding is
/// refused once the policy is being deleted (the API server allows no new finalizer then).
///
/// A conflict (the policy changed between the read and the write: the status writer's own
/// writes move its version at any time) is read again and retried, at most
/// [`CONFLICT_RETRIES`] times: a raise waits for this write, and a reconcile that gives up on
/// it looks again only after [`failover_core::reconcile::SCALE_RECHECK`].
pub async fn set(writer: &Writer, policy: &PolicyEntry, want: Finalizer) -> Result<(), String> {
    let failed = |e: kube::Error| format!("the policy's finalizer: {}", describe(&e));
    let policies = writer
        .namespaced::<FailoverPolicy>(&policy.key.namespace, "finalizer")
        .managed_by(FIELD_MANAGER);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let Some(current) = policies.get_opt(&policy.key.name).await.map_err(failed)? else {
            return Ok(());
        };
        if current.uid().as_deref() != Some(&*policy.identity.uid) {
            return Ok(());
        }
        let Some(finalizers) = changed(current.finalizers(), want) else {
            return Ok(());
        };
        if want == Finalizer::Hold && current.metadata.deletion_timestamp.is_some() {
            return Err("the policy is being deleted".into());
        }
        let patch = json!({
            "metadata": {
                "resourceVersion": current.resource_version(),
                "finalizers": finalizers,
            }
        });
        match policies.merge(&policy.key.name, &patch).await {
            Err(not_written) => return Err(not_written.to_string()),
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(kube::Error::Api(e))) if e.code == 409 && attempt < CONFLICT_RETRIES => {}
            Ok(Err(e)) => return Err(failed(e)),
        }
    }
}

/// The most times one change of the finalizers is tried when the policy keeps changing under it.
const CONFLICT_RETRIES: usize = 3;

/// The finalizers with ours added or removed as `want` says; `None` when they already are.
fn changed(finalizers: &[String], want: Finalizer) -> Option<Vec<String>> {
    let hold = want == Finalizer::Hold;
    let present = finalizers.iter().any(|f| f == SCALE_FINALIZER);
    if present == hold {
        return None;
    }
    let mut list: Vec<String> = finalizers
        .iter()
        .filter(|f| *f != SCALE_FINALIZER)
        .cloned()
        .collect();
    if hold {
        list.push(SCALE_FINALIZER.into());
    }
    Some(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_is_added_or_removed_and_every_other_finalizer_kept() {
        let other = || "example.com/keep".to_string();
        assert_eq!(
            changed(&[other()], Finalizer::Hold),
            Some(vec![other(), SCALE_FINALIZER.into()])
        );
        assert_eq!(
            changed(&[other(), SCALE_FINALIZER.into()], Finalizer::Hold),
            None
        );
        assert_eq!(
            changed(&[SCALE_FINALIZER.into(), other()], Finalizer::Release),
            Some(vec![other()])
        );
        assert_eq!(changed(&[other()], Finalizer::Release), None);
        assert_eq!(
            changed(&[], Finalizer::Hold),
            Some(vec![SCALE_FINALIZER.into()])
        );
    }
}
