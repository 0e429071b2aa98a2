//! Real kubectl and helm against the control plane, and the RBAC helpers built on kubectl
//! (Roles, ServiceAccounts, token kubeconfigs).

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use super::{ControlPlane, TestEnv, repo_root};

/// Runs `kubectl` with `kubeconfig` from the repository's root, with `input` on its standard
/// input when given.
fn run(kubectl: &Path, kubeconfig: &Path, args: &[&str], input: Option<&str>) -> Output {
    use std::io::Write;
    let mut child = Command::new(kubectl)
        .current_dir(repo_root())
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning kubectl");
    let mut stdin = child.stdin.take().expect("stdin");
    if let Some(input) = input {
        stdin
            .write_all(input.as_bytes())
            .expect("writing to kubectl");
    }
    drop(stdin);
    child.wait_with_output().expect("kubectl output")
}

/// Runs one of the tools built beside the control plane (e.g. `kstatus`), with `input` on its
/// standard input.
pub fn tool_stdin(cp: &ControlPlane, tool: &str, args: &[&str], input: &str) -> Output {
    run(&cp.bin(tool), &cp.kubeconfig, args, Some(input))
}

/// Runs kubectl against the control plane.
pub fn kubectl(cp: &ControlPlane, args: &[&str]) -> Output {
    run(&cp.bin("kubectl"), &cp.kubeconfig, args, None)
}

/// Runs kubectl with text on its standard input.
pub fn kubectl_stdin(cp: &ControlPlane, args: &[&str], input: &str) -> Output {
    run(&cp.bin("kubectl"), &cp.kubeconfig, args, Some(input))
}

impl TestEnv {
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

/// The chart's aggregated ClusterRole for policy authors (`aggregate-to-edit`), as the chart
/// names it for the release `failover-controller` in `failover-system`.
pub const POLICY_EDIT_ROLE: &str = "failover-system-failover-controller-policy-edit";
/// The chart's aggregated ClusterRole for policy readers (`aggregate-to-view`).
pub const POLICY_VIEW_ROLE: &str = "failover-system-failover-controller-policy-view";

/// Renders the chart's user roles with helm and applies them (server-side, so tests running
/// at once apply the same objects without conflict).
pub fn install_user_roles(env: &TestEnv) {
    let rendered = helm(
        env,
        &[
            "template",
            "failover-controller",
            "charts/failover-controller",
            "--namespace",
            "failover-system",
            "--show-only",
            "templates/user-roles.yaml",
        ],
    );
    let roles = ok(&rendered, "helm template of the user roles");
    let out = kubectl_stdin(
        env.cp,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=failover-tests",
            "-f",
            "-",
        ],
        &roles,
    );
    ok(&out, "applying the chart's user roles");
}

/// A user bound in the test namespace to the chart's role for policy authors, which lets it
/// write FailoverPolicies only: a tenant sharing the cluster.
pub struct Tenant {
    kubeconfig: PathBuf,
    kubectl: PathBuf,
}

impl Tenant {
    /// kubectl as the tenant, in its namespace.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        run(&self.kubectl, &self.kubeconfig, args, None)
    }

    /// `kubectl apply -f -` as the tenant; fails the test when refused.
    pub fn apply(&self, yaml: &str) {
        let out = run(
            &self.kubectl,
            &self.kubeconfig,
            &["apply", "-f", "-"],
            Some(yaml),
        );
        ok(&out, "kubectl apply as the tenant");
    }

    /// `kubectl create -f -` as the tenant; whether it was created.
    pub fn create(&self, json: &str) -> bool {
        let out = run(
            &self.kubectl,
            &self.kubeconfig,
            &["create", "-f", "-"],
            Some(json),
        );
        out.status.success()
    }

    /// `kubectl delete KIND NAME` as the tenant, waiting for it to go.
    pub fn delete(&self, kind: &str, name: &str) {
        let out = self.kubectl(&["delete", kind, name, "--wait"]);
        ok(&out, "kubectl delete as the tenant");
    }

    /// A client acting as the tenant.
    pub async fn client(&self) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("the tenant's client config");
        kube::Client::try_from(config).expect("the tenant's client")
    }

    /// Creates `count` policies (`padded-<n>`) padded with labels to just under the largest
    /// object the API server stores (found by trying, as a tenant would): no status fits beside
    /// them. Returns their names.
    pub fn padded_to_the_limit(&self, count: usize) -> Vec<String> {
        let padded = |labels: usize, name: &str| {
            let labels: serde_json::Map<String, serde_json::Value> = (0..labels)
                .map(|i| (format!("pad.example.com/l{i:05}"), "v".repeat(63).into()))
                .collect();
            serde_json::json!({
                "apiVersion": "failover.dev/v1alpha1", "kind": "FailoverPolicy",
                "metadata": {"name": name, "labels": labels},
                "spec": {"service": name, "primary": "web", "secondaries": [{"service": "web-east"}]},
            })
            .to_string()
        };
        // The largest that is stored, to within one label.
        let (mut fits, mut refused) = (1_000, 40_000);
        while refused - fits > 1 {
            let labels = (fits + refused) / 2;
            if self.create(&padded(labels, "probe")) {
                fits = labels;
                self.delete("failoverpolicy", "probe");
            } else {
                refused = labels;
            }
        }
        (0..count)
            .map(|i| {
                let name = format!("padded-{i}");
                assert!(self.create(&padded(fits, &name)), "creating {name}");
                name
            })
            .collect()
    }

    /// `kubectl apply -f -` as the tenant, which must be refused; what kubectl said.
    pub fn apply_refused(&self, yaml: &str) -> String {
        let out = run(
            &self.kubectl,
            &self.kubeconfig,
            &["apply", "-f", "-"],
            Some(yaml),
        );
        assert!(
            !out.status.success(),
            "kubectl apply as the tenant was accepted"
        );
        String::from_utf8_lossy(&out.stderr).to_string()
    }
}

