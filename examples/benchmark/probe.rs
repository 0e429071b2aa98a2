//! What one TrafficSplit apply costs the API server, by the shape of the object.
//!
//! Six TrafficSplits that no policy references (the controller ignores them) are applied in
//! turn, round after round, while the controller and the churn run: the relay's shape (only a
//! spec), then with the controller's labels, its ownerReference, and the controller's own shape
//! (labels, ownerReference, created by a POST before the first apply, as the controller creates
//! a route). The differences between the rows are what the object's shape costs per apply.

use std::time::{Duration, Instant};

use failover::route::{FIELD_MANAGER, trafficsplit::TrafficSplit};
use kube::{
    Api,
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

/// Applies every shape `ROUNDS` times and prints each one's apply time.
pub async fn run(env: &TestEnv, n: usize) {
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
    for (shape, times) in SHAPES.iter().zip(times) {
        let p = crate::report::percentiles(times);
        eprintln!(
            "[{n}] apply probe {}: p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms",
            shape.name, p.p50_ms, p.p95_ms, p.p99_ms
        );
    }
}
