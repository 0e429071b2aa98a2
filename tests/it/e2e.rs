//! The controller end to end, run as in production (the `failover-controller` binary as a child
//! process, one per test, watching the test's namespace) against the real control plane.

use std::time::{Duration, Instant};

use failover::api::conditions::{READY, ready};
use failover::{
    api::{FailoverPolicy, Phase, Strategy},
    route::trafficsplit::TrafficSplit,
};
use futures::{StreamExt, TryStreamExt};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};

use crate::support::{
    self, ControllerProcess, ON_EAST, ON_WEB, ON_WEST, PolicyBuilder, WAIT, WEB_BACKENDS,
    condition_reason, phase, routing_to_web, test_env, wait_until, weights,
};

#[tokio::test]
async fn routes_all_traffic_to_ready_primary_and_owns_the_split() {
    let Some((env, _controller)) = routing_to_web("primary-ready", PolicyBuilder::web()).await
    else {
        return;
    };
    let policy = env
        .wait_policy("web", WAIT, "phase Primary", |p| {
            phase(p) == Some(Phase::Primary)
        })
        .await;
    let ts = env
        .api::<TrafficSplit>()
        .get("web")
        .await
        .expect("TrafficSplit");
    let owner = ts
        .owner_references()
        .first()
        .cloned()
        .expect("ownerReference");
    assert_eq!(owner.uid, policy.uid().expect("uid"));
    assert_eq!(owner.controller, Some(true));
    assert_eq!(owner.block_owner_deletion, Some(true));
    assert_eq!(ts.spec.service, "web");
    let status = policy.status.expect("status");
    assert_eq!(status.active_backends, vec!["web"]);
    assert_eq!(status.ready_summary.as_deref(), Some("3/3"));
    assert_eq!(status.traffic_split.as_deref(), Some("web"));
    assert_eq!(status.observed_generation, policy.metadata.generation);
    assert_eq!(
        condition_reason(&env.policy("web").await.expect("policy"), READY).as_deref(),
        Some(ready::PRIMARY_ACTIVE)
    );
}

#[tokio::test]
async fn fails_over_to_first_ready_secondary_and_kubectl_shows_it() {
    let Some((env, _controller)) = routing_to_web("ordered", PolicyBuilder::web()).await else {
        return;
    };
    env.set_endpoints("web", 0, 2).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let policy = env
        .wait_policy("web", WAIT, ready::FAILED_OVER, |p| {
            phase(p) == Some(Phase::FailedOver)
        })
        .await;
    let status = policy.status.expect("status");
    assert!(status.last_failover_time.is_some());
    assert_eq!(
        status.backends[0].message.as_deref(),
        Some("0 of 2 endpoints ready, 1 needed")
    );
    let out = env.kubectl(&["get", "failoverpolicies"]);
    let table = String::from_utf8_lossy(&out.stdout);
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        &row[..5],
        ["web", "web", "web-east", ready::FAILED_OVER, "2/3"],
        "{table}"
    );
    // An Event tells what happened, on the policy.
    let seen = env.wait_event("web", ready::FAILED_OVER, None, WAIT).await;
    assert!(seen, "a FailedOver Event is recorded");
}

#[tokio::test]
async fn equal_strategy_splits_among_ready_secondaries() {
    let Some((env, _controller)) =
        routing_to_web("equal", PolicyBuilder::web().strategy(Strategy::Equal)).await
    else {
        return;
    };
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &[("web", 0), ("web-east", 1), ("web-west", 1)], WAIT)
        .await;
}

#[tokio::test]
async fn weighted_strategy_follows_weights() {
    let Some(env) = test_env!() else { return };
    let _controller = env.with_controller(&[]).await;
    env.apply_policy(
        "apiVersion: failover.dev/v1alpha1\nkind: FailoverPolicy\nmetadata: {name: web}\nspec:\n  service: web\n  primary: web\n  strategy: Weighted\n  secondaries:\n    - {service: web-east, weight: 300}\n    - {service: web-west, weight: 700}\n",
    );
    env.wait_weights("web", &ON_WEB, WAIT).await;
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights(
        "web",
        &[("web", 0), ("web-east", 300), ("web-west", 700)],
        WAIT,
    )
    .await;
    env.set_endpoints("web-west", 0, 1).await;
    env.wait_weights(
        "web",
        &[("web", 0), ("web-east", 300), ("web-west", 0)],
        WAIT,
    )
    .await;
}

