//! What becomes of the workloads a policy scales (`spec.capacity.scale`): each one a
//! `scaleTarget` names is raised as the decision asks ([`step`]), and what the controller raised
//! (`status.scaled`) is restored once nothing asks for it: the failback is over, the secondary's
//! `scaleTarget` no longer names it, or the policy is deleted. A value someone changed after the
//! controller did is theirs: the record is released, nothing is raised again until the failback,
//! and nothing is restored. The policy keeps its finalizer exactly while it holds a record or is
//! about to raise.

use crate::{
    api::{ScaleTarget, ScaledWorkload},
    decide::plan::ScaleWant,
};

/// A workload's replicas now, and the most it may have (an HPA's `maxReplicas`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replicas {
    /// Its replicas (an HPA's `minReplicas`) now.
    pub now: i32,
    /// The most it may have, if bounded.
    pub most: Option<i32>,
}

/// What becomes of one workload a `scaleTarget` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkloadStep {
    /// Nothing to write; this record (if any) is kept.
    Keep(Option<ScaledWorkload>),
    /// Raise it to the record's `replicas`, and keep the record.
    Raise(ScaledWorkload),
    /// Write back `to`, what it had before it was raised; no record is kept.
    Restore {
        /// The value to write back.
        to: i32,
        /// The record it is restored from.
        record: ScaledWorkload,
    },
}

/// What becomes of the workload `target` names, which has `current` replicas: the decision
/// wants it at `want` replicas (none: the failover is over), and `record` is what the controller
/// last raised it to, if anything.
pub fn step(
    target: &ScaleTarget,
    want: Option<i32>,
    record: Option<ScaledWorkload>,
    current: Replicas,
) -> WorkloadStep {
    match (want, record) {
        // Someone changed it since the controller did: theirs stays, until the failback.
        (Some(_), Some(r)) if r.released || current.now != r.replicas => {
            WorkloadStep::Keep(Some(ScaledWorkload {
                released: true,
                ..r
            }))
        }
        (Some(want), record) => {
            let original = record.as_ref().map_or(current.now, |r| r.original_replicas);
            let replicas = want.max(original).min(current.most.unwrap_or(i32::MAX));
            if replicas == current.now {
                return WorkloadStep::Keep(record);
            }
            WorkloadStep::Raise(ScaledWorkload {
                kind: target.kind,
                name: target.name.clone(),
                original_replicas: original,
                replicas,
                released: false,
            })
        }
        // The failback is over: restore what it had, unless someone changed it since.
        (None, Some(r)) => match restored(&r, current.now) {
            Some(to) => WorkloadStep::Restore { to, record: r },
            None => WorkloadStep::Keep(None),
        },
        (None, None) => WorkloadStep::Keep(None),
    }
}

/// The value to write back to a raised workload that now has `replicas`: what it had before
/// the controller raised it, unless the record is released or the workload was changed since
/// (then nothing: the value is someone else's).
pub fn restored(record: &ScaledWorkload, replicas: i32) -> Option<i32> {
    (!record.released && replicas == record.replicas).then_some(record.original_replicas)
}

/// The records of workloads that no secondary's `scaleTarget` names any more (removed, or
/// changed to another workload).
pub fn unnamed<'a, T>(
    raised: &'a [ScaledWorkload],
    targets: T,
) -> impl Iterator<Item = &'a ScaledWorkload> + use<'a, T>
where
    T: Iterator<Item = &'a ScaleTarget> + Clone,
{
    raised.iter().filter(move |r| {
        !targets
            .clone()
            .any(|t| t.kind == r.kind && t.name == r.name)
    })
}

/// Whether the policy should hold the finalizer that restores its workloads: while some
/// workload is recorded as raised, or a raise is asked for (added before the first raise, so
/// that no deletion can come between a raise and its record).
pub fn finalizer_wanted(wants: &[ScaleWant], records: &[ScaledWorkload]) -> bool {
    !wants.is_empty() || !records.is_empty()
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
        let raised = [record("web-east", false), record("web-west", false)];
        let names = |targets: &[Option<ScaleTarget>]| {
            unnamed(&raised, targets.iter().flatten())
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
    fn a_workload_is_raised_to_the_want_within_its_bound_and_never_below_what_it_had() {
        let east = ScaleTarget {
            kind: ScaleKind::Deployment,
            name: "web-east".into(),
        };
        let at = |now, most| Replicas { now, most };
        let raised = |original, replicas| {
            WorkloadStep::Raise(ScaledWorkload {
                original_replicas: original,
                replicas,
                ..record("web-east", false)
            })
        };
        assert_eq!(step(&east, Some(3), None, at(1, None)), raised(1, 3));
        assert_eq!(
            step(&east, Some(9), None, at(1, Some(4))),
            raised(1, 4),
            "bounded"
        );
        assert_eq!(
            step(&east, Some(1), None, at(2, None)),
            WorkloadStep::Keep(None),
            "has more"
        );
        let record = record("web-east", false);
        assert_eq!(
            step(&east, Some(5), Some(record.clone()), at(3, None)),
            raised(1, 5),
            "raised further"
        );
        assert_eq!(
            step(&east, Some(3), Some(record.clone()), at(3, None)),
            WorkloadStep::Keep(Some(record.clone()))
        );
    }

    #[test]
    fn a_workload_changed_since_is_released_and_never_restored() {
        let east = ScaleTarget {
            kind: ScaleKind::Deployment,
            name: "web-east".into(),
        };
        let now = |n| Replicas { now: n, most: None };
        let raised = record("web-east", false);
        assert_eq!(
            step(&east, Some(3), Some(raised.clone()), now(7)),
            WorkloadStep::Keep(Some(record("web-east", true)))
        );
        assert_eq!(
            step(&east, None, Some(raised.clone()), now(3)),
            WorkloadStep::Restore {
                to: 1,
                record: raised.clone()
            }
        );
        assert_eq!(
            step(&east, None, Some(raised), now(7)),
            WorkloadStep::Keep(None)
        );
        assert_eq!(step(&east, None, None, now(7)), WorkloadStep::Keep(None));
    }

    #[test]
    fn the_finalizer_is_held_from_the_first_raise_until_the_last_record_goes() {
        assert!(!finalizer_wanted(&[], &[]));
        assert!(finalizer_wanted(
            &[ScaleWant {
                backend: 1,
                replicas: 2
            }],
            &[]
        ));
        assert!(finalizer_wanted(&[], &[record("web-east", true)]));
    }
}
