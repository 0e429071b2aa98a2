//! The noisy neighbour: failover latency of a scale's policies while one more policy, whose
//! health query sits at every cost limit, is edited every second (a new generation, so a new
//! check and parse of the query, each time), against the same kind of changes without it. The
//! two take turns, a block of changes each, ten blocks, so they share the same load window.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use failover::api::FailoverPolicy;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams},
};
use serde_json::json;

use crate::{
    Options,
    latency::{BLOCKS, Phase, Slowest, record, timed},
    objects::Picks,
    report::{Percentiles, percentiles},
    support::TestEnv,
    watches::SplitWatch,
};

/// What the changes took with and without the neighbour's edits.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Neighbour {
    pub quiet: Percentiles,
    pub noisy: Percentiles,
    /// Edits of the noisy policy made during the noisy blocks.
    pub edits: usize,
    /// Changes not seen within 30 s, without and with the neighbour.
    pub lost: [usize; 2],
}

/// The noisy policy, its query one of two texts at every limit (they alternate, so each edit is
/// a new generation with a query to check and parse again).
fn noisy(edit: usize) -> FailoverPolicy {
    let query = failover::health_query::at_every_limit();
    let query = if edit.is_multiple_of(2) {
        query
    } else {
        format!("{query} * 1")
    };
    serde_json::from_value(json!({
        "apiVersion": "failover.dev/v1alpha1", "kind": "FailoverPolicy", "metadata": {"name": "noisy"},
        "spec": {"service": "noisy", "primary": "noisy-a", "secondaries": [{"service": "noisy-b"}],
                 "health": {"prometheus": {"query": query, "max": 0.5, "interval": "1s"}}},
    }))
    .expect("noisy policy")
}

async fn apply(api: &Api<FailoverPolicy>, edit: usize) {
    let _ = api
        .patch(
            "noisy",
            &PatchParams::apply("bench-noisy").force(),
            &Patch::Apply(&noisy(edit)),
        )
        .await;
}

/// `flips` random policies made not ready and ready again, half of the blocks while the
/// neighbour edits its policy every second.
pub async fn measure(env: &TestEnv, watch: &SplitWatch, n: usize, o: &Options) -> Neighbour {
    let policies: Api<FailoverPolicy> = env.api();
    apply(&policies, 0).await;
    let slices: Api<EndpointSlice> = env.api();
    let (mut quiet, mut noisy) = (Phase::default(), Phase::default());
    let edits = Arc::new(AtomicUsize::new(0));
    let mut picks = Picks::new();
    for block in 0..BLOCKS {
        let flips = o.flips / BLOCKS + usize::from(block < o.flips % BLOCKS);
        for with_neighbour in [false, true] {
            let editor = with_neighbour.then(|| {
                let (policies, edits) = (policies.clone(), edits.clone());
                tokio::spawn(async move {
                    loop {
                        let edit = edits.fetch_add(1, Ordering::Relaxed) + 1;
                        apply(&policies, edit).await;
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                })
            });
            let phase = if with_neighbour {
                &mut noisy
            } else {
                &mut quiet
            };
            for _ in 0..flips {
                let name = format!("p{}", picks.next(n));
                for (ready, expected) in [(false, [0i64, 1, 0]), (true, [1i64, 0, 0])] {
                    let change = timed(&slices, watch, &name, ready, &expected).await;
                    record(phase, change, &name, &mut Slowest::default());
                }
            }
            if let Some(editor) = editor {
                editor.abort();
            }
        }
    }
    let _ = policies.delete("noisy", &DeleteParams::default()).await;
    let result = Neighbour {
        lost: [quiet.lost, noisy.lost],
        quiet: percentiles(quiet.samples),
        noisy: percentiles(noisy.samples),
        edits: edits.load(Ordering::Relaxed),
    };
    eprintln!(
        "[{n}] noisy neighbour: {} edits of a query at every limit; p50 {:.2} / {:.2} ms, p99 {:.2} / {:.2} ms without / with it",
        result.edits,
        result.quiet.p50_ms,
        result.noisy.p50_ms,
        result.quiet.p99_ms,
        result.noisy.p99_ms
    );
    result
}
