//! Sharing a cluster, end to end: a policy's author bound to a Role of one namespace (write
//! FailoverPolicies there, nothing else) tries to borrow the controller's reach: its health
//! queries sent to an address the admin did not allow, a query reading another namespace's
//! series, readiness read from a remote namespace its namespace is not granted. Each is refused
//! with a condition naming the field and the rule, and what the tenant sees is printed.

mod support;

use std::time::Duration;

use failover::api::conditions::{CLUSTERS_REACHABLE, HEALTH_QUERY_FAILED, clusters, health};
use failover::api::{FailoverPolicy, ReadinessFrom};
use support::{
    ControllerProcess, Exporter, ON_WEB, PolicyBuilder, PrometheusServer, Tenant, TestEnv, WAIT,
    condition, remote_control_plane, weights,
};

/// A condition's message as the tenant reads it with kubectl.
fn seen_by(tenant: &Tenant, type_: &str) -> String {
    let path = format!("jsonpath={{.status.conditions[?(@.type==\"{type_}\")].message}}");
    support::ok(
        &tenant.kubectl(&["get", "failoverpolicy", "web", "-o", &path]),
        "kubectl get as the tenant",
    )
}

fn health_value(p: &FailoverPolicy) -> Option<f64> {
    p.status.as_ref()?.backends.first()?.health.as_ref()?.value
}

#[tokio::test]
async fn a_tenant_cannot_send_health_queries_to_an_address_the_admin_did_not_allow() {
    let Some(env) = TestEnv::new("tenant-address").await else {
        return;
    };
    // Stands for what a tenant should not reach through the controller (a metadata endpoint,
    // another team's Service): it counts every connection.
    let target = Exporter::start();
    let _c = env
        .with_controller(&["--prometheus-address", "http://127.0.0.1:9"])
        .await;
    let tenant = env.tenant();
    let forbidden = format!("http://{}", target.address);
    tenant.apply(&PolicyBuilder::web_with_health(Some(forbidden.clone()), "up").yaml());
    let p = env
        .wait_policy("web", WAIT, health::ADDRESS_NOT_ALLOWED, |p| {
            condition(p, HEALTH_QUERY_FAILED).is_some_and(|c| c.1 == health::ADDRESS_NOT_ALLOWED)
        })
        .await;
    let (_, _, message) = condition(&p, HEALTH_QUERY_FAILED).expect("condition");
    assert!(
        message.contains(&format!(
            "spec.health.prometheus.address {forbidden} is not an address the controller may ask"
        )) && message.contains("--prometheus-allowed-addresses"),
        "{message}"
    );
    // Three intervals later, still not one connection; traffic follows readiness alone.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(target.accepted(), 0, "the refused address was never asked");
    assert_eq!(env.split_weights("web").await, Some(weights(&ON_WEB)));
    eprintln!(
        "the tenant sees: HealthQueryFailed: {}",
        seen_by(&tenant, HEALTH_QUERY_FAILED)
    );
    env.cleanup().await;
}

#[tokio::test]
async fn a_tenants_health_query_reads_only_the_series_of_its_own_namespace() {
    let Some(env) = TestEnv::new("tenant-series").await else {
        return;
    };
    // The same metric for this namespace (healthy) and for another team's (unhealthy).
    let exporter = Exporter::start();
    let ns = env.ns.clone();
    exporter.serve(format!(
        "backend_error_ratio{{namespace=\"{ns}\",service=\"web\"}} 0.01\nbackend_error_ratio{{namespace=\"payments\",service=\"web\"}} 0.9\n"
    ));
    let prometheus = PrometheusServer::start(env.cp, &exporter, &env.ns).await;
    let _c = env
        .with_controller(&["--prometheus-address", &prometheus.url])
        .await;
    let tenant = env.tenant();
    // No namespace in the query: as written it would read both series (max 0.9, unhealthy);
    // scoped, it reads this namespace's only.
    tenant.apply(
        &PolicyBuilder::web_with_health(None, "max(backend_error_ratio{service=\"web\"})").yaml(),
    );
    let p = env
        .wait_policy("web", WAIT, "the primary's reading", |p| {
            health_value(p).is_some()
        })
        .await;
    assert_eq!(health_value(&p), Some(0.01), "only this namespace's series");
    assert_eq!(env.split_weights("web").await, Some(weights(&ON_WEB)));

    // Naming the other namespace, in any form, is refused and nothing is read.
    for query in [
        "backend_error_ratio{namespace=\"payments\"}",
        "max(backend_error_ratio{namespace=~\".+\"})",
    ] {
        tenant.apply(&PolicyBuilder::web_with_health(None, query).yaml());
        let p = env
            .wait_policy("web", WAIT, health::QUERY_NOT_ALLOWED, |p| {
                condition(p, HEALTH_QUERY_FAILED).is_some_and(|c| c.1 == health::QUERY_NOT_ALLOWED)
                    && health_value(p).is_none()
            })
            .await;
        let (_, _, message) = condition(&p, HEALTH_QUERY_FAILED).expect("condition");
        assert!(
            message.contains("spec.health.prometheus.query selects namespace"),
            "{message}"
        );
        eprintln!(
            "{query}: the tenant sees: HealthQueryFailed: {}",
            seen_by(&tenant, HEALTH_QUERY_FAILED)
        );
        let status = serde_json::to_string(&p.status).unwrap_or_default();
        assert!(
            !status.contains("0.9"),
            "no other namespace's value: {status}"
        );
        // Back to the scoped query before the next try.
        tenant.apply(
            &PolicyBuilder::web_with_health(None, "max(backend_error_ratio{service=\"web\"})")
                .yaml(),
        );
        env.wait_policy("web", WAIT, "the scoped query answering", |p| {
            health_value(p) == Some(0.01)
        })
        .await;
    }
    env.cleanup().await;
}

