//! Test support: a real local control plane (etcd, kube-apiserver, kube-controller-manager),
//! started once per test binary by `hack/control-plane.sh`, and one fresh namespace per test.
//!
//! - `FAILOVER_TEST_KUBECONFIG=<path>` reuses a control plane that is already running.
//! - `FAILOVER_SKIP_CLUSTER_TESTS=1` skips the cluster tests, loudly; nothing else skips them.
//! - Missing binaries fail the tests with the command that builds them.
#![allow(dead_code)]

use std::{
    collections::BTreeMap,
    future::Future,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::{
        OnceLock,
        atomic::{AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use failover::{
    api::FailoverPolicy,
    crd,
    readiness::SERVICE_NAME_LABEL,
    trafficsplit::{TrafficSplit, traffic_split_crd},
};
use k8s_openapi::{
    api::{
        core::v1::{Namespace, Service, ServicePort, ServiceSpec},
        discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, Config, ResourceExt,
    api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};

/// Root of the repository.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

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

impl ControlPlane {
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

fn skip_requested() -> bool {
    std::env::var("FAILOVER_SKIP_CLUSTER_TESTS").is_ok_and(|v| v == "1")
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
    let bin_dir = bin_dir();
    let out = Command::new(repo_root().join("hack/control-plane.sh"))
        .args(["start", "--owner-pid", &std::process::id().to_string()])
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

/// The control plane shared by the tests of this binary, with the CRDs installed; `None` (after
/// a loud message) only when FAILOVER_SKIP_CLUSTER_TESTS=1.
pub fn shared() -> Option<&'static ControlPlane> {
    SHARED
        .get_or_init(|| {
            if skip_requested() {
                eprintln!("\n!!! FAILOVER_SKIP_CLUSTER_TESTS=1: SKIPPING tests that need a control plane !!!\n");
                return None;
            }
            let cp = match std::env::var("FAILOVER_TEST_KUBECONFIG") {
                Ok(path) => {
                    let kubeconfig = PathBuf::from(path);
                    let dir = kubeconfig.parent().map(Path::to_path_buf).unwrap_or_default();
                    ControlPlane { kubeconfig, bin_dir: bin_dir(), dir }
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

/// Runs kubectl against the control plane.
pub fn kubectl(cp: &ControlPlane, args: &[&str]) -> Output {
    Command::new(cp.bin("kubectl"))
        .current_dir(repo_root())
        .env("KUBECONFIG", &cp.kubeconfig)
        .args(args)
        .output()
        .expect("running kubectl")
}

/// Runs kubectl with text on its standard input.
pub fn kubectl_stdin(cp: &ControlPlane, args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(cp.bin("kubectl"))
        .env("KUBECONFIG", &cp.kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning kubectl");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("writing to kubectl");
    child.wait_with_output().expect("kubectl output")
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

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl TestEnv {
    /// A fresh namespace named after the test, or `None` when cluster tests are skipped.
    pub async fn new(test: &str) -> Option<Self> {
        Self::on(shared()?, test).await
    }

    /// A control plane of this test's own (for tests that stop its components), with the CRDs,
    /// or `None` when cluster tests are skipped. It stops when the test process exits.
    pub async fn dedicated(test: &str) -> Option<Self> {
        shared()?;
        let cp: &'static ControlPlane = Box::leak(Box::new(start_control_plane()));
        install_crds(cp);
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

    /// kubectl in the test namespace.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        let mut all = vec!["-n", self.ns.as_str()];
        all.extend_from_slice(args);
        kubectl(self.cp, &all)
    }

    /// kubectl in the test namespace, with standard input.
    pub fn kubectl_stdin(&self, args: &[&str], input: &str) -> Output {
        let mut all = vec!["-n", self.ns.as_str()];
        all.extend_from_slice(args);
        kubectl_stdin(self.cp, &all, input)
    }

    /// Creates (or keeps) a selectorless Service, as a mirrored Service is.
    pub async fn create_service(&self, name: &str) {
        let svc = Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                ports: Some(vec![ServicePort {
                    port: 80,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.api::<Service>()
            .patch(
                name,
                &PatchParams::apply("failover-tests").force(),
                &Patch::Apply(&svc),
            )
            .await
            .expect("applying Service");
    }

    /// Sets the endpoints of a Service: one EndpointSlice `<service>-test` with `ready` ready
    /// and `not_ready` not-ready endpoints. Returns the slice's new resourceVersion.
    pub async fn set_endpoints(&self, service: &str, ready: usize, not_ready: usize) -> String {
        let endpoint = |i: usize, is_ready: bool| Endpoint {
            addresses: vec![format!(
                "10.{}.{}.{}",
                (i / 65536) % 256,
                (i / 256) % 256,
                i % 256
            )],
            conditions: Some(EndpointConditions {
                ready: Some(is_ready),
                ..Default::default()
            }),
            ..Default::default()
        };
        let endpoints = (0..ready)
            .map(|i| endpoint(i, true))
            .chain((ready..ready + not_ready).map(|i| endpoint(i, false)))
            .collect();
        let slice = EndpointSlice {
            metadata: ObjectMeta {
                name: Some(format!("{service}-test")),
                labels: Some(BTreeMap::from([
                    (SERVICE_NAME_LABEL.to_string(), service.to_string()),
                    (
                        "endpointslice.kubernetes.io/managed-by".to_string(),
                        "failover-tests".to_string(),
                    ),
                ])),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints,
            ports: Some(vec![EndpointPort {
                port: Some(80),
                ..Default::default()
            }]),
        };
        let applied = self
            .api::<EndpointSlice>()
            .patch(
                &format!("{service}-test"),
                &PatchParams::apply("failover-tests").force(),
                &Patch::Apply(&slice),
            )
            .await
            .expect("applying EndpointSlice");
        applied.resource_version().unwrap_or_default()
    }

    /// Creates Services with one ready endpoint each.
    pub async fn ready_backends(&self, services: &[&str]) {
        for s in services {
            self.create_service(s).await;
            self.set_endpoints(s, 1, 0).await;
        }
    }

    /// Applies a FailoverPolicy from YAML with real kubectl (as users do).
    pub fn apply_policy(&self, yaml: &str) {
        let out = self.kubectl_stdin(&["apply", "-f", "-"], yaml);
        assert!(
            out.status.success(),
            "kubectl apply failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The TrafficSplit's backends as (service, weight), if it exists.
    pub async fn split_weights(&self, name: &str) -> Option<Vec<(String, i64)>> {
        let ts = self.api::<TrafficSplit>().get_opt(name).await.ok()??;
        Some(
            ts.spec
                .backends
                .into_iter()
                .map(|b| (b.service, b.weight))
                .collect(),
        )
    }

    /// The policy, if it exists.
    pub async fn policy(&self, name: &str) -> Option<FailoverPolicy> {
        self.api::<FailoverPolicy>().get_opt(name).await.ok()?
    }

    /// Waits until the TrafficSplit has exactly these weights.
    pub async fn wait_weights(&self, name: &str, expected: &[(&str, i64)], timeout: Duration) {
        let expected: Vec<(String, i64)> =
            expected.iter().map(|(s, w)| (s.to_string(), *w)).collect();
        let deadline = Instant::now() + timeout;
        let mut last = self.split_weights(name).await;
        while last.as_ref() != Some(&expected) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            last = self.split_weights(name).await;
        }
        assert!(
            last.as_ref() == Some(&expected),
            "TrafficSplit {name}: wanted {expected:?}, last saw {last:?} (namespace {})",
            self.ns
        );
    }

    /// Waits until the policy satisfies a predicate; returns it.
    pub async fn wait_policy(
        &self,
        name: &str,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&FailoverPolicy) -> bool,
    ) -> FailoverPolicy {
        let deadline = Instant::now() + timeout;
        let mut last = self.policy(name).await;
        while !last.as_ref().is_some_and(&pred) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            last = self.policy(name).await;
        }
        match last {
            Some(p) if pred(&p) => p,
            other => panic!(
                "policy {name}: {what} not reached; last status: {:#?}",
                other.and_then(|p| p.status)
            ),
        }
    }

    /// Waits until an Event with this reason (and type, when given) is recorded on the object
    /// named `regarding`; returns whether it was.
    pub async fn wait_event(
        &self,
        regarding: &str,
        reason: &str,
        type_: Option<&str>,
        timeout: Duration,
    ) -> bool {
        let events: Api<k8s_openapi::api::events::v1::Event> = self.api();
        wait_until(timeout, || async {
            events.list(&Default::default()).await.is_ok_and(|l| {
                l.items.iter().any(|e| {
                    e.reason.as_deref() == Some(reason)
                        && type_.is_none_or(|t| e.type_.as_deref() == Some(t))
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding)
                })
            })
        })
        .await
    }

    /// Deletes the namespace (best effort).
    pub async fn cleanup(self) {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let _ = namespaces.delete(&self.ns, &DeleteParams::default()).await;
    }
}

/// Polls `check` every 50 ms until it is true or `timeout` passes; returns whether it held.
pub async fn wait_until<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The controller binary, run as a child process exactly as in production.
pub struct ControllerProcess {
    child: Child,
    /// Where its log goes.
    pub log: PathBuf,
    admin: Option<String>,
}

impl ControllerProcess {
    /// Starts `failover-controller` for one namespace with the admin kubeconfig.
    pub fn start(env: &TestEnv, extra: &[&str]) -> Self {
        Self::start_with_kubeconfig(env, &env.cp.kubeconfig, extra)
    }

    /// Starts `failover-controller` for one namespace with the given kubeconfig.
    pub fn start_with_kubeconfig(env: &TestEnv, kubeconfig: &Path, extra: &[&str]) -> Self {
        let binary = option_env!("CARGO_BIN_EXE_failover-controller")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join("target/release/failover-controller"));
        Self::start_binary(&binary, env, kubeconfig, extra)
    }

    /// Starts a given `failover-controller` binary for one namespace.
    pub fn start_binary(binary: &Path, env: &TestEnv, kubeconfig: &Path, extra: &[&str]) -> Self {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let log = std::env::temp_dir().join(format!("failover-controller-{}-{n}.log", env.ns));
        let file = std::fs::File::create(&log).expect("controller log file");
        let mut args: Vec<&str> = vec!["--namespace", &env.ns];
        if !extra.contains(&"--log-level") {
            args.extend(["--log-level", "info,failover=debug"]);
        }
        // A free port picked here, so the address is known whatever the log level.
        let admin = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.to_string())
            .expect("free port");
        if !extra.contains(&"--admin-addr") {
            args.extend(["--admin-addr", &admin]);
        }
        let child = Command::new(binary)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("RUST_LOG")
            .args(&args)
            .args(extra)
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .spawn()
            .expect("starting failover-controller");
        Self {
            child,
            log,
            admin: (!extra.contains(&"--admin-addr")).then_some(admin),
        }
    }

    /// The controller's log so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The admin server's address, from the log (waits up to 10 s for it).
    pub async fn admin_addr(&self) -> String {
        if let Some(addr) = &self.admin {
            return addr.clone();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(addr) = self
                .logs()
                .lines()
                .find(|l| l.contains("admin server listening"))
                .and_then(|l| l.split("address=").nth(1))
                .and_then(|rest| rest.split_whitespace().next())
            {
                return addr.trim_matches('"').to_string();
            }
            assert!(
                Instant::now() < deadline,
                "controller did not start its admin server:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// GET on the admin server: (status code, body).
    pub async fn admin_get(&self, path: &str) -> (u16, String) {
        let addr = self.admin_addr().await;
        // Right after start the server may not listen yet: retry refused connections briefly.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let answer = http_get(&addr, path);
            if answer.0 != 0 || Instant::now() >= deadline {
                return answer;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal (e.g. "TERM", "KILL") and waits for the process to exit.
    pub fn signal(&mut self, signal: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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

/// A minimal HTTP/1.1 GET over loopback: (status code, body); (0, error) when unreachable.
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return (0, format!("cannot connect to {addr}"));
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return (0, "write failed".into());
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// The sum of every sample of a metric family (all label sets) in a Prometheus text exposition.
pub fn metric_sum(text: &str, family: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(family))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum()
}

/// The value of one sample in a Prometheus text exposition (`name{labels}` as written), if any.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

impl TestEnv {
    /// Grants a ServiceAccount of the test namespace a Role with these rules (a YAML list) through
    /// a RoleBinding of the same name.
    pub fn grant(&self, name: &str, service_account: &str, rules: &str) {
        let role = format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: {name}}}\nrules:\n{rules}"
        );
        let out = self.kubectl_stdin(&["apply", "-f", "-"], &role);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.bind(name, service_account);
    }

    /// Binds the Role `name` to a ServiceAccount of the test namespace.
    pub fn bind(&self, name: &str, service_account: &str) {
        let subject = format!("{}:{service_account}", self.ns);
        let out = self.kubectl(&[
            "create",
            "rolebinding",
            name,
            &format!("--role={name}"),
            "--serviceaccount",
            &subject,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Creates a ServiceAccount and returns a kubeconfig that authenticates as it, with a token
    /// from `kubectl create token` (the API server's TokenRequest API).
    pub fn service_account_kubeconfig(&self, name: &str) -> PathBuf {
        let out = self.kubectl(&["create", "serviceaccount", name]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.token_kubeconfig(name)
    }

    /// A kubeconfig that authenticates as an existing ServiceAccount of the test namespace, with
    /// a token from `kubectl create token` (the API server's TokenRequest API).
    pub fn token_kubeconfig(&self, name: &str) -> PathBuf {
        let out = self.kubectl(&["create", "token", name, "--duration=2h"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let token = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let admin: serde_json::Value = serde_yaml::from_str(
            &std::fs::read_to_string(&self.cp.kubeconfig).expect("admin kubeconfig"),
        )
        .expect("kubeconfig yaml");
        let cluster = &admin["clusters"][0]["cluster"];
        let kubeconfig = serde_json::json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "local", "cluster": cluster}],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": "sa", "context": {"cluster": "local", "user": name, "namespace": self.ns}}],
            "current-context": "sa",
        });
        let path = std::env::temp_dir().join(format!("{}-{name}.kubeconfig", self.ns));
        std::fs::write(&path, serde_yaml::to_string(&kubeconfig).expect("yaml"))
            .expect("writing kubeconfig");
        path
    }
}
