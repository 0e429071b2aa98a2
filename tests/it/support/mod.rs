//! Test support, split by concern:
//!
//! - [`cluster`]: a real local control plane (etcd, kube-apiserver, kube-controller-manager),
//!   started once for the test binary by `hack/control-plane.sh`, and one fresh namespace per
//!   test ([`test_env!`]), deleted when the test's environment is dropped;
//! - [`kubectl`]: real kubectl, and RBAC helpers built on it;
//! - [`backends`]: backend Services and their EndpointSlices;
//! - [`policy`]: a typed policy builder and readers of what the controller made of a policy;
//! - [`process`]: the controller binary as a child process, and its admin server;
//! - [`metrics`]: reading the controller's metrics;
//! - [`node`]: a real node, the controller's image and chart, real backend Deployments;
//! - [`prometheus`]: a real Prometheus scraping an exporter the test controls;
//! - [`alertmanager`]: a real Alertmanager, the alerts posted to it read back;
//! - [`webhook`]: a webhook receiver that records each request and answers as the test says;
//! - [`remote`]: remote clusters (more control planes) and the Secrets that declare them;
//! - [`setup`]: the one way tests set up the usual scene, and the weights they expect;
//! - [`samples`]: the repository's sample policies;
//! - [`script`]: the project's scripts run as a user runs them, their output read step by step;
//! - [`skips`]: tests skipped on purpose, announced and recorded for the run's summary;
//! - [`traffic`]: a load generator: real requests through the proxy, each answer recorded;
//!   [`exchanges`]: its gRPC, TLS and TCP requests; [`failovers`]: traffic across a failover,
//!   its stage and the bound on what it loses;
//! - [`turns`]: which tests run beside which (a few run alone).
//!
//! `FAILOVER_TEST_KUBECONFIG=<path>` reuses a control plane that is already running;
//! `FAILOVER_SKIP_CLUSTER_TESTS=1` skips the cluster tests, loudly; nothing else skips them.
//! Missing binaries fail the tests with the command that builds them.

pub mod alertmanager;
pub mod backends;
pub mod chart;
pub mod cluster;
pub mod exchanges;
pub mod failovers;
pub mod kubectl;
pub mod metrics;
pub mod node;
pub mod policy;
pub mod process;
pub mod prometheus;
pub mod remote;
pub mod samples;
pub mod script;
pub mod setup;
pub mod skips;
pub mod traffic;
pub mod turns;
pub mod webhook;
pub mod what_if;

use std::{
    future::Future,
    path::PathBuf,
    time::{Duration, Instant},
};

pub use alertmanager::*;
pub use chart::*;
pub use cluster::*;
pub use kubectl::*;
pub use metrics::*;
pub use node::*;
pub use policy::*;
pub use process::*;
pub use prometheus::*;
pub use remote::*;
pub use samples::*;
pub use script::*;
pub use setup::*;
pub use skips::*;
pub use traffic::*;
pub use turns::*;
pub use webhook::*;

/// Prints a figure a test measured and, when `FAILOVER_FIGURES_FILE` names a file (the test
/// command sets it), appends it there as `<test>: <figure>`, so that a run's figures can be kept
/// and cited, not only printed.
pub fn figure(text: String) {
    use std::io::Write as _;
    eprintln!("{text}");
    let Some(path) = std::env::var_os("FAILOVER_FIGURES_FILE") else {
        return;
    };
    let test = std::thread::current()
        .name()
        .unwrap_or("unnamed")
        .to_string();
    let line = format!("{test}: {}\n", text.replace('\n', " | "));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path);
    if let Ok(mut file) = file {
        let _ = file.write_all(line.as_bytes());
    }
}

/// The frame of a cluster test: a fresh namespace on the shared control plane, named after the
/// calling test function (or `test_env!(name)`), or `None` when cluster tests are skipped (the
/// skip recorded). Dropping it deletes the namespace, also when the test fails.
///
/// ```ignore
/// let Some(env) = test_env!() else { return };
/// ```
macro_rules! test_env {
    () => {
        $crate::support::TestEnv::new($crate::support::test_name(::std::any::type_name_of_val(&{
            fn here() {}
            here
        })))
        .await
    };
    ($name:expr) => {
        $crate::support::TestEnv::new($name).await
    };
}
pub(crate) use test_env;

/// The name of the function that defines the item whose path `std::any::type_name_of_val`
/// gave (`it::strategies::a_test::{{closure}}::here`: `a_test`).
pub fn test_name(path: &'static str) -> &'static str {
    path.rsplit("::")
        .filter(|segment| !segment.starts_with('{'))
        .nth(1)
        .unwrap_or(path)
}

/// How long end-to-end tests wait for the controller to converge.
pub const WAIT: Duration = Duration::from_secs(30);

/// How long tests wait under a fault, or with many objects to go through.
pub const LONG_WAIT: Duration = Duration::from_secs(60);

/// Text with every run of white space made one space, to compare what a command printed
/// whatever its line breaks and alignment.
pub fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Root of the repository.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
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
