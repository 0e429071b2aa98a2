//! The apply stage of the pipeline, for workloads, with `spec.capacity.scale`: raises each secondary's workload (an
//! HorizontalPodAutoscaler's `minReplicas`, or a Deployment's replicas through its scale
//! subresource) to what the decision asks for, and restores what it raised once the decision
//! asks for nothing (the failback is over) or no `scaleTarget` names it any more (removed or
//! changed). The policy holds its finalizer ([`crate::pipeline::finalize`]) from before the
//! first raise until every record is restored or released, so that its deletion restores them
//! too ([`crate::pipeline::deletion`]).
//!
//! What a workload had is recorded in the status (`status.scaled`), so a restart or a new leader
//! restores it too. What to write is the core's decision ([`restore::step`]); this step reads
//! each workload and writes what it says, each write a merge patch under the field manager
//! [`FIELD_MANAGER`], so `managedFields` shows who set the value, and only while the cluster
//! admin let the controller scale (`--allow-scaling`, the chart's `scaling.enabled`) and the
//! workload's owner consents: its annotation `failover.dev/policies` names the policy
//! ([`failover_core::consent`]), read on the same GET that reads the replicas the write starts from.
//! Without consent nothing is raised, and a record raised before is released, not restored.

use k8s_openapi::{
    NamespaceResourceScope,
    api::{apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler},
};
use kube::Resource;
use serde_json::json;
use tracing::warn;

use crate::pipeline::finalize::Finalizer;
use crate::sources::scope::Scaling;
use crate::{
    pipeline::finalize,
    runtime::{
        api_client::describe,
        writer::{NotLeader, Objects, Writer},
    },
    sources::local::policies::PolicyEntry,
};
use failover_core::{
    api::{ScaleKind, ScaleTarget, ScaledWorkload},
    applied::{ScaleChange, ScaleProblem, Scaled},
    consent,
    decide::{
        capacity::ScaleWant,
        restore::{self, Replicas, WorkloadStep},
    },
    policy::ValidPolicy,
};

/// The field manager of the controller's changes to workloads.
pub const FIELD_MANAGER: &str = "failover-controller-scale";

/// Why a workload could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ScaleError {
    /// This replica lost leadership before writing.
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
    /// The workload does not consent to the policy's changes ([`failover_core::consent`]).
    #[error("{0} does not consent")]
    NotConsented(String),
    /// The API server refused or did not answer.
    #[error("{what}: {message}")]
    Api {
        /// The workload and the field, in words.
        what: String,
        /// The API server's message, in one line.
        message: String,
    },
}

impl ScaleError {
    fn api(target: &ScaleTarget, error: &kube::Error) -> Self {
        ScaleError::Api {
            what: describe_target(target),
            message: describe(error),
        }
    }

    /// What the status says of it.
    pub fn problem(&self) -> ScaleProblem {
        match self {
            ScaleError::NotConsented(workload) => ScaleProblem::not_consented(workload),
            other => ScaleProblem::failed(other.to_string()),
        }
    }
}

/// Raises and restores the policy's workloads as `wants` says, from what `raised` recorded;
/// changes nothing while the policy is suspended. A record of a workload no `scaleTarget` names
/// any more is restored too, and the policy holds its finalizer while it holds a record.
pub async fn scale(
    writer: &Writer,
    scaling: Scaling,
    policy: &PolicyEntry,
    valid: &ValidPolicy,
    wants: &[ScaleWant],
    raised: &[ScaledWorkload],
) -> Scaled {
    let asks_scaling = valid.capacity.as_ref().is_some_and(|c| c.scale.is_some());
    let targets = valid.scale_targets();
    if !asks_scaling && raised.is_empty() {
        return Scaled::default();
    }
    if valid.suspend || scaling == Scaling::Forbidden {
        return unchanged(valid, wants, raised);
    }
    let mut scaled = Scaled::default();
    // No raise before the finalizer is in place: a deletion in between would leave it raised.
    let mut may_raise = MayRaise::Yes;
    if restore::finalizer_wanted(wants, raised)
        && !policy.identity.lifecycle.holds_finalizer()
        && let Err(problem) = finalize::set(writer, policy, Finalizer::Hold).await
    {
        scaled.problem = Some(ScaleProblem::failed(problem));
        may_raise = MayRaise::NoFinalizer;
    }
    let workloads = Workloads {
        writer,
        namespace: &valid.namespace,
        policy: &valid.name,
    };
    restore_unnamed(&workloads, targets.clone(), raised, &mut scaled).await;
    let raise = Raise {
        workloads: &workloads,
        wants,
        raised,
        may_raise,
    };
    raise.named(targets, &mut scaled).await;
    let done = !restore::finalizer_wanted(wants, &scaled.workloads);
    if done && policy.identity.lifecycle.holds_finalizer() {
        // Harmless when it fails: the next reconcile, or the deletion, removes it.
        if let Err(problem) = finalize::set(writer, policy, Finalizer::Release).await {
            warn!(problem, "the policy's finalizer could not be removed");
        }
    }
    scaled
}

