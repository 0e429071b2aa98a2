//! The chart as the tests render and install it: its path, the versions it is tested with, the
//! Prometheus Operator's CRDs its optional objects need, and its rendered objects.

use std::{path::PathBuf, sync::Mutex};

use serde::Deserialize;

use super::{
    ControlPlane, ControllerProcess, TestEnv, helm, kubectl, kubectl_stdin, ok, repo_root,
};

/// The chart, from the repository's root.
pub const CHART: &str = "charts/failover-controller";

/// A version pinned in `hack/versions.env`.
pub fn pinned(name: &str) -> String {
    let versions =
        std::fs::read_to_string(repo_root().join("hack/versions.env")).expect("versions.env");
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
pub fn install_prometheus_operator_crds(cp: &ControlPlane) {
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
        &kubectl_stdin(cp, &["apply", "--server-side", "-f", "-"], &crds),
        "applying the Prometheus Operator's CRDs",
    );
    ok(
        &kubectl(
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

/// Release and namespace of the charts rendered by `render`; its cluster-scoped objects are
/// named `<namespace>-<release>-failover-controller`.
pub const RENDER_NAMESPACE: &str = "failover-system";
/// The name of the rendered chart's cluster-scoped objects.
pub const RENDER_CLUSTER_NAME: &str = "failover-system-fc-failover-controller";

/// The objects of the chart rendered by `helm template` with these `--set` values.
pub fn render(env: &TestEnv, sets: &[&str]) -> Vec<serde_json::Value> {
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
pub fn find<'a>(
    objects: &'a [serde_json::Value],
    kind: &str,
    name: &str,
) -> Option<&'a serde_json::Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

/// Ends a test of the controller under the chart's RBAC: no request of the controller was
/// forbidden (a permission the chart lacks), then the release is uninstalled.
pub fn no_permission_missing_then_uninstall(
    env: &TestEnv,
    controller: &ControllerProcess,
    release: &str,
) {
    let logs = controller.logs();
    assert!(
        !logs.to_lowercase().contains("forbidden"),
        "a permission was missing:\n{logs}"
    );
    ok(
        &helm(env, &["uninstall", release, "--namespace", &env.ns]),
        "helm uninstall",
    );
}
