//! What the controller's two writes per change cost the API server, measured with the controller
//! and the churn running.
//!
//! - Routes: five TrafficSplits that no policy references (the controller ignores them) are
//!   applied in turn, round after round: the relay's shape (only a spec), the same created by a
//!   POST before its first apply, with the controller's labels, with its ownerReference, and the
//!   controller's own shape (all three). The differences between the rows are what the shape
//!   costs per apply.
//! - Statuses: a policy's status written by server-side apply (as the controller does), by a
//!   merge patch, and reduced to `observedGeneration`, each with the API server's CPU per write.

use std::time::{Duration, Instant};

use failover_core::{
    api::FailoverPolicy,
    route::{FIELD_MANAGER, trafficsplit::TrafficSplit},
};
use kube::{
    Api, Resource,
    api::{DynamicObject, Patch, PatchParams, PostParams},
    discovery::ApiResource,
};
use serde_json::{Value, json};

use crate::support::TestEnv;

/// Rounds of applies (each round applies every shape once).
const ROUNDS: i64 = 400;

/// One shape: its name, whether it carries the controller's labels and ownerReference, and
/// whether it is created by a POST before it is applied.
struct Shape {
    name: &'static str,
    labels: bool,
    owner: bool,
    created: bool,
}

const SHAPES: [Shape; 5] = [
    Shape {
        name: "probe-spec-only",
        labels: false,
        owner: false,
        created: false,
    },
    Shape {
        name: "probe-created",
        labels: false,
        owner: false,
        created: true,
    },
    Shape {
        name: "probe-labels",
        labels: true,
        owner: false,
        created: false,
    },
    Shape {
        name: "probe-owner",
        labels: false,
        owner: true,
        created: false,
    },
    Shape {
        name: "probe-as-controller",
        labels: true,
        owner: true,
        created: true,
    },
];

/// The object applied for `shape`, its weights flipped by `round`; labels and ownerReference
/// copied from the controller's route `template`.
fn body(shape: &Shape, template: &DynamicObject, round: i64) -> Value {
    let weight = round % 2;
    let mut v = json!({"apiVersion": "split.smi-spec.io/v1alpha2", "kind": "TrafficSplit",
        "metadata": {"name": shape.name},
        "spec": {"service": "probe", "backends": [{"service": "a", "weight": weight},
            {"service": "b", "weight": 1 - weight}, {"service": "c", "weight": 0}]}});
    if shape.labels {
        v["metadata"]["labels"] = json!(template.metadata.labels);
    }
    if shape.owner {
        v["metadata"]["ownerReferences"] = json!(template.metadata.owner_references);
    }
    v
}

/// Runs both probes.
pub async fn run(env: &TestEnv, n: usize) {
    splits(env, n).await;
    statuses(env, n).await;
}

/// Applies every shape `ROUNDS` times and prints each one's apply time.
async fn splits(env: &TestEnv, n: usize) {
    let api: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.ns,
        &ApiResource::erase::<TrafficSplit>(&()),
    );
    let template = api.get("p0").await.expect("the controller's route p0");
    let post = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    for shape in SHAPES.iter().filter(|s| s.created) {
        let object: DynamicObject =
            serde_json::from_value(body(shape, &template, 1)).expect("TrafficSplit");
        api.create(&post, &object).await.expect("probe create");
    }
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let cpu_before = crate::apiserver::cpu_seconds(env.cp, "kube-apiserver");
    let mut times = vec![Vec::new(); SHAPES.len()];
    for round in 0..ROUNDS {
        for (shape, times) in SHAPES.iter().zip(&mut times) {
            let started = Instant::now();
            api.patch(
                shape.name,
                &apply,
                &Patch::Apply(body(shape, &template, round)),
            )
            .await
            .expect("probe apply");
            times.push(started.elapsed());
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let cpu = crate::apiserver::cpu_seconds(env.cp, "kube-apiserver") - cpu_before;
    eprintln!(
        "[{n}] apply probe: the API server's CPU {:.2} ms per apply (all shapes)",
        cpu * 1000.0 / (ROUNDS as f64 * SHAPES.len() as f64)
    );
    for (shape, times) in SHAPES.iter().zip(times) {
        let p = crate::report::percentiles(times);
        eprintln!(
            "[{n}] apply probe {}: p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms",
            shape.name, p.p50_ms, p.p95_ms, p.p99_ms
        );
    }
}

/// Writes a policy's status (a copy of one the controller wrote, on a copy of its policy in a
/// namespace the controller does not watch) `ROUNDS` times per way of writing it, and prints
/// each way's request time and the API server's CPU time per write.
async fn statuses(env: &TestEnv, n: usize) {
    let (own, target) = crate::latency::status_target(env).await;
    let body = |status: &Value, round: i64| {
        let mut status = status.clone();
        status["observedGeneration"] = json!(round);
        json!({"apiVersion": FailoverPolicy::api_version(&()), "kind": FailoverPolicy::kind(&()), "status": status})
    };
    let small = json!({});
    let (apply_params, merge_params) = (
        PatchParams::apply(FIELD_MANAGER).force(),
        PatchParams::default(),
    );
    // Each way: its name, whether it is a server-side apply (else a merge patch), the status.
    let ways = [
        ("server-side apply", true, &target.status),
        ("merge patch", false, &target.status),
        ("server-side apply, observedGeneration only", true, &small),
    ];
    for (way, apply, status) in ways {
        let params = if apply { &apply_params } else { &merge_params };
        let cpu_before = crate::apiserver::cpu_seconds(env.cp, "kube-apiserver");
        let mut times = Vec::new();
        for round in 0..ROUNDS {
            let body = body(status, round);
            let patch = if apply {
                Patch::Apply(body)
            } else {
                Patch::Merge(body)
            };
            let started = Instant::now();
            target
                .api
                .patch_status("relay", params, &patch)
                .await
                .expect("probe status write");
            times.push(started.elapsed());
        }
        let cpu = crate::apiserver::cpu_seconds(env.cp, "kube-apiserver") - cpu_before;
        let p = crate::report::percentiles(times);
        eprintln!(
            "[{n}] status probe, {way}: p50 {:.2} ms, p95 {:.2} ms; the API server's CPU {:.2} ms per write",
            p.p50_ms,
            p.p95_ms,
            cpu * 1000.0 / ROUNDS as f64
        );
    }
    drop(own);
}
