//! The Helm chart with real helm and a real API server: lint, the values' schema, server-side
//! dry run of the rendered manifests, install, upgrade across a CRD change, and the controller
//! running under exactly the chart's RBAC; its alerting rules through promtool and its
//! dashboard's queries through a real Prometheus; its README generated from its values.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::Mutex,
    time::{Duration, Instant},
};

use failover::api::{Phase, Strategy};
use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::{ResourceExt, api::PostParams};
use serde::Deserialize;

use crate::support::{
    self, ControlPlane, ControllerProcess, ON_EAST, ON_WEB, PolicyBuilder, PrometheusServer,
    ScriptRun, TestEnv, WAIT, helm, ok, test_env,
};

const CHART: &str = "charts/failover-controller";

/// A version pinned in `hack/versions.env`.
fn pinned(name: &str) -> String {
    let versions = std::fs::read_to_string(support::repo_root().join("hack/versions.env"))
        .expect("versions.env");
    let prefix = format!("{name}=");
    versions
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no {name} in hack/versions.env"))
        .trim()
        .to_string()
}

/// The control planes (by kubeconfig) that have the Prometheus Operator's CRDs already.
static PROMETHEUS_OPERATOR: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Installs the Prometheus Operator's ServiceMonitor and PrometheusRule CRDs, as its Go module
/// publishes them (fetched by `hack/build-control-plane.sh --prometheus`), once per control plane:
/// the chart's optional objects of those kinds are checked against the real schemas.
fn install_prometheus_operator_crds(cp: &ControlPlane) {
    let mut done = PROMETHEUS_OPERATOR
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if done.contains(&cp.kubeconfig) {
        return;
    }
    let version = pinned("PROMETHEUS_OPERATOR_VERSION");
    let path = cp
        .bin_dir
        .join(format!("prometheus-operator-{version}-crds.yaml"));
    let crds = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; fetch it once with hack/build-control-plane.sh --prometheus",
            path.display()
        )
    });
    ok(
        &support::kubectl_stdin(cp, &["apply", "--server-side", "-f", "-"], &crds),
        "applying the Prometheus Operator's CRDs",
    );
    ok(
        &support::kubectl(
            cp,
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/servicemonitors.monitoring.coreos.com",
                "crd/prometheusrules.monitoring.coreos.com",
            ],
        ),
        "waiting for the Prometheus Operator's CRDs",
    );
    done.push(cp.kubeconfig.clone());
}

/// promtool from the control plane's bin folder; fails with the build command when missing.
fn promtool(env: &TestEnv) -> PathBuf {
    let promtool = env.cp.bin("promtool");
    assert!(
        promtool.exists(),
        "no promtool in {}: build it once with hack/build-control-plane.sh --prometheus",
        env.cp.bin_dir.display()
    );
    promtool
}

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

/// Release and namespace of the charts rendered by `render`; its cluster-scoped objects are
/// named `<namespace>-<release>-failover-controller`.
const RENDER_NAMESPACE: &str = "failover-system";
const RENDER_CLUSTER_NAME: &str = "failover-system-fc-failover-controller";

/// The objects of the chart rendered by `helm template` with these `--set` values.
fn render(env: &TestEnv, sets: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec!["template", "fc", CHART, "--namespace", RENDER_NAMESPACE];
    for set in sets {
        args.extend_from_slice(&["--set", *set]);
    }
    let rendered = ok(&helm(env, &args), &format!("helm template with {sets:?}"));
    serde_yaml::Deserializer::from_str(&rendered)
        .map(|document| serde_json::Value::deserialize(document).expect("rendered YAML"))
        .filter(|object| !object.is_null())
        .collect()
}

