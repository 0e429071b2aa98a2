//! Failover groups at scale: `--groups` groups of [`MEMBERS`] policies each (the scale's first
//! policies; every policy has its primary in site `one` and its secondaries in site `two`), then
//! `--group-flips` failovers, each the primary of one member of a group turning not ready, timed
//! from the acknowledgement of that EndpointSlice write to the moment the independent watch sees
//! the last member's TrafficSplit move to site `two`; then the primary ready again and every
//! member back (not timed), and the controller at rest before the next. The route writes of each failover are counted: one per member.

use std::time::{Duration, Instant};

use failover::{
    api::{FailoverGroup, FailoverGroupSpec},
    route::trafficsplit::TrafficSplit,
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{
    Api,
    api::{Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;

use crate::{
    latency::{settle, writes},
    objects::{Picks, create_all, set_ready},
    report::{Percentiles, percentiles},
    support::{ControllerProcess, TestEnv},
    watches::SplitWatch,
};

/// Policies per group.
pub const MEMBERS: usize = 10;
/// How long a group failover may take before it counts as lost.
const LOST_AFTER: Duration = Duration::from_secs(30);
/// A member's TrafficSplit weights with its primary, and with its first secondary (site two).
const ON_PRIMARY: [i64; 3] = [1, 0, 0];
const ON_SITE_TWO: [i64; 3] = [0, 1, 0];

/// What the groups measured.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Groups {
    pub groups: usize,
    pub members: usize,
    /// The trigger's write acknowledged → the last member's route seen moved.
    pub latency: Percentiles,
    /// The first member's route seen moved → the last's.
    pub spread: Percentiles,
    /// Failovers whose members were not all seen moved within 30 s.
    pub lost: usize,
    /// TrafficSplit writes per group failover (one per member expected).
    pub route_writes_per_failover: f64,
    /// The floor: a relay that applies the routes of as many members at once (one apply each,
    /// concurrently) on each change of its EndpointSlice, timed the same way.
    pub floor: Percentiles,
    /// How long the groups took to be created and every member to settle, in seconds.
    pub settled_s: f64,
}

/// Group `g<k>`: members `p<10k>` to `p<10k+9>`, sites `one` then `two`.
fn group(k: usize) -> FailoverGroup {
    FailoverGroup::new(
        &format!("g{k}"),
        FailoverGroupSpec {
            sites: vec!["one".into(), "two".into()],
            members: members(k).map(|i| format!("p{i}")).collect(),
        },
    )
}

fn members(k: usize) -> impl Iterator<Item = usize> {
    k * MEMBERS..(k + 1) * MEMBERS
}

/// Creates `groups` groups, waits until the controller settles, then times `flips` failovers.
pub async fn measure(
    env: &TestEnv,
    controller: &ControllerProcess,
    watch: &SplitWatch,
    n: usize,
    groups: usize,
    flips: usize,
) -> Groups {
    let groups = groups.min(n / MEMBERS);
    let started = Instant::now();
    create_all(&env.api(), (0..groups).map(group).collect(), 32).await;
    settle(controller).await;
    let settled_s = started.elapsed().as_secs_f64();
    eprintln!("[{n}] {groups} groups of {MEMBERS} created and settled in {settled_s:.1}s");
    let slices: Api<EndpointSlice> = env.api();
    let (mut latency, mut spread, mut lost) = (Vec::new(), Vec::new(), 0);
    let before = writes(controller).await;
    let mut picks = Picks::new();
    for _ in 0..flips {
        let k = picks.next(groups.max(1));
        let trigger = k * MEMBERS + picks.next(MEMBERS);
        let acked = set_ready(&slices, &format!("p{trigger}"), false).await;
        let acked_at = chrono::Utc::now();
        match seen(watch, k, &ON_SITE_TWO).await {
            Some((first, last)) => {
                eprintln!(
                    "[{n}] group g{k}: p{trigger}'s slice written at {}, first member's route seen after {:.1?}, the last after {:.1?}",
                    acked_at.format("%H:%M:%S%.3f"),
                    first.saturating_duration_since(acked),
                    last.saturating_duration_since(acked)
                );
                latency.push(last.saturating_duration_since(acked));
                spread.push(last.saturating_duration_since(first));
            }
            None => {
                lost += 1;
                eprintln!("lost group failover: g{k} not all seen moved within {LOST_AFTER:?}");
            }
        }
        set_ready(&slices, &format!("p{trigger}"), true).await;
        if seen(watch, k, &ON_PRIMARY).await.is_none() {
            eprintln!("g{k} not all seen back within {LOST_AFTER:?}");
        }
        // Each failover starts from a controller at rest, as each of the floor's does: the
        // failback's member statuses and Events written first.
        settle(controller).await;
    }
    let after = writes(controller).await;
    let floor = relay_floor(env, watch, flips).await;
    let routes = after.get("trafficsplit").copied().unwrap_or(0.0)
        - before.get("trafficsplit").copied().unwrap_or(0.0);
    Groups {
        groups,
        members: MEMBERS,
        latency: percentiles(latency),
        spread: percentiles(spread),
        lost,
        // Each flip is a failover and a failback: two moves of every member.
        route_writes_per_failover: routes / (2 * flips.max(1)) as f64,
        floor,
        settled_s,
    }
}

/// When the watch saw the first and the last member of group `k` with `weights`; `None` when
/// not all within [`LOST_AFTER`].
async fn seen(watch: &SplitWatch, k: usize, weights: &[i64]) -> Option<(Instant, Instant)> {
    let mut at = Vec::new();
    for i in members(k) {
        at.push(
            watch
                .wait_for(&format!("p{i}"), weights, LOST_AFTER)
                .await?,
        );
    }
    Some((*at.iter().min()?, *at.iter().max()?))
}

/// The relay's name: its EndpointSlice `grelay-bench`, its routes `grelay-0` to `grelay-9`.
const RELAY: &str = "grelay";

/// The floor of a group failover: `flips` changes of the relay's EndpointSlice, each timed from
/// its acknowledgement to the watch seeing the last of the relay's [`MEMBERS`] routes moved.
async fn relay_floor(env: &TestEnv, watch: &SplitWatch, flips: usize) -> Percentiles {
    let splits: Api<TrafficSplit> = env.api();
    let slices: Api<EndpointSlice> = env.api();
    set_ready(&slices, RELAY, true).await;
    let relay = tokio::spawn(group_relay(slices.clone(), splits));
    let names: Vec<String> = (0..MEMBERS).map(|i| format!("{RELAY}-{i}")).collect();
    for name in &names {
        let _ = watch.wait_for(name, &ON_PRIMARY[..2], LOST_AFTER).await;
    }
    let mut samples = Vec::new();
    for _ in 0..flips {
        let acked = set_ready(&slices, RELAY, false).await;
        if let Some((_, last)) = seen_all(watch, &names, &ON_SITE_TWO[..2]).await {
            samples.push(last.saturating_duration_since(acked));
        }
        set_ready(&slices, RELAY, true).await;
        let _ = seen_all(watch, &names, &ON_PRIMARY[..2]).await;
    }
    relay.abort();
    percentiles(samples)
}

/// On each change of the relay's EndpointSlice, applies its routes at once.
async fn group_relay(slices: Api<EndpointSlice>, splits: Api<TrafficSplit>) {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={RELAY}-bench"));
    let mut changes = watcher(slices, cfg).applied_objects().boxed();
    while let Ok(Some(slice)) = changes.try_next().await {
        let ready = slice
            .endpoints
            .iter()
            .any(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true));
        futures::future::join_all((0..MEMBERS).map(|i| {
            let name = format!("{RELAY}-{i}");
            let patch = json!({"apiVersion": "split.smi-spec.io/v1alpha2", "kind": "TrafficSplit", "metadata": {"name": name},
                "spec": {"service": name, "backends": [{"service": format!("{name}-a"), "weight": i64::from(ready)}, {"service": format!("{name}-b"), "weight": i64::from(!ready)}]}});
            let splits = splits.clone();
            async move {
                let _ = splits
                    .patch(&name, &PatchParams::apply("relay").force(), &Patch::Apply(&patch))
                    .await;
            }
        }))
        .await;
    }
}

/// When the watch saw the first and the last of `names` with `weights`.
async fn seen_all(
    watch: &SplitWatch,
    names: &[String],
    weights: &[i64],
) -> Option<(Instant, Instant)> {
    let mut at = Vec::new();
    for name in names {
        at.push(watch.wait_for(name, weights, LOST_AFTER).await?);
    }
    Some((*at.iter().min()?, *at.iter().max()?))
}
