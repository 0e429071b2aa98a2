//! Step 6b of the pipeline, with `spec.capacity.scale`: raises each secondary's workload (an
//! HorizontalPodAutoscaler's `minReplicas`, or a Deployment's replicas through its scale
//! subresource) to what the decision asks for, and restores what it raised once the decision
//! asks for nothing (the failback is over).
//!
//! What a workload had is recorded in the status (`status.scaled`), so a restart or a new leader
//! restores it too. A value someone changed after the controller did is theirs: the record is
//! marked released, nothing is raised again until the failback, and nothing is restored. Each
//! write is a merge patch under the field manager [`FIELD_MANAGER`], so `managedFields` shows
//! who set the value, and only while the cluster admin let the controller scale
//! (`--allow-scaling`, the chart's `scaling.enabled`).

use k8s_openapi::api::{apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;

use crate::{
    api::{ScaleKind, ScaleTarget, ScaledWorkload},
    applied::{ScaleChange, Scaled},
    decide::capacity::ScaleWant,
    policy::ValidPolicy,
    runtime::{api_client::describe, gate::WriteGate},
};

/// The field manager of the controller's changes to workloads.
pub const FIELD_MANAGER: &str = "failover-controller-scale";

/// A workload's replicas now, and the most it may have (an HPA's `maxReplicas`).
struct Current {
    replicas: i32,
    most: Option<i32>,
}

/// Raises and restores the policy's workloads as `wants` says, from what `held` recorded;
/// changes nothing while the policy is suspended.
pub async fn scale(
    gate: &WriteGate,
    allowed: bool,
    valid: &ValidPolicy,
    wants: &[ScaleWant],
    held: &[ScaledWorkload],
) -> Scaled {
    let Some(scale) = valid.capacity.as_ref().and_then(|c| c.scale.as_ref()) else {
        return Scaled::default();
    };
    let mut scaled = Scaled::default();
    let nothing_to_do = wants.is_empty() && held.is_empty();
    if valid.suspend {
        scaled.workloads = held.to_vec();
        return scaled;
    }
    if !allowed {
        scaled.workloads = held.to_vec();
        if !nothing_to_do {
            scaled.problem = Some(
                "the cluster admin has not let the controller scale workloads (--allow-scaling, the chart's scaling.enabled); traffic moves as the ready capacity allows".into(),
            );
        }
        return scaled;
    }
    for (backend, target) in scale.targets.iter().enumerate() {
        let Some(target) = target else { continue };
        let want = wants
            .iter()
            .find(|w| w.backend == backend)
            .map(|w| w.replicas);
        let record = held
            .iter()
            .find(|r| r.kind == target.kind && r.name == target.name)
            .cloned();
        if want.is_none() && record.is_none() {
            continue;
        }
        match one(gate, &valid.namespace, target, want, record.clone()).await {
            Ok((kept, change)) => {
                scaled.workloads.extend(kept);
                scaled.changes.extend(change);
            }
            Err(problem) => {
                scaled.workloads.extend(record);
                scaled.problem.get_or_insert(problem);
            }
        }
    }
    scaled
}

/// One workload: the record to keep, and what was changed.
async fn one(
    gate: &WriteGate,
    namespace: &str,
    target: &ScaleTarget,
    want: Option<i32>,
    record: Option<ScaledWorkload>,
) -> Result<(Option<ScaledWorkload>, Option<ScaleChange>), String> {
    let current = read(gate, namespace, target).await?;
    let what = describe_target(target);
    match (want, record) {
        // Someone changed it since the controller did: theirs stays, until the failback.
        (Some(_), Some(r)) if r.released || current.replicas != r.replicas => Ok((
            Some(ScaledWorkload {
                released: true,
                ..r
            }),
            None,
        )),
        (Some(want), record) => {
            let original = record
                .as_ref()
                .map_or(current.replicas, |r| r.original_replicas);
            let replicas = want.max(original).min(current.most.unwrap_or(i32::MAX));
            if replicas == current.replicas {
                return Ok((record, None));
            }
            write(gate, namespace, target, replicas).await?;
            let kept = ScaledWorkload {
                kind: target.kind,
                name: target.name.clone(),
                original_replicas: original,
                replicas,
                released: false,
            };
            let note = format!(
                "{what} raised from {} to {replicas} for the failover",
                current.replicas
            );
            Ok((Some(kept), Some(ScaleChange { raised: true, note })))
        }
        // The failback is over: restore what it had, unless someone changed it since.
        (None, Some(r)) if !r.released && current.replicas == r.replicas => {
            write(gate, namespace, target, r.original_replicas).await?;
            let note = format!(
                "{what} restored from {} to {} after the failback",
                r.replicas, r.original_replicas
            );
            Ok((
                None,
                Some(ScaleChange {
                    raised: false,
                    note,
                }),
            ))
        }
        (None, _) => Ok((None, None)),
    }
}

fn describe_target(target: &ScaleTarget) -> String {
    match target.kind {
        ScaleKind::HorizontalPodAutoscaler => {
            format!("HorizontalPodAutoscaler {} minReplicas", target.name)
        }
        ScaleKind::Deployment => format!("Deployment {} replicas", target.name),
    }
}

/// What the workload has now.
async fn read(gate: &WriteGate, namespace: &str, target: &ScaleTarget) -> Result<Current, String> {
    let missing = |e: kube::Error| format!("{}: {}", describe_target(target), describe(&e));
    match target.kind {
        ScaleKind::HorizontalPodAutoscaler => {
            let api: Api<HorizontalPodAutoscaler> = Api::namespaced(gate.client.clone(), namespace);
            let hpa = api.get(&target.name).await.map_err(missing)?;
            let spec = hpa.spec.unwrap_or_default();
            Ok(Current {
                replicas: spec.min_replicas.unwrap_or(1),
                most: Some(spec.max_replicas),
            })
        }
        ScaleKind::Deployment => {
            let api: Api<Deployment> = Api::namespaced(gate.client.clone(), namespace);
            let scale = api.get_scale(&target.name).await.map_err(missing)?;
            Ok(Current {
                replicas: scale.spec.and_then(|s| s.replicas).unwrap_or(0),
                most: None,
            })
        }
    }
}

/// Sets the workload's replicas, as the leader only.
async fn write(
    gate: &WriteGate,
    namespace: &str,
    target: &ScaleTarget,
    replicas: i32,
) -> Result<(), String> {
    gate.ensure_leader().map_err(|e| e.to_string())?;
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let failed = |e: kube::Error| format!("{}: {}", describe_target(target), describe(&e));
    match target.kind {
        ScaleKind::HorizontalPodAutoscaler => {
            let api: Api<HorizontalPodAutoscaler> = Api::namespaced(gate.client.clone(), namespace);
            let patch = json!({ "spec": { "minReplicas": replicas } });
            api.patch(&target.name, &params, &Patch::Merge(&patch))
                .await
                .map_err(failed)?;
        }
        ScaleKind::Deployment => {
            let api: Api<Deployment> = Api::namespaced(gate.client.clone(), namespace);
            let patch = json!({ "spec": { "replicas": replicas } });
            api.patch_scale(&target.name, &params, &Patch::Merge(&patch))
                .await
                .map_err(failed)?;
        }
    }
    gate.metrics.write("scale");
    Ok(())
}