/// The rendered object of this kind and name, if any.
fn find<'a>(
    objects: &'a [serde_json::Value],
    kind: &str,
    name: &str,
) -> Option<&'a serde_json::Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
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
/// its ClusterRole grants `delete` on both kinds of route, while policies stay read-only to it.
#[tokio::test]
async fn the_controllers_cluster_role_lets_it_delete_the_routes_it_yields() {
    let Some(env) = test_env!() else { return };
    let objects = render(&env, &[]);
    let role = find(&objects, "ClusterRole", RENDER_CLUSTER_NAME).expect("controller ClusterRole");
    let route_verbs = ["get", "list", "watch", "create", "patch", "delete"];
    assert_eq!(
        verbs(role, "split.smi-spec.io", "trafficsplits"),
        route_verbs
    );
    assert_eq!(
        verbs(role, "gateway.networking.k8s.io", "httproutes"),
        route_verbs
    );
    assert_eq!(
        verbs(role, "failover.dev", "failoverpolicies"),
        ["get", "list", "watch"],
        "the controller never writes a policy's spec"
    );
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

/// A value of the wrong type, or a misspelt key where the chart knows every key, fails
/// `helm template` and `helm lint` with the schema's message naming the value, before anything
/// is rendered.
#[tokio::test]
async fn a_wrong_value_type_fails_helm_template() {
    let Some(env) = test_env!() else { return };
    let cases: [([&str; 2], &str); 8] = [
        (
            ["--set", "replicaCount=abc"],
            "'/replicaCount': got string, want integer",
        ),
        (
            ["--set-json", "concurrency=\"x\""],
            "'/concurrency': got string, want integer",
        ),
        (
            ["--set", "logFormat=xml"],
            "'/logFormat': value must be one of",
        ),
        (
            ["--set", "image.pullPolicy=Sometimes"],
            "'/image/pullPolicy'",
        ),
        (
            ["--set", "serviceMonitor.enabled=yes"],
            "'/serviceMonitor/enabled'",
        ),
        (
            ["--set", "leaderElection.leaseDuration=15"],
            "'/leaderElection/leaseDuration'",
        ),
        (
            ["--set", "image.tagg=1"],
            "additional properties 'tagg' not allowed",
        ),
        (
            ["--set", "replicas=2"],
            "additional properties 'replicas' not allowed",
        ),
    ];
    for (value, expected) in cases {
        let mut args = vec!["template", "fc", CHART];
        args.extend_from_slice(&value);
        let out = helm(&env, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "helm template {value:?} passed");
        assert!(
            stderr.contains("values don't meet the specifications of the schema")
                && stderr.contains(expected),
            "helm template {value:?}: {stderr}"
        );
    }
    let lint = helm(
        &env,
        &["lint", "--strict", CHART, "--set", "replicaCount=abc"],
    );
    assert!(!lint.status.success(), "helm lint passed replicaCount=abc");
    // The same values, of the right types, pass.
    ok(
        &helm(
            &env,
            &[
                "template",
                "fc",
                CHART,
                "--set",
                "replicaCount=2",
                "--set-json",
                "concurrency=4",
                "--set",
                "logFormat=plain",
            ],
        ),
        "helm template with values of the right types",
    );
}

/// Every value of values.yaml is in values.schema.json, and every key the schema knows where it
/// refuses others (`additionalProperties: false`) is in values.yaml: the two stay in step.
#[test]
fn the_values_schema_covers_every_value() {
    let chart = support::repo_root().join(CHART);
    let values: serde_json::Value = serde_yaml::from_str(
        &std::fs::read_to_string(chart.join("values.yaml")).expect("values.yaml"),
    )
    .expect("values.yaml is YAML");
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(chart.join("values.schema.json")).expect("values.schema.json"),
    )
    .expect("values.schema.json is JSON");
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    let mut problems = Vec::new();
    compare_with_schema(&values, &schema, "", &mut problems);
    assert!(
        problems.is_empty(),
        "values.yaml and values.schema.json differ: {problems:#?}"
    );
}

/// Adds to `problems` the keys of `values` that `schema` does not describe, and the keys that a
/// closed object of `schema` describes and `values` lacks, each by its dotted path.
fn compare_with_schema(
    values: &serde_json::Value,
    schema: &serde_json::Value,
    path: &str,
    problems: &mut Vec<String>,
) {
    let (Some(values), Some(properties)) = (values.as_object(), schema["properties"].as_object())
    else {
        return;
    };
    let at = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    for (key, value) in values {
        match properties.get(key) {
            Some(property) => compare_with_schema(value, property, &at(key), problems),
            None => problems.push(format!("{}: in values.yaml, not in the schema", at(key))),
        }
    }
    if schema["additionalProperties"] == false {
        // `global` is a parent chart's to pass; `resources.claims` is Kubernetes' own field.
        for key in properties.keys() {
            let dotted = at(key);
            if !values.contains_key(key)
                && !["global", "resources.claims"].contains(&dotted.as_str())
            {
                problems.push(format!("{dotted}: in the schema, not in values.yaml"));
            }
        }
    }
}

