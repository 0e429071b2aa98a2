//! Whatever the controller raised, it restores, as a tenant's policies see it (the chart's
//! policy-edit role): deleting a policy while its secondaries are scaled up restores the
//! Deployment's replicas and the HPA's `minReplicas` before the policy goes (a finalizer, held
//! only while something is raised; the controller runs under the chart's RBAC with
//! `scaling.enabled`), and a deletion is not held when the workload is gone or scaling is off;
//! removing a secondary's `scaleTarget` restores its workload; one workload named on two
//! secondaries is refused at `kubectl apply`; a workload whose annotation `failover.dev/policies`
//! does not name the policy is not raised, whatever the policy's author writes.

use failover_core::api::{
    CapacitySpec, FailoverPolicy, SCALE_FINALIZER, ScaleKind, ScaleSpec, ScaleTarget, Strategy,
    conditions::{SCALED_UP, scaling},
};

use crate::support::{
    self, CHART, ControllerProcess, ON_WEB, PolicyBuilder, TestEnv, WAIT, WEB_BACKENDS, helm, hpa,
    ok, test_env, wait_until,
};

/// The usual policy at 10 requests/s per endpoint, `Equal`, each secondary scaled through its
/// target (`None`: not scaled).
fn scaled(east: Option<ScaleKind>, west: Option<ScaleKind>) -> PolicyBuilder {
    PolicyBuilder::web()
        .strategy(Strategy::Equal)
        .spec(move |s| {
            s.capacity = Some(CapacitySpec {
                unserved: Default::default(),
                per_endpoint: 10,
                primary_per_endpoint: None,
                scale: Some(ScaleSpec {
                    deadline: "1m".into(),
                    max_replicas: 10,
                }),
            });
            for (secondary, kind) in s.secondaries.iter_mut().zip([east, west]) {
                secondary.scale_target = kind.map(|kind| ScaleTarget {
                    kind,
                    name: secondary.service.clone(),
                });
            }
        })
}

/// A Deployment `name` of one replica, consenting to the policy `web`'s changes.
fn deployment(env: &TestEnv, name: &str) {
    deployment_consenting(env, name, "web");
}

/// A Deployment `name` of one replica, consenting to the changes of the policies `consents`
/// names.
fn deployment_consenting(env: &TestEnv, name: &str, consents: &str) {
    let yaml = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, annotations: {{failover.dev/policies: '{consents}'}}}}\nspec:\n  replicas: 1\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec: {{containers: [{{name: web, image: localhost/backend:latest}}]}}\n"
    );
    ok(
        &env.kubectl_stdin(&["apply", "-f", "-"], &yaml),
        "a Deployment",
    );
}

/// What the workload has now: an HPA's `minReplicas`, or a Deployment's replicas.
fn replicas(env: &TestEnv, kind: ScaleKind, name: &str) -> String {
    let (resource, path) = match kind {
        ScaleKind::HorizontalPodAutoscaler => ("hpa", "{.spec.minReplicas}"),
        ScaleKind::Deployment => ("deployment", "{.spec.replicas}"),
    };
    let jsonpath = format!("jsonpath={path}");
    ok(
        &env.kubectl(&["get", resource, name, "-o", &jsonpath]),
        "the workload's replicas",
    )
}

async fn wait_replicas(env: &TestEnv, kind: ScaleKind, name: &str, want: &str) {
    let reached = wait_until(WAIT, || async { replicas(env, kind, name) == want }).await;
    assert!(
        reached,
        "{kind:?} {name}: wanted {want}, has {}",
        replicas(env, kind, name)
    );
}

fn finalized(p: &FailoverPolicy) -> bool {
    p.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == SCALE_FINALIZER)
}

/// The chart installed in the test's namespace with `scaling.enabled` (no Pod of its own), and
/// the controller running under exactly its RBAC; the release's name.
fn under_the_charts_rbac(env: &TestEnv) -> (ControllerProcess, String) {
    let release = format!("sr{}", std::process::id());
    let args = [
        "install",
        &release,
        CHART,
        "--namespace",
        &env.ns,
        "--set",
        &format!("watchNamespace={}", env.ns),
        "--set",
        "scaling.enabled=true",
        "--set",
        "replicaCount=0",
        "--wait=false",
    ];
    ok(&helm(env, &args), "helm install");
    let kubeconfig = env.token_kubeconfig(&format!("{release}-failover-controller"));
    let controller =
        ControllerProcess::start_with_kubeconfig(env, &kubeconfig, &["--allow-scaling"]);
    (controller, release)
}

