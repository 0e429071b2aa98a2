//! What one tenant can cost everyone else, one test per class of cost: policies at every size
//! limit (memory), objects whose status the API server cannot store (the status writer), edit
//! floods (the policy watch), slow health queries (Prometheus' query slots), Event storms, and a
//! broken remote cluster's error. In each, a hostile tenant bound to the chart's edit role works
//! in its own namespace while another namespace's primary fails: the test asserts that the other
//! namespace fails over within a bound far below what the tenant's work would cost it, that the
//! controller is the process it started as (it did not crash or restart), and prints the figure.
//! Each runs on a control plane of its own, with one controller for every namespace.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use failover_core::{
    api::{
        FailoverGroup, FailoverGroupSpec, FailoverPolicy, FailoverPolicySpec, ReadinessFrom,
        conditions::{self, READY},
    },
    health_query,
};
use k8s_openapi::api::events::v1::Event;
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams, PostParams},
};

use crate::support::{
    self, ControllerProcess, ON_EAST, ON_WEB, ON_WEST, PolicyBuilder, SlotHolder, Tenant, TestEnv,
    WAIT, WEB_BACKENDS, condition, metric, wait_until,
};

/// How long another namespace's failover may take while a tenant works: its usual latency here
/// is tens of milliseconds (a few seconds for a health-driven one, its interval included).
const FAILOVER_BOUND: Duration = Duration::from_secs(5);
/// What a policy at every limit may cost the controller while it is held (docs/security.md).
const AT_LIMIT_BYTES: f64 = 64.0 * 1024.0;
/// The most a policy's status takes, whatever its spec (docs/security.md).
const STATUS_BYTES: usize = 32 * 1024;

/// A control plane of the test's own with a hostile tenant's namespace and a victim namespace
/// (the usual backends, its usual policy routing to `web`), and one controller for both.
struct Scene {
    tenant: TestEnv,
    victim: TestEnv,
    /// The tenant's author, and the victim's.
    author: Tenant,
    victims_author: Tenant,
    controller: ControllerProcess,
}

impl Scene {
    async fn start(test: &str, gateway_api: bool, args: &[&str]) -> Option<Self> {
        let tenant = TestEnv::dedicated(&format!("{test}-tenant")).await?;
        let victim = TestEnv::on(tenant.cp, &format!("{test}-victim"))
            .await
            .expect("the victim's namespace");
        if gateway_api {
            tenant.cp.install_gateway_api();
        }
        victim.ready_backends(&WEB_BACKENDS).await;
        let controller = ControllerProcess::start_cluster_wide(&tenant, args);
        let (author, victims_author) = (tenant.tenant(), victim.tenant());
        victims_author.apply(&PolicyBuilder::web().yaml());
        victim.wait_weights("web", &ON_WEB, WAIT).await;
        Some(Self {
            tenant,
            victim,
            author,
            victims_author,
            controller,
        })
    }

    /// The victim's primary made not ready: how long until its route sends all traffic to
    /// `web-east` (within [`FAILOVER_BOUND`]), the controller still the process it started as.
    async fn victim_fails_over(&mut self, while_: &str) -> Duration {
        let took = victim_failover(&self.victim).await;
        self.still_up().await;
        support::figure(format!(
            "{while_}: another namespace failed over in {} ms",
            took.as_millis()
        ));
        took
    }

    /// The controller is the process the test started, and healthy.
    async fn still_up(&mut self) {
        assert!(
            self.controller.still_running(),
            "the controller exited:\n{}",
            tail(&self.controller.logs())
        );
        let (code, _) = self.controller.admin_get("/healthz").await;
        assert_eq!(code, 200, "the controller's /healthz");
    }
}

/// The victim's primary made not ready: how long until its route sends all traffic to
/// `web-east`, within [`FAILOVER_BOUND`].
async fn victim_failover(victim: &TestEnv) -> Duration {
    let started = Instant::now();
    victim.set_endpoints("web", 0, 1).await;
    victim.wait_weights("web", &ON_EAST, FAILOVER_BOUND).await;
    started.elapsed()
}

