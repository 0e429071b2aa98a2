//! The `kubectl failover` plugin, end to end: real kubectl finds `kubectl-failover` on the PATH
//! (kubectl's own plugin discovery) and runs it against the real control plane.

use std::process::Output;

use failover_core::api::FailoverPolicy;
use failover_core::api::conditions::{READY, SUSPENDED, ready, suspended};

use crate::support::{
    self, ControllerProcess, ON_EAST, ON_WEB, ON_WEST, PolicyBuilder, TestEnv, WAIT,
    condition_reason, kubectl_failover as failover, test_env, weights,
};

/// The plugin's standard output; fails the test when it did not succeed.
fn ok(out: Output) -> String {
    support::ok(&out, "kubectl failover")
}

/// The plugin's standard output; fails the test unless it exited with `code`.
fn exited(out: Output, code: i32) -> String {
    assert_eq!(
        out.status.code(),
        Some(code),
        "kubectl failover exited otherwise:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn fits_100_columns(text: &str) {
    for line in text.lines() {
        assert!(
            line.chars().count() <= 100,
            "line over 100 columns:\n{line}"
        );
    }
}

async fn failed_over(test: &str) -> Option<(TestEnv, ControllerProcess)> {
    let env = TestEnv::new(test).await?;
    let controller = env.with_controller(&[]).await;
    env.apply(&PolicyBuilder::web());
    env.set_endpoints("web", 0, 3).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    env.wait_policy("web", WAIT, ready::FAILED_OVER, |p| {
        condition_reason(p, READY).as_deref() == Some(ready::FAILED_OVER)
    })
    .await;
    Some((env, controller))
}

#[tokio::test]
async fn status_prints_a_backend_table_and_the_conditions_within_100_columns() {
    let Some((env, _c)) = failed_over("plugin-status").await else {
        return;
    };
    let text = ok(failover(&env, &["status", "web"]));
    support::figure(format!("kubectl failover status web:\n{text}"));
    fits_100_columns(&text);
    for expected in [
        "SERVICE",
        "ROLE",
        "READY",
        "ENDPOINTS",
        "WEIGHT",
        "SHARE",
        "SINCE",
    ] {
        assert!(text.contains(expected), "{expected} missing:\n{text}");
    }
    let row = |service: &str| {
        text.lines()
            // The table's rows, by their role (the heading names the namespace, any words).
            .filter(|l| matches!(l.split_whitespace().nth(1), Some("primary" | "secondary")))
            .find(|l| l.split_whitespace().next() == Some(service))
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(row("web")[1..5], ["primary", "no", "0/3", "0"], "{text}");
    assert_eq!(
        row("web-east")[1..6],
        ["secondary", "yes", "1/1", "1", "100%"],
        "{text}"
    );
    assert!(text.contains("Ready True FailedOver"), "{text}");
    assert!(text.contains("phase FailedOver"), "{text}");

    // Every namespace: other tests' policies too, some not ready (2) or all ready (0).
    let all = failover(&env, &["status", "-A"]);
    assert!(matches!(all.status.code(), Some(0 | 2)), "{all:?}");
    let all = String::from_utf8_lossy(&all.stdout);
    assert!(
        all.contains(&format!("web (namespace {})", env.ns)),
        "{all}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(failover(&env, &["status", "-o", "json"])))
            .expect("status -o json is JSON");
    assert_eq!(json[0]["phase"], ready::FAILED_OVER);
    assert_eq!(json[0]["backends"][1]["weight"], 1);
    let yaml: serde_json::Value =
        serde_yaml::from_str(&ok(failover(&env, &["status", "web", "-o", "yaml"])))
            .expect("status -o yaml is YAML");
    assert_eq!(yaml[0]["activeBackends"][0], "web-east");
}

#[tokio::test]
async fn explain_decision_names_the_rule_and_when_a_hold_falls_due() {
    let Some(env) = test_env!() else { return };
    let _c = env.with_controller(&[]).await;
    env.apply(&PolicyBuilder::web().holds("1h", "0s"));
    env.set_endpoints("web", 0, 1).await;
    env.wait_policy("web", WAIT, ready::FAILOVER_PENDING, |p| {
        condition_reason(p, READY).as_deref() == Some(ready::FAILOVER_PENDING)
    })
    .await;
    let text = exited(failover(&env, &["explain-decision", "web"]), 2);
    support::figure(format!("kubectl failover explain-decision web:\n{text}"));
    fits_100_columns(&text);
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(text.contains("Rule: FailoverPending"), "{text}");
    assert!(
        text.contains("failoverAfter (1h) keeps traffic on it"),
        "{text}"
    );
    assert!(
        text.contains("traffic moves to the secondaries at"),
        "{text}"
    );
    assert!(text.contains("(in 59m"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&exited(
        failover(&env, &["explain-decision", "web", "-o", "json"]),
        2,
    ))
    .expect("JSON");
    assert_eq!(json["rule"], ready::FAILOVER_PENDING);
    assert!(json["holdUntil"].is_string(), "{json}");
}

/// Whether `manager` owns `spec.<field>` of the policy (its `managedFields`).
fn owns(p: &FailoverPolicy, manager: &str, field: &str) -> bool {
    p.metadata.managed_fields.iter().flatten().any(|m| {
        m.manager.as_deref() == Some(manager)
            && m.fields_v1.as_ref().is_some_and(|f| {
                f.0.get("f:spec")
                    .is_some_and(|spec| spec.get(format!("f:{field}")).is_some())
            })
    })
}

const PIN: &str = "kubectl-failover-pin";
const SUSPEND: &str = "kubectl-failover-suspend";

#[tokio::test]
async fn pin_unpin_suspend_and_resume_change_the_policy_under_their_own_field_managers() {
    let Some((env, _c)) = failed_over("plugin-edit").await else {
        return;
    };
    let out = ok(failover(&env, &["pin", "web", "web-west"]));
    assert!(out.contains("pinned to web-west"), "{out}");
    // It returns once the controller has acted on the pin: the status says so already.
    assert!(out.contains("Ready=True Pinned"), "{out}");
    let p = env.policy("web").await.expect("policy");
    assert_eq!(
        condition_reason(&p, READY).as_deref(),
        Some(ready::PINNED),
        "status right after pin"
    );
    env.wait_weights("web", &ON_WEST, WAIT).await;
    assert_eq!(p.spec.pin.as_deref(), Some("web-west"));
    assert!(owns(&p, PIN, "pin"), "pin sets spec.pin under {PIN}");
    let refused = failover(&env, &["pin", "web", "nope"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("nope is not a backend of web"));

    ok(failover(&env, &["unpin", "web"]));
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let p = env.policy("web").await.expect("policy");
    assert_eq!(p.spec.pin, None);
    assert!(!owns(&p, PIN, "pin"), "unpin gives up {PIN}'s spec.pin");

    ok(failover(&env, &["suspend", "web"]));
    let p = env
        .wait_policy("web", WAIT, suspended::SUSPENDED, |p| {
            p.spec.suspend && condition_reason(p, SUSPENDED).is_some()
        })
        .await;
    assert!(
        owns(&p, SUSPEND, "suspend"),
        "suspend sets spec.suspend under {SUSPEND}"
    );
    // The primary is ready again; once the controller has seen it (the status says so), the
    // route is still where it was frozen.
    env.set_endpoints("web", 1, 0).await;
    env.wait_policy("web", WAIT, "the primary seen ready", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.backends.first())
            .is_some_and(|b| b.ready && b.ready_endpoints == 1)
    })
    .await;
    assert_eq!(
        env.split_weights("web").await,
        Some(weights(&ON_EAST)),
        "the route stays frozen while suspended"
    );
    // The controls are independent: pinning and unpinning a suspended policy leaves it suspended.
    ok(failover(&env, &["pin", "web", "web-west"]));
    ok(failover(&env, &["unpin", "web"]));
    let p = env.policy("web").await.expect("policy");
    assert!(p.spec.suspend && p.spec.pin.is_none(), "{:?}", p.spec);
    assert!(owns(&p, SUSPEND, "suspend") && !owns(&p, PIN, "pin"));
    ok(failover(&env, &["resume", "web"]));
    env.wait_weights("web", &ON_WEB, WAIT).await;
    let p = env.policy("web").await.expect("policy");
    assert!(!p.spec.suspend);
    assert!(
        !owns(&p, SUSPEND, "suspend"),
        "resume gives up {SUSPEND}'s spec.suspend"
    );
}

#[tokio::test]
async fn a_suspended_policy_with_its_primary_down_shows_the_frozen_route_everywhere() {
    let Some(env) = test_env!() else { return };
    let _c = env.with_controller(&[]).await;
    env.apply(&PolicyBuilder::web());
    env.wait_weights("web", &ON_WEB, WAIT).await;
    ok(failover(&env, &["suspend", "web"]));
    env.set_endpoints("web", 0, 1).await;
    env.wait_policy("web", WAIT, "suspended, the primary seen not ready", |p| {
        condition_reason(p, SUSPENDED).is_some()
            && p.status
                .as_ref()
                .and_then(|s| s.backends.first())
                .is_some_and(|b| !b.ready)
    })
    .await;
    assert_eq!(env.split_weights("web").await, Some(weights(&ON_WEB)));

    // kubectl get: NAME PRIMARY ACTIVE PHASE READY AGE; Active is the frozen route's backend.
    let listed = support::ok(&env.kubectl(&["get", "failoverpolicies"]), "kubectl get");
    support::figure(format!("kubectl get failoverpolicies:\n{listed}"));
    let row: Vec<&str> = listed
        .lines()
        .find(|l| l.starts_with("web "))
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        row.get(2..5),
        Some(&["web", "Primary", "2/3"][..]),
        "{listed}"
    );

    // kubectl failover status: the primary keeps weight 1 although it is not ready (Ready=False:
    // exit code 2).
    let text = exited(failover(&env, &["status", "web"]), 2);
    support::figure(format!("kubectl failover status web:\n{text}"));
    let row = |service: &str| -> Vec<String> {
        text.lines()
            // The table's rows, by their role (the heading names the namespace, any words).
            .filter(|l| matches!(l.split_whitespace().nth(1), Some("primary" | "secondary")))
            .find(|l| l.split_whitespace().next() == Some(service))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(row("web")[1..5], ["primary", "no", "0/1", "1"], "{text}");
    assert_eq!(row("web-east")[4], "0", "{text}");
    assert!(text.contains("phase Primary"), "{text}");

    // explain-decision: suspended, where the route stays and where traffic would go.
    let text = exited(failover(&env, &["explain-decision", "web"]), 2);
    support::figure(format!("kubectl failover explain-decision web:\n{text}"));
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(text.contains("Rule: Suspended"), "{text}");
    assert!(
        text.contains("suspended: the TrafficSplit stays at web=1 web-east=0 web-west=0"),
        "{text}"
    );
    assert!(text.contains("would go to web-east"), "{text}");
}

/// The plugin binary, run directly as kubectl runs it.
fn plugin() -> std::process::Command {
    std::process::Command::new(support::plugin_binary())
}

/// The plugin with KUBECONFIG pointing nowhere: only its own flags name a cluster.
fn failover_with_flags(args: &[&str]) -> Output {
    plugin()
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .args(args)
        .output()
        .expect("running kubectl-failover")
}

#[tokio::test]
async fn kubeconfig_context_selector_and_exit_codes_work_as_kubectls() {
    let Some((env, _c)) = failed_over("plugin-flags").await else {
        return;
    };
    let kubeconfig = env.cp.kubeconfig.to_str().expect("path").to_string();
    let context = support::ok(
        &env.kubectl(&["config", "current-context"]),
        "current-context",
    );
    let ns = env.ns.as_str();
    let with = |extra: &[&str]| {
        let mut args = vec!["--kubeconfig", &kubeconfig, "-n", ns];
        args.extend_from_slice(extra);
        failover_with_flags(&args)
    };
    // Ready (failed over to a ready secondary): 0.
    let text = exited(with(&["--context", context.trim(), "status", "web"]), 0);
    assert!(text.contains("phase FailedOver"), "{text}");
    let out = exited(with(&["--context", "no-such-context", "status"]), 1);
    assert!(out.is_empty());
    let refused = with(&["--context", "no-such-context", "status"]);
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("no-such-context"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    // A second policy with no ready backend: 2 for all, 0 for those the selector keeps.
    env.apply(&PolicyBuilder::named(
        "lonely",
        "nothing",
        &["nothing-either"],
    ));
    env.wait_policy("lonely", WAIT, ready::NO_READY_BACKEND, |p| {
        condition_reason(p, READY).as_deref() == Some(ready::NO_READY_BACKEND)
    })
    .await;
    // A label no other test's policy has: this namespace's name.
    let label = format!("tier={ns}");
    support::ok(&env.kubectl(&["label", "fp", "web", &label]), "label");
    exited(with(&["status"]), 2);
    let text = exited(with(&["status", "-l", &label]), 0);
    assert!(
        text.contains("web (namespace") && !text.contains("lonely"),
        "{text}"
    );
    let text = exited(with(&["status", "-A", "-l", &label, "-o", "json"]), 0);
    assert!(text.contains("\"name\": \"web\""), "{text}");
    // A name excludes -A, as with kubectl get.
    exited(with(&["status", "web", "-A"]), 1);
}

#[tokio::test]
async fn status_watch_prints_a_policy_again_when_it_changes() {
    let Some((env, _c)) = failed_over("plugin-watch").await else {
        return;
    };
    let mut watch = plugin()
        .env("KUBECONFIG", &env.cp.kubeconfig)
        .args(["-n", env.ns.as_str(), "status", "web", "--watch"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("running kubectl-failover status --watch");
    // Its output as it comes.
    let printed = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let printed = printed.clone();
        let stdout = watch.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let mut text = printed.lock().unwrap_or_else(|e| e.into_inner());
                text.push_str(&line);
                text.push('\n');
            }
        })
    };
    let shows = |marker: &'static str, after: usize| {
        let printed = printed.clone();
        move || {
            let text = printed.lock().unwrap_or_else(|e| e.into_inner()).clone();
            std::future::ready(text.get(after..).is_some_and(|t| t.contains(marker)))
        }
    };
    assert!(
        support::wait_until(WAIT, shows("phase FailedOver", 0)).await,
        "the first listing"
    );
    let listed = printed.lock().unwrap_or_else(|e| e.into_inner()).len();
    env.set_endpoints("web", 1, 0).await;
    let printed_again = support::wait_until(WAIT, shows("phase Primary", listed)).await;
    let _ = watch.kill();
    let _ = watch.wait();
    let _ = reader.join();
    let text = printed.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(printed_again, "the failback never printed:\n{text}");
}

#[test]
fn version_and_completion_print_without_a_cluster() {
    let version = exited(failover_with_flags(&["version"]), 0);
    assert!(
        version.contains(failover_core::VERSION) && version.contains("failover.dev/v1alpha1"),
        "{version}"
    );
    for shell in ["bash", "zsh", "fish"] {
        let script = exited(failover_with_flags(&["completion", shell]), 0);
        assert!(
            script.contains("kubectl-failover") && script.contains("explain-decision"),
            "{shell}: {script}"
        );
    }
}
