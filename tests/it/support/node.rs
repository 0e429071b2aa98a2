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
    process::{Command, Output},
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

/// The release the node tests build with `hack/release.sh` and install as the README's "Install
/// on your cluster" says: its image archive loaded into the node's containerd, its chart
/// installed with the image the chart names by default.
pub const RELEASE_VERSION: &str = "0.2.0";

/// The release's image archive, as the README's `ctr` line loads it.
pub fn release_image_archive() -> String {
    format!("dist/{RELEASE_VERSION}/failover-controller-{RELEASE_VERSION}.image.tar")
}

/// The release's packaged chart, as the README's `helm install` line installs it.
pub fn release_chart() -> String {
    format!("dist/{RELEASE_VERSION}/failover-controller-{RELEASE_VERSION}.tgz")
}

/// The README's line that starts with `prefix` (a command of its own), as words, without a
/// trailing comment; fails the test when the README has no such line.
pub fn readme_command(prefix: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let line = readme
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("the README has no line starting with {prefix:?}"));
    line.split(" #")
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

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
        release_and_import_image(&cp);
        Some(cp)
    })
    .as_ref()
}

/// Builds the release (`hack/release.sh`: the image from the Dockerfile, the chart, the plugin,
/// the checksums) and loads its image into the node's containerd with the README's `ctr` line
/// (pointed at this node's socket).
fn release_and_import_image(cp: &ControlPlane) {
    let started = Instant::now();
    let out = Command::new(repo_root().join("hack/release.sh"))
        .arg(RELEASE_VERSION)
        .current_dir(repo_root())
        .output()
        .expect("running hack/release.sh");
    ok(&out, "hack/release.sh");
    eprintln!(
        "release {RELEASE_VERSION} built in {:.1?}",
        started.elapsed()
    );
    let sums =
        std::fs::read_to_string(repo_root().join(format!("dist/{RELEASE_VERSION}/SHA256SUMS")))
            .expect("the release's SHA256SUMS");
    for file in [release_image_archive(), release_chart()] {
        let name = file.rsplit('/').next().unwrap_or_default().to_string();
        assert!(sums.contains(&name), "{name} not in SHA256SUMS:\n{sums}");
    }
    let load = readme_command("ctr -n k8s.io images import");
    assert_eq!(load.last(), Some(&release_image_archive()), "{load:?}");
    let socket = cp.dir.join("node/containerd.sock");
    let out = Command::new(&load[0])
        .arg("--address")
        .arg(&socket)
        .args(&load[1..])
        .current_dir(repo_root())
        .output()
        .expect("running ctr");
    ok(&out, "importing the release's image as the README says");
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

    /// Installs the release's chart as the README's `helm install` line does (the image it names by
    /// default, loaded into the node), as `release` in the test's namespace and watching it;
    /// `values` are extra `--set` pairs.
    pub fn install_chart(&self, release: &str, values: &[&str]) -> String {
        let readme = readme_command("helm install failover-controller dist/");
        assert_eq!(readme.get(3), Some(&release_chart()), "{readme:?}");
        let mut args = vec![
            "install".to_string(),
            release.to_string(),
            release_chart(),
            "-n".into(),
            self.ns.clone(),
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
        self.backend_at_rate(name, replicas, 0);
    }

    /// As [`TestEnv::backend`], each Pod answering 503 `<name> overloaded` above `rate`
    /// requests in a second (0: no limit).
    pub fn backend_at_rate(&self, name: &str, replicas: u32, rate: u32) {
        let template = std::fs::read_to_string(repo_root().join("hack/backend.yaml"))
            .expect("hack/backend.yaml");
        let yaml = template
            .replace("__NAME__", name)
            .replace("__REPLICAS__", &replicas.to_string())
            .replace("__RATE__", &rate.to_string());
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
            self.why_pods_wait()
        );
    }

    /// What a failed wait for Pods prints: the namespace's Pods, the node's conditions and
    /// taints (a node under pressure is tainted and schedules nothing), and the namespace's
    /// warnings (the scheduler's and the kubelet's reasons).
    fn why_pods_wait(&self) -> String {
        let text = |out: Output| {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            text
        };
        let node = "jsonpath={range .items[*]}{.metadata.name} taints={.spec.taints}{\"\\n\"}\
                    {range .status.conditions[*]}  {.type}={.status} {.reason}: {.message}{\"\\n\"}{end}{end}";
        format!(
            "{}\nnodes:\n{}\nwarnings:\n{}",
            text(self.kubectl(&["get", "pods", "-o", "wide"])),
            text(kubectl(self.cp, &["get", "nodes", "-o", node])),
            text(self.kubectl(&["get", "events", "--field-selector", "type=Warning"])),
        )
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
            self.set_pod_ready(&pod, ready);
        }
    }

    /// Makes one Pod pass or fail its readiness probe.
    pub fn set_pod_ready(&self, pod: &str, ready: bool) {
        let action = if ready {
            "touch /www/ready"
        } else {
            "rm -f /www/ready"
        };
        let out = self.kubectl(&["exec", pod, "--", "sh", "-c", action]);
        ok(&out, "changing a Pod's readiness");
    }
}

/// kubectl on the node's control plane, outside any namespace.
pub fn node_kubectl(cp: &ControlPlane, args: &[&str]) -> String {
    ok(&kubectl(cp, args), "kubectl")
}
