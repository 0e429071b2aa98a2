//! What the controller costs the API server: one failover is one TrafficSplit write and one
//! status write, and nothing is written while nothing changes; five hundred policies sharing one
//! primary all fail over, without an error.

use std::time::{Duration, Instant};

use failover_core::{
    api::{FailoverPolicy, Phase, conditions::ready},
    route::trafficsplit::TrafficSplit,
};
use futures::{StreamExt, TryStreamExt};
use kube::{
    Api,
    api::PostParams,
    runtime::{WatchStreamExt, watcher},
};

use crate::support::{
    self, ControllerProcess, LONG_WAIT, ON_EAST, PolicyBuilder, WAIT, metric_sum, phase,
    routing_to_web, test_env, wait_until,
};

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
async fn five_hundred_policies_sharing_one_primary_all_fail_over() {
    let Some(env) = test_env!() else { return };
    env.ready_backends(&["shared", "east", "west"]).await;
    let controller = ControllerProcess::start(&env, &["--log-level", "warn"]);
    let api: kube::Api<FailoverPolicy> = env.api();
    for i in 0..500 {
        let p: FailoverPolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "failover.dev/v1alpha1", "kind": "FailoverPolicy", "metadata": {"name": format!("p{i}")},
            "spec": {"service": format!("apex{i}"), "primary": "shared", "secondaries": [{"service": "east"}, {"service": "west"}]}
        }))
        .expect("policy");
        api.create(&PostParams::default(), &p)
            .await
            .expect("create policy");
    }
    let splits: kube::Api<failover_core::route::trafficsplit::TrafficSplit> = env.api();
    let count = |weights: [i64; 3]| {
        let splits = splits.clone();
        async move {
            splits
                .list(&Default::default())
                .await
                .map(|l| {
                    l.items
                        .iter()
                        .filter(|t| t.spec.backends.iter().map(|b| b.weight).eq(weights))
                        .count()
                })
                .unwrap_or(0)
        }
    };
    assert!(
        wait_until(LONG_WAIT, || async { count([1, 0, 0]).await == 500 }).await,
        "500 TrafficSplits on the primary"
    );
    let flipped = Instant::now();
    env.set_endpoints("shared", 0, 1).await;
    assert!(
        wait_until(LONG_WAIT, || async { count([0, 1, 0]).await == 500 }).await,
        "500 TrafficSplits failed over"
    );
    let took = flipped.elapsed();
    let all = wait_until(LONG_WAIT, || async {
        api.list(&Default::default()).await.is_ok_and(|l| {
            l.items
                .iter()
                .filter(|p| phase(p) == Some(Phase::FailedOver))
                .count()
                == 500
        })
    })
    .await;
    assert!(all, "every status says FailedOver");
    let text = controller.admin_get("/metrics").await.1;
    let errors = metric_sum(&text, "failover_reconcile_errors_total");
    assert_eq!(errors, 0.0);
    support::figure(format!(
        "500 policies sharing one primary: all TrafficSplits failed over in {took:?}"
    ));
    // A thousand objects to delete: gone before this test ends, not while the next ones run.
    env.cleanup_and_wait(LONG_WAIT).await;
}
