//! The samples (`samples/`): each valid by the Rust-side validation and applied by a real API
//! server; each invalid one (`samples/invalid/`) rejected with the error its comment documents;
//! and each policy, applied on its own with the objects it needs, reaching the condition its
//! documentation promises.

use std::{fs, path::PathBuf};

use failover_core::{
    api::{
        FailoverPolicy, Output,
        conditions::{
            ATTACHED, DEGRADED, DEMAND_UNSERVED, DRILL, HEALTH_QUERY_FAILED, NOTIFIED, READY,
            attached, capacity, degraded, drill, health, notified, ready,
        },
    },
    validate::validate_spec,
};

use crate::support::{
    self, ControllerProcess, WAIT, condition, repo_root, sample_policies, squash, test_env,
};

fn yaml_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(repo_root().join(dir))
        .expect("listing samples")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn rust_validation_accepts_every_valid_sample() {
    for (file, policy) in sample_policies() {
        assert_eq!(
            validate_spec(&policy.spec),
            Ok(()),
            "{file} should be valid"
        );
    }
}

#[tokio::test]
async fn every_valid_sample_applies() {
    let Some(env) = test_env!() else { return };
    // A sample may hold the user's own Gateway API route beside its policy.
    env.cp.install_gateway_api();
    for file in yaml_files("samples") {
        let out = env.kubectl(&["apply", "-f", file.to_str().expect("path")]);
        assert!(
            out.status.success(),
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test]
async fn every_invalid_sample_is_rejected_with_its_documented_error() {
    let Some(env) = test_env!() else { return };
    for file in yaml_files("samples/invalid") {
        let text = fs::read_to_string(&file).expect("sample");
        let documented: String = text
            .lines()
            .skip_while(|l| !l.contains("rejects it with:"))
            .skip(1)
            .take_while(|l| l.starts_with("#   "))
            .map(|l| l.trim_start_matches('#').trim())
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            !documented.is_empty(),
            "{} must document its error",
            file.display()
        );
        let relative = file.strip_prefix(repo_root()).expect("relative path");
        let out = env.kubectl(&["apply", "-f", relative.to_str().expect("path")]);
        assert!(!out.status.success(), "{} was accepted", file.display());
        let stderr = squash(&String::from_utf8_lossy(&out.stderr));
        let first_line = squash(documented.split(" * ").next().unwrap_or_default());
        assert!(
            stderr.contains(&first_line),
            "{}: expected {first_line:?} in {stderr:?}",
            file.display()
        );
    }
}

/// The samples that need what a test cluster does not have (a remote cluster, a Prometheus), or
/// whose feature shows in a condition of its own (capacity, a drill), and the condition their
/// comments say the policy shows, besides `Ready=True`:
/// (policy, condition type, status, reason, part of its message).
const WITHOUT_EXTERNALS: [(&str, &str, &str, &str, &str); 12] = [
    (
        "listings",
        READY,
        "True",
        ready::FOLLOWING_GROUP,
        "group marketplace routes to site east",
    ),
    (
        "bookings",
        READY,
        "True",
        ready::FOLLOWING_GROUP,
        "group marketplace routes to site east",
    ),
    (
        "orders",
        ATTACHED,
        "False",
        attached::NO_ANSWER,
        "no controller has answered for Service",
    ),
    (
        "shop",
        ATTACHED,
        "False",
        attached::NO_ANSWER,
        "no controller has answered for Gateway default/edge",
    ),
    (
        "checkout",
        DEGRADED,
        "True",
        degraded::SECONDARY_NOT_READY,
        "is not declared",
    ),
    (
        "reviews-health",
        HEALTH_QUERY_FAILED,
        "True",
        health::HEALTH_QUERY_FAILED,
        "did not answer",
    ),
    (
        "inventory",
        DEMAND_UNSERVED,
        "False",
        capacity::ENOUGH_CAPACITY,
        "",
    ),
    ("ledger", DRILL, "True", drill::RUNNING, "ledger-dr"),
    (
        "invoicing",
        NOTIFIED,
        "False",
        notified::WEBHOOK_NOT_ALLOWED,
        "spec.notifications.webhooks[0].url http://incident-bridge.ops:8080/failover",
    ),
    (
        "quotes",
        ATTACHED,
        "False",
        attached::NO_ANSWER,
        "no controller has answered for Gateway default/edge",
    ),
    (
        "vault",
        ATTACHED,
        "False",
        attached::NO_ANSWER,
        "no controller has answered for Gateway default/edge",
    ),
    (
        "ledger-db",
        ATTACHED,
        "False",
        attached::NO_ANSWER,
        "no controller has answered for Gateway default/edge",
    ),
];

/// Whether a policy shows `Ready=True` and, for a sample that needs more, its documented
/// condition.
fn documented(policy: &FailoverPolicy) -> bool {
    let ready = condition(policy, READY).is_some_and(|(status, ..)| status == "True");
    let name = policy.metadata.name.as_deref().unwrap_or_default();
    ready
        && WITHOUT_EXTERNALS.iter().filter(|(p, ..)| *p == name).all(
            |(_, type_, status, reason, message)| {
                condition(policy, type_)
                    .is_some_and(|(s, r, m)| s == *status && r == *reason && m.contains(message))
            },
        )
}

#[tokio::test]
async fn every_sample_applies_and_reaches_its_documented_condition() {
    let mut failures = Vec::new();
    let samples = sample_policies();
    for (file, policy) in &samples {
        let name = policy.metadata.name.clone().unwrap_or_default();
        let Some(env) = test_env!(&format!("sample-{name}")) else {
            return;
        };
        // Every backend of the file's policies: a group's members are in one file.
        let backends: Vec<&str> = samples
            .iter()
            .filter(|(f, _)| f == file)
            .flat_map(|(_, p)| {
                std::iter::once(p.spec.primary.as_str())
                    .chain(p.spec.secondaries.iter().map(|s| s.service.as_str()))
            })
            .collect();
        for backend in &backends {
            env.create_service(backend).await;
            env.set_endpoints(backend, 2, 0).await;
        }
        if policy.spec.output != Output::TrafficSplit || policy.spec.route_ref.is_some() {
            env.cp.install_gateway_api();
        }
        // The Prometheus a health sample asks is the controller's, and the Gateway of another
        // namespace the admin allows, as the chart sets them.
        let _controller = ControllerProcess::start(
            &env,
            &[
                "--prometheus-address",
                "http://prometheus.monitoring:9090",
                "--allowed-gateways",
                "default/edge",
            ],
        );
        let relative = format!("samples/{file}");
        let out = env.kubectl(&["apply", "-f", &relative]);
        if !out.status.success() {
            failures.push(format!(
                "{file}: kubectl apply failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
            continue;
        }
        let reached = env
            .wait_policy(&name, WAIT, "its documented condition", documented)
            .await;
        let conditions: Vec<String> = reached
            .status
            .iter()
            .flat_map(|s| &s.conditions)
            .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
            .collect();
        support::figure(format!("{file}: {name}: {}", conditions.join(" | ")));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