/// What a suspended policy, or one the cluster admin does not let scale, keeps: every record as
/// it is, and (when not suspended) why nothing is scaled.
fn unchanged(valid: &ValidPolicy, wants: &[ScaleWant], raised: &[ScaledWorkload]) -> Scaled {
    let mut scaled = Scaled {
        workloads: raised.to_vec(),
        ..Scaled::default()
    };
    let nothing_to_do = wants.is_empty() && raised.is_empty();
    if !valid.suspend && !nothing_to_do {
        scaled.problem = Some(ScaleProblem::failed(
            "the cluster admin has not let the controller scale workloads (--allow-scaling, the chart's scaling.enabled); traffic moves as the ready capacity allows",
        ));
    }
    scaled
}

/// Raising and restoring the workloads the targets name.
struct Raise<'a> {
    workloads: &'a Workloads<'a>,
    wants: &'a [ScaleWant],
    raised: &'a [ScaledWorkload],
    /// Whether the finalizer is in place (nothing is raised without it).
    may_raise: MayRaise,
}

/// Whether a workload may be raised now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MayRaise {
    /// The finalizer is in place, or nothing needs it.
    Yes,
    /// The finalizer could not be added: nothing is raised, only restored.
    NoFinalizer,
}

impl Raise<'_> {
    /// Each target's workload (by backend index) raised as its want says, or restored without
    /// one. A workload that does not consent keeps no record: its value is its owner's.
    async fn named(
        &self,
        targets: impl Iterator<Item = (usize, &ScaleTarget)>,
        scaled: &mut Scaled,
    ) {
        for (backend, target) in targets {
            let want = self
                .wants
                .iter()
                .find(|w| w.backend == backend)
                .map(|w| w.replicas);
            let record = self
                .raised
                .iter()
                .find(|r| r.kind == target.kind && r.name == target.name)
                .cloned();
            if want.is_none() && record.is_none() {
                continue;
            }
            if want.is_some() && self.may_raise == MayRaise::NoFinalizer {
                scaled.workloads.extend(record);
                continue;
            }
            match self.workloads.one(target, want, record.clone()).await {
                Ok((kept, change)) => {
                    scaled.workloads.extend(kept);
                    scaled.changes.extend(change);
                }
                Err(problem) => {
                    if !matches!(problem, ScaleError::NotConsented(_)) {
                        scaled.workloads.extend(record);
                    }
                    scaled.problem.get_or_insert(problem.problem());
                }
            }
        }
    }
}

/// Restores the workloads of `raised` that no target names any more (the `scaleTarget` removed
/// or changed); a record that could not be restored is kept, to be tried again.
async fn restore_unnamed<'a>(
    workloads: &Workloads<'_>,
    targets: impl Iterator<Item = (usize, &'a ScaleTarget)> + Clone,
    raised: &[ScaledWorkload],
    scaled: &mut Scaled,
) {
    for record in restore::unnamed(raised, targets.map(|(_, t)| t)) {
        let why = "as no scaleTarget names it any more";
        match workloads.restore_one(record, why).await {
            Ok(change) => scaled.changes.extend(change),
            Err(problem) => {
                scaled.workloads.push(record.clone());
                scaled.problem.get_or_insert(problem.problem());
            }
        }
    }
}

/// A workload as read before a write: its replicas, and whether its owner consents to the
/// policy's changes.
struct Workload {
    replicas: Replicas,
    consents: bool,
}

/// The workloads of one policy's namespace, read and written on the policy's behalf.
pub struct Workloads<'a> {
    /// The leader-checked writer.
    pub writer: &'a Writer,
    /// The policy's namespace.
    pub namespace: &'a str,
    /// The policy's name, which a workload's consent names.
    pub policy: &'a str,
}

