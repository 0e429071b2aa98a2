//! What becomes of the workloads a policy raised (`status.scaled`) once nothing asks for them:
//! the failback is over, the secondary's `scaleTarget` no longer names them, or the policy is
//! deleted. Whatever the controller raised, it restores, unless someone changed it since; and
//! the policy keeps its finalizer exactly while it holds such a record or is about to raise.

use crate::api::{ScaleTarget, ScaledWorkload};

/// The value to write back to a raised workload that now has `replicas`: what it had before
/// the controller raised it, unless the record is released or the workload was changed since
/// (then nothing: the value is someone else's).
pub fn restored(record: &ScaledWorkload, replicas: i32) -> Option<i32> {
    (!record.released && replicas == record.replicas).then_some(record.original_replicas)
}

/// The records of workloads that no secondary's `scaleTarget` names any more (removed, or
/// changed to another workload).
pub fn unnamed<'a>(
    held: &'a [ScaledWorkload],
    targets: &'a [Option<ScaleTarget>],
) -> impl Iterator<Item = &'a ScaledWorkload> {
    held.iter().filter(move |r| {
        !targets
            .iter()
            .flatten()
            .any(|t| t.kind == r.kind && t.name == r.name)
    })
}

/// Whether the policy should hold the finalizer that restores its workloads: while some
/// workload is recorded as raised, or a raise is asked for (added before the first raise, so
/// that no deletion can come between a raise and its record).
pub fn finalizer_wanted(raising: bool, records: &[ScaledWorkload]) -> bool {
    raising || !records.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ScaleKind;

    fn record(name: &str, released: bool) -> ScaledWorkload {
        ScaledWorkload {
            kind: ScaleKind::Deployment,
            name: name.into(),
            original_replicas: 1,
            replicas: 3,
            released,
        }
    }

    fn target(kind: ScaleKind, name: &str) -> Option<ScaleTarget> {
        Some(ScaleTarget {
            kind,
            name: name.into(),
        })
    }

    #[test]
    fn a_workload_as_the_controller_left_it_is_restored_and_any_other_is_left_alone() {
        assert_eq!(restored(&record("web-east", false), 3), Some(1));
        assert_eq!(
            restored(&record("web-east", false), 5),
            None,
            "changed since"
        );
        assert_eq!(restored(&record("web-east", true), 3), None, "released");
    }

    #[test]
    fn records_of_workloads_no_scale_target_names_are_the_ones_left_over() {
        let held = [record("web-east", false), record("web-west", false)];
        let names = |targets: &[Option<ScaleTarget>]| {
            unnamed(&held, targets)
                .map(|r| r.name.clone())
                .collect::<Vec<_>>()
        };
        let east = target(ScaleKind::Deployment, "web-east");
        let west = target(ScaleKind::Deployment, "web-west");
        assert!(names(&[None, east.clone(), west]).is_empty());
        assert_eq!(names(&[None, east, None]), ["web-west"], "removed");
        let east_hpa = target(ScaleKind::HorizontalPodAutoscaler, "web-east");
        assert_eq!(
            names(&[None, east_hpa, target(ScaleKind::Deployment, "web-other")]),
            ["web-east", "web-west"],
            "changed to another workload"
        );
        assert_eq!(
            names(&[]),
            ["web-east", "web-west"],
            "capacity.scale removed"
        );
    }

    #[test]
    fn the_finalizer_is_held_from_the_first_raise_until_the_last_record_goes() {
        assert!(!finalizer_wanted(false, &[]));
        assert!(finalizer_wanted(true, &[]));
        assert!(finalizer_wanted(false, &[record("web-east", true)]));
    }
}
