//! The Helm chart with real helm and a real API server: lint, server-side dry run of the
//! rendered manifests, install, upgrade across a CRD change, and the controller running under
//! exactly the chart's RBAC.

use std::collections::BTreeMap;

use failover_core::{
    api::{Phase, Strategy},
    route,
};
use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::{ResourceExt, api::PostParams};

use crate::support::{
    self, CHART, ControllerProcess, ON_EAST, ON_WEB, PolicyBuilder, RENDER_CLUSTER_NAME, TestEnv,
    WAIT, find, helm, install_prometheus_operator_crds, ok, render, test_env,
};

#[tokio::test]
async fn helm_lint_is_clean() {
    let Some(env) = test_env!() else { return };
    let out = ok(&helm(&env, &["lint", "--strict", CHART]), "helm lint");
    assert!(out.contains("0 chart(s) failed"), "{out}");
    assert!(
        !out.contains("[WARNING]") && !out.contains("[ERROR]"),
        "{out}"
    );
}

#[tokio::test]
async fn rendered_manifests_pass_a_server_side_dry_run() {
    let Some(env) = test_env!() else { return };
    // The optional ServiceMonitor and PrometheusRule are checked against their real CRDs.
    install_prometheus_operator_crds(env.cp);
    let watch = format!("watchNamespace={}", env.ns);
    let digest = format!("image.digest=sha256:{}", "0123456789abcdef".repeat(4));
    let value_sets: [&[&str]; 4] = [
        &[],
        &[
            "--set",
            "replicaCount=3",
            "--set",
            &watch,
            "--set",
            "logFormat=plain",
            "--set",
            "extraLabels.team=net",
            "--set",
            "extraAnnotations.owner=sre",
        ],
        &[
            "--set",
            "leaderElection.enabled=false",
            "--set",
            "metrics.service.enabled=false",
            "--set",
            "trafficSplitCRD.install=true",
            "--set",
            "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.monitoring=enabled",
            "--set",
            "networkPolicy.apiServer.to[0].ipBlock.cidr=10.0.0.1/32",
            "--set",
            "networkPolicy.prometheus.to[0].namespaceSelector.matchLabels.team=monitoring",
            "--set",
            "networkPolicy.remoteClusters.ports[0]=6443",
            "--set",
            "networkPolicy.remoteClusters.to[0].ipBlock.cidr=203.0.113.10/32",
            "--set",
            "prometheusAllowedAddresses[0]=http://prometheus.monitoring:9090",
            "--set",
            "allowedGateways={infra/public,shared/*}",
            "--set",
            "userRoles.create=false",
            "--set",
            "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=zone",
            "--set",
            "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
        ],
        // The Pod's extras, the security contexts as OpenShift wants them, and every optional
        // monitoring object (in the release namespace: the dry run applies to the test's).
        &[
            "--set",
            "replicaCount=2",
            "--set",
            "extraArgs[0]=--cluster-secret-namespace=clusters",
            "--set",
            "extraEnv[0].name=HTTPS_PROXY",
            "--set",
            "extraEnv[0].value=http://proxy.example:3128",
            "--set",
            "extraVolumes[0].name=ca",
            "--set",
            "extraVolumes[0].configMap.name=extra-ca",
            "--set",
            "extraVolumeMounts[0].name=ca",
            "--set",
            "extraVolumeMounts[0].mountPath=/etc/ssl/certs/extra",
            "--set",
            "extraVolumeMounts[0].readOnly=true",
            "--set",
            "podLabels.team=net",
            "--set",
            "podAnnotations.owner=sre",
            "--set",
            "topologySpreadConstraints[0].maxSkew=1",
            "--set",
            "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
            "--set",
            "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
            "--set",
            &digest,
            "--set",
            "podDisruptionBudget.maxUnavailable=1",
            "--set",
            "podSecurityContext.runAsUser=null",
            "--set",
            "podSecurityContext.runAsGroup=null",
            "--set",
            "podSecurityContext.fsGroup=2000",
            "--set",
            "securityContext.privileged=false",
            "--set",
            "serviceMonitor.enabled=true",
            "--set",
            "serviceMonitor.scrapeTimeout=10s",
            "--set",
            "serviceMonitor.relabelings[0].action=replace",
            "--set",
            "serviceMonitor.relabelings[0].targetLabel=cluster",
            "--set",
            "serviceMonitor.relabelings[0].replacement=east",
            "--set",
            "serviceMonitor.metricRelabelings[0].action=drop",
            "--set",
            "serviceMonitor.metricRelabelings[0].sourceLabels[0]=__name__",
            "--set",
            "serviceMonitor.metricRelabelings[0].regex=go_.*",
            "--set",
            "prometheusRule.enabled=true",
            "--set",
            "prometheusRule.labels.release=prometheus",
            "--set",
            "grafanaDashboard.enabled=true",
        ],
    ];
    for values in value_sets {
        let mut args = vec![
            "template",
            "dry",
            CHART,
            "--namespace",
            env.ns.as_str(),
            "--include-crds",
        ];
        args.extend_from_slice(values);
        let rendered = ok(&helm(&env, &args), "helm template");
        let out = env.kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], &rendered);
        ok(&out, &format!("server-side dry run with {values:?}"));
    }
}

