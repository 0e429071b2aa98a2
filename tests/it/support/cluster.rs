//! The control plane a test binary runs against (one, shared, started on first use, or a
//! dedicated one for tests that stop its components) and one fresh namespace per test.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::{
        OnceLock,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use failover::{crd, route::trafficsplit::traffic_split_crd};
use k8s_openapi::{
    api::core::v1::Namespace,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, Config, ResourceExt,
    api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};

use super::{cluster_tests_skipped, kubectl, kubectl_stdin, repo_root};

/// A running control plane.
#[derive(Debug, Clone)]
pub struct ControlPlane {
    /// Admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// Folder with kubectl, helm and the control-plane binaries.
    pub bin_dir: PathBuf,
    /// The instance's directory (holds `env`, logs, pid files).
    pub dir: PathBuf,
}

/// The control planes (by kubeconfig) that have the Gateway API's CRDs already.
static GATEWAY_API: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

impl ControlPlane {
    /// Installs the Gateway API's standard-channel CRDs, from its Go module, once per control
    /// plane.
    pub fn install_gateway_api(&self) {
        let mut done = GATEWAY_API.lock().unwrap_or_else(|e| e.into_inner());
        if done.contains(&self.kubeconfig) {
            return;
        }
        let versions =
            std::fs::read_to_string(repo_root().join("hack/versions.env")).expect("versions.env");
        let version = versions
            .lines()
            .find_map(|l| l.strip_prefix("GATEWAY_API_VERSION="))
            .expect("GATEWAY_API_VERSION")
            .trim()
            .to_string();
        let crds = std::fs::read_to_string(
            self.bin_dir
                .join(format!("gateway-api-{version}-standard.yaml")),
        )
        .expect("Gateway API CRDs (hack/build-control-plane.sh fetches them)");
        let out = kubectl_stdin(self, &["apply", "--server-side", "-f", "-"], &crds);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let crd = "crd/httproutes.gateway.networking.k8s.io";
        let out = kubectl(
            self,
            &["wait", "--for=condition=Established", "--timeout=60s", crd],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        done.push(self.kubeconfig.clone());
    }

    /// A value of the instance's `env` file (`PROXY_URL`, `NODE_IP`, …), if it has it.
    pub fn env(&self, key: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.dir.join("env")).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(|v| v.trim().to_string())
    }

    /// Path of a binary from the bin folder.
    pub fn bin(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }

    /// Runs `hack/control-plane.sh` with arguments against this instance.
    pub fn script(&self, args: &[&str]) -> Output {
        Command::new(repo_root().join("hack/control-plane.sh"))
            .args(args)
            .output()
            .expect("running hack/control-plane.sh")
    }

    /// A client for this control plane, bound to the calling test's runtime.
    pub async fn client(&self) -> Client {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig).expect("reading kubeconfig");
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("kubeconfig config");
        Client::try_from(config).expect("client")
    }
}

fn bin_dir() -> PathBuf {
    let out = Command::new(repo_root().join("hack/build-control-plane.sh"))
        .arg("--check")
        .output()
        .expect("running hack/build-control-plane.sh --check");
    if !out.status.success() {
        panic!(
            "{}\nThe cluster tests need a local control plane. Build its binaries once with:\n    hack/build-control-plane.sh\nor run every test with the README's test command. To skip cluster tests explicitly, set FAILOVER_SKIP_CLUSTER_TESTS=1.",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    PathBuf::from(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or_default()
            .trim(),
    )
}

/// Starts a control plane owned by this test process; it stops itself when the process exits.
pub fn start_control_plane() -> ControlPlane {
    start_control_plane_with(&[])
}

/// Starts a control plane with extra options of `hack/control-plane.sh start` (`--node`).
pub fn start_control_plane_with(options: &[&str]) -> ControlPlane {
    let bin_dir = bin_dir();
    let owner = std::process::id().to_string();
    let mut args = vec!["start", "--owner-pid", &owner];
    args.extend_from_slice(options);
    let out = Command::new(repo_root().join("hack/control-plane.sh"))
        .args(&args)
        .stderr(Stdio::inherit())
        .output()
        .expect("running hack/control-plane.sh start");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let kubeconfig = stdout
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("export KUBECONFIG="))
        .unwrap_or_else(|| panic!("control plane did not start: {stdout}"));
    let kubeconfig = PathBuf::from(kubeconfig.trim());
    let dir = kubeconfig.parent().expect("kubeconfig dir").to_path_buf();
    ControlPlane {
        kubeconfig,
        bin_dir,
        dir,
    }
}

static SHARED: OnceLock<Option<ControlPlane>> = OnceLock::new();

/// The control plane shared by the tests of this binary, with the CRDs installed; `None` only
/// when FAILOVER_SKIP_CLUSTER_TESTS=1 (the skip recorded for the calling test).
pub fn shared() -> Option<&'static ControlPlane> {
    if cluster_tests_skipped("a test of the control plane") {
        return None;
    }
    SHARED
        .get_or_init(|| {
            let cp = match std::env::var("FAILOVER_TEST_KUBECONFIG") {
                Ok(path) => {
                    let kubeconfig = PathBuf::from(path);
                    let dir = kubeconfig
                        .parent()
                        .map(Path::to_path_buf)
                        .unwrap_or_default();
                    ControlPlane {
                        kubeconfig,
                        bin_dir: bin_dir(),
                        dir,
                    }
                }
                Err(_) => start_control_plane(),
            };
            install_crds(&cp);
            Some(cp)
        })
        .as_ref()
}

