//! What GitOps tools read of a policy's health: Flux and kpt judge a resource with
//! sigs.k8s.io/cli-utils' kstatus (built by the project's scripts as `kstatus`). A policy the
//! controller has not yet observed reads InProgress, a settled one Current, and one whose spec
//! the controller refuses Failed with the reason, so an apply fails at once instead of waiting
//! for its timeout.

use std::time::{Duration, Instant};

use failover_core::api::conditions::{READY, STALLED, ready};

use crate::support::{
    ControllerProcess, ON_WEB, PolicyBuilder, TestEnv, WAIT, WEB_BACKENDS, condition, ok, test_env,
    tool_stdin,
};

/// kstatus' verdict on the policy: its status word and message.
fn kstatus(env: &TestEnv, name: &str) -> (String, String) {
    let json = ok(
        &env.kubectl(&["get", "failoverpolicy", name, "-o", "json"]),
        "kubectl get",
    );
    let out = tool_stdin(env.cp, "kstatus", &[], &json);
    let line = ok(&out, "kstatus");
    let rest = line.trim().split_once(' ').map_or("", |(_, r)| r);
    let (status, message) = rest.split_once(' ').unwrap_or((rest, ""));
    (status.to_string(), message.to_string())
}

/// Waits until kstatus reads `want`; returns its message.
async fn until_kstatus(env: &TestEnv, name: &str, want: &str) -> String {
    let start = Instant::now();
    loop {
        let (status, message) = kstatus(env, name);
        if status == want {
            return message;
        }
        assert!(
            start.elapsed() < WAIT,
            "kstatus never read {want}: {status} {message}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn gitops_tools_read_a_new_policy_in_progress_a_settled_one_current_an_invalid_one_failed() {
    let Some(env) = test_env!() else { return };
    env.ready_backends(&WEB_BACKENDS).await;
    env.apply(&PolicyBuilder::web());
    // No controller yet: the schema's default status says generation 1 is not observed.
    let (status, message) = kstatus(&env, "web");
    assert_eq!(status, "InProgress", "{message}");
    assert!(
        message.contains("latest observed generation is 0"),
        "{message}"
    );

    let _controller =
        ControllerProcess::start(&env, &["--prometheus-address", "http://127.0.0.1:9"]);
    env.wait_weights("web", &ON_WEB, WAIT).await;
    until_kstatus(&env, "web", "Current").await;

    // Valid to the schema, refused by the controller: a health query that is not PromQL.
    env.apply(&PolicyBuilder::web_with_health(None, "sum(("));
    let p = env
        .wait_policy("web", WAIT, ready::INVALID_SPEC, |p| {
            condition(p, READY).is_some_and(|c| c.1 == ready::INVALID_SPEC)
        })
        .await;
    assert_eq!(
        condition(&p, STALLED).map(|c| (c.0, c.1)),
        Some(("True".into(), ready::INVALID_SPEC.into()))
    );
    let message = until_kstatus(&env, "web", "Failed").await;
    assert!(message.contains("spec.health"), "{message}");
    crate::support::figure(format!("kstatus of an invalid policy: Failed, {message}"));

    // Fixed, it settles again.
    env.apply(&PolicyBuilder::web());
    until_kstatus(&env, "web", "Current").await;
    let p = env
        .wait_policy("web", WAIT, "no Stalled condition", |p| {
            condition(p, STALLED).is_none()
        })
        .await;
    assert!(condition(&p, READY).is_some_and(|c| c.0 == "True"));
}