/// The Pod's values reach the Deployment: the image by digest, extra arguments after the chart's
/// own, extra variables and volumes, Pod labels that never replace the selector's, a spread
/// constraint that selects the release's Pods, security contexts overridden key by key; and the
/// PodDisruptionBudget takes `maxUnavailable` when set, `minAvailable` otherwise, none when
/// disabled or with one replica.
#[tokio::test]
async fn the_pod_values_reach_the_deployment_and_the_disruption_budget() {
    let Some(env) = test_env!() else { return };
    let deployment = |sets: &[&str]| -> serde_json::Value {
        let objects = render(&env, sets);
        find(&objects, "Deployment", "fc-failover-controller")
            .expect("Deployment")
            .clone()
    };
    let selector = serde_json::json!({
        "app.kubernetes.io/name": "failover-controller",
        "app.kubernetes.io/instance": "fc",
    });

    let default = deployment(&[]);
    let pod = &default["spec"]["template"]["spec"];
    let image = pod["containers"][0]["image"].as_str().expect("image");
    assert!(
        image.starts_with("ghcr.io/failover-dev/failover-controller:"),
        "{image}"
    );
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(pod["securityContext"]["runAsGroup"], 65532);
    assert!(pod["volumes"].is_null() && pod["topologySpreadConstraints"].is_null());

    let digest = format!("sha256:{}", "0123456789abcdef".repeat(4));
    let digest_value = format!("image.digest={digest}");
    let set = deployment(&[
        digest_value.as_str(),
        "image.tag=9.9.9",
        "extraArgs[0]=--cluster-secret-namespace=clusters",
        "extraEnv[0].name=HTTPS_PROXY",
        "extraEnv[0].value=http://proxy.example:3128",
        "extraVolumes[0].name=ca",
        "extraVolumes[0].configMap.name=extra-ca",
        "extraVolumeMounts[0].name=ca",
        "extraVolumeMounts[0].mountPath=/etc/ssl/certs/extra",
        "podLabels.team=net",
        "podLabels.app\\.kubernetes\\.io/name=someone-else",
        "topologySpreadConstraints[0].maxSkew=1",
        "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
        "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
        "podSecurityContext.runAsUser=null",
        "podSecurityContext.runAsGroup=null",
        "priorityClassName=system-cluster-critical",
    ]);
    let template = &set["spec"]["template"];
    let pod = &template["spec"];
    let container = &pod["containers"][0];
    assert_eq!(
        container["image"],
        format!("ghcr.io/failover-dev/failover-controller@{digest}"),
        "a digest wins over the tag"
    );
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert_eq!(
        args.last(),
        Some(&"--cluster-secret-namespace=clusters"),
        "{args:?}"
    );
    assert!(args.contains(&"--leader-elect"), "{args:?}");
    let env_names: Vec<&str> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(env_names, ["POD_NAME", "POD_NAMESPACE", "HTTPS_PROXY"]);
    assert_eq!(pod["volumes"][0]["configMap"]["name"], "extra-ca");
    assert_eq!(
        container["volumeMounts"][0]["mountPath"],
        "/etc/ssl/certs/extra"
    );
    let labels = &template["metadata"]["labels"];
    assert_eq!(labels["team"], "net");
    assert_eq!(
        labels["app.kubernetes.io/name"], "failover-controller",
        "a Pod label must not take the selector's Pods away"
    );
    assert_eq!(
        pod["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"],
        selector
    );
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    let security = pod["securityContext"].as_object().expect("securityContext");
    assert!(
        !security.contains_key("runAsUser") && !security.contains_key("runAsGroup"),
        "null leaves the key out: {security:?}"
    );
    assert_eq!(security["runAsNonRoot"], true);
    assert_eq!(security["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert!(
        deployment(&["podSecurityContext=null"])["spec"]["template"]["spec"]["securityContext"]
            .is_null()
    );

    let budget = |sets: &[&str]| -> Option<serde_json::Value> {
        render(&env, sets)
            .into_iter()
            .find(|o| o["kind"] == "PodDisruptionBudget")
            .map(|o| o["spec"].clone())
    };
    assert_eq!(budget(&[]), None, "one replica: no PodDisruptionBudget");
    let spec = budget(&["replicaCount=2"]).expect("a PodDisruptionBudget for two replicas");
    assert_eq!(spec["minAvailable"], 1);
    assert!(spec["maxUnavailable"].is_null(), "{spec}");
    assert_eq!(spec["selector"]["matchLabels"], selector);
    let spec = budget(&["replicaCount=3", "podDisruptionBudget.maxUnavailable=1"])
        .expect("a PodDisruptionBudget for three replicas");
    assert_eq!(spec["maxUnavailable"], 1);
    assert!(spec["minAvailable"].is_null(), "{spec}");
    let spec = budget(&["replicaCount=3", "podDisruptionBudget.maxUnavailable=50%"])
        .expect("a PodDisruptionBudget for three replicas");
    assert_eq!(spec["maxUnavailable"], "50%");
    assert_eq!(
        budget(&["replicaCount=3", "podDisruptionBudget.enabled=false"]),
        None
    );
}

/// The optional monitoring objects: none by default; each where it is asked for, the
/// ServiceMonitor selecting the metrics Service of the release namespace with the controller's
/// labels kept, the PrometheusRule carrying the rules file, the dashboard's ConfigMap labelled
/// for Grafana's sidecar.
#[tokio::test]
async fn monitoring_objects_are_rendered_where_asked() {
    let Some(env) = test_env!() else { return };
    let name = "fc-failover-controller";
    let objects = render(&env, &[]);
    assert!(find(&objects, "ServiceMonitor", name).is_none());
    assert!(find(&objects, "PrometheusRule", name).is_none());
    assert!(find(&objects, "ConfigMap", &format!("{name}-dashboard")).is_none());

    let objects = render(
        &env,
        &[
            "serviceMonitor.enabled=true",
            "serviceMonitor.namespace=monitoring",
            "serviceMonitor.scrapeTimeout=10s",
            "serviceMonitor.labels.release=prometheus",
            "serviceMonitor.relabelings[0].action=replace",
            "serviceMonitor.relabelings[0].targetLabel=cluster",
            "serviceMonitor.relabelings[0].replacement=east",
            "prometheusRule.enabled=true",
            "prometheusRule.namespace=monitoring",
            "prometheusRule.labels.release=prometheus",
            "grafanaDashboard.enabled=true",
            "grafanaDashboard.namespace=grafana",
        ],
    );
    let monitor = find(&objects, "ServiceMonitor", name).expect("ServiceMonitor");
    assert_eq!(monitor["metadata"]["namespace"], "monitoring");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"],
        serde_json::json!([RENDER_NAMESPACE])
    );
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "metrics");
    assert_eq!(endpoint["honorLabels"], true);
    assert_eq!(endpoint["scrapeTimeout"], "10s");
    assert_eq!(endpoint["relabelings"][0]["targetLabel"], "cluster");

    let files = support::repo_root().join(CHART).join("files");
    let rules: serde_json::Value = serde_yaml::from_str(
        &std::fs::read_to_string(files.join("prometheus-rules.yaml")).expect("rules file"),
    )
    .expect("rules YAML");
    let rule = find(&objects, "PrometheusRule", name).expect("PrometheusRule");
    assert_eq!(rule["metadata"]["namespace"], "monitoring");
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(
        rule["spec"], rules,
        "the PrometheusRule carries files/prometheus-rules.yaml as it is"
    );

    let dashboard = find(&objects, "ConfigMap", &format!("{name}-dashboard")).expect("ConfigMap");
    assert_eq!(dashboard["metadata"]["namespace"], "grafana");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: serde_json::Value = serde_json::from_str(
        dashboard["data"]["failover-controller.json"]
            .as_str()
            .expect("the dashboard's JSON"),
    )
    .expect("the dashboard is JSON");
    let file: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(files.join("grafana-dashboard.json")).expect("dashboard file"),
    )
    .expect("dashboard file JSON");
    assert_eq!(json, file);
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
    let foreign: failover::route::trafficsplit::TrafficSplit =
        serde_json::from_value(serde_json::json!({
            "apiVersion": "split.smi-spec.io/v1alpha2", "kind": "TrafficSplit",
            "metadata": {"name": "someone-elses"},
            "spec": {"service": "bystander", "backends": [{"service": "bystander", "weight": 1}]}
        }))
        .expect("ts");
    env.api::<failover::route::trafficsplit::TrafficSplit>()
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
    let versions = |services: Vec<Service>,
                    slices: Vec<EndpointSlice>,
                    splits: Vec<failover::route::trafficsplit::TrafficSplit>| {
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
            .api::<failover::route::trafficsplit::TrafficSplit>()
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
    let logs = controller.logs();
    assert!(
        !logs.to_lowercase().contains("forbidden"),
        "a permission was missing:\n{logs}"
    );
    ok(
        &helm(&env, &["uninstall", &release, "--namespace", &env.ns]),
        "helm uninstall",
    );
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

/// The chart's alerting rules pass `promtool check rules`, and their unit tests
/// (`files/prometheus-rules.test.yaml`: each alert fires on synthetic series, and a tenant's
/// health-query errors fire no platform alert) pass `promtool test rules`. Every alert has a test
/// that fires it, and no alert for the policies' owners is critical.
#[tokio::test]
async fn prometheus_rules_pass_promtool() {
    let Some(env) = test_env!() else { return };
    let promtool = promtool(&env);
    let files = support::repo_root().join(CHART).join("files");
    let run = |args: &[&str]| {
        std::process::Command::new(&promtool)
            .current_dir(&files)
            .args(args)
            .output()
            .expect("running promtool")
    };
    let check = ok(
        &run(&["check", "rules", "prometheus-rules.yaml"]),
        "promtool check rules",
    );
    assert!(check.contains("SUCCESS"), "{check}");
    let test = ok(
        &run(&["test", "rules", "prometheus-rules.test.yaml"]),
        "promtool test rules",
    );
    assert!(test.contains("SUCCESS"), "{test}");

    let read = |file: &str| -> serde_json::Value {
        serde_yaml::from_str(&std::fs::read_to_string(files.join(file)).expect(file)).expect(file)
    };
    let (rules, tests) = (
        read("prometheus-rules.yaml"),
        read("prometheus-rules.test.yaml"),
    );
    let fired: Vec<&str> = tests["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["alert_rule_test"].as_array().into_iter().flatten())
        .filter(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()))
        .filter_map(|c| c["alertname"].as_str())
        .collect();
    let groups = rules["groups"].as_array().expect("rule groups");
    for group in groups {
        for rule in group["rules"].as_array().into_iter().flatten() {
            let alert = rule["alert"].as_str().expect("alerting rules only");
            assert!(
                fired.contains(&alert),
                "{alert} is never fired by prometheus-rules.test.yaml"
            );
            if group["name"] == "failover-policies" {
                assert_ne!(
                    rule["labels"]["severity"], "critical",
                    "{alert} would page the platform team for a tenant's policy"
                );
            } else {
                assert!(
                    !rule["expr"]
                        .as_str()
                        .unwrap_or_default()
                        .contains("health_query_errors"),
                    "{alert}: tenants' health queries are not the platform's alerts"
                );
            }
        }
    }
}

/// Every PromQL expression of the chart's Grafana dashboard (its panels' `targets[].expr`), as a
/// query sent outside Grafana reads it: `$__rate_interval` one minute, `$namespace` every
/// namespace.
fn dashboard_queries() -> Vec<String> {
    let path = support::repo_root()
        .join(CHART)
        .join("files/grafana-dashboard.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the dashboard"))
            .expect("the dashboard is JSON");
    let top = dashboard["panels"].as_array().into_iter().flatten();
    // A collapsed row holds its panels.
    let nested = top
        .clone()
        .flat_map(|row| row["panels"].as_array().into_iter().flatten());
    top.chain(nested)
        .flat_map(|panel| panel["targets"].as_array().into_iter().flatten())
        .filter_map(|target| target["expr"].as_str())
        .map(|expr| {
            expr.replace("$__rate_interval", "1m")
                .replace("$namespace", ".*")
        })
        .collect()
}