#[tokio::test]
async fn deleting_a_scaled_up_policy_restores_the_deployment_and_the_hpa_before_it_goes() {
    let Some(env) = test_env!() else { return };
    for name in ["web-east", "web-west"] {
        deployment(&env, name);
    }
    hpa(&env, "web-west", 5);
    env.ready_backends(&WEB_BACKENDS).await;
    env.set_endpoints("web", 3, 0).await;
    let (controller, release) = under_the_charts_rbac(&env);
    let tenant = env.tenant();
    let policy = scaled(
        Some(ScaleKind::Deployment),
        Some(ScaleKind::HorizontalPodAutoscaler),
    );
    tenant.apply(&policy.yaml());
    env.wait_weights("web", &ON_WEB, WAIT).await;
    let before = env.policy("web").await.expect("the policy");
    assert!(!finalized(&before), "no finalizer while nothing is raised");

    // 30 requests/s shared equally: 15 each, 2 replicas each.
    env.set_endpoints("web", 0, 3).await;
    wait_replicas(&env, ScaleKind::Deployment, "web-east", "2").await;
    wait_replicas(&env, ScaleKind::HorizontalPodAutoscaler, "web-west", "2").await;
    env.wait_policy("web", WAIT, "two records and the finalizer", |p| {
        finalized(p) && p.status.as_ref().is_some_and(|s| s.scaled.len() == 2)
    })
    .await;

    ok(
        &tenant.kubectl(&["delete", "failoverpolicy", "web", "--timeout=60s"]),
        "kubectl delete as the tenant",
    );
    assert!(env.policy("web").await.is_none(), "the policy is gone");
    assert_eq!(replicas(&env, ScaleKind::Deployment, "web-east"), "1");
    assert_eq!(
        replicas(&env, ScaleKind::HorizontalPodAutoscaler, "web-west"),
        "1"
    );
    support::no_permission_missing_then_uninstall(&env, &controller, &release);
}

#[tokio::test]
async fn removing_the_scale_target_of_a_scaled_up_secondary_restores_its_workload() {
    let Some(env) = test_env!() else { return };
    deployment(&env, "web-east");
    let _c = env.with_controller(&["--allow-scaling"]).await;
    env.set_endpoints("web", 3, 0).await;
    let tenant = env.tenant();
    tenant.apply(&scaled(Some(ScaleKind::Deployment), None).yaml());
    env.wait_weights("web", &ON_WEB, WAIT).await;
    env.set_endpoints("web", 0, 3).await;
    // 30 requests/s shared equally: web-west, not scaled, serves 10; web-east is raised for
    // the rest.
    env.wait_policy("web", WAIT, "a record", |p| {
        p.status.as_ref().is_some_and(|s| !s.scaled.is_empty())
    })
    .await;
    let raised = replicas(&env, ScaleKind::Deployment, "web-east");
    assert_ne!(raised, "1", "web-east is raised");

    tenant.apply(&scaled(None, None).yaml());
    wait_replicas(&env, ScaleKind::Deployment, "web-east", "1").await;
    env.wait_policy("web", WAIT, "no record and no finalizer", |p| {
        !finalized(p) && p.status.as_ref().is_some_and(|s| s.scaled.is_empty())
    })
    .await;
    assert!(
        env.wait_event(
            "web",
            failover_core::api::conditions::scaling::SCALE_RESTORED,
            Some("Normal"),
            WAIT
        )
        .await
    );
    support::figure(format!(
        "scaleTarget removed during a failover: web-east restored from {raised} to 1"
    ));
}