/// The first Event with this reason on the object named `regarding`, waiting up to `limit`.
async fn event(env: &TestEnv, regarding: &str, reason: &str, limit: Duration) -> Event {
    let events: Api<Event> = env.api();
    let started = Instant::now();
    loop {
        let found = events
            .list(&ListParams::default())
            .await
            .ok()
            .and_then(|l| {
                l.items.into_iter().find(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding)
                })
            });
        match found {
            Some(event) => return event,
            None if started.elapsed() < limit => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            None => panic!("no Event {reason} on {regarding} within {limit:?}"),
        }
    }
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Waits until every policy of `env` named `<prefix><n>` has a status (the controller took
/// them all in), at most `limit`.
async fn all_reconciled(env: &TestEnv, prefix: &str, count: usize, limit: Duration) {
    let api: Api<FailoverPolicy> = env.api();
    let done = wait_until(limit, || {
        let api = api.clone();
        async move {
            let list = api.list(&ListParams::default()).await;
            list.map(|l| {
                l.items
                    .iter()
                    .filter(|p| {
                        p.metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| n.starts_with(prefix))
                    })
                    .filter(|p| {
                        p.status
                            .as_ref()
                            .is_some_and(|s| s.observed_generation.is_some())
                    })
                    .count()
            })
            .unwrap_or(0)
                >= count
        }
    })
    .await;
    if !done {
        let list = api.list(&ListParams::default()).await.expect("policies");
        let waiting = list.items.iter().find(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(prefix))
                && p.status
                    .as_ref()
                    .is_none_or(|s| s.observed_generation.is_none())
        });
        panic!(
            "the controller never reconciled the tenant's {count} policies; one: {:?}",
            waiting.map(|p| (&p.metadata.name, &p.status))
        );
    }
}

/// The controller's heap once the tenant's `count` policies named `huge-<n>` are taken in and
/// every status written: the least of a few readings a second apart (a reading may catch a
/// health query's text in flight).
async fn heap_holding(scene: &Scene, count: usize) -> f64 {
    all_reconciled(&scene.tenant, "huge-", count, Duration::from_secs(120)).await;
    let mut least = f64::MAX;
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        least = least.min(scene.controller.heap_bytes().await);
    }
    least
}

#[tokio::test]
async fn a_tenants_policies_at_every_limit_cost_at_most_64_kib_each_and_another_namespace_fails_over()
 {
    // The cost of a policy is what each one more adds: the slope from FIRST to ALL held (what
    // the first large objects cost once, the watches' read buffers, is not a policy's).
    const FIRST: usize = 20;
    const ALL: usize = 60;
    let Some(mut scene) = Scene::start(
        "limits",
        true,
        &["--prometheus-address", "http://127.0.0.1:9"],
    )
    .await
    else {
        return;
    };
    let policies: Vec<String> = (0..ALL)
        .map(|i| PolicyBuilder::at_every_limit(&format!("huge-{i}"), None).yaml())
        .collect();
    let author = &scene.author;
    author.apply(&policies[..FIRST].join("---\n"));
    let first = heap_holding(&scene, FIRST).await;
    author.apply(&policies[FIRST..].join("---\n"));
    let all = heap_holding(&scene, ALL).await;
    let per_policy = (all - first) / (ALL - FIRST) as f64;
    let huge = scene.tenant.policy("huge-0").await.expect("a huge policy");
    let status = serde_json::to_string(&huge.status).expect("status").len();
    let claimed = huge.status.as_ref().and_then(|s| s.claimed.clone());
    support::figure(format!(
        "policies at every limit (256 listener claims, a health query at every limit polled): the controller's heap {:.0} KiB with {FIRST}, {:.0} KiB with {ALL}: {:.1} KiB per policy (bound {} KiB); one's status is {status} bytes (bound {STATUS_BYTES}), its claims (held, lost, times) {:?}",
        first / 1024.0,
        all / 1024.0,
        per_policy / 1024.0,
        AT_LIMIT_BYTES / 1024.0,
        claimed.as_ref().map(|c| (c.held, c.lost, c.made.len()))
    ));
    assert!(
        per_policy <= AT_LIMIT_BYTES,
        "a policy at every limit costs {:.1} KiB",
        per_policy / 1024.0
    );
    assert!(
        claimed.is_some_and(|c| c.held == 256 && c.lost == 0),
        "each holds its 256 claims"
    );
    assert!(status <= STATUS_BYTES, "a status of {status} bytes");
    scene
        .victim_fails_over(&format!("{ALL} policies at every limit held"))
        .await;
}