#[tokio::test]
async fn helm_install_creates_every_object() {
    let Some(env) = test_env!() else { return };
    let release = format!("fc{}", std::process::id());
    ok(
        &helm(
            &env,
            &[
                "install",
                &release,
                CHART,
                "--namespace",
                &env.ns,
                "--set",
                "replicaCount=2",
                "--wait=false",
            ],
        ),
        "helm install",
    );
    let full = format!("{release}-failover-controller");
    // The chart names cluster-scoped objects `<namespace>-<fullname>`, cut to 63 characters.
    let cluster: String = format!("{}-{full}", env.ns).chars().take(63).collect();
    let cluster = cluster.trim_end_matches('-').to_string();
    for (kind, name, namespaced) in [
        ("deployment", full.as_str(), true),
        ("serviceaccount", full.as_str(), true),
        ("service", &format!("{full}-metrics"), true),
        ("poddisruptionbudget", full.as_str(), true),
        ("networkpolicy", full.as_str(), true),
        ("role", &format!("{full}-leader-election"), true),
        ("rolebinding", &format!("{full}-leader-election"), true),
        ("role", &format!("{full}-cluster-secrets"), true),
        ("rolebinding", &format!("{full}-cluster-secrets"), true),
        ("clusterrole", cluster.as_str(), false),
        ("clusterrolebinding", cluster.as_str(), false),
        ("clusterrole", &format!("{cluster}-policy-edit"), false),
        ("clusterrole", &format!("{cluster}-policy-view"), false),
        ("crd", "failoverpolicies.failover.dev", false),
    ] {
        let out = if namespaced {
            env.kubectl(&["get", kind, name])
        } else {
            support::kubectl(env.cp, &["get", kind, name])
        };
        ok(&out, &format!("{kind}/{name} after helm install"));
    }
    let deployment = ok(
        &env.kubectl(&["get", "deployment", &full, "-o", "json"]),
        "get deployment",
    );
    let d: serde_json::Value = serde_json::from_str(&deployment).expect("json");
    let pod = &d["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"][0],
        "ALL"
    );
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert!(container["resources"]["limits"]["memory"].is_string());
    ok(
        &helm(&env, &["uninstall", &release, "--namespace", &env.ns]),
        "helm uninstall",
    );
    for role in [
        cluster.clone(),
        format!("{cluster}-policy-edit"),
        format!("{cluster}-policy-view"),
    ] {
        support::kubectl(
            env.cp,
            &["delete", "clusterrole", &role, "--ignore-not-found"],
        );
    }
}

