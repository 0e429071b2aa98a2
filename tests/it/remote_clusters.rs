//! Remote clusters, end to end against three real control planes (local, east, west) started by
//! the project's own script: readiness read from the cluster that runs the backend while traffic
//! goes to the local mirror Service (which has no endpoints at all, as in a mesh's
//! remote-discovery mode), silent clusters noticed after `staleAfter` and not before, wrong
//! credentials and deleted Secrets reported.

use std::time::{Duration, Instant};

use failover_core::api::conditions::{CLUSTERS_REACHABLE, clusters};
use failover_core::api::{FailoverPolicy, ReadinessFrom};

use crate::support::{
    self, ControlPlane, ControllerProcess, DedicatedPlane, ON_EAST, ON_WEB, ON_WEST, PolicyBuilder,
    TestEnv, WAIT, condition, remote_control_plane,
};

/// One remote cluster: its control plane (stopped when this is dropped), a namespace there with
/// a ready `web`, and a kubeconfig that can read it.
struct Remote {
    env: TestEnv,
    kubeconfig: String,
    plane: DedicatedPlane,
}

impl Remote {
    fn cp(&self) -> &'static ControlPlane {
        self.plane.cp
    }
}

async fn remote(test: &str) -> Remote {
    let plane = remote_control_plane().await;
    let env = TestEnv::on(plane.cp, test).await.expect("remote namespace");
    env.ready_backends(&["web"]).await;
    let kubeconfig = env.reader_kubeconfig();
    Remote {
        env,
        kubeconfig,
        plane,
    }
}

/// Both remote clusters of a test.
async fn east_and_west() -> (Remote, Remote) {
    (remote("east").await, remote("west").await)
}

fn from(cluster: &str, remote: &Remote) -> Option<ReadinessFrom> {
    Some(ReadinessFrom {
        cluster: cluster.into(),
        namespace: Some(remote.env.ns.clone()),
        service: Some("web".into()),
    })
}

/// The local side: a ready primary, mirror Services without endpoints, both clusters declared,
/// a controller, and the policy routing to the primary.
async fn local(
    test: &str,
    east: &Remote,
    west: &Remote,
    stale_after: &str,
) -> Option<(TestEnv, ControllerProcess)> {
    let env = TestEnv::new(test).await?;
    env.ready_backends(&["web"]).await;
    env.create_service("web-east").await;
    env.create_service("web-west").await;
    env.declare_cluster("east", &east.kubeconfig, stale_after)
        .await;
    env.declare_cluster("west", &west.kubeconfig, stale_after)
        .await;
    let controller = ControllerProcess::start(&env, &["--cluster-secret-namespace", &env.ns]);
    env.apply(&PolicyBuilder::web().spec(|s| {
        s.secondaries[0].readiness_from = from("east", east);
        s.secondaries[1].readiness_from = from("west", west);
    }));
    env.wait_weights("web", &ON_WEB, WAIT).await;
    Some((env, controller))
}

