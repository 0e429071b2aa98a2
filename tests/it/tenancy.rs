//! Sharing a cluster, end to end: a policy's author bound to a Role of one namespace (write
//! FailoverPolicies there, nothing else) tries to borrow the controller's reach: its health
//! queries sent to an address the admin did not allow, a query reading another namespace's
//! series, readiness read from a remote namespace its namespace is not granted. Each is refused
//! with a condition naming the field and the rule, and what the tenant sees is printed.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use failover_core::api::conditions::{
    ATTACHED, CLUSTERS_REACHABLE, HEALTH_QUERY_FAILED, READY, attached, clusters, health, ready,
};
use failover_core::api::{FailoverPolicy, ReadinessFrom};
use kube::api::DynamicObject;

use crate::support::{
    self, ControllerProcess, Exporter, ON_EAST, ON_WEB, PolicyBuilder, PrometheusServer, Tenant,
    TestEnv, WAIT, WEB_BACKENDS, condition, http_get, remote_control_plane, test_env, wait_until,
    weights,
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
    let Some(env) = test_env!() else { return };
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
            "spec.health.prometheus.address {forbidden} is not one the cluster admin allows"
        )) && message.contains("--prometheus-allowed-addresses"),
        "{message}"
    );
    // Three intervals later, still not one connection; traffic follows readiness alone.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(target.accepted(), 0, "the refused address was never asked");
    assert_eq!(env.split_weights("web").await, Some(weights(&ON_WEB)));
    support::figure(format!(
        "the tenant sees: HealthQueryFailed: {}",
        seen_by(&tenant, HEALTH_QUERY_FAILED)
    ));
}