/// The verbs a role's rules grant on `resource` of `group`, in rule order.
fn verbs(role: &serde_json::Value, group: &str, resource: &str) -> Vec<String> {
    let names = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    role["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|rule| {
            names(&rule["apiGroups"]).iter().any(|g| g == group)
                && names(&rule["resources"]).iter().any(|r| r == resource)
        })
        .flat_map(|rule| names(&rule["verbs"]))
        .collect()
}

/// The controller deletes a route it owns when an older policy holds the same apex Service, so
/// its ClusterRole grants `delete` on both kinds of route; on policies it only patches (their
/// finalizer, while a workload it scaled is not restored), with or without scaling.
#[tokio::test]
async fn the_controllers_cluster_role_lets_it_delete_the_routes_it_yields() {
    let Some(env) = test_env!() else { return };
    let objects = render(&env, &[]);
    let role = find(&objects, "ClusterRole", RENDER_CLUSTER_NAME).expect("controller ClusterRole");
    let route_verbs = ["get", "list", "watch", "create", "patch", "delete"];
    for kind in failover_core::route::KINDS {
        let resource = kind.resource();
        assert_eq!(
            verbs(role, &resource.group, &resource.plural),
            route_verbs,
            "{}",
            kind.name
        );
    }
    for values in [&[][..], &["scaling.enabled=true"][..]] {
        let objects = render(&env, values);
        let role = find(&objects, "ClusterRole", RENDER_CLUSTER_NAME).expect("ClusterRole");
        assert_eq!(
            verbs(role, "failover.dev", "failoverpolicies"),
            ["get", "list", "watch", "patch"],
            "no create, update or delete: only the finalizer is patched ({values:?})"
        );
    }
}

/// Webhook sinks sign with a key read from a Secret of the policy's namespace: the ClusterRole
/// grants `get` on Secrets (never `list` or `watch`) only when the admin allows some sink, and
/// the Deployment passes the notification values as flags.
#[tokio::test]
async fn secrets_are_readable_only_when_the_admin_allows_webhook_sinks() {
    let Some(env) = test_env!() else { return };
    let objects = render(&env, &[]);
    let role = find(&objects, "ClusterRole", RENDER_CLUSTER_NAME).expect("ClusterRole");
    assert!(
        verbs(role, "", "secrets").is_empty(),
        "no Secret by default"
    );
    let objects = render(
        &env,
        &[
            "notifications.allowedUrls={http://hooks.ops:8080}",
            "notifications.alertmanagerUrl=http://alertmanager.monitoring:9093",
        ],
    );
    let role = find(&objects, "ClusterRole", RENDER_CLUSTER_NAME).expect("ClusterRole");
    assert_eq!(verbs(role, "", "secrets"), ["get"]);
    let args = serde_json::to_string(&objects).expect("JSON");
    for flag in [
        "--notification-allowed-urls=http://hooks.ops:8080",
        "--alertmanager-url=http://alertmanager.monitoring:9093",
        "--alert-resend-interval=1m",
    ] {
        assert!(args.contains(flag), "{flag} not passed");
    }
}

/// Every route kind the controller can write has, in its ClusterRole, the verbs it uses on
/// routes, on the resource its watch lists: a kind added without its RBAC fails here.
#[tokio::test]
async fn the_controllers_cluster_role_grants_every_route_kind_its_verbs() {
    let Some(env) = test_env!() else { return };
    let objects = render(&env, &[]);
    let role = find(&objects, "ClusterRole", RENDER_CLUSTER_NAME).expect("controller ClusterRole");
    for kind in route::KINDS {
        let resource = kind.resource();
        assert_eq!(
            verbs(role, &resource.group, &resource.plural),
            route::VERBS,
            "{} ({}.{})",
            kind.name,
            resource.plural,
            resource.group
        );
    }
}