#[tokio::test]
async fn objects_whose_status_cannot_be_stored_hold_no_writer_and_another_namespace_fails_over() {
    const ORDINARY: usize = 300;
    // Two status writers: two unstorable objects would hold both for good.
    let Some(mut scene) = Scene::start("unstorable", false, &["--concurrency", "2"]).await else {
        return;
    };
    let padded = scene.author.padded_to_the_limit(2);
    let ordinary: Vec<String> = (0..ORDINARY)
        .map(|i| PolicyBuilder::named(&format!("p{i}"), "web", &["web-east"]).yaml())
        .collect();
    scene.author.apply(&ordinary.join("---\n"));
    scene
        .victim_fails_over(&format!(
            "{} objects whose status cannot be stored, {ORDINARY} new policies",
            padded.len()
        ))
        .await;
    all_reconciled(&scene.tenant, "p", ORDINARY, Duration::from_secs(60)).await;
    let (_, text) = scene.controller.admin_get("/metrics").await;
    let refused = metric(
        &text,
        "failover_status_write_failures_total{reason=\"too_large\"}",
    )
    .unwrap_or(0.0);
    let event = event(
        &scene.tenant,
        &padded[0],
        conditions::events::STATUS_NOT_WRITTEN,
        WAIT,
    )
    .await;
    support::figure(format!(
        "status writes refused as too large: {refused}; the tenant reads: {}",
        event.note.unwrap_or_default()
    ));
    assert!(refused >= 2.0, "both refusals counted: {refused}");
}

