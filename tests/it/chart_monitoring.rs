//! The chart's monitoring: the ServiceMonitor, PrometheusRule and dashboard objects where asked,
//! the alerting rules through promtool, and the dashboard's queries through a real Prometheus
//! scraping a running controller.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use crate::support::{
    self, CHART, ON_EAST, PolicyBuilder, PrometheusServer, RENDER_NAMESPACE, TestEnv, WAIT, find,
    ok, render, test_env,
};

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
