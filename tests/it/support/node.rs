//! A real node: a control plane started with `--node --proxy` (containerd, runc, CNI, kubelet,
//! kube-proxy, kube-scheduler, and Traefik serving the Gateway `default/edge`), the controller's
//! image built from the project's Dockerfile and imported into the node's containerd, the chart
//! installed for real, and backends that are real Deployments whose Pods pass or fail real
//! readiness probes and answer HTTP with their name.
//!
//! One node for the test binary, shared by its tests. `FAILOVER_SKIP_NODE_TESTS=1` skips these
//! tests, loudly; a machine that cannot host a node (not root, no cgroups) fails them with one
//! line naming what is missing and how to skip them on purpose.

use std::{
    process::Command,
    sync::OnceLock,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, api::ListParams};

use super::{
    ControlPlane, SKIP_CLUSTER, SKIP_NODE, TestEnv, alone, helm, install_crds, kubectl,
    node_tests_skipped, ok, repo_root, start_control_plane_with, turn,
};

/// The Helm release the node tests install the chart as.
pub const RELEASE: &str = "fc";
/// The controller's Deployment (and Pods' prefix) in that release.
pub const CONTROLLER: &str = "fc-failover-controller";

/// The controller image's reference in the node's containerd.
pub const CONTROLLER_IMAGE: &str = "localhost/failover-controller";
/// Its tag.
pub const CONTROLLER_TAG: &str = "dev";

static NODE: OnceLock<Option<ControlPlane>> = OnceLock::new();

/// Why this machine cannot host a node, in the script's one line (`hack/control-plane.sh
/// check-node`); `None` when it can.
fn missing_prerequisite() -> Option<String> {
    let out = Command::new(repo_root().join("hack/control-plane.sh"))
        .arg("check-node")
        .output()
        .expect("running hack/control-plane.sh check-node");
    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).trim().to_string())
}

/// Fails the test when this machine cannot host a node, with the one line that says why.
pub fn assert_node_possible() {
    if let Some(missing) = missing_prerequisite() {
        panic!(
            "{missing}. Run the tests on a machine that can, or set FAILOVER_SKIP_NODE_TESTS=1 to skip the node tests on purpose."
        );
    }
}

/// The node's control plane, started on first use; `None` when node tests are skipped on
/// purpose (the caller records its skip).
fn node() -> Option<&'static ControlPlane> {
    NODE.get_or_init(|| {
        if [SKIP_CLUSTER, SKIP_NODE]
            .iter()
            .any(|v| std::env::var(v).is_ok_and(|v| v == "1"))
        {
            return None;
        }
        assert_node_possible();
        let cp = start_control_plane_with(&["--node", "--proxy"]);
        install_crds(&cp);
        import_controller_image(&cp);
        Some(cp)
    })
    .as_ref()
}

/// Builds the controller's image from the Dockerfile (hack/images.sh) and imports it.
fn import_controller_image(cp: &ControlPlane) {
    let started = Instant::now();
    let out = Command::new(repo_root().join("hack/images.sh"))
        .arg("controller")
        .output()
        .expect("running hack/images.sh");
    let archive = ok(&out, "building the controller image from the Dockerfile");
    let archive = archive
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_string();
    eprintln!("controller image built in {:.1?}", started.elapsed());
    let socket = cp.dir.join("node/containerd.sock");
    let out = Command::new("ctr")
        .args([
            "--address",
            &socket.to_string_lossy(),
            "-n",
            "k8s.io",
            "images",
            "import",
            &archive,
        ])
        .output()
        .expect("running ctr");
    ok(&out, "importing the controller image");
}

impl TestEnv {
    /// A fresh namespace on the node's control plane, or `None` when node tests are skipped (the
    /// skip recorded).
    pub async fn on_node(test: &str) -> Option<Self> {
        if node_tests_skipped(test) {
            return None;
        }
        let _turn = turn().await;
        Self::on(node()?, test).await
    }

    /// As [`on_node`](Self::on_node), for a test that runs [`alone`]: the namespace holds the
    /// turn.
    pub async fn on_node_alone(test: &str) -> Option<Self> {
        if node_tests_skipped(test) {
            return None;
        }
        let _alone = alone().await;
        Self::on(node()?, test).await
    }

    /// Installs the chart as release [`RELEASE`] (see [`install_chart`](Self::install_chart)) and
    /// waits until its controller Deployment ([`CONTROLLER`]) has rolled out.
    pub fn install_controller(&self, values: &[&str]) {
        self.install_chart(RELEASE, values);
        let rollout = self.kubectl(&[
            "rollout",
            "status",
            &format!("deployment/{CONTROLLER}"),
            "--timeout=120s",
        ]);
        ok(&rollout, "the controller's rollout");
    }

