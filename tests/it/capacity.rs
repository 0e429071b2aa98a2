//! Capacity-aware failover on the control plane: a failover sends each secondary only what its
//! ready endpoints serve and says how much is unserved; with `capacity.scale`, the controller
//! raises the secondary's HorizontalPodAutoscaler or Deployment when the primary fails, restores
//! it after the failback, keeps a hand edit made in between, and scales nothing unless the
//! cluster admin allowed it.

use failover_core::api::{
    CapacitySpec, ScaleKind, ScaleSpec, ScaleTarget,
    conditions::{DEMAND_UNSERVED, SCALED_UP, capacity, scaling},
};

use crate::support::{
    self, ControllerProcess, PolicyBuilder, TestEnv, WAIT, WEB_BACKENDS, condition, hpa, test_env,
    wait_until,
};

/// The usual policy, 10 requests/s per endpoint; `web-east` scaled through `target` when given.
fn sized(target: Option<ScaleKind>) -> PolicyBuilder {
    PolicyBuilder::web().spec(move |s| {
        s.capacity = Some(CapacitySpec {
            unserved: Default::default(),
            per_endpoint: 10,
            primary_per_endpoint: None,
            scale: target.map(|_| ScaleSpec {
                deadline: "1m".into(),
                max_replicas: 10,
            }),
        });
        s.secondaries[0].scale_target = target.map(|kind| ScaleTarget {
            kind,
            name: "web-east".into(),
        });
    })
}

/// The usual backends (`web` with 3 endpoints), a controller with `extra` arguments, `policy`.
async fn scene(env: &TestEnv, extra: &[&str], policy: &PolicyBuilder) -> ControllerProcess {
    env.ready_backends(&WEB_BACKENDS).await;
    env.set_endpoints("web", 3, 0).await;
    let controller = ControllerProcess::start(env, extra);
    env.apply(policy);
    env.wait_weights("web", &[("web", 1), ("web-east", 0), ("web-west", 0)], WAIT)
        .await;
    controller
}

/// A Deployment `web-east` of one replica, and (for `ScaleKind::HorizontalPodAutoscaler`) an
/// HPA of it with `minReplicas: 1`, each consenting to the policy `web`'s changes.
fn workload(env: &TestEnv, kind: ScaleKind) {
    let deployment = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web-east, annotations: {failover.dev/policies: web}}
spec:
  replicas: 1
  selector: {matchLabels: {app: web-east}}
  template:
    metadata: {labels: {app: web-east}}
    spec: {containers: [{name: web, image: localhost/backend:latest}]}
"#;
    support::ok(
        &env.kubectl_stdin(&["apply", "-f", "-"], deployment),
        "a Deployment",
    );
    if kind == ScaleKind::HorizontalPodAutoscaler {
        hpa(env, "web-east", 5);
    }
}

/// What the workload has now: the HPA's `minReplicas`, or the Deployment's replicas.
fn replicas(env: &TestEnv, kind: ScaleKind) -> String {
    let (resource, path) = match kind {
        ScaleKind::HorizontalPodAutoscaler => ("hpa", "{.spec.minReplicas}"),
        ScaleKind::Deployment => ("deployment", "{.spec.replicas}"),
    };
    support::ok(
        &env.kubectl(&[
            "get",
            resource,
            "web-east",
            "-o",
            &format!("jsonpath={path}"),
        ]),
        "the workload's replicas",
    )
}

async fn wait_replicas(env: &TestEnv, kind: ScaleKind, want: &str) {
    let reached = wait_until(WAIT, || async { replicas(env, kind) == want }).await;
    assert!(
        reached,
        "{kind:?} web-east: wanted {want}, has {}",
        replicas(env, kind)
    );
}

#[tokio::test]
async fn a_failover_sends_each_secondary_only_what_its_ready_endpoints_serve() {
    let Some(env) = test_env!() else { return };
    let c = scene(&env, &[], &sized(None)).await;
    // 30 requests/s; web-east and web-west serve 10 each: a third stays on the primary.
    env.set_endpoints("web", 0, 3).await;
    env.wait_weights(
        "web",
        &[("web", 3334), ("web-east", 3333), ("web-west", 3333)],
        WAIT,
    )
    .await;
    let policy = env
        .wait_policy("web", WAIT, "DemandUnserved=True", |p| {
            condition(p, DEMAND_UNSERVED)
                .is_some_and(|(s, r, _)| s == "True" && r == capacity::NOT_ENOUGH_CAPACITY)
        })
        .await;
    let status = policy.status.expect("status");
    let load = status.capacity.expect("status.capacity");
    assert_eq!((load.demand, load.unserved.as_str()), (30, "33.33%"));
    let text = support::ok(
        &support::kubectl_failover(&env, &["status", "web"]),
        "kubectl failover status",
    );
    assert!(
        text.contains("capacity: demand 30 requests/s, 33.33% unserved"),
        "{text}"
    );
    let series = |name: &str| format!("{name}{{namespace=\"{}\",policy=\"web\"}}", env.ns);
    let metrics = c.admin_get("/metrics").await.1;
    assert_eq!(
        support::metric(&metrics, &series("failover_demand_requests_per_second")),
        Some(30.0)
    );
    assert_eq!(
        support::metric(&metrics, &series("failover_unserved_ratio")),
        Some(0.3333)
    );
    // web-east gets a second endpoint: it serves 20, west 10, nothing unserved.
    env.set_endpoints("web-east", 2, 0).await;
    env.wait_weights(
        "web",
        &[("web", 0), ("web-east", 6667), ("web-west", 3333)],
        WAIT,
    )
    .await;
    support::figure(format!(
        "capacity: demand 30 requests/s, secondaries serving 10 + 10: {} unserved, weights 3334/3333/3333",
        load.unserved
    ));
}