#[tokio::test]
async fn a_tenant_editing_its_policies_many_times_a_second_delays_no_other_namespaces_edit() {
    const FLOODED: usize = 10;
    let Some(mut scene) = Scene::start(
        "edits",
        false,
        &["--prometheus-address", "http://127.0.0.1:9"],
    )
    .await
    else {
        return;
    };
    let tenant = &scene.author;
    let api: Api<FailoverPolicy> = Api::namespaced(tenant.client().await, &scene.tenant.ns);
    let shapes = Arc::new([
        health_query::at_every_limit(),
        health_query::behind_a_comment(),
        health_query::deepest_at_limit()[3].clone(),
    ]);
    let policy = move |i: usize, edit: usize| {
        PolicyBuilder::named(&format!("flood-{i}"), "web", &["web-east"])
            .with_health(None, &shapes[(i + edit) % shapes.len()])
    };
    let all: Vec<String> = (0..FLOODED).map(|i| policy(i, 0).yaml()).collect();
    tenant.apply(&all.join("---\n"));
    all_reconciled(&scene.tenant, "flood-", FLOODED, WAIT).await;
    // Each edit a new query: a new generation, validated anew. Counted once it lands.
    let landed = Arc::new(AtomicUsize::new(0));
    let flood = {
        let (api, landed) = (api.clone(), landed.clone());
        tokio::spawn(async move {
            for edit in 1.. {
                let i = edit % FLOODED;
                let body = serde_json::to_value(policy(i, edit).policy()).expect("policy");
                let params = PatchParams::apply("flood").force();
                let name = format!("flood-{i}");
                if api
                    .patch(&name, &params, &Patch::Apply(&body))
                    .await
                    .is_ok()
                {
                    landed.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(10)).await;
    // The victim's author pins a backend: an edit of another namespace.
    let started = Instant::now();
    scene.victims_author.apply(
        &PolicyBuilder::web()
            .spec(|s| s.pin = Some("web-west".into()))
            .yaml(),
    );
    scene
        .victim
        .wait_weights("web", &ON_WEST, FAILOVER_BOUND)
        .await;
    let pinned = started.elapsed();
    scene.victims_author.apply(&PolicyBuilder::web().yaml());
    scene
        .victim
        .wait_weights("web", &ON_WEB, FAILOVER_BOUND)
        .await;
    let failover = scene.victim_fails_over("an edit flood").await;
    let seconds = started.elapsed().as_secs_f64() + 10.0;
    flood.abort();
    let landed = landed.load(Ordering::Relaxed);
    support::figure(format!(
        "a tenant landing {landed} edits of {FLOODED} policies with queries at every limit in {seconds:.0} s: another namespace's pin applied in {} ms, its failover in {} ms",
        pinned.as_millis(),
        failover.as_millis()
    ));
    assert!(
        landed as f64 >= 5.0 * seconds,
        "the flood landed {landed} edits"
    );
}

#[tokio::test]
async fn a_tenants_slow_health_queries_leave_another_namespaces_health_failover_on_time() {
    const SLOW: usize = 6;
    // A Prometheus answering three queries at once, the tenant's holding their slot for 8 s.
    let Some(tenant_env) = TestEnv::dedicated("slow-queries-tenant").await else {
        return;
    };
    let victim = TestEnv::on(tenant_env.cp, "slow-queries-victim")
        .await
        .expect("the victim's namespace");
    let prometheus = SlotHolder::start(3, &tenant_env.ns, Duration::from_secs(8));
    prometheus.set(&[("web", 0.01), ("web-east", 0.0), ("web-west", 0.0)]);
    for env in [&victim, &tenant_env] {
        env.ready_backends(&WEB_BACKENDS).await;
    }
    let mut controller = ControllerProcess::start_cluster_wide(
        &tenant_env,
        &["--prometheus-address", &prometheus.url],
    );
    let query = "backend_error_ratio{service=\"{{service}}\"}";
    victim
        .tenant()
        .apply(&PolicyBuilder::web_with_health(None, query).yaml());
    victim.wait_weights("web", &ON_WEB, WAIT).await;
    victim
        .wait_policy("web", WAIT, "the primary's first reading", |p| {
            p.status
                .as_ref()
                .and_then(|s| s.backends.first()?.health.as_ref()?.value)
                == Some(0.01)
        })
        .await;
    // Queries within every cost limit that hold a slot each, and one that would hold it for
    // seconds on any Prometheus (a month at one evaluation a second).
    let mut slow: Vec<String> = (0..SLOW)
        .map(|i| {
            PolicyBuilder::named(&format!("slow-{i}"), "web", &["web-east"])
                .with_health(None, query)
                .yaml()
        })
        .collect();
    let costly = "count_over_time(vector(1)[30d:1s])";
    slow.push(
        PolicyBuilder::named("costly", "web", &["web-east"])
            .with_health(None, costly)
            .yaml(),
    );
    tenant_env.tenant().apply(&slow.join("---\n"));
    let refused = tenant_env
        .wait_policy("costly", WAIT, "the costly query judged", |p| {
            condition(p, READY).is_some()
        })
        .await;
    // The tenant's queries are in flight: its slots are taken.
    let held = wait_until(WAIT, || async {
        prometheus
            .seen()
            .iter()
            .filter(|q| q.contains(&tenant_env.ns))
            .count()
            >= 2
    })
    .await;
    assert!(held, "the tenant's queries never reached Prometheus");
    let started = Instant::now();
    prometheus.set(&[("web", 0.9), ("web-east", 0.0), ("web-west", 0.0)]);
    // The health interval is 1 s: a reading, then the failover.
    victim.wait_weights("web", &ON_EAST, FAILOVER_BOUND).await;
    let took = started.elapsed();
    assert!(controller.still_running(), "the controller exited");
    let seen = prometheus.seen();
    assert!(
        !seen.iter().any(|q| q.contains("30d")),
        "the costly query was sent"
    );
    support::figure(format!(
        "a tenant's {SLOW} policies each holding one of a Prometheus' 3 query slots for 8 s, and one asking {costly} (the tenant reads: {}): another namespace failed over on its error ratio in {} ms",
        condition(&refused, READY).map(|c| c.2).unwrap_or_default(),
        took.as_millis()
    ));
}

/// Makes `service` of `env` not ready and ready again, `times` times, as fast as the API
/// server takes it.
async fn flap(env: &TestEnv, service: &str, times: usize) {
    for _ in 0..times {
        env.set_endpoints(service, 0, 1).await;
        env.set_endpoints(service, 1, 0).await;
    }
}

#[tokio::test]
async fn a_tenants_event_storm_delays_no_other_namespace_and_a_long_named_group_moves_with_an_event()
 {
    const STORMING: usize = 50;
    let Some(mut scene) = Scene::start("events", false, &[]).await else {
        return;
    };
    // Fifty policies on one primary: each flap is fifty failovers and fifty failbacks.
    scene.tenant.ready_backends(&WEB_BACKENDS).await;
    let storming: Vec<String> = (0..STORMING)
        .map(|i| PolicyBuilder::named(&format!("storm-{i}"), "web", &["web-east"]).yaml())
        .collect();
    scene.author.apply(&storming.join("---\n"));
    all_reconciled(&scene.tenant, "storm-", STORMING, WAIT).await;
    let (_, failover) = tokio::join!(flap(&scene.tenant, "web", 20), async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        victim_failover(&scene.victim).await
    });
    scene.still_up().await;
    let victims_event = event(&scene.victim, "web", conditions::ready::FAILED_OVER, WAIT).await;
    // A group named at the longest a name may be: its move is an Event too.
    let group = support::long_name("group", failover_core::api::rules::MAX_SUBDOMAIN);
    scene
        .victim
        .ready_backends(&["a-east", "a-west", "b-east", "b-west"])
        .await;
    for member in ["a", "b"] {
        scene.victims_author.apply(
            &PolicyBuilder::named(
                member,
                &format!("{member}-east"),
                &[&format!("{member}-west")],
            )
            .spec(|s: &mut FailoverPolicySpec| {
                s.primary_site = Some("east".into());
                s.secondaries[0].site = Some("west".into());
            })
            .yaml(),
        );
    }
    scene
        .victim
        .api::<FailoverGroup>()
        .create(
            &PostParams::default(),
            &FailoverGroup::new(
                &group,
                FailoverGroupSpec {
                    sites: vec!["east".into(), "west".into()],
                    members: vec!["a".into(), "b".into()],
                },
            ),
        )
        .await
        .expect("the group");
    // The group's first choice is made on its primary site before that site fails: a group
    // whose first choice already finds it failed starts on the next site, and moves nowhere.
    crate::groups::wait_group(&scene.victim, &group, "east", conditions::group::SITE_READY).await;
    scene.victim.set_endpoints("a-east", 0, 1).await;
    let moved = event(&scene.victim, &group, conditions::group::FAILED_OVER, WAIT).await;
    let (_, text) = scene.controller.admin_get("/metrics").await;
    let dropped = metric(&text, "failover_events_dropped_total").unwrap_or(0.0);
    support::figure(format!(
        "{STORMING} policies flapping 20 times: {dropped} of the tenant's Events dropped, another namespace failed over in {} ms with its Event ({}); a group named with 253 characters moved with the Event {}",
        failover.as_millis(),
        victims_event.note.unwrap_or_default(),
        moved.metadata.name.unwrap_or_default()
    ));
    assert!(dropped > 0.0, "the storm was bounded");
    scene.still_up().await;
}

#[tokio::test]
async fn a_broken_remote_clusters_error_reaches_only_the_namespaces_it_grants() {
    let Some(admin) = TestEnv::dedicated("remote-errors-admin").await else {
        return;
    };
    let granted = TestEnv::on(admin.cp, "remote-errors-granted")
        .await
        .expect("the granted namespace");
    let other = TestEnv::on(admin.cp, "remote-errors-other")
        .await
        .expect("the other namespace");
    // The admin's cluster Secret: a kubeconfig that does not parse, granted to one namespace.
    admin
        .declare_cluster_granting(
            "east",
            "this is: [not a kubeconfig\n",
            "2s",
            Some(&format!("{}=*", granted.ns)),
        )
        .await;
    let mut controller =
        ControllerProcess::start_cluster_wide(&admin, &["--cluster-secret-namespace", &admin.ns]);
    let from_east = |p: PolicyBuilder| {
        p.spec(|s| {
            s.secondaries[1].readiness_from = Some(ReadinessFrom {
                cluster: "east".into(),
                namespace: Some("shop".into()),
                service: Some("web".into()),
            })
        })
    };
    let mut messages = Vec::new();
    for env in [&granted, &other] {
        env.ready_backends(&WEB_BACKENDS).await;
        env.tenant().apply(&from_east(PolicyBuilder::web()).yaml());
        env.wait_weights("web", &ON_WEB, WAIT).await;
        let p = env
            .wait_policy("web", WAIT, "web-west's readiness judged", |p| {
                west_message(p).contains("cluster east")
            })
            .await;
        messages.push(west_message(&p));
    }
    let (told, refused) = (&messages[0], &messages[1]);
    support::figure(format!(
        "the granted namespace reads: {told}; another reads: {refused}"
    ));
    assert!(told.contains("does not parse"), "{told}");
    assert!(
        refused.contains("does not grant") && !refused.contains("parse"),
        "{refused}"
    );
    let started = Instant::now();
    other.set_endpoints("web", 0, 1).await;
    other.wait_weights("web", &ON_EAST, FAILOVER_BOUND).await;
    assert!(controller.still_running(), "the controller exited");
    support::figure(format!(
        "a broken remote cluster declared: another namespace failed over in {} ms",
        started.elapsed().as_millis()
    ));
}

fn west_message(p: &FailoverPolicy) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.backends.iter().find(|b| b.service == "web-west"))
        .and_then(|b| b.message.clone())
        .unwrap_or_default()
}
