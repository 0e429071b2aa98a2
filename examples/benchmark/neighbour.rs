//! The noisy neighbour: failover latency of a scale's policies while tenants of other
//! namespaces edit policies whose health queries are the costliest shapes there are (a new
//! generation, so a new check and parse of the query, each time), against the same kind of
//! changes without them. The two take turns, a block of changes each, ten blocks, so they share
//! the same load window; the tenants edit throughout each of their blocks.
//!
//! The shapes: a query at every cost limit, regex matchers behind a comment ending with a
//! carriage return, the deepest query of each form allowed, and one thousands of levels deep
//! (the last two kinds are refused, and cost only their check).

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use failover::{api::FailoverPolicy, health_query};
use k8s_openapi::api::{core::v1::Namespace, discovery::v1::EndpointSlice};
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams, PostParams},
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

/// What the changes took with and without the neighbours' edits.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Neighbour {
    pub quiet: Percentiles,
    pub noisy: Percentiles,
    /// Edits of the noisy policies made during the noisy blocks.
    pub edits: usize,
    /// Changes not seen within 30 s, without and with the neighbours.
    pub lost: [usize; 2],
}

/// How many tenants edit, each a policy in a namespace of its own.
const TENANTS: usize = 3;
/// How often each tenant edits its policy.
const EDIT_EVERY: Duration = Duration::from_millis(250);

/// The costliest shapes of a health query, in the order the tenants cycle through them.
fn shapes() -> Vec<String> {
    let mut shapes = vec![
        health_query::at_every_limit(),
        health_query::behind_a_comment(),
    ];
    shapes.extend(health_query::deepest_at_limit());
    shapes.push(format!("{}up{}", "(".repeat(2000), ")".repeat(2000)));
    shapes
}

/// A tenant's policy at its `edit`-th edit: the next shape, so each edit is a new generation.
fn noisy(shapes: &[String], tenant: usize, edit: usize) -> FailoverPolicy {
    let query = &shapes[(edit + tenant) % shapes.len()];
    serde_json::from_value(json!({
        "apiVersion": "failover.dev/v1alpha1", "kind": "FailoverPolicy", "metadata": {"name": "noisy"},
        "spec": {"service": "noisy", "primary": "noisy-a", "secondaries": [{"service": "noisy-b"}],
                 "health": {"prometheus": {"query": query, "max": 0.5, "interval": "1s"}}},
    }))
    .expect("noisy policy")
}

/// The tenants' namespaces, created.
async fn tenants(env: &TestEnv) -> Vec<Api<FailoverPolicy>> {
    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    let mut apis = Vec::new();
    for tenant in 0..TENANTS {
        let name = format!("{}-noisy-{tenant}", env.ns);
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
        let _ = namespaces.create(&PostParams::default(), &ns).await;
        apis.push(Api::namespaced(env.client.clone(), &name));
    }
    apis
}

/// Every tenant edits its policy every [`EDIT_EVERY`] until aborted.
fn edit(apis: &[Api<FailoverPolicy>], edits: &Arc<AtomicUsize>) -> tokio::task::JoinHandle<()> {
    let (apis, edits, shapes) = (apis.to_vec(), edits.clone(), shapes());
    tokio::spawn(async move {
        let mut every = tokio::time::interval(EDIT_EVERY);
        loop {
            every.tick().await;
            let edit = edits.fetch_add(TENANTS, Ordering::Relaxed);
            for (tenant, api) in apis.iter().enumerate() {
                let policy = noisy(&shapes, tenant, edit);
                let params = PatchParams::apply("bench-noisy").force();
                let _ = api.patch("noisy", &params, &Patch::Apply(&policy)).await;
            }
        }
    })
}

/// `flips` random policies made not ready and ready again, half of the blocks while the
/// tenants edit their policies.
pub async fn measure(env: &TestEnv, watch: &SplitWatch, n: usize, o: &Options) -> Neighbour {
    let policies = tenants(env).await;
    let slices: Api<EndpointSlice> = env.api();
    let (mut quiet, mut noisy) = (Phase::default(), Phase::default());
    let edits = Arc::new(AtomicUsize::new(0));
    let mut picks = Picks::new();
    for block in 0..BLOCKS {
        let flips = o.flips / BLOCKS + usize::from(block < o.flips % BLOCKS);
        for with_neighbour in [false, true] {
            let editor = with_neighbour.then(|| edit(&policies, &edits));
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
    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    for tenant in 0..TENANTS {
        let name = format!("{}-noisy-{tenant}", env.ns);
        let _ = namespaces.delete(&name, &DeleteParams::default()).await;
    }
    let result = Neighbour {
        lost: [quiet.lost, noisy.lost],
        quiet: percentiles(quiet.samples),
        noisy: percentiles(noisy.samples),
        edits: edits.load(Ordering::Relaxed),
    };
    eprintln!(
        "[{n}] noisy neighbour: {} edits by {TENANTS} tenants of the costliest queries; p50 {:.2} / {:.2} ms, p99 {:.2} / {:.2} ms without / with it",
        result.edits,
        result.quiet.p50_ms,
        result.noisy.p50_ms,
        result.quiet.p99_ms,
        result.noisy.p99_ms
    );
    result
}