#[tokio::test]
async fn secondary_readiness_change_during_failover_moves_traffic() {
    let Some((env, _controller)) = routing_to_web("secondary-change", PolicyBuilder::web()).await
    else {
        return;
    };
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    env.set_endpoints("web-east", 0, 1).await;
    env.wait_weights("web", &ON_WEST, WAIT).await;
    env.set_endpoints("web-east", 3, 0).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
}

#[tokio::test]
async fn fails_back_when_primary_recovers() {
    let Some((env, _controller)) = routing_to_web("failback", PolicyBuilder::web()).await else {
        return;
    };
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    env.set_endpoints("web", 2, 0).await;
    env.wait_weights("web", &ON_WEB, WAIT).await;
    let p = env
        .wait_policy("web", WAIT, "failback recorded", |p| {
            p.status
                .as_ref()
                .is_some_and(|s| s.last_failback_time.is_some() && s.phase == Some(Phase::Primary))
        })
        .await;
    let s = p.status.expect("status");
    assert!(s.last_failback_time >= s.last_failover_time);
}

#[tokio::test]
async fn keeps_weights_when_nothing_is_ready() {
    let Some((env, _controller)) = routing_to_web("none-ready", PolicyBuilder::web()).await else {
        return;
    };
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    env.set_endpoints("web-east", 0, 1).await;
    env.wait_weights("web", &ON_WEST, WAIT).await;
    let before = env.split_weights("web").await;
    env.set_endpoints("web-west", 0, 1).await;
    let p = env
        .wait_policy("web", WAIT, ready::NO_READY_BACKEND, |p| {
            phase(p) == Some(Phase::NoReadyBackend)
        })
        .await;
    assert_eq!(
        condition_reason(&p, READY).as_deref(),
        Some(ready::NO_READY_BACKEND)
    );
    // Fail static: the route keeps exactly the weights it had before the last backend went
    // (the status is written after the route, so the route is as decided).
    assert_eq!(env.split_weights("web").await, before);
    assert_eq!(before, Some(weights(&ON_WEST)));
}

#[tokio::test]
async fn failover_after_holds_traffic_until_due() {
    let Some((env, _controller)) =
        routing_to_web("hold", PolicyBuilder::web().holds("3s", "2s")).await
    else {
        return;
    };
    let lost = Instant::now();
    env.set_endpoints("web", 0, 1).await;
    env.wait_policy("web", WAIT, ready::FAILOVER_PENDING, |p| {
        condition_reason(p, READY).as_deref() == Some(ready::FAILOVER_PENDING)
    })
    .await;
    assert_eq!(
        env.split_weights("web").await.expect("split")[0].1,
        1,
        "still on the primary during the hold"
    );
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let held = lost.elapsed();
    assert!(
        held >= Duration::from_millis(2900),
        "failover happened after {held:?}, before failoverAfter"
    );
    let back = Instant::now();
    env.set_endpoints("web", 1, 0).await;
    env.wait_policy("web", WAIT, ready::FAILBACK_PENDING, |p| {
        condition_reason(p, READY).as_deref() == Some(ready::FAILBACK_PENDING)
    })
    .await;
    env.wait_weights("web", &ON_WEB, WAIT).await;
    assert!(
        back.elapsed() >= Duration::from_millis(1900),
        "failback after {:?}",
        back.elapsed()
    );
    support::figure(format!(
        "failoverAfter 3s took {held:?}; failbackAfter 2s took {:?}",
        back.elapsed()
    ));
}

