//! Failover groups at scale: `--groups` groups of [`MEMBERS`] policies each (the scale's first
//! policies; every policy has its primary in site `one` and its secondaries in site `two`), then
//! `--group-flips` failovers, each the primary of one member of a group turning not ready, timed
//! from the acknowledgement of that EndpointSlice write to the moment the independent watch sees
//! the last member's TrafficSplit move to site `two`; then the primary ready again and every
//! member back (not timed), and the controller at rest before the next. The route writes of
//! each failover are counted: one per member. As many group moves through the relay making the
//! controller's writes (`relay`) are timed the same way, in turns with the controller's.

use std::time::{Duration, Instant};

use failover_core::api::{FailoverGroup, FailoverGroupSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;

use crate::{
    latency::{settle, writes},
    objects::{Picks, create_all, set_ready},
    relay,
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
    /// The floor: a relay making the controller's writes of a group move (every member's route
    /// at once, then the statuses and Events), in turns with the controller, timed the same way.
    pub floor: Percentiles,
    /// The relay's moves not all seen within 30 s.
    pub floor_lost: usize,
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

/// Creates `groups` groups, waits until the controller settles, then times `flips` group
/// failovers through the controller and as many through the relay making its writes, in turns
/// ([`BLOCKS`] blocks each).
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
    let relay = GroupRelay::start(env, watch).await;
    let mut ours = Moves::default();
    let mut floor = Moves::default();
    let before = writes(controller).await;
    let mut picks = Picks::new();
    for block in 0..BLOCKS {
        let count = flips / BLOCKS + usize::from(block < flips % BLOCKS);
        for _ in 0..count {
            let k = picks.next(groups.max(1));
            let trigger = k * MEMBERS + picks.next(MEMBERS);
            ours.add(group_move(env, controller, watch, n, k, trigger).await);
        }
        for _ in 0..count {
            floor.add(relay.flip(env).await);
        }
    }
    let after = writes(controller).await;
    relay.stop().await;
    let routes = after.get("trafficsplit").copied().unwrap_or(0.0)
        - before.get("trafficsplit").copied().unwrap_or(0.0);
    Groups {
        groups,
        members: MEMBERS,
        latency: percentiles(ours.latency),
        spread: percentiles(ours.spread),
        lost: ours.lost,
        // Each flip is a failover and a failback: two moves of every member.
        route_writes_per_failover: routes / (2 * flips.max(1)) as f64,
        floor: percentiles(floor.latency),
        floor_lost: floor.lost,
        settled_s,
    }
}

/// How many turns the controller and the relay take.
const BLOCKS: usize = 10;

/// The moves of one side: when the last member's route was seen moved after the trigger's
/// write, the spread from the first's, and the moves not all seen within [`LOST_AFTER`].
#[derive(Default)]
struct Moves {
    latency: Vec<Duration>,
    spread: Vec<Duration>,
    lost: usize,
}

impl Moves {
    fn add(&mut self, seen: Option<(Duration, Duration)>) {
        match seen {
            Some((last, spread)) => {
                self.latency.push(last);
                self.spread.push(spread);
            }
            None => self.lost += 1,
        }
    }
}

/// One group failover through the controller: member `trigger` of group `k` not ready, timed
/// until every member's route is seen moved; then ready again, every member back, and the
/// controller at rest (the failback's statuses and Events written) before the next.
async fn group_move(
    env: &TestEnv,
    controller: &ControllerProcess,
    watch: &SplitWatch,
    n: usize,
    k: usize,
    trigger: usize,
) -> Option<(Duration, Duration)> {
    let slices: Api<EndpointSlice> = env.api();
    let acked = set_ready(&slices, &format!("p{trigger}"), false).await;
    let acked_at = chrono::Utc::now();
    let seen = seen(watch, k, &ON_SITE_TWO).await;
    match seen {
        Some((first, last)) => eprintln!(
            "[{n}] group g{k}: p{trigger}'s slice written at {}, first member's route seen after {:.1?}, the last after {:.1?}",
            acked_at.format("%H:%M:%S%.3f"),
            first.saturating_duration_since(acked),
            last.saturating_duration_since(acked)
        ),
        None => eprintln!("lost group failover: g{k} not all seen moved within {LOST_AFTER:?}"),
    }
    set_ready(&slices, &format!("p{trigger}"), true).await;
    if crate::groups::seen(watch, k, &ON_PRIMARY).await.is_none() {
        eprintln!("g{k} not all seen back within {LOST_AFTER:?}");
    }
    at_rest(controller).await;
    seen.map(|(first, last)| {
        (
            last.saturating_duration_since(acked),
            last.saturating_duration_since(first),
        )
    })
}

/// Waits until the controller's write counters have not moved for [`AT_REST`].
async fn at_rest(controller: &ControllerProcess) {
    let mut last = writes(controller).await;
    let mut since = Instant::now();
    while since.elapsed() < AT_REST {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = writes(controller).await;
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
}

/// How long the controller's write counters stay still before it counts as at rest.
const AT_REST: Duration = Duration::from_millis(500);

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

/// The relay's name: its EndpointSlice `grelay-bench` (beside the controller's), its policies
/// `grelay-0` to `grelay-9` and their group `grelay` in a namespace of their own.
const RELAY: &str = "grelay";

/// The floor of a group failover: the relay making the controller's writes of a group move
/// (every member's route at once, then the members' statuses and Events and the group's).
struct GroupRelay {
    own: TestEnv,
    running: relay::Running,
    /// An independent watch of its routes.
    watch: SplitWatch,
    names: Vec<String>,
}

impl GroupRelay {
    async fn start(env: &TestEnv, watch: &SplitWatch) -> Self {
        let own = TestEnv::on(env.cp, "bench-group-relay")
            .await
            .expect("namespace");
        let names: Vec<String> = (0..MEMBERS).map(|i| format!("{RELAY}-{i}")).collect();
        let mut members = Vec::new();
        for name in &names {
            members.push(relay::Member::create(&own, name).await);
        }
        let group = FailoverGroup::new(
            RELAY,
            FailoverGroupSpec {
                sites: vec!["one".into(), "two".into()],
                members: names.clone(),
            },
        );
        own.api::<FailoverGroup>()
            .create(&Default::default(), &group)
            .await
            .expect("the relay's group");
        let slices: Api<EndpointSlice> = env.api();
        set_ready(&slices, RELAY, true).await;
        let g0: Vec<String> = members_of(0).collect();
        let target = relay::Target {
            members,
            group: Some(RELAY.to_string()),
            written: relay::controller_writes(env, watch, "p0", &g0, Some("g0")).await,
        };
        let running = relay::start(env.client.clone(), &env.ns, RELAY, target);
        let relay = Self {
            watch: SplitWatch::start(own.api()),
            own,
            running,
            names,
        };
        let _ = seen_all(&relay.watch, &relay.names, &ON_PRIMARY).await;
        relay
    }

    /// One group failover through the relay, timed from its trigger's write to the last of its
    /// routes seen moved; then back, its writes landed before the next.
    async fn flip(&self, env: &TestEnv) -> Option<(Duration, Duration)> {
        let slices: Api<EndpointSlice> = env.api();
        let acked = set_ready(&slices, RELAY, false).await;
        let seen = seen_all(&self.watch, &self.names, &ON_SITE_TWO).await;
        set_ready(&slices, RELAY, true).await;
        let _ = seen_all(&self.watch, &self.names, &ON_PRIMARY).await;
        self.running.idle().await;
        seen.map(|(first, last)| {
            (
                last.saturating_duration_since(acked),
                last.saturating_duration_since(first),
            )
        })
    }

    async fn stop(self) {
        drop((self.running, self.watch));
        self.own.cleanup_and_wait(Duration::from_secs(60)).await;
    }
}

fn members_of(k: usize) -> impl Iterator<Item = String> {
    members(k).map(|i| format!("p{i}"))
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