#[tokio::test]
async fn a_tenants_health_query_reads_only_the_series_of_its_own_namespace() {
    let Some(env) = test_env!() else { return };
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
        support::figure(format!(
            "{query}: the tenant sees: HealthQueryFailed: {}",
            seen_by(&tenant, HEALTH_QUERY_FAILED)
        ));
        // Not the other namespace's 0.9 (a substring check of the status also matched a
        // timestamp's milliseconds, ".959Z").
        let readings: Vec<Option<f64>> = p
            .status
            .iter()
            .flat_map(|s| &s.backends)
            .filter_map(|b| b.health.as_ref().map(|h| h.value))
            .collect();
        assert!(
            !readings.contains(&Some(0.9)),
            "no other namespace's value: {readings:?}"
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
}

#[tokio::test]
async fn a_tenant_reads_only_the_remote_namespaces_the_cluster_grants_its_namespace() {
    let plane = remote_control_plane().await;
    let Some(remote) = TestEnv::on(plane.cp, "tr").await else {
        return;
    };
    remote.ready_backends(&["web"]).await;
    let kubeconfig = remote.reader_kubeconfig();
    // Named short (the numbers after a name grow with the tests run before): the refusal names
    // both namespaces and the rule within its bound.
    let Some(env) = test_env!("tr") else {
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
    support::figure(format!(
        "the tenant sees: ClustersReachable: {}",
        seen_by(&tenant, CLUSTERS_REACHABLE)
    ));

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
}

#[tokio::test]
async fn the_charts_roles_let_a_tenant_write_policies_and_nothing_else_and_aggregate_into_edit_and_view()
 {
    let Some(env) = test_env!() else { return };
    let can = |tenant: &Tenant, verb: &str, resource: &str| {
        // `resource/status` asks for the subresource (kubectl reads `a/b` as a name).
        let (resource, subresource) = match resource.split_once('/') {
            Some((resource, sub)) => (resource, Some(format!("--subresource={sub}"))),
            None => (resource, None),
        };
        let mut args = vec!["auth", "can-i", verb, resource];
        args.extend(subresource.as_deref());
        let out = tenant.kubectl(&args);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let tenant = env.tenant();
    for (verb, resource, allowed) in [
        ("create", "failoverpolicies.failover.dev", "yes"),
        ("delete", "failoverpolicies.failover.dev", "yes"),
        ("patch", "failoverpolicies.failover.dev/status", "no"),
        ("get", "secrets", "no"),
        ("get", "endpointslices.discovery.k8s.io", "no"),
        ("create", "trafficsplits.split.smi-spec.io", "no"),
        ("create", "httproutes.gateway.networking.k8s.io", "no"),
    ] {
        assert_eq!(
            can(&tenant, verb, resource),
            allowed,
            "can the tenant {verb} {resource}?"
        );
    }
    // The cluster's own edit and view roles take them in (kube-controller-manager aggregates).
    let editor = env.tenant_bound("editor", "edit");
    let viewer = env.tenant_bound("viewer", "view");
    let aggregated = wait_until(WAIT, || async {
        can(&editor, "create", "failoverpolicies.failover.dev") == "yes"
            && can(&viewer, "list", "failoverpolicies.failover.dev") == "yes"
    })
    .await;
    assert!(aggregated, "edit and view never took in the chart's roles");
    assert_eq!(
        can(&viewer, "create", "failoverpolicies.failover.dev"),
        "no"
    );
    let reader = env.tenant_bound("reader", support::POLICY_VIEW_ROLE);
    for (verb, allowed) in [("list", "yes"), ("watch", "yes"), ("update", "no")] {
        assert_eq!(
            can(&reader, verb, "failoverpolicies.failover.dev"),
            allowed,
            "{verb}"
        );
    }
}

/// A health query of `matchers` regex matchers, each `regex` (as written in PromQL).
fn query_of(matchers: usize, regex: &str) -> String {
    let all: Vec<String> = (0..matchers)
        .map(|i| format!(r#"l{i}=~"{regex}""#))
        .collect();
    format!("x{{{}}}", all.join(","))
}

#[tokio::test]
async fn a_costly_health_query_is_refused_at_apply_or_by_validation_within_100ms_of_cpu() {
    let Some(env) = test_env!() else { return };
    let controller = env
        .with_controller(&["--prometheus-address", "http://127.0.0.1:9"])
        .await;
    let tenant = env.tenant();
    // 210 matchers of \w{100}, 3,468 characters: valid PromQL, seconds of regex compiling.
    let flood = query_of(210, r"\\w{100}");
    assert!(flood.len() > 3400 && flood.len() <= 4096, "{}", flood.len());
    let out = tenant.apply_refused(&PolicyBuilder::web_with_health(None, &flood).yaml());
    assert!(
        out.contains(failover_core::api::rules::REGEX_MATCHERS_MESSAGE)
            && out.contains(failover_core::api::rules::REPETITION_MESSAGE),
        "{out}"
    );
    support::figure(format!(
        "kubectl apply refused 4 KiB of costly matchers: {out}"
    ));

    // Within what CEL can see (8 matchers, two-digit counts), too costly to compile.
    let before = controller.cpu_time();
    let costly = query_of(8, r"\\pL{40}");
    tenant.apply(&PolicyBuilder::web_with_health(None, &costly).yaml());
    let p = env
        .wait_policy("web", WAIT, ready::INVALID_SPEC, |p| {
            condition(p, READY).is_some_and(|c| c.1 == ready::INVALID_SPEC)
        })
        .await;
    let used = controller.cpu_time().saturating_sub(before);
    let (_, _, message) = condition(&p, READY).expect("condition");
    assert!(
        message.contains("spec.health.prometheus.query") && message.contains("256 KiB"),
        "{message}"
    );
    support::figure(format!(
        "validation refused 8 costly regexes using {used:?} of the controller's CPU (the whole process, everything it did meanwhile): {message}"
    ));
    assert!(used <= Duration::from_millis(100), "{used:?}");
}

#[tokio::test]
async fn a_tenant_editing_a_query_at_the_limits_every_second_does_not_stop_another_namespaces_failover()
 {
    let Some(noisy) = TestEnv::dedicated("noisy-tenant").await else {
        return;
    };
    let quiet = TestEnv::on(noisy.cp, "quiet-tenant")
        .await
        .expect("a second namespace");
    for env in [&noisy, &quiet] {
        env.ready_backends(&WEB_BACKENDS).await;
    }
    let controller = ControllerProcess::start_cluster_wide(
        &noisy,
        &["--prometheus-address", "http://127.0.0.1:9"],
    );
    // The same names in both namespaces: policy, apex, route.
    quiet.apply(&PolicyBuilder::web());
    quiet.wait_weights("web", &ON_WEB, WAIT).await;
    let tenant = noisy.tenant();
    let at_limits = [
        failover_core::health_query::at_every_limit(),
        format!("{} * 1", failover_core::health_query::at_every_limit()),
    ];
    tenant.apply(&PolicyBuilder::web_with_health(None, &at_limits[0]).yaml());
    noisy
        .wait_policy("web", WAIT, "the query at the limits accepted", |p| {
            condition(p, READY).is_some_and(|c| c.0 == "True")
        })
        .await;

    // The noisy tenant changes its query every second (a new generation to validate each
    // time); /healthz is asked every 200 ms.
    let stop = Arc::new(AtomicBool::new(false));
    let edited = Arc::new(AtomicUsize::new(0));
    let edits = {
        let (stop, edited, queries) = (stop.clone(), edited.clone(), at_limits.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let n = edited.fetch_add(1, Ordering::Relaxed) + 1;
                tenant.apply(&PolicyBuilder::web_with_health(None, &queries[n % 2]).yaml());
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    let admin = controller.admin_addr().await;
    let probes = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            // The slowest answer, and every answer that was not 200 (none overwrites another).
            let (mut slowest, mut failed) = (Duration::ZERO, Vec::new());
            let mut count = 0;
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let (code, _) = http_get(&admin, "/healthz");
                slowest = slowest.max(started.elapsed());
                if code != 200 {
                    failed.push(code);
                }
                count += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            (count, (slowest, failed))
        })
    };

    // Meanwhile, the quiet namespace's primary fails and recovers, five times, a round every
    // 1.5 s, each failover while the noisy tenant's edits are under way.
    let mut took = Vec::new();
    for _ in 0..5 {
        let round = Instant::now();
        let lost = Instant::now();
        quiet.set_endpoints("web", 0, 1).await;
        quiet.wait_weights("web", &ON_EAST, WAIT).await;
        took.push(lost.elapsed());
        quiet.set_endpoints("web", 1, 0).await;
        quiet.wait_weights("web", &ON_WEB, WAIT).await;
        tokio::time::sleep(Duration::from_millis(1500).saturating_sub(round.elapsed())).await;
    }
    stop.store(true, Ordering::Relaxed);
    edits.join().expect("the noisy tenant's edits");
    let edited = edited.load(Ordering::Relaxed);
    let (probed, (slowest, failed)) = probes.join().expect("probes");
    took.sort();
    support::figure(format!(
        "with {edited} edits of a query at the limits, 5 failovers in another namespace took {took:?}; {probed} /healthz probes, the slowest {slowest:?}"
    ));
    assert!(edited >= 5, "the noisy tenant edited {edited} times");
    assert!(
        took.iter().all(|t| *t < Duration::from_secs(2)),
        "each failover lands in its usual time (under 300 ms without the noise): {took:?}"
    );
    assert!(
        failed.is_empty() && slowest < Duration::from_secs(1),
        "every /healthz answered 200 within 1 s: slowest {slowest:?}, answers not 200: {failed:?}"
    );
    // Nothing of the noisy namespace reached the quiet one: its own route, its own status.
    let p = quiet.policy("web").await.expect("the quiet policy");
    let status = serde_json::to_string(&p.status).unwrap_or_default();
    assert!(
        !status.contains("HealthQuery") && !status.contains(&noisy.ns),
        "{status}"
    );
    assert_eq!(quiet.split_weights("web").await, Some(weights(&ON_WEB)));
}

#[tokio::test]
async fn an_escape_sequence_in_a_query_reaches_no_status_log_or_plugin_output() {
    let Some(env) = test_env!() else { return };
    let controller = env
        .with_controller(&["--prometheus-address", "http://127.0.0.1:9"])
        .await;
    let tenant = env.tenant();
    // Cursor up, erase the line, and an unclosed group: an invalid regex whose error quotes it.
    let query = "x{a=~\"\u{1b}[1A\u{1b}[2K(\"}";
    tenant.apply(&PolicyBuilder::web_with_health(None, query).yaml());
    let p = env
        .wait_policy("web", WAIT, ready::INVALID_SPEC, |p| {
            condition(p, READY).is_some_and(|c| c.1 == ready::INVALID_SPEC)
        })
        .await;
    let (_, _, message) = condition(&p, READY).expect("condition");
    assert!(
        message.contains("[1A[2K("),
        "the text stays, the escapes go: {message}"
    );
    let status = serde_json::to_string(&p.status).unwrap_or_default();
    assert!(
        !status.contains('\u{1b}') && !status.contains("\\u001b"),
        "{status}"
    );
    let shown = support::kubectl_failover(&env, &["status", "web"]);
    let printed = String::from_utf8_lossy(&shown.stdout);
    assert!(!printed.contains('\u{1b}'), "{printed}");
    assert!(
        !controller.logs().contains('\u{1b}'),
        "the log holds an escape character"
    );
    support::figure(format!("the operator reads: {message}"));
}

#[tokio::test]
async fn a_gateway_of_another_namespace_is_attached_to_only_where_the_admin_allowed_it() {
    let Some(env) = test_env!() else { return };
    env.cp.install_gateway_api();
    let tenant = env.tenant();
    let policy = PolicyBuilder::web().on_gateway("infra", "public");
    let parents = support::route_parents;
    let routes: kube::Api<DynamicObject> = kube::Api::namespaced_with(
        env.client.clone(),
        &env.ns,
        &failover_core::route::RouteKind::HttpRoute.resource(),
    );
    {
        let _c = env.with_controller(&[]).await;
        tenant.apply(&policy.yaml());
        let p = env
            .wait_policy("web", WAIT, attached::GATEWAY_NOT_ALLOWED, |p| {
                condition(p, ATTACHED).is_some_and(|c| c.1 == attached::GATEWAY_NOT_ALLOWED)
            })
            .await;
        let (_, _, message) = condition(&p, ATTACHED).expect("condition");
        assert!(message.contains("Gateway infra/public"), "{message}");
        let route = routes
            .get("web")
            .await
            .expect("the route, attached to nothing");
        assert!(parents(&route).is_empty(), "{:?}", parents(&route));
        support::figure(format!(
            "the tenant sees: Attached: {}",
            seen_by(&tenant, ATTACHED)
        ));
    }
    // The admin allows that Gateway: the route attaches to it.
    let _c = ControllerProcess::start(&env, &["--allowed-gateways", "infra/public"]);
    let attached = wait_until(WAIT, || async {
        routes
            .get("web")
            .await
            .is_ok_and(|r| parents(&r) == ["infra/public"])
    })
    .await;
    assert!(attached, "the allowed Gateway is never a parent");
}
