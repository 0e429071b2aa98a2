//! The control plane the tests run against (one, shared by the whole binary, started on first
//! use, or a dedicated one for tests that stop its components) and one fresh namespace per test,
//! deleted when the test's [`TestEnv`] is dropped.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::{
        OnceLock,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use failover_core::{crd, route::trafficsplit::traffic_split_crd};
use k8s_openapi::{
    api::core::v1::Namespace,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, Config, ResourceExt,
    api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};

use super::{Turn, cluster_tests_skipped, kubectl, kubectl_stdin, repo_root, turn};

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
    /// plane. A control plane with the proxy has the Gateway API already, from the channel the
    /// proxy needs (its env file's `GATEWAY_API_CHANNEL`): the standard CRDs would replace it.
    pub fn install_gateway_api(&self) {
        let mut done = GATEWAY_API.lock().unwrap_or_else(|e| e.into_inner());
        if done.contains(&self.kubeconfig) || self.env("GATEWAY_API_CHANNEL").is_some() {
            return;
        }
        let crds = self.gateway_api_crds();
        let out = kubectl_stdin(self, &["apply", "--server-side", "-f", "-"], &crds);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        wait_established(self, &["crd/httproutes.gateway.networking.k8s.io"]);
        done.push(self.kubeconfig.clone());
    }

    /// The Gateway API's standard-channel CRDs of the pinned version, as YAML.
    pub fn gateway_api_crds(&self) -> String {
        let version = super::pinned("GATEWAY_API_VERSION");
        std::fs::read_to_string(
            self.bin_dir
                .join(format!("gateway-api-{version}-standard.yaml")),
        )
        .expect("Gateway API CRDs (hack/build-control-plane.sh fetches them)")
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

    /// Stops every component and removes the instance's directory (`hack/control-plane.sh
    /// stop`), waiting until it is done; never panics (it runs from `Drop`).
    pub fn stop(&self) {
        let _ = Command::new(repo_root().join("hack/control-plane.sh"))
            .arg("stop")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
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

/// Starts a control plane owned by this test process; it stops itself when the process exits at
/// the latest (see [`DedicatedPlane`] to stop it when a test ends).
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

/// A control plane of a test's own, with the CRDs installed or not, stopped when this is dropped
/// (at the end of the test, so that the tests that follow do not share the machine with it). It
/// holds the test's [`Turn`].
pub struct DedicatedPlane {
    /// The control plane (kept for the test's lifetime, its processes stopped on drop).
    pub cp: &'static ControlPlane,
    _turn: Turn,
}

impl DedicatedPlane {
    /// Starts a control plane without any CRD, once the calling test has its turn.
    pub async fn start() -> Self {
        let turn = turn().await;
        let cp: &'static ControlPlane = Box::leak(Box::new(start_control_plane()));
        Self { cp, _turn: turn }
    }

    /// Starts a control plane and installs the CRDs.
    pub async fn with_crds() -> Self {
        let plane = Self::start().await;
        install_crds(plane.cp);
        plane
    }
}

impl Drop for DedicatedPlane {
    fn drop(&mut self) {
        self.cp.stop();
    }
}

static SHARED: OnceLock<Option<ControlPlane>> = OnceLock::new();

/// The control plane shared by every test of this binary, with the CRDs installed; `None` only
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

/// Applies the FailoverPolicy, FailoverGroup and TrafficSplit CRDs and waits until they are
/// served.
pub fn install_crds(cp: &ControlPlane) {
    let mut yaml = crd::failover_policy_yaml().expect("crd yaml");
    yaml.push_str("---\n");
    yaml.push_str(&crd::failover_group_yaml().expect("group crd yaml"));
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
    wait_established(
        cp,
        &[
            "crd/failoverpolicies.failover.dev",
            "crd/failovergroups.failover.dev",
            "crd/trafficsplits.split.smi-spec.io",
        ],
    );
}

/// Waits until each CRD is Established. A CRD read before the API server gave it any condition
/// makes `kubectl wait` fail at once ("accessor error": no conditions yet): that is waited out.
pub fn wait_established(cp: &ControlPlane, crds: &[&str]) {
    let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    args.extend_from_slice(crds);
    for _ in 0..50 {
        let out = kubectl(cp, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            return;
        }
        assert!(
            stderr.contains("accessor error"),
            "waiting for CRDs: {stderr}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("waiting for CRDs: {crds:?} never had a condition");
}

/// One test's view: a client and its own namespace. Dropping it deletes the namespace (without
/// waiting for it to go), also when the test fails; on a control plane of the test's own
/// ([`TestEnv::dedicated`]), it stops the control plane instead.
pub struct TestEnv {
    /// The control plane.
    pub cp: &'static ControlPlane,
    /// Admin client.
    pub client: Client,
    /// The test's namespace.
    pub ns: String,
    /// Whether the namespace is deleted already ([`TestEnv::cleanup_and_wait`]).
    deleted: bool,
    /// The control plane of this test's own, if any: stopped when this is dropped.
    plane: Option<DedicatedPlane>,
    /// The test's turn (see [`turn`]), held until its last environment is dropped.
    _turn: Turn,
}

/// Numbers namespaces, logs and ports within the test binary.
pub static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A namespace name for `test`: the first 30 characters of its name made a DNS label, then the
/// process and a number that make it unique. Short: messages that name a namespace have a bound.
fn namespace_name(test: &str, n: u32) -> String {
    let suffix = format!("-{}-{n}", std::process::id());
    let name: String = test
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(30)
        .collect();
    let name = name.trim_matches('-');
    if name.is_empty() {
        format!("t{suffix}")
    } else {
        format!("{name}{suffix}")
    }
}

impl TestEnv {
    /// A fresh namespace named after the test on the shared control plane, or `None` when
    /// cluster tests are skipped (the skip recorded). Tests write it `test_env!()`.
    pub async fn new(test: &str) -> Option<Self> {
        let _turn = turn().await;
        Self::on(shared()?, test).await
    }

    /// A control plane of this test's own (for tests that stop its components), with the CRDs,
    /// or `None` when cluster tests are skipped. It stops when this is dropped.
    pub async fn dedicated(test: &str) -> Option<Self> {
        if cluster_tests_skipped(test) {
            return None;
        }
        Self::on_own(DedicatedPlane::with_crds().await, test).await
    }

    /// A control plane of this test's own without any CRD, or `None` when cluster tests are
    /// skipped. It stops when this is dropped.
    pub async fn dedicated_without_crds(test: &str) -> Option<Self> {
        if cluster_tests_skipped(test) {
            return None;
        }
        Self::on_own(DedicatedPlane::start().await, test).await
    }

    async fn on_own(plane: DedicatedPlane, test: &str) -> Option<Self> {
        let mut env = Self::on(plane.cp, test).await?;
        env.plane = Some(plane);
        Some(env)
    }

    /// A fresh namespace on the given control plane, once the calling test has its turn.
    pub async fn on(cp: &'static ControlPlane, test: &str) -> Option<Self> {
        let turn = turn().await;
        let client = cp.client().await;
        let ns = namespace_name(test, COUNTER.fetch_add(1, Ordering::SeqCst));
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
        Some(Self {
            cp,
            client,
            ns,
            deleted: false,
            plane: None,
            _turn: turn,
        })
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

    /// Deletes the namespace and waits until it is gone with everything in it (at most
    /// `limit`), so that the deletions do not load the API server afterwards; how long it took.
    pub async fn cleanup_and_wait(mut self, limit: Duration) -> Duration {
        let started = std::time::Instant::now();
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let _ = namespaces.delete(&self.ns, &DeleteParams::default()).await;
        self.deleted = true;
        while started.elapsed() < limit {
            if let Ok(None) = namespaces.get_opt(&self.ns).await {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        started.elapsed()
    }
}

impl TestEnv {
    /// Removes the kubeconfigs written for this namespace's ServiceAccounts
    /// (`<namespace>-<account>.kubeconfig` in the temporary directory): each holds a token.
    fn remove_token_kubeconfigs(&self) {
        let prefix = format!("{}-", self.ns);
        for entry in std::fs::read_dir(std::env::temp_dir())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(&prefix) && name.ends_with(".kubeconfig") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

impl Drop for TestEnv {
    /// Deletes the namespace with real kubectl, without waiting for it to go (a blocking call of
    /// a moment, from any thread, with or without a runtime); never panics. A control plane of the
    /// test's own is stopped instead (its field's own drop), and a stopped one is left alone.
    fn drop(&mut self) {
        self.remove_token_kubeconfigs();
        if self.deleted || self.plane.is_some() || !self.cp.kubeconfig.exists() {
            return;
        }
        let _ = Command::new(self.cp.bin("kubectl"))
            .env("KUBECONFIG", &self.cp.kubeconfig)
            .args(["delete", "namespace", &self.ns])
            .args([
                "--wait=false",
                "--ignore-not-found",
                "--request-timeout=10s",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
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