/// Like cert-manager's and Argo Rollouts', the chart's user roles aggregate into the built-in
/// `edit`/`admin` (write policies) and `view` (read them); neither grants the status
/// subresource, which only the controller writes. `userRoles.create=false` leaves them out.
#[tokio::test]
async fn the_chart_ships_aggregated_roles_for_policy_authors_and_viewers() {
    let Some(env) = test_env!() else { return };
    let objects = render(&env, &[]);
    let edit_name = format!("{RENDER_CLUSTER_NAME}-policy-edit");
    let view_name = format!("{RENDER_CLUSTER_NAME}-policy-view");
    let edit = find(&objects, "ClusterRole", &edit_name).expect("policy-edit ClusterRole");
    let view = find(&objects, "ClusterRole", &view_name).expect("policy-view ClusterRole");

    let labels = &edit["metadata"]["labels"];
    assert_eq!(
        labels["rbac.authorization.k8s.io/aggregate-to-edit"],
        "true"
    );
    assert_eq!(
        labels["rbac.authorization.k8s.io/aggregate-to-admin"],
        "true"
    );
    assert!(
        labels["rbac.authorization.k8s.io/aggregate-to-view"].is_null(),
        "viewers must not gain write verbs: {labels}"
    );
    assert_eq!(labels["app.kubernetes.io/instance"], "fc");
    let labels = &view["metadata"]["labels"];
    assert_eq!(
        labels["rbac.authorization.k8s.io/aggregate-to-view"],
        "true"
    );
    assert!(labels["rbac.authorization.k8s.io/aggregate-to-edit"].is_null());
    assert!(labels["rbac.authorization.k8s.io/aggregate-to-admin"].is_null());
    assert_eq!(labels["app.kubernetes.io/instance"], "fc");

    assert_eq!(
        verbs(edit, "failover.dev", "failoverpolicies"),
        [
            "get",
            "list",
            "watch",
            "create",
            "update",
            "patch",
            "delete",
            "deletecollection"
        ]
    );
    assert_eq!(
        verbs(view, "failover.dev", "failoverpolicies"),
        ["get", "list", "watch"]
    );
    for role in [edit, view] {
        assert_eq!(
            role["rules"].as_array().map(Vec::len),
            Some(1),
            "one rule, on failoverpolicies only: {role}"
        );
        assert!(
            !role.to_string().contains("failoverpolicies/status"),
            "only the controller writes status: {role}"
        );
    }

    let objects = render(&env, &["userRoles.create=false"]);
    for name in [&edit_name, &view_name] {
        assert!(
            find(&objects, "ClusterRole", name).is_none(),
            "{name} rendered with userRoles.create=false"
        );
    }
    assert!(find(&objects, "ClusterRole", RENDER_CLUSTER_NAME).is_some());
}