#[tokio::test]
async fn an_author_who_may_edit_only_policies_cannot_raise_a_workload_that_does_not_consent() {
    let Some(env) = test_env!() else { return };
    deployment_consenting(&env, "web-east", "");
    let _c = env.with_controller(&["--allow-scaling"]).await;
    env.set_endpoints("web", 3, 0).await;
    let tenant = env.tenant();
    let annotate = [
        "annotate",
        "deployment",
        "web-east",
        "--overwrite",
        "failover.dev/policies=web",
    ];
    assert!(
        !tenant.kubectl(&annotate).status.success(),
        "the author gave itself the workload's consent"
    );
    tenant.apply(&scaled(Some(ScaleKind::Deployment), None).yaml());
    env.wait_weights("web", &ON_WEB, WAIT).await;
    env.set_endpoints("web", 0, 3).await;
    let refused = env
        .wait_policy("web", WAIT, "ScaledUp=False, not consented", |p| {
            support::condition(p, SCALED_UP)
                .is_some_and(|c| c.1 == scaling::SCALE_TARGET_NOT_CONSENTED)
        })
        .await;
    let message = support::condition(&refused, SCALED_UP)
        .map(|c| c.2)
        .unwrap_or_default();
    assert!(
        message.contains("Deployment web-east does not consent"),
        "{message}"
    );
    assert_eq!(replicas(&env, ScaleKind::Deployment, "web-east"), "1");
    let records = refused.status.as_ref().map_or(0, |s| s.scaled.len());
    assert_eq!(records, 0, "nothing is raised, so nothing is recorded");

    // Its owner consents: it is raised for the failover.
    ok(&env.kubectl(&annotate), "the owner's consent");
    let raised = wait_until(WAIT, || async {
        replicas(&env, ScaleKind::Deployment, "web-east") != "1"
    })
    .await;
    assert!(raised, "web-east was not raised once it consented");
    support::figure(format!(
        "scaleTarget: a Deployment without consent kept 1 replica; once it consented it was raised to {}",
        replicas(&env, ScaleKind::Deployment, "web-east")
    ));
}

/// Applies the policy as the tenant, fails the primary over and waits until web-east is raised
/// and the policy holds its finalizer.
async fn raised(env: &TestEnv, tenant: &support::Tenant) {
    env.set_endpoints("web", 3, 0).await;
    tenant.apply(&scaled(Some(ScaleKind::Deployment), None).yaml());
    env.wait_weights("web", &ON_WEB, WAIT).await;
    env.set_endpoints("web", 0, 3).await;
    env.wait_policy("web", WAIT, "a record and the finalizer", |p| {
        finalized(p) && p.status.as_ref().is_some_and(|s| !s.scaled.is_empty())
    })
    .await;
}

/// The tenant deletes the policy, and it goes.
async fn deleted(env: &TestEnv, tenant: &support::Tenant) {
    ok(
        &tenant.kubectl(&["delete", "failoverpolicy", "web", "--timeout=30s"]),
        "kubectl delete as the tenant",
    );
    assert!(env.policy("web").await.is_none(), "the policy is gone");
}

#[tokio::test]
async fn a_deleted_policy_is_not_held_when_its_workload_is_gone_or_scaling_is_off() {
    let Some(env) = test_env!() else { return };
    deployment(&env, "web-east");
    let allowed = env.with_controller(&["--allow-scaling"]).await;
    let tenant = env.tenant();
    raised(&env, &tenant).await;
    ok(
        &env.kubectl(&["delete", "deployment", "web-east"]),
        "deleting the workload",
    );
    deleted(&env, &tenant).await;

    // Raised again, then the controller restarted without --allow-scaling.
    deployment(&env, "web-east");
    raised(&env, &tenant).await;
    let raised_to = replicas(&env, ScaleKind::Deployment, "web-east");
    drop(allowed);
    let _off = ControllerProcess::start(&env, &[]);
    deleted(&env, &tenant).await;
    assert_eq!(
        replicas(&env, ScaleKind::Deployment, "web-east"),
        raised_to,
        "nothing is restored without --allow-scaling"
    );
}

#[tokio::test]
async fn one_workload_named_on_two_secondaries_is_refused_at_apply() {
    let Some(env) = test_env!() else { return };
    let tenant = env.tenant();
    let twice = scaled(Some(ScaleKind::Deployment), Some(ScaleKind::Deployment)).spec(|s| {
        for secondary in &mut s.secondaries {
            if let Some(target) = &mut secondary.scale_target {
                target.name = "web".into();
            }
        }
    });
    let refused = tenant.apply_refused(&twice.yaml());
    assert!(
        refused.contains("spec.secondaries")
            && refused.contains(failover_core::api::rules::DISTINCT_SCALE_TARGETS.message),
        "{refused}"
    );
    // Two workloads of one name and two kinds are two workloads.
    let two = scaled(
        Some(ScaleKind::Deployment),
        Some(ScaleKind::HorizontalPodAutoscaler),
    )
    .spec(|s| {
        for secondary in &mut s.secondaries {
            if let Some(target) = &mut secondary.scale_target {
                target.name = "web".into();
            }
        }
    });
    tenant.apply(&two.yaml());
}