#[tokio::test]
async fn scaling_raises_the_deployment_for_a_failover_and_restores_it_after_the_failback() {
    let Some(env) = test_env!() else { return };
    let kind = ScaleKind::Deployment;
    workload(&env, kind);
    let _c = scene(&env, &["--allow-scaling"], &sized(Some(kind))).await;
    env.set_endpoints("web", 0, 3).await;
    // 30 requests/s at 10 per endpoint: 3 replicas.
    wait_replicas(&env, kind, "3").await;
    let policy = env
        .wait_policy("web", WAIT, "ScaledUp=True", |p| {
            condition(p, SCALED_UP).is_some_and(|(s, ..)| s == "True")
        })
        .await;
    let scaled = policy.status.expect("status").scaled;
    assert_eq!(
        scaled
            .iter()
            .map(|w| (w.original_replicas, w.replicas, w.released))
            .collect::<Vec<_>>(),
        vec![(1, 3, false)]
    );
    assert!(
        env.wait_event("web", scaling::SCALED_UP, Some("Normal"), WAIT)
            .await
    );
    env.set_endpoints("web", 3, 0).await;
    wait_replicas(&env, kind, "1").await;
    env.wait_policy("web", WAIT, "ScaledUp=False", |p| {
        condition(p, SCALED_UP).is_some_and(|(s, r, _)| s == "False" && r == scaling::NOT_SCALED)
    })
    .await;
    assert!(
        env.wait_event("web", scaling::SCALE_RESTORED, Some("Normal"), WAIT)
            .await
    );
}

#[tokio::test]
async fn a_hand_edit_of_the_scaled_hpa_is_kept_and_nothing_is_restored() {
    let Some(env) = test_env!() else { return };
    let kind = ScaleKind::HorizontalPodAutoscaler;
    workload(&env, kind);
    let _c = scene(&env, &["--allow-scaling"], &sized(Some(kind))).await;
    env.set_endpoints("web", 0, 3).await;
    wait_replicas(&env, kind, "3").await;
    // Someone sets 5 by hand during the failover; a change of readiness wakes the controller.
    support::ok(
        &env.kubectl(&[
            "patch",
            "hpa",
            "web-east",
            "--type=merge",
            "-p",
            r#"{"spec":{"minReplicas":5}}"#,
        ]),
        "kubectl patch hpa",
    );
    env.set_endpoints("web-west", 1, 1).await;
    env.wait_policy("web", WAIT, "the record released", |p| {
        p.status
            .as_ref()
            .is_some_and(|s| s.scaled.iter().any(|w| w.released))
    })
    .await;
    assert_eq!(replicas(&env, kind), "5");
    env.set_endpoints("web", 3, 0).await;
    env.wait_policy("web", WAIT, "no record after the failback", |p| {
        p.status.as_ref().is_some_and(|s| s.scaled.is_empty())
    })
    .await;
    assert_eq!(replicas(&env, kind), "5", "the hand edit is kept");
}

#[tokio::test]
async fn without_the_admins_consent_nothing_is_scaled_and_the_condition_says_why() {
    let Some(env) = test_env!() else { return };
    let kind = ScaleKind::HorizontalPodAutoscaler;
    workload(&env, kind);
    let _c = scene(&env, &[], &sized(Some(kind))).await;
    env.set_endpoints("web", 0, 3).await;
    let policy = env
        .wait_policy("web", WAIT, "ScaledUp ScalingFailed", |p| {
            condition(p, SCALED_UP).is_some_and(|(_, r, _)| r == scaling::SCALING_FAILED)
        })
        .await;
    let (_, _, message) = condition(&policy, SCALED_UP).expect("ScaledUp");
    assert!(message.contains("--allow-scaling"), "{message}");
    assert_eq!(replicas(&env, kind), "1");
}