    /// Installs the chart from the repository with the locally built image, watching the test's
    /// namespace; `values` are extra `--set` pairs.
    pub fn install_chart(&self, release: &str, values: &[&str]) -> String {
        let mut args = vec![
            "install".to_string(),
            release.to_string(),
            "charts/failover-controller".into(),
            "-n".into(),
            self.ns.clone(),
            "--set".into(),
            format!("image.repository={CONTROLLER_IMAGE}"),
            "--set".into(),
            format!("image.tag={CONTROLLER_TAG}"),
            "--set".into(),
            "image.pullPolicy=Never".into(),
            "--set".into(),
            format!("watchNamespace={}", self.ns),
            "--set".into(),
            "logFormat=plain".into(),
            // The proxy's Gateway `default/edge` serves every test's routes.
            "--set".into(),
            "allowedGateways={default/edge}".into(),
        ];
        for v in values {
            args.extend(["--set".to_string(), v.to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ok(&helm(self, &args), "helm install")
    }

    /// A Deployment of real backend Pods (busybox httpd) behind a Service of the same name
    /// (`hack/backend.yaml`). Each Pod is ready while its `/www/ready` file exists.
    pub fn backend(&self, name: &str, replicas: u32) {
        let template = std::fs::read_to_string(repo_root().join("hack/backend.yaml"))
            .expect("hack/backend.yaml");
        let yaml = template
            .replace("__NAME__", name)
            .replace("__REPLICAS__", &replicas.to_string());
        let out = self.kubectl_stdin(&["apply", "-f", "-"], &yaml);
        ok(&out, "applying a backend");
    }

    /// Waits until a Deployment has this many ready replicas.
    pub async fn wait_ready_replicas(&self, name: &str, replicas: u32, timeout: Duration) {
        let jsonpath = "jsonpath={.status.readyReplicas}";
        let ok = super::wait_until(timeout, || async {
            let out = self.kubectl(&["get", "deployment", name, "-o", jsonpath]);
            String::from_utf8_lossy(&out.stdout).trim() == replicas.to_string()
                || (replicas == 0 && out.status.success() && out.stdout.is_empty())
        })
        .await;
        assert!(
            ok,
            "deployment {name} never had {replicas} ready replicas: {}",
            String::from_utf8_lossy(&self.kubectl(&["get", "pods", "-o", "wide"]).stdout)
        );
    }

    /// The names of a backend's running Pods.
    pub async fn pods(&self, app: &str) -> Vec<String> {
        self.pods_labelled(&format!("app={app}")).await
    }

    /// The names of the chart's controller Pods (release `fullname`).
    pub async fn pods_of(&self, fullname: &str) -> Vec<String> {
        self.pods_labelled(&format!(
            "app.kubernetes.io/instance={}",
            fullname.split('-').next().unwrap_or(fullname)
        ))
        .await
    }

    async fn pods_labelled(&self, selector: &str) -> Vec<String> {
        let pods: Api<Pod> = self.api();
        let list = pods
            .list(&ListParams::default().labels(selector))
            .await
            .expect("listing Pods");
        list.items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.name)
            .collect()
    }

    /// Makes every Pod of a backend answer 500 to this share of requests (0 to 100), while it
    /// stays ready.
    pub async fn set_backend_failing(&self, app: &str, percent: u32) {
        for pod in self.pods(app).await {
            let action = format!("echo {percent} > /www/fail-percent");
            let out = self.kubectl(&["exec", &pod, "--", "sh", "-c", &action]);
            ok(&out, "changing a Pod's share of failed requests");
        }
    }

    /// The proxy's URL for requests to the test backends (`/cgi-bin/name` on its entrypoint).
    pub fn proxy_url(&self) -> String {
        let base = self
            .cp
            .env("PROXY_URL")
            .expect("the node's control plane runs the proxy (start --proxy)");
        format!("{base}/cgi-bin/name")
    }

    /// Makes every Pod of a backend pass (or fail) its readiness probe, from inside the Pod.
    pub async fn set_backend_ready(&self, app: &str, ready: bool) {
        for pod in self.pods(app).await {
            let action = if ready {
                "touch /www/ready"
            } else {
                "rm -f /www/ready"
            };
            let out = self.kubectl(&["exec", &pod, "--", "sh", "-c", action]);
            ok(&out, "changing a Pod's readiness");
        }
    }
}

/// kubectl on the node's control plane, outside any namespace.
pub fn node_kubectl(cp: &ControlPlane, args: &[&str]) -> String {
    ok(&kubectl(cp, args), "kubectl")
}