impl Workloads<'_> {
    /// Restores one raised workload to what it had before, `why` (for the Event), unless
    /// someone changed it since or its owner does not consent; a workload that no longer exists
    /// has nothing to restore. The change, if one was made.
    pub async fn restore_one(
        &self,
        record: &ScaledWorkload,
        why: &str,
    ) -> Result<Option<ScaleChange>, ScaleError> {
        let target = ScaleTarget {
            kind: record.kind,
            name: record.name.clone(),
        };
        let current = match self.read(&target).await {
            Ok(current) => current,
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
            Err(e) => return Err(ScaleError::api(&target, &e)),
        };
        if !current.consents {
            return Ok(None);
        }
        match restore::restored(record, current.replicas.now) {
            Some(to) => Ok(Some(self.put_back(record, to, why).await?)),
            None => Ok(None),
        }
    }

    /// Writes back `to`, what the recorded workload had before it was raised; the change, `why`.
    async fn put_back(
        &self,
        record: &ScaledWorkload,
        to: i32,
        why: &str,
    ) -> Result<ScaleChange, ScaleError> {
        let target = ScaleTarget {
            kind: record.kind,
            name: record.name.clone(),
        };
        self.write(&target, to).await?;
        let what = describe_target(&target);
        let note = format!("{what} restored from {} to {to} {why}", record.replicas);
        Ok(ScaleChange {
            raised: false,
            note,
        })
    }

    /// One workload: the record to keep, and what was changed; nothing is written to a
    /// workload that does not consent.
    async fn one(
        &self,
        target: &ScaleTarget,
        want: Option<i32>,
        record: Option<ScaledWorkload>,
    ) -> Result<(Option<ScaledWorkload>, Option<ScaleChange>), ScaleError> {
        let current = self
            .read(target)
            .await
            .map_err(|e| ScaleError::api(target, &e))?;
        if !current.consents {
            return Err(ScaleError::NotConsented(describe_workload(target)));
        }
        match restore::step(target, want, record, current.replicas) {
            WorkloadStep::Keep(kept) => Ok((kept, None)),
            WorkloadStep::Raise(kept) => {
                self.write(target, kept.replicas).await?;
                let note = format!(
                    "{} raised from {} to {} for the failover",
                    describe_target(target),
                    current.replicas.now,
                    kept.replicas
                );
                Ok((Some(kept), Some(ScaleChange { raised: true, note })))
            }
            WorkloadStep::Restore { to, record } => {
                let change = self.put_back(&record, to, "after the failback").await?;
                Ok((None, Some(change)))
            }
        }
    }

    /// The workloads of kind `K`, written under [`FIELD_MANAGER`].
    fn of<K>(&self) -> Objects<'_, K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        self.writer
            .namespaced(self.namespace, "scale")
            .managed_by(FIELD_MANAGER)
    }

    /// What the workload has now, and whether it consents, from one reading.
    async fn read(&self, target: &ScaleTarget) -> Result<Workload, kube::Error> {
        let (replicas, meta) = match target.kind {
            ScaleKind::HorizontalPodAutoscaler => {
                let hpa = self
                    .of::<HorizontalPodAutoscaler>()
                    .get(&target.name)
                    .await?;
                let spec = hpa.spec.unwrap_or_default();
                let replicas = Replicas {
                    now: spec.min_replicas.unwrap_or(1),
                    most: Some(spec.max_replicas),
                };
                (replicas, hpa.metadata)
            }
            ScaleKind::Deployment => {
                let deployment = self.of::<Deployment>().get(&target.name).await?;
                let replicas = Replicas {
                    // The API server defaults an unset count to 1.
                    now: deployment.spec.and_then(|s| s.replicas).unwrap_or(1),
                    most: None,
                };
                (replicas, deployment.metadata)
            }
        };
        Ok(Workload {
            replicas,
            consents: consent::granted(meta.annotations.as_ref(), self.policy),
        })
    }

    /// Sets the workload's replicas, as the leader only.
    async fn write(&self, target: &ScaleTarget, replicas: i32) -> Result<(), ScaleError> {
        let failed = |e: kube::Error| ScaleError::api(target, &e);
        match target.kind {
            ScaleKind::HorizontalPodAutoscaler => {
                let patch = json!({ "spec": { "minReplicas": replicas } });
                self.of::<HorizontalPodAutoscaler>()
                    .merge(&target.name, &patch)
                    .await?
                    .map_err(failed)?;
            }
            ScaleKind::Deployment => {
                let patch = json!({ "spec": { "replicas": replicas } });
                self.of::<Deployment>()
                    .merge_scale(&target.name, &patch)
                    .await?
                    .map_err(failed)?;
            }
        }
        Ok(())
    }
}

/// The value a target names, in words.
fn describe_target(target: &ScaleTarget) -> String {
    let field = match target.kind {
        ScaleKind::HorizontalPodAutoscaler => "minReplicas",
        ScaleKind::Deployment => "replicas",
    };
    format!("{} {field}", describe_workload(target))
}

/// The workload a target names, in words.
fn describe_workload(target: &ScaleTarget) -> String {
    let kind = match target.kind {
        ScaleKind::HorizontalPodAutoscaler => "HorizontalPodAutoscaler",
        ScaleKind::Deployment => "Deployment",
    };
    format!("{kind} {}", target.name)
}