#[tokio::test]
async fn a_tenant_reads_only_the_remote_namespaces_the_cluster_grants_its_namespace() {
    let plane = remote_control_plane();
    let Some(remote) = TestEnv::on(plane.cp, "tenant-remote").await else {
        return;
    };
    remote.ready_backends(&["web"]).await;
    let kubeconfig = remote.reader_kubeconfig();
    let Some(env) = TestEnv::new("tenant-remote").await else {
        return;
    };
    env.ready_backends(&["web", "web-west"]).await;
    env.create_service("web-east").await;
    // Declared without grants: each namespace reads its namesake there, and this namespace's
    // name is not the remote one.
    env.declare_cluster_granting("east", &kubeconfig, "30s", None)
        .await;
    let _c = ControllerProcess::start(&env, &["--cluster-secret-namespace", &env.ns]);
    let tenant = env.tenant();
    let policy = PolicyBuilder::web().spec(|s| {
        s.secondaries[0].readiness_from = Some(ReadinessFrom {
            cluster: "east".into(),
            namespace: Some(remote.ns.clone()),
            service: Some("web".into()),
        });
    });
    tenant.apply(&policy.yaml());
    let p = env
        .wait_policy("web", WAIT, clusters::NAMESPACE_NOT_GRANTED, |p| {
            condition(p, CLUSTERS_REACHABLE).is_some_and(|c| c.1 == clusters::NAMESPACE_NOT_GRANTED)
        })
        .await;
    let (_, _, message) = condition(&p, CLUSTERS_REACHABLE).expect("condition");
    assert!(
        message.contains(&format!(
            "cluster east does not grant namespace {} its namespace {}",
            env.ns, remote.ns
        )) && message.contains("each namespace reads its namesake only"),
        "{message}"
    );
    let east = &p.status.as_ref().expect("status").backends[1];
    assert!(!east.ready, "a refused namespace is not read, so not ready");
    eprintln!(
        "the tenant sees: ClustersReachable: {}",
        seen_by(&tenant, CLUSTERS_REACHABLE)
    );

    // The admin grants it: the same policy now reads it.
    let grant = format!("{}={}", env.ns, remote.ns);
    env.declare_cluster_granting("east", &kubeconfig, "30s", Some(&grant))
        .await;
    env.wait_policy("web", WAIT, "east read once granted", |p| {
        condition(p, CLUSTERS_REACHABLE).is_some_and(|c| c.0 == "True")
            && p.status
                .as_ref()
                .is_some_and(|s| s.backends.get(1).is_some_and(|b| b.ready))
    })
    .await;
    env.cleanup().await;
    remote.cleanup().await;
}

#[tokio::test]
async fn the_tenants_role_lets_it_write_policies_and_read_nothing_else() {
    let Some(env) = TestEnv::new("tenant-role").await else {
        return;
    };
    let tenant = env.tenant();
    for (verb, resource, allowed) in [
        ("create", "failoverpolicies.failover.dev", "yes"),
        ("get", "secrets", "no"),
        ("get", "endpointslices.discovery.k8s.io", "no"),
        ("create", "trafficsplits.split.smi-spec.io", "no"),
    ] {
        let out = tenant.kubectl(&["auth", "can-i", verb, resource]);
        let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert_eq!(said, allowed, "can the tenant {verb} {resource}?");
    }
    env.cleanup().await;
}
