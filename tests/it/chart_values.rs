//! The chart's values: a schema that refuses a wrong type or an unknown key and covers every
//! value, the Pod values reaching the Deployment and the disruption budget, and the chart's
//! README generated from them.

use std::time::Duration;

use crate::support::{self, CHART, PolicyBuilder, ScriptRun, find, helm, ok, render, test_env};

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

/// `tenantQuota` renders a ResourceQuota per namespace listed; applied, it caps the namespace's
/// FailoverPolicies: a tenant's policy past the cap is refused at `kubectl apply`.
#[tokio::test]
async fn the_tenant_quota_caps_a_namespaces_policies() {
    let Some(env) = test_env!() else { return };
    let namespace = format!("tenantQuota.namespaces[0]={}", env.ns);
    let objects = render(&env, &[&namespace, "tenantQuota.policies=1"]);
    let quota = find(&objects, "ResourceQuota", "fc-failover-controller-policies")
        .expect("a ResourceQuota")
        .clone();
    assert_eq!(quota["metadata"]["namespace"], env.ns.as_str());
    assert_eq!(
        quota["spec"]["hard"]["count/failoverpolicies.failover.dev"],
        "1"
    );
    assert!(
        render(&env, &[])
            .iter()
            .all(|o| o["kind"] != "ResourceQuota"),
        "no quota by default"
    );
    let out = crate::support::kubectl_stdin(
        env.cp,
        &["apply", "-f", "-"],
        &serde_json::to_string(&quota).expect("quota"),
    );
    ok(&out, "applying the quota");
    let tenant = env.tenant();
    // The quota counts once its controller has counted what the namespace holds: it finds a
    // custom resource in its next pass over discovery (every 30 s), then counts on its resync.
    let counted = crate::support::wait_until(Duration::from_secs(90), || async {
        let out = crate::support::kubectl(
            env.cp,
            &["get", "resourcequota", "-n", &env.ns, "-o", "json"],
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).is_ok_and(|list| {
            list["items"][0]["status"]["used"]["count/failoverpolicies.failover.dev"].is_string()
        })
    })
    .await;
    assert!(counted, "the quota was never counted");
    tenant.apply(&PolicyBuilder::web().yaml());
    let said = tenant.apply_refused(&PolicyBuilder::named("api", "web", &["web-east"]).yaml());
    support::figure(format!(
        "a tenant's second policy under a quota of one: {said}"
    ));
    assert!(said.contains("exceeded quota"), "{said}");
}

/// `shards` installs one controller per shard: a Deployment each, named for the shard, with its
/// `--shard` selector, its own Lease and a selector no other shard's Pods match, and a
/// disruption budget each; a name given twice, or shards with `watchNamespace`, fails.
#[tokio::test]
async fn the_chart_installs_one_controller_per_shard_from_one_list() {
    let Some(env) = test_env!() else { return };
    let shards = "shards[0].name=a,shards[0].selector=failover.dev/shard=a,\
                  shards[1].name=b,shards[1].selector=failover.dev/shard in (b\\,c)";
    let objects = render(&env, &[shards, "replicaCount=2"]);
    let deployments: Vec<&serde_json::Value> = objects
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .collect();
    assert_eq!(deployments.len(), 2, "one Deployment per shard");
    for (name, selector) in [
        ("a", "failover.dev/shard=a"),
        ("b", "failover.dev/shard in (b,c)"),
    ] {
        let full = format!("fc-failover-controller-{name}");
        let deployment = find(&objects, "Deployment", &full).expect("the shard's Deployment");
        let args: Vec<&str> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(|a| a.as_str())
            .collect();
        assert!(
            args.contains(&format!("--shard={selector}").as_str()),
            "{args:?}"
        );
        assert!(
            args.contains(&format!("--lease-name={full}").as_str()),
            "{args:?}"
        );
        let matched = &deployment["spec"]["selector"]["matchLabels"];
        assert_eq!(matched["failover.dev/shard"], name);
        assert_eq!(
            deployment["spec"]["template"]["metadata"]["labels"]["failover.dev/shard"],
            name
        );
        let budget = find(&objects, "PodDisruptionBudget", &full).expect("the shard's budget");
        assert_eq!(&budget["spec"]["selector"]["matchLabels"], matched);
    }
    let twice = helm(
        &env,
        &[
            "template",
            "fc",
            CHART,
            "--set",
            "shards[0].name=a,shards[0].selector=x=a,shards[1].name=a,shards[1].selector=x=b",
        ],
    );
    assert!(!twice.status.success());
    assert!(
        String::from_utf8_lossy(&twice.stderr).contains("shards: the name \"a\" is given twice")
    );
    let with_namespace = helm(
        &env,
        &[
            "template",
            "fc",
            CHART,
            "--set",
            "shards[0].name=a,shards[0].selector=x=a,watchNamespace=n",
        ],
    );
    assert!(!with_namespace.status.success());
}