#[tokio::test]
async fn foreign_traffic_split_is_never_touched() {
    let Some(env) = test_env!() else { return };
    env.ready_backends(&WEB_BACKENDS).await;
    let foreign = serde_json::json!({
        "apiVersion": "split.smi-spec.io/v1alpha2", "kind": "TrafficSplit",
        "metadata": {"name": "web"},
        "spec": {"service": "web", "backends": [{"service": "other", "weight": 5}]}
    });
    let ts: TrafficSplit = serde_json::from_value(foreign).expect("ts");
    let created = env
        .api::<TrafficSplit>()
        .create(&PostParams::default(), &ts)
        .await
        .expect("create foreign split");
    let _controller = ControllerProcess::start(&env, &[]);
    env.apply(&PolicyBuilder::web());
    let p = env
        .wait_policy("web", WAIT, ready::TRAFFIC_SPLIT_CONFLICT, |p| {
            condition_reason(p, READY).as_deref() == Some(ready::TRAFFIC_SPLIT_CONFLICT)
        })
        .await;
    let ready = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == READY))
        .expect(READY);
    assert_eq!(ready.status, "False");
    assert!(
        ready.message.contains("so traffic to web is not written"),
        "the decision not written is in the condition: {}",
        ready.message
    );
    let status = p.status.as_ref().expect("status");
    assert!(
        status.active_backends.is_empty() && status.phase.is_none(),
        "no route of this policy is in place, and the status says so: {status:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = env
        .api::<TrafficSplit>()
        .get("web")
        .await
        .expect("foreign split");
    assert_eq!(
        after.resource_version(),
        created.resource_version(),
        "the foreign TrafficSplit was modified"
    );
    // Once the foreign split is gone, the policy takes its name.
    env.api::<TrafficSplit>()
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    env.wait_weights("web", &ON_WEB, WAIT).await;
}