/// Applies the FailoverPolicy and TrafficSplit CRDs and waits until both are served.
pub fn install_crds(cp: &ControlPlane) {
    let mut yaml = crd::failover_policy_yaml().expect("crd yaml");
    yaml.push_str("---\n");
    yaml.push_str(&serde_yaml::to_string(&traffic_split_crd()).expect("ts crd yaml"));
    let out = kubectl_stdin(
        cp,
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        &yaml,
    );
    assert!(
        out.status.success(),
        "installing CRDs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl(
        cp,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/failoverpolicies.failover.dev",
            "crd/trafficsplits.split.smi-spec.io",
        ],
    );
    assert!(
        out.status.success(),
        "waiting for CRDs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One test's view: a client and its own namespace.
pub struct TestEnv {
    /// The control plane.
    pub cp: &'static ControlPlane,
    /// Admin client.
    pub client: Client,
    /// The test's namespace.
    pub ns: String,
}

/// Numbers namespaces, logs and ports within a test binary.
pub static COUNTER: AtomicU32 = AtomicU32::new(0);

impl TestEnv {
    /// A fresh namespace named after the test, or `None` when cluster tests are skipped (the
    /// skip recorded).
    pub async fn new(test: &str) -> Option<Self> {
        Self::on(shared()?, test).await
    }

    /// A control plane of this test's own (for tests that stop its components), with the CRDs,
    /// or `None` when cluster tests are skipped. It stops when the test process exits.
    pub async fn dedicated(test: &str) -> Option<Self> {
        let env = Self::dedicated_without_crds(test).await?;
        install_crds(env.cp);
        Some(env)
    }

    /// A control plane of this test's own without any CRD, or `None` when cluster tests are
    /// skipped. It stops when the test process exits.
    pub async fn dedicated_without_crds(test: &str) -> Option<Self> {
        shared()?;
        let cp: &'static ControlPlane = Box::leak(Box::new(start_control_plane()));
        Self::on(cp, test).await
    }

    /// A fresh namespace on the given control plane.
    pub async fn on(cp: &'static ControlPlane, test: &str) -> Option<Self> {
        let client = cp.client().await;
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let mut ns: String = format!("{test}-{}-{n}", std::process::id())
            .to_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        if ns.len() > 63 {
            ns = format!("t{}-{n}-{}", std::process::id(), &test.len());
        }
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let object = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        namespaces
            .create(&PostParams::default(), &object)
            .await
            .expect("creating test namespace");
        Some(Self { cp, client, ns })
    }

    /// Typed API in the test namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Deletes the namespace (best effort).
    pub async fn cleanup(self) {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let _ = namespaces.delete(&self.ns, &DeleteParams::default()).await;
    }

    /// Deletes the namespace and waits until it is gone with everything in it (at most
    /// `limit`), so that the deletions do not load the API server afterwards; how long it took.
    pub async fn cleanup_and_wait(self, limit: Duration) -> Duration {
        let started = std::time::Instant::now();
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let _ = namespaces.delete(&self.ns, &DeleteParams::default()).await;
        while started.elapsed() < limit {
            if let Ok(None) = namespaces.get_opt(&self.ns).await {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        started.elapsed()
    }
}

/// Applies a CRD object (used by tests that remove and restore CRDs).
pub async fn apply_crd(client: &Client, crd: &CustomResourceDefinition) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.patch(
        &crd.name_any(),
        &PatchParams::apply("failover-tests").force(),
        &Patch::Apply(crd),
    )
    .await
    .expect("applying CRD");
}