/// Each query of the dashboard returns data from a real Prometheus scraping a running controller
/// with a policy that failed over: every series the dashboard names exists, by that name and
/// with those labels.
#[tokio::test]
async fn dashboard_queries_return_data() {
    let Some(env) = test_env!() else { return };
    let promtool = promtool(&env);
    let queries = dashboard_queries();
    assert!(
        queries.len() >= 10,
        "the dashboard's queries are not where expected: {queries:?}"
    );
    let controller = env.routing_to_web(&PolicyBuilder::web(), WAIT).await;
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let admin = controller.admin_addr().await;
    let prometheus = PrometheusServer::scraping(env.cp, &admin, "127.0.0.1", &env.ns).await;
    for query in &queries {
        // Ranges need two scrapes (one a second) before they have a sample.
        let deadline = Instant::now() + WAIT;
        loop {
            let out = std::process::Command::new(&promtool)
                .args([
                    "query",
                    "instant",
                    "-o",
                    "json",
                    prometheus.url.as_str(),
                    query.as_str(),
                ])
                .output()
                .expect("running promtool query");
            let answer = String::from_utf8_lossy(&out.stdout).to_string();
            let samples = serde_json::from_str::<serde_json::Value>(&answer)
                .ok()
                .and_then(|v| v.as_array().map(Vec::len))
                .unwrap_or(0);
            if samples > 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the dashboard's query returned no sample: {query}\n{answer}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// The chart's README is what `hack/chart-readme.sh` generates from values.yaml (helm-docs):
/// a value added or changed without regenerating it fails here.
#[test]
fn chart_readme_is_generated_from_values() {
    // helm-docs is built with the control plane's binaries.
    if support::cluster_tests_skipped("the chart's README check") {
        return;
    }
    let run = ScriptRun::of(
        "hack/chart-readme.sh",
        &["--check"],
        Duration::from_secs(120),
    );
    assert_eq!(
        run.code,
        Some(0),
        "charts/failover-controller/README.md is stale; regenerate it with hack/chart-readme.sh:\n{}",
        run.tail(60)
    );
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