impl TestEnv {
    /// The tenant of this namespace: a ServiceAccount `author` bound here (a RoleBinding) to
    /// the chart's ClusterRole for policy authors, which lets it write FailoverPolicies and
    /// nothing else.
    pub fn tenant(&self) -> Tenant {
        self.tenant_bound("author", POLICY_EDIT_ROLE)
    }

    /// A ServiceAccount of this namespace bound here to a ClusterRole (the chart's user roles
    /// installed first), as a tenant.
    pub fn tenant_bound(&self, name: &str, cluster_role: &str) -> Tenant {
        install_user_roles(self);
        let kubeconfig = self.service_account_kubeconfig(name);
        let subject = format!("{}:{name}", self.ns);
        let out = self.kubectl(&[
            "create",
            "rolebinding",
            name,
            &format!("--clusterrole={cluster_role}"),
            "--serviceaccount",
            &subject,
        ]);
        ok(&out, "binding the tenant");
        Tenant {
            kubeconfig,
            kubectl: self.cp.bin("kubectl"),
        }
    }
}

/// Real helm against the test's control plane, with its own cache and config folders.
pub fn helm(env: &TestEnv, args: &[&str]) -> Output {
    let home = std::env::temp_dir().join("failover-helm");
    Command::new(env.cp.bin("helm"))
        .current_dir(repo_root())
        .env("KUBECONFIG", &env.cp.kubeconfig)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .args(args)
        .output()
        .expect("running helm")
}

/// The standard output of a command that must have succeeded.
pub fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The `kubectl failover` plugin's binary, built beforehand: it is a crate of its own, so this
/// test build does not make it. Found in `CARGO_TARGET_DIR` when set (a relative one from the
/// repository's root), else in the repository's `target/`; a missing binary fails the test with
/// the command that builds it.
pub fn plugin_binary() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .filter(|dir| !dir.is_empty())
        .map_or_else(|| repo_root().join("target"), |dir| repo_root().join(dir));
    let binary = target.join("debug/kubectl-failover");
    assert!(
        binary.is_file(),
        "the kubectl-failover plugin is not built ({} is missing): run `cargo build -p \
         kubectl-failover` first (hack/test.sh does)",
        binary.display()
    );
    binary
}

/// `kubectl failover ARGS` in the test namespace, the plugin found on the PATH.
pub fn kubectl_failover(env: &TestEnv, args: &[&str]) -> Output {
    let plugin = plugin_binary();
    let dirs = [
        plugin.parent().expect("plugin dir").to_path_buf(),
        env.cp.bin_dir.clone(),
    ];
    let path = std::env::join_paths(dirs.iter().cloned().chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");
    let mut all = vec!["failover", "-n", env.ns.as_str()];
    all.extend_from_slice(args);
    std::process::Command::new(env.cp.bin("kubectl"))
        .env("KUBECONFIG", &env.cp.kubeconfig)
        .env("PATH", path)
        .args(&all)
        .output()
        .expect("running kubectl failover")
}