/// `allowedGateways` reaches the controller as one comma-joined `--allowed-gateways`; by default
/// no such argument is passed (a policy attaches only to Gateways of its own namespace).
#[tokio::test]
async fn allowed_gateways_reach_the_controller_only_when_set() {
    let Some(env) = test_env!() else { return };
    let args = |sets: &[&str]| -> Vec<String> {
        let objects = render(&env, sets);
        let deployment =
            find(&objects, "Deployment", "fc-failover-controller").expect("Deployment");
        deployment["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("arg").to_string())
            .collect()
    };
    let set = args(&["allowedGateways={infra/public,shared/*}"]);
    assert_eq!(
        set.iter()
            .filter(|a| a.starts_with("--allowed-gateways"))
            .collect::<Vec<_>>(),
        ["--allowed-gateways=infra/public,shared/*"],
        "{set:?}"
    );
    let default = args(&[]);
    assert!(
        !default.iter().any(|a| a.starts_with("--allowed-gateways")),
        "{default:?}"
    );
}

/// Installs the chart for the test namespace, then runs the controller binary as the chart's
/// ServiceAccount (a token from `kubectl create token`) through a failover and a failback. Any
/// permission the chart lacks makes a write fail and the test time out. Foreign objects keep
/// their resourceVersions.
#[tokio::test]
async fn controller_works_under_exactly_the_charts_rbac_and_touches_nothing_foreign() {
    let Some(env) = test_env!() else { return };
    let release = format!("lp{}", std::process::id());
    ok(
        &helm(
            &env,
            &[
                "install",
                &release,
                CHART,
                "--namespace",
                &env.ns,
                "--set",
                &format!("watchNamespace={}", env.ns),
                "--wait=false",
            ],
        ),
        "helm install",
    );
    let full = format!("{release}-failover-controller");
    // The chart created the ServiceAccount; only a token is needed.
    let token_kubeconfig = env.token_kubeconfig(&full);

    // Backends, plus bystanders the controller must never modify.
    env.ready_backends(&["web", "web-east", "web-west", "bystander"])
        .await;
    let foreign: failover_core::route::trafficsplit::TrafficSplit =
        serde_json::from_value(serde_json::json!({
            "apiVersion": "split.smi-spec.io/v1alpha2", "kind": "TrafficSplit",
            "metadata": {"name": "someone-elses"},
            "spec": {"service": "bystander", "backends": [{"service": "bystander", "weight": 1}]}
        }))
        .expect("ts");
    env.api::<failover_core::route::trafficsplit::TrafficSplit>()
        .create(&PostParams::default(), &foreign)
        .await
        .expect("foreign split");

    let lease = [
        "--leader-elect",
        "--lease-namespace",
        &env.ns,
        "--lease-name",
        &full,
        "--retry-period",
        "500ms",
    ];
    let controller = ControllerProcess::start_with_kubeconfig(&env, &token_kubeconfig, &lease);
    env.apply(&PolicyBuilder::web());
    env.wait_weights("web", &ON_WEB, WAIT).await;
    let versions =
        |services: Vec<Service>,
         slices: Vec<EndpointSlice>,
         splits: Vec<failover_core::route::trafficsplit::TrafficSplit>| {
            let mut v = BTreeMap::new();
            for s in services {
                v.insert(format!("service/{}", s.name_any()), s.resource_version());
            }
            for s in slices {
                v.insert(format!("slice/{}", s.name_any()), s.resource_version());
            }
            for s in splits.into_iter().filter(|s| s.name_any() != "web") {
                v.insert(format!("split/{}", s.name_any()), s.resource_version());
            }
            v
        };
    let list = || async {
        let services = env
            .api::<Service>()
            .list(&Default::default())
            .await
            .expect("services")
            .items;
        let slices = env
            .api::<EndpointSlice>()
            .list(&Default::default())
            .await
            .expect("slices")
            .items;
        let splits = env
            .api::<failover_core::route::trafficsplit::TrafficSplit>()
            .list(&Default::default())
            .await
            .expect("splits")
            .items;
        (services, slices, splits)
    };
    let (services, slices, splits) = list().await;
    let slices_before: Vec<EndpointSlice> = slices
        .into_iter()
        .filter(|s| s.name_any().starts_with("bystander"))
        .collect();
    let before = versions(services, slices_before, splits);

    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    env.wait_policy("web", WAIT, "FailedOver status", |p| {
        p.status.as_ref().and_then(|s| s.phase) == Some(Phase::FailedOver)
    })
    .await;
    env.set_endpoints("web", 1, 0).await;
    env.wait_weights("web", &ON_WEB, WAIT).await;
    env.wait_policy("web", WAIT, "Primary status", |p| {
        p.status.as_ref().and_then(|s| s.phase) == Some(Phase::Primary)
    })
    .await;

    let (services, slices, splits) = list().await;
    let slices_after: Vec<EndpointSlice> = slices
        .into_iter()
        .filter(|s| s.name_any().starts_with("bystander"))
        .collect();
    assert_eq!(
        before,
        versions(services, slices_after, splits),
        "foreign objects were modified"
    );
    support::no_permission_missing_then_uninstall(&env, &controller, &release);
}

/// The rendered chart passes kube-score, a Kubernetes manifest security and reliability linter,
/// for one and three replicas and with the optional objects and the Pod's extras set. One check
/// is ignored on purpose (see docs/operations.md): `container-image-pull-policy`, since a pinned
/// tag with `IfNotPresent` keeps a failover controller restartable while the registry is
/// unreachable.
#[tokio::test]
async fn rendered_chart_passes_the_manifest_security_linter() {
    let Some(env) = test_env!() else { return };
    let digest = format!("image.digest=sha256:{}", "0123456789abcdef".repeat(4));
    let value_sets: [&[&str]; 3] = [
        &["replicaCount=1"],
        &["replicaCount=3"],
        &[
            "replicaCount=3",
            "serviceMonitor.enabled=true",
            "prometheusRule.enabled=true",
            "grafanaDashboard.enabled=true",
            "extraEnv[0].name=HTTPS_PROXY",
            "extraEnv[0].value=http://proxy.example:3128",
            "extraVolumes[0].name=ca",
            "extraVolumes[0].configMap.name=extra-ca",
            "extraVolumeMounts[0].name=ca",
            "extraVolumeMounts[0].mountPath=/etc/ssl/certs/extra",
            "topologySpreadConstraints[0].maxSkew=1",
            "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
            "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
            "podDisruptionBudget.maxUnavailable=1",
            &digest,
        ],
    ];
    for sets in value_sets {
        let mut args = vec!["template", "score", CHART];
        for set in sets {
            args.extend_from_slice(&["--set", *set]);
        }
        let rendered = ok(&helm(&env, &args), "helm template");
        let mut child = std::process::Command::new(env.cp.bin("kube-score"))
            .args(["score", "--ignore-test", "container-image-pull-policy", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kube-score");
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(rendered.as_bytes())
            .expect("write");
        let out = child.wait_with_output().expect("kube-score output");
        ok(&out, &format!("kube-score with {sets:?}"));
    }
}

/// Helm installs `crds/` once and never upgrades it; the documented upgrade applies the chart's
/// CRD server-side (forcing the fields Helm's install owns) before `helm upgrade`. Across such a
/// change (here the CRD with an optional field and a printer column more, as a next version might
/// bring), every policy stays with its spec, the new field is served, and the upgrade does not
/// put the old CRD back.
#[tokio::test]
async fn helm_upgrade_across_a_crd_change_keeps_every_policy() {
    // A control plane of its own: the test changes a cluster-wide CRD.
    let Some(env) = TestEnv::dedicated_without_crds("helm-upgrade-crd").await else {
        return;
    };
    let watch = format!("watchNamespace={}", env.ns);
    let crd = "crd/failoverpolicies.failover.dev";
    ok(
        &helm(
            &env,
            &[
                "install",
                "up",
                CHART,
                "--namespace",
                &env.ns,
                "--set",
                &watch,
                "--wait=false",
            ],
        ),
        "helm install",
    );
    ok(
        &support::kubectl(
            env.cp,
            &["wait", "--for=condition=Established", "--timeout=60s", crd],
        ),
        "the chart's CRD established",
    );
    for policy in [
        PolicyBuilder::web(),
        PolicyBuilder::named("api", "api", &["api-east", "api-west"]).strategy(Strategy::Equal),
        PolicyBuilder::named("search", "search", &["search-east"]).holds("10s", "1m"),
    ] {
        env.apply(&policy);
    }
    let specs = || -> BTreeMap<String, serde_json::Value> {
        let out = ok(
            &env.kubectl(&["get", "failoverpolicies", "-o", "json"]),
            "listing the policies",
        );
        let list: serde_json::Value = serde_json::from_str(&out).expect("policy list");
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let name = p["metadata"]["name"].as_str().unwrap_or_default();
                (name.to_string(), p["spec"].clone())
            })
            .collect()
    };
    let before = specs();
    assert_eq!(before.len(), 3, "{before:?}");

    // The next version's CRD: one optional field and one printer column more.
    let path = support::repo_root()
        .join(CHART)
        .join("crds/failoverpolicies.failover.dev.yaml");
    let mut changed: serde_json::Value =
        serde_yaml::from_str(&std::fs::read_to_string(path).expect("the chart's CRD"))
            .expect("the CRD is YAML");
    for version in changed["spec"]["versions"]
        .as_array_mut()
        .expect("the CRD's versions")
    {
        version["additionalPrinterColumns"]
            .as_array_mut()
            .expect("printer columns")
            .push(serde_json::json!({
                "name": "Note", "type": "string", "jsonPath": ".spec.note", "priority": 1
            }));
        version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["note"] =
            serde_json::json!({"type": "string", "description": "A note on the policy."});
    }
    let changed = serde_yaml::to_string(&changed).expect("CRD YAML");
    let apply = |extra: &[&str]| {
        let mut args = vec!["apply", "--server-side"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["-f", "-"]);
        support::kubectl_stdin(env.cp, &args, &changed)
    };
    // Helm's install owns the CRD's fields: a plain server-side apply stops at the conflict.
    let plain = apply(&[]);
    assert!(
        !plain.status.success() && String::from_utf8_lossy(&plain.stderr).contains("conflict"),
        "a server-side apply over Helm's CRD without --force-conflicts: {}",
        String::from_utf8_lossy(&plain.stderr)
    );
    ok(
        &apply(&["--force-conflicts"]),
        "kubectl apply --server-side --force-conflicts of the changed CRD",
    );
    ok(
        &support::kubectl(
            env.cp,
            &["wait", "--for=condition=Established", "--timeout=60s", crd],
        ),
        "the changed CRD established",
    );
    // A policy with the new field: refused (unknown field) until the new schema is served.
    let mut noted: serde_json::Value =
        serde_yaml::from_str(&PolicyBuilder::named("noted", "noted", &["noted-east"]).yaml())
            .expect("policy YAML");
    noted["spec"]["note"] = "kept by the new schema".into();
    let noted = serde_yaml::to_string(&noted).expect("policy YAML");
    let served = support::wait_until(WAIT, || async {
        env.kubectl_stdin(&["apply", "-f", "-"], &noted)
            .status
            .success()
    })
    .await;
    assert!(served, "the changed CRD's new field is never served");

    ok(
        &helm(
            &env,
            &[
                "upgrade",
                "up",
                CHART,
                "--namespace",
                &env.ns,
                "--set",
                &watch,
                "--set",
                "logFormat=plain",
                "--wait=false",
            ],
        ),
        "helm upgrade",
    );
    let args = ok(
        &env.kubectl(&[
            "get",
            "deployment",
            "up-failover-controller",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].args}",
        ]),
        "the upgraded Deployment",
    );
    assert!(args.contains("--log-format=plain"), "{args}");
    let after = specs();
    for (name, spec) in &before {
        assert_eq!(
            after.get(name),
            Some(spec),
            "the policy {name} after the upgrade"
        );
    }
    assert_eq!(after.len(), before.len() + 1, "{after:?}");
    assert_eq!(after["noted"]["note"], "kept by the new schema");
    let columns = ok(
        &support::kubectl(
            env.cp,
            &[
                "get",
                crd,
                "-o",
                "jsonpath={.spec.versions[0].additionalPrinterColumns[*].name}",
            ],
        ),
        "the CRD's printer columns",
    );
    assert!(
        columns.split_whitespace().any(|c| c == "Note"),
        "helm upgrade put the old CRD back: {columns}"
    );
}