/// Sets `web` of `writer`'s namespace to (ready, not ready) endpoints and times until the route
/// of `env` has `expected`, in milliseconds.
async fn flip(
    env: &TestEnv,
    writer: &TestEnv,
    expected: &[(&str, i64)],
    endpoints: (usize, usize),
) -> u128 {
    let want: Vec<(String, i64)> = expected.iter().map(|(s, w)| (s.to_string(), *w)).collect();
    let started = Instant::now();
    writer.set_endpoints("web", endpoints.0, endpoints.1).await;
    while env.split_weights("web").await.as_ref() != Some(&want) {
        assert!(started.elapsed() < WAIT, "route never had {want:?}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    started.elapsed().as_millis()
}

fn median(mut samples: Vec<u128>) -> u128 {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn backend_message(p: &FailoverPolicy, service: &str) -> String {
    p.status
        .iter()
        .flat_map(|s| &s.backends)
        .find(|b| b.service == service)
        .and_then(|b| b.message.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn readiness_comes_from_the_cluster_that_runs_the_backend() {
    let Some(_) = support::shared() else { return };
    let (east, west) = east_and_west().await;
    let Some((env, _c)) = local("remote-readiness", &east, &west, "30s").await else {
        return;
    };
    // The mirrors have no endpoints; the remote Services' readiness decides.
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let p = env
        .wait_policy("web", WAIT, "every cluster reachable", |p| {
            condition(p, CLUSTERS_REACHABLE).map(|c| c.1).as_deref()
                == Some(clusters::ALL_CLUSTERS_REACHABLE)
        })
        .await;
    let source = p
        .status
        .as_ref()
        .and_then(|s| s.backends[1].readiness_from.clone())
        .expect("source");
    assert_eq!(
        (source.cluster.as_str(), source.service.as_str()),
        ("east", "web")
    );
    // Ten remote changes, then ten local ones, each timed from the write to the route change
    // (read every 2 ms): the local ones are the floor of the remote path.
    let mut remote_ms = Vec::new();
    for _ in 0..5 {
        remote_ms.push(flip(&env, &east.env, &ON_WEST, (0, 1)).await);
        remote_ms.push(flip(&env, &east.env, &ON_EAST, (1, 0)).await);
    }
    let mut local_ms = Vec::new();
    for _ in 0..5 {
        local_ms.push(flip(&env, &env, &ON_WEB, (1, 0)).await);
        local_ms.push(flip(&env, &env, &ON_EAST, (0, 1)).await);
    }
    support::figure(format!(
        "remote EndpointSlice change → local TrafficSplit change: median {} ms (a local change: median {} ms), 10 changes each",
        median(remote_ms),
        median(local_ms)
    ));
    env.wait_weights("web", &ON_EAST, WAIT).await;
}

/// Reads the weights of `name` until `until` has passed since `from`, failing if they ever differ
/// from `expected` (a failed read is not a difference).
async fn unchanged_until(
    env: &TestEnv,
    name: &str,
    expected: &[(&str, i64)],
    from: Instant,
    until: Duration,
) {
    let want: Vec<(String, i64)> = expected.iter().map(|(s, w)| (s.to_string(), *w)).collect();
    while from.elapsed() < until {
        if let Some(seen) = env.split_weights(name).await {
            assert_eq!(
                seen,
                want,
                "{name} moved {:.1?} after the outage began, before {until:?}",
                from.elapsed()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_silent_cluster_counts_as_not_ready_after_stale_after_and_not_before() {
    let Some(_) = support::shared() else { return };
    let (east, west) = east_and_west().await;
    // FAILOVER_TEST_STALE_AFTER_SECONDS measures other values by hand (docs/benchmarks.md).
    let stale_after: u64 = std::env::var("FAILOVER_TEST_STALE_AFTER_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let stale = format!("{stale_after}s");
    let Some((env, _c)) = local("remote-stale", &east, &west, &stale).await else {
        return;
    };
    // A second policy whose primary is read from east, held 3 s before traffic returns to it.
    env.ready_backends(&["api-local"]).await;
    env.apply(
        &PolicyBuilder::named("api", "web-east", &["api-local"])
            .holds("0s", "3s")
            .spec(|s| s.primary_readiness_from = from("east", &east)),
    );
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    env.wait_weights("api", &[("web-east", 1), ("api-local", 0)], WAIT)
        .await;
    let (east_cp, dir) = (east.cp(), east.cp().dir.to_string_lossy().to_string());
    let stopped = Instant::now();
    let stopped_at = chrono::Utc::now();
    // SIGKILL: the API server is gone at once (a graceful stop refuses connections long before
    // the process exits).
    east_cp.script(&["stop-component", &dir, "kube-apiserver", "--kill"]);
    unchanged_until(
        &env,
        "web",
        &ON_EAST,
        stopped,
        Duration::from_secs(stale_after),
    )
    .await;
    env.wait_weights("web", &ON_WEST, WAIT).await;
    let left = stopped.elapsed();
    env.wait_weights("api", &[("web-east", 0), ("api-local", 1)], WAIT)
        .await;
    let p = env
        .wait_policy("web", WAIT, "east unreachable", |p| {
            condition(p, CLUSTERS_REACHABLE).is_some_and(|c| c.0 == "False")
        })
        .await;
    let message = backend_message(&p, "web-east");
    assert!(
        message.starts_with("cluster east unreachable for"),
        "{message}"
    );
    // The controller's own record: web-east turned not ready no sooner than staleAfter after
    // the API server died (the silence counts from the first failed contact, after the kill).
    let turned = p
        .status
        .iter()
        .flat_map(|s| &s.backends)
        .find(|b| b.service == "web-east")
        .and_then(|b| b.last_transition_time)
        .expect("web-east's transition time");
    let after = turned.0 - stopped_at;
    assert!(
        after >= chrono::Duration::seconds(stale_after as i64),
        "web-east turned not ready {after:?} after east's API server died, before staleAfter {stale}"
    );
    let restored = Instant::now();
    east_cp.script(&["start-component", &dir, "kube-apiserver"]);
    // Readiness is re-read; the secondary comes back at once, the primary after failbackAfter.
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let reread = restored.elapsed();
    env.wait_weights("api", &[("web-east", 1), ("api-local", 0)], WAIT)
        .await;
    let p = env
        .wait_policy("api", WAIT, "failed back", |p| {
            p.status
                .as_ref()
                .is_some_and(|s| s.last_failback_time.is_some())
        })
        .await;
    let status = p.status.expect("status");
    let ready_since = status.backends[0].last_transition_time.expect("since").0;
    let failed_back = status.last_failback_time.expect("failback time").0;
    assert!(
        failed_back - ready_since >= chrono::Duration::seconds(3),
        "failbackAfter held: primary ready at {ready_since}, traffic back at {failed_back}"
    );
    support::figure(format!(
        "staleAfter {stale}: traffic left the silent cluster {left:.1?} after its API server stopped ({message}); re-read and back {reread:.1?} after it started again; the primary read from it {:.1?} later (failbackAfter 3 s)",
        (failed_back - ready_since).to_std().unwrap_or_default()
    ));
}

#[tokio::test]
async fn wrong_credentials_are_reported_with_the_api_servers_words_and_a_fix_recovers() {
    let Some(_) = support::shared() else { return };
    let (east, west) = east_and_west().await;
    let Some((env, _c)) = local("remote-auth", &east, &west, "2s").await else {
        return;
    };
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let wrong = east
        .kubeconfig
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("token:") {
                "    token: not-a-valid-token"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    env.declare_cluster("east", &wrong, "2s").await;
    env.wait_weights("web", &ON_WEST, WAIT).await;
    let p = env
        .wait_policy("web", WAIT, "the auth error", |p| {
            backend_message(p, "web-east").contains("Unauthorized")
        })
        .await;
    support::figure(format!(
        "rotated to a wrong token: {}",
        backend_message(&p, "web-east")
    ));
    env.declare_cluster("east", &east.kubeconfig, "2s").await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
}

#[tokio::test]
async fn a_deleted_cluster_secret_makes_its_backends_not_ready_with_a_clear_message() {
    let Some(_) = support::shared() else { return };
    let (east, west) = east_and_west().await;
    let Some((env, _c)) = local("remote-deleted", &east, &west, "30s").await else {
        return;
    };
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    assert!(
        env.kubectl(&["delete", "secret", "cluster-east"])
            .status
            .success()
    );
    env.wait_weights("web", &ON_WEST, WAIT).await;
    let p = env
        .wait_policy("web", WAIT, "the backend's message", |p| {
            backend_message(p, "web-east").starts_with("cluster east is not declared")
        })
        .await;
    support::figure(format!(
        "a deleted cluster Secret: {}",
        backend_message(&p, "web-east")
    ));
}

/// The token of a kubeconfig (its `token:` line).
fn token_of(kubeconfig: &str) -> String {
    kubeconfig
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("token:"))
        .map(|t| t.trim().to_string())
        .expect("a token in the reader's kubeconfig")
}

/// Replaces one line of a kubeconfig (the first starting with `key:`) by `key: value`.
fn with_line(kubeconfig: &str, key: &str, value: &str) -> String {
    kubeconfig
        .lines()
        .map(|l| {
            let indent = &l[..l.len() - l.trim_start().len()];
            if l.trim_start().starts_with(&format!("{key}:")) {
                format!("{indent}{key}: {value}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn a_broken_cluster_secret_says_why_in_one_line_and_never_its_content() {
    let Some(_) = support::shared() else { return };
    let (east, west) = east_and_west().await;
    let Some((env, _c)) = local("remote-broken", &east, &west, "2s").await else {
        return;
    };
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let token = token_of(&east.kubeconfig);
    let dead = {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        with_line(
            &east.kubeconfig,
            "server",
            &format!("https://127.0.0.1:{port}"),
        )
    };
    // Another cluster's CA: the local control plane's, which did not sign east's certificate.
    let other_ca = support::kubectl(
        env.cp,
        &[
            "config",
            "view",
            "--raw",
            "-o",
            "jsonpath={.clusters[0].cluster.certificate-authority-data}",
        ],
    );
    let wrong_ca = with_line(
        &east.kubeconfig,
        "certificate-authority-data",
        String::from_utf8_lossy(&other_ca.stdout).trim(),
    );
    let broken = [
        (
            "does not parse",
            format!("this is: [not a kubeconfig\ntoken: {token}\n"),
        ),
        ("a dead server", dead),
        ("a wrong CA", wrong_ca),
    ];
    for (what, kubeconfig) in broken {
        env.declare_cluster("east", &kubeconfig, "2s").await;
        env.wait_weights("web", &ON_WEST, WAIT).await;
        let p = env
            .wait_policy("web", WAIT, what, |p| {
                backend_message(p, "web-east").starts_with("cluster east")
            })
            .await;
        for (field, message) in support::status_messages(&p) {
            assert!(
                !message.contains(&token) && !message.contains("not a kubeconfig"),
                "{what}: {field} quotes the Secret: {message}"
            );
        }
        support::figure(format!("{what}: {}", backend_message(&p, "web-east")));
        env.declare_cluster("east", &east.kubeconfig, "2s").await;
        env.wait_weights("web", &ON_EAST, WAIT).await;
    }
}