#[tokio::test]
async fn hand_edit_of_the_split_is_reverted() {
    let Some((env, _controller)) = routing_to_web("hand-edit", PolicyBuilder::web()).await else {
        return;
    };
    let edit = serde_json::json!({"spec": {"backends": [{"service": "web", "weight": 0}, {"service": "web-east", "weight": 9}, {"service": "web-west", "weight": 0}]}});
    env.api::<TrafficSplit>()
        .patch("web", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .expect("hand edit");
    env.wait_weights("web", &ON_WEB, WAIT).await;
}

#[tokio::test]
async fn deleting_the_policy_garbage_collects_its_split() {
    let Some((env, _controller)) = routing_to_web("gc-split", PolicyBuilder::web()).await else {
        return;
    };
    env.api::<FailoverPolicy>()
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete policy");
    let gone = wait_until(Duration::from_secs(60), || async {
        env.split_weights("web").await.is_none()
    })
    .await;
    assert!(gone, "the TrafficSplit was not garbage-collected");
}

#[tokio::test]
async fn missing_service_and_missing_slices_are_reported() {
    let Some(env) = test_env!() else { return };
    env.create_service("web-east").await;
    env.ready_backends(&["web-west"]).await;
    let _controller = ControllerProcess::start(&env, &[]);
    env.apply(&PolicyBuilder::web());
    env.wait_weights("web", &ON_WEST, WAIT).await;
    let p = env
        .wait_policy("web", WAIT, "status", |p| {
            phase(p) == Some(Phase::FailedOver)
        })
        .await;
    let backends = p.status.expect("status").backends;
    assert_eq!(backends[0].message.as_deref(), Some("Service not found"));
    assert_eq!(
        backends[1].message.as_deref(),
        Some("Service has no EndpointSlices")
    );
}

/// Changes seen by a watch, with the time each was seen.
type Seen<K> = std::sync::Arc<std::sync::Mutex<Vec<(Instant, K)>>>;

/// Records every change a watch sees, with the time it was seen.
fn record<K>(api: Api<K>) -> (Seen<K>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    let task = tokio::spawn(async move {
        let mut stream = watcher(api, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Ok(Some(obj)) = stream.try_next().await {
            if let Ok(mut seen) = sink.lock() {
                seen.push((Instant::now(), obj));
            }
        }
    });
    (seen, task)
}

/// Measures, for the record, the latency from an acknowledged EndpointSlice write to the
/// TrafficSplit change seen by an independent watch, and counts the controller's writes for one
/// failover and for an idle period: exactly one TrafficSplit write and one status write.
#[tokio::test]
async fn one_failover_costs_one_split_write_and_one_status_write() {
    let Some((env, _controller)) = routing_to_web("write-count", PolicyBuilder::web()).await else {
        return;
    };
    env.wait_policy("web", WAIT, "settled", |p| phase(p) == Some(Phase::Primary))
        .await;
    let (splits, split_task) = record(env.api::<TrafficSplit>());
    let (policies, policy_task) = record(env.api::<FailoverPolicy>());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let baseline = (
        splits.lock().map(|s| s.len()).unwrap_or(0),
        policies.lock().map(|s| s.len()).unwrap_or(0),
    );

    let started = Instant::now();
    env.set_endpoints("web", 0, 1).await;
    let acked = Instant::now();
    env.wait_weights("web", &ON_EAST, WAIT).await;
    env.wait_policy("web", WAIT, ready::FAILED_OVER, |p| {
        phase(p) == Some(Phase::FailedOver)
    })
    .await;
    // Quiet period: nothing changes, so nothing may be written.
    tokio::time::sleep(Duration::from_secs(3)).await;
    split_task.abort();
    policy_task.abort();

    let splits = splits
        .lock()
        .map(|s| s[baseline.0..].to_vec())
        .unwrap_or_default();
    let policies = policies
        .lock()
        .map(|s| s[baseline.1..].to_vec())
        .unwrap_or_default();
    assert_eq!(
        splits.len(),
        1,
        "TrafficSplit writes for one failover: {splits:#?}"
    );
    assert_eq!(
        policies.len(),
        1,
        "status writes for one failover: {:#?}",
        policies.iter().map(|(_, p)| &p.status).collect::<Vec<_>>()
    );
    let seen = splits[0].0;
    support::figure(format!(
        "failover latency: EndpointSlice write acknowledged after {:?}; TrafficSplit change seen by a watch {:?} after the acknowledgement",
        acked - started,
        seen.saturating_duration_since(acked)
    ));
}

#[tokio::test]
async fn two_policies_on_one_apex_give_one_route_and_deleting_the_older_hands_it_over() {
    let Some(env) = test_env!() else { return };
    env.ready_backends(&["api-a", "api-b", "api-c"]).await;
    let on_api = |name: &str, primary: &str| {
        PolicyBuilder::named(name, primary, &["api-b"]).spec(|s| s.service = "api".into())
    };
    env.apply(&on_api("api-first", "api-a"));
    // creationTimestamp counts seconds: the second policy is younger by at least one.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    env.apply(&on_api("api-second", "api-c"));
    // The younger one's route as an earlier release would have left it: owned by it, in place.
    let younger = env.policy("api-second").await.expect("the younger policy");
    let leftover: TrafficSplit = serde_json::from_value(serde_json::json!({
        "apiVersion": "split.smi-spec.io/v1alpha2", "kind": "TrafficSplit",
        "metadata": {"name": "api-second", "labels": {"failover.dev/policy": "api-second"},
            "ownerReferences": [{"apiVersion": "failover.dev/v1alpha1", "kind": "FailoverPolicy",
                "name": "api-second", "uid": younger.uid(), "controller": true}]},
        "spec": {"service": "api", "backends": [{"service": "api-c", "weight": 1}, {"service": "api-b", "weight": 0}]}
    }))
    .expect("split");
    let splits = env.api::<TrafficSplit>();
    splits
        .create(&PostParams::default(), &leftover)
        .await
        .expect("creating the leftover route");

    let _controller = ControllerProcess::start(&env, &[]);
    env.wait_weights("api-first", &[("api-a", 1), ("api-b", 0)], WAIT)
        .await;
    let p = env
        .wait_policy("api-second", WAIT, ready::APEX_CONFLICT, |p| {
            condition_reason(p, READY).as_deref() == Some(ready::APEX_CONFLICT)
        })
        .await;
    let (_, _, message) = support::condition(&p, READY).unwrap_or_default();
    assert!(
        message.contains(&format!(
            "apex Service api is routed by policy {}/api-first",
            env.ns
        )),
        "{message}"
    );
    let routes_of_api = || async {
        splits
            .list(&Default::default())
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .filter(|s| s.spec.service == "api")
                    .map(|s| s.name_any())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let one = wait_until(WAIT, || async { routes_of_api().await == ["api-first"] }).await;
    assert!(one, "routes of api: {:?}", routes_of_api().await);
    support::figure(format!("the younger policy says: {message}"));

    // Deleting the older policy hands the apex over.
    let out = env.kubectl(&["delete", "failoverpolicy", "api-first"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    env.wait_weights("api-second", &[("api-c", 1), ("api-b", 0)], WAIT)
        .await;
    env.wait_policy("api-second", WAIT, ready::PRIMARY_ACTIVE, |p| {
        condition_reason(p, READY).as_deref() == Some(ready::PRIMARY_ACTIVE)
    })
    .await;
    let handed = wait_until(WAIT, || async { routes_of_api().await == ["api-second"] }).await;
    assert!(handed, "routes of api: {:?}", routes_of_api().await);
}
