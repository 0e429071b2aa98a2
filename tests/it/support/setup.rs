//! The one way tests set up the usual scene, and the one vocabulary for where its traffic goes:
//! the backends `web` (the primary), `web-east` and `web-west`, each with one ready endpoint; a
//! controller for the test's namespace, run as in production; a policy applied with real kubectl.

use std::time::Duration;

use super::{ControllerProcess, PolicyBuilder, TestEnv};

/// The usual policy's backends, primary first.
pub const WEB_BACKENDS: [&str; 3] = ["web", "web-east", "web-west"];

/// The weights of a route of the usual policy, as (service, weight).
pub type Weights = [(&'static str, i64); 3];
/// All traffic on the primary `web`.
pub const ON_WEB: Weights = [("web", 1), ("web-east", 0), ("web-west", 0)];
/// All traffic on the first secondary, `web-east`.
pub const ON_EAST: Weights = [("web", 0), ("web-east", 1), ("web-west", 0)];
/// All traffic on the second secondary, `web-west`.
pub const ON_WEST: Weights = [("web", 0), ("web-east", 0), ("web-west", 1)];

/// Weights as a route reader returns them.
pub fn weights(expected: &Weights) -> Vec<(String, i64)> {
    expected.iter().map(|(s, w)| (s.to_string(), *w)).collect()
}

impl TestEnv {
    /// The usual backends, all ready, and a controller for this namespace (with `extra`
    /// arguments).
    pub async fn with_controller(&self, extra: &[&str]) -> ControllerProcess {
        self.ready_backends(&WEB_BACKENDS).await;
        ControllerProcess::start(self, extra)
    }

    /// The usual backends, a controller, and `policy` applied; waits until its route sends all
    /// traffic to the primary `web` (the route named `web`, the usual policy's).
    pub async fn routing_to_web(
        &self,
        policy: &PolicyBuilder,
        wait: Duration,
    ) -> ControllerProcess {
        let controller = self.with_controller(&[]).await;
        self.apply(policy);
        self.wait_weights("web", &ON_WEB, wait).await;
        controller
    }
}

/// A fresh namespace with the usual backends, a controller, and `policy` applied (not waited
/// for); `None` when cluster tests are skipped.
pub async fn started(test: &str, policy: PolicyBuilder) -> Option<(TestEnv, ControllerProcess)> {
    let env = TestEnv::new(test).await?;
    let controller = env.with_controller(&[]).await;
    env.apply(&policy);
    Some((env, controller))
}

/// As [`started`], and routing all traffic to the primary `web`.
pub async fn routing_to_web(
    test: &str,
    policy: PolicyBuilder,
) -> Option<(TestEnv, ControllerProcess)> {
    let env = TestEnv::new(test).await?;
    let controller = env.routing_to_web(&policy, super::WAIT).await;
    Some((env, controller))
}

/// The controller's arguments for leader election in the test's namespace, with short timings
/// (lease 4 s, renew deadline 3 s, retry 250 ms) so a standby takes over within seconds.
pub fn election_args(ns: &str) -> Vec<String> {
    [
        "--leader-elect",
        "--lease-namespace",
        ns,
        "--lease-duration",
        "4s",
        "--renew-deadline",
        "3s",
        "--retry-period",
        "250ms",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// An `autoscaling/v2` HorizontalPodAutoscaler `name` of the Deployment of the same name, with
/// `minReplicas` 1 and this `maxReplicas`, consenting to the policy `web`'s changes.
pub fn hpa(env: &TestEnv, name: &str, max_replicas: u32) {
    let yaml = format!(
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {{name: {name}, annotations: {{failover.dev/policies: web}}}}\nspec:\n  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: {name}}}\n  minReplicas: 1\n  maxReplicas: {max_replicas}\n"
    );
    super::ok(&env.kubectl_stdin(&["apply", "-f", "-"], &yaml), "an HPA");
}

/// A dedicated control plane with the Gateway API, and two namespaces on it (`first` and
/// `second`), each with the usual ready backends; `None` when cluster tests are skipped.
pub async fn two_namespaces_on_gateway_api(
    first: &str,
    second: &str,
) -> Option<(TestEnv, TestEnv)> {
    let one = TestEnv::dedicated(first).await?;
    let two = TestEnv::on(one.cp, second)
        .await
        .expect("a second namespace");
    one.cp.install_gateway_api();
    for env in [&one, &two] {
        env.ready_backends(&WEB_BACKENDS).await;
    }
    Some((one, two))
}

/// The Gateway `gw` of `env`'s namespace (its owner is the admin), with an HTTP listener `web`
/// on port 80 and a TCP listener `db` on port 5432, each admitting routes `from` these
/// namespaces (`All` or `Same`).
pub fn shared_gateway(env: &TestEnv, web_from: &str) {
    let yaml = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  gatewayClassName: none
  listeners:
  - {{name: web, port: 80, protocol: HTTP, allowedRoutes: {{namespaces: {{from: {web_from}}}}}}}
  - {{name: db, port: 5432, protocol: TCP, allowedRoutes: {{namespaces: {{from: All}}}}}}
"
    );
    super::ok(
        &env.kubectl_stdin(&["apply", "-f", "-"], &yaml),
        "the Gateway owner's Gateway",
    );
}
