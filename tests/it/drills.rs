//! Failover drills (`kubectl failover drill`, `spec.drill`): a drill moves all traffic to its
//! backend at once and the controller lifts it by itself at its end time, never before, also
//! across a restart of the controller and a change of leader; `--abort` ends it at once; a drill
//! to a backend that is not ready is refused unless forced. Each start and end is an Event, the
//! `Drill` condition and column say where it stands, and a metric holds its end time.

use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use failover_core::api::{
    FailoverPolicy,
    conditions::{DRILL, READY, drill, ready},
};

use crate::support::{
    self, ControllerProcess, ON_EAST, ON_WEB, ON_WEST, PolicyBuilder, TestEnv, WAIT, WEB_BACKENDS,
    condition, condition_reason, election_args, kubectl_failover, metric, routing_to_web, test_env,
};

/// Starts a drill of `web` to `to` for `duration` with the plugin; returns its end time.
async fn drill_to(env: &TestEnv, to: &str, duration: &str) -> DateTime<Utc> {
    support::ok(
        &kubectl_failover(env, &["drill", "web", "--to", to, "--for", duration]),
        "kubectl failover drill",
    );
    until(&env.policy("web").await.expect("the policy"))
}

/// The end time in the policy's spec.
fn until(policy: &FailoverPolicy) -> DateTime<Utc> {
    policy.spec.drill.as_ref().expect("spec.drill").until.0
}

/// Waits until the route sends all traffic back to the primary; fails if that happened before
/// the drill's end time.
async fn ended_on_time(env: &TestEnv, until: DateTime<Utc>) -> Duration {
    env.wait_weights("web", &ON_WEB, WAIT).await;
    let back = DateTime::<Utc>::from(SystemTime::now());
    assert!(
        back >= until,
        "traffic returned at {back}, before the drill's end at {until}"
    );
    let policy = env
        .wait_policy("web", WAIT, "Drill=False DrillEnded", |p| {
            condition(p, DRILL).is_some_and(|(s, r, _)| s == "False" && r == drill::ENDED)
        })
        .await;
    assert_eq!(
        condition_reason(&policy, READY).as_deref(),
        Some(ready::PRIMARY_ACTIVE)
    );
    (back - until).to_std().unwrap_or_default()
}

fn running(p: &FailoverPolicy) -> bool {
    condition(p, DRILL).is_some_and(|(s, r, _)| s == "True" && r == drill::RUNNING)
}

#[tokio::test]
async fn a_drill_moves_traffic_at_once_and_ends_by_itself_at_its_end_time() {
    let Some((env, controller)) = routing_to_web("drill-ends", PolicyBuilder::web()).await else {
        return;
    };
    let until = drill_to(&env, "web-east", "6s").await;
    // The plugin returns once the controller acted: the route is the drill's already.
    assert_eq!(
        env.split_weights("web").await,
        Some(support::weights(&ON_EAST))
    );
    let policy = env.wait_policy("web", WAIT, "Drill=True", running).await;
    assert_eq!(
        condition_reason(&policy, READY).as_deref(),
        Some(ready::DRILL)
    );
    let column = support::ok(
        &env.kubectl(&["get", "failoverpolicies", "web"]),
        "kubectl get failoverpolicies",
    );
    assert!(
        column.contains("DRILL") && column.contains(drill::RUNNING),
        "{column}"
    );
    let series = format!(
        "failover_drill_end_timestamp_seconds{{namespace=\"{}\",policy=\"web\"}}",
        env.ns
    );
    let metrics = controller.admin_get("/metrics").await.1;
    let ends = metric(&metrics, &series);
    assert_eq!(ends, Some(until.timestamp() as f64), "{metrics}");
    assert!(
        env.wait_event("web", drill::STARTED, Some("Normal"), WAIT)
            .await
    );

    let late = ended_on_time(&env, until).await;
    assert!(
        env.wait_event("web", drill::ENDED, Some("Normal"), WAIT)
            .await
    );
    let metrics = controller.admin_get("/metrics").await.1;
    assert_eq!(metric(&metrics, &series), None, "no drill runs");
    support::figure(format!(
        "a 6 s drill: traffic back on the primary {late:.1?} after its end time"
    ));
}

#[tokio::test]
async fn abort_ends_a_drill_at_once() {
    let Some((env, _c)) = routing_to_web("drill-abort", PolicyBuilder::web()).await else {
        return;
    };
    drill_to(&env, "web-west", "10m").await;
    env.wait_weights("web", &ON_WEST, WAIT).await;
    support::ok(
        &kubectl_failover(&env, &["drill", "web", "--abort"]),
        "kubectl failover drill --abort",
    );
    // The plugin returns once the controller acted on the abort.
    assert_eq!(
        env.split_weights("web").await,
        Some(support::weights(&ON_WEB))
    );
    let policy = env.policy("web").await.expect("the policy");
    assert!(policy.spec.drill.is_none());
    assert_eq!(condition(&policy, DRILL), None);
    assert!(
        env.wait_event("web", drill::ENDED, Some("Normal"), WAIT)
            .await
    );
}

#[tokio::test]
async fn a_drill_to_a_backend_that_is_not_ready_is_refused_unless_forced() {
    let Some((env, _c)) = routing_to_web("drill-refused", PolicyBuilder::web()).await else {
        return;
    };
    env.set_endpoints("web-west", 0, 1).await;
    env.wait_policy("web", WAIT, "web-west not ready", |p| {
        p.status.as_ref().is_some_and(|s| {
            s.backends
                .iter()
                .any(|b| b.service == "web-west" && !b.ready)
        })
    })
    .await;
    let out = kubectl_failover(&env, &["drill", "web", "--to", "web-west", "--for", "1m"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("web-west is not ready") && err.contains("--force"),
        "{err}"
    );
    assert!(
        env.policy("web")
            .await
            .expect("policy")
            .spec
            .drill
            .is_none()
    );

    // Done, and the policy is not ready (its traffic goes to a backend that is not): exit 2.
    let forced = kubectl_failover(
        &env,
        &["drill", "web", "--to", "web-west", "--for", "1m", "--force"],
    );
    assert_eq!(forced.status.code(), Some(2), "{forced:?}");
    env.wait_weights("web", &ON_WEST, WAIT).await;
    let policy = env.wait_policy("web", WAIT, "Drill=True", running).await;
    assert_eq!(
        condition_reason(&policy, READY).as_deref(),
        Some(ready::DRILL_BACKEND_NOT_READY)
    );
}

#[tokio::test]
async fn a_drill_survives_a_controller_restart_and_still_ends_on_time() {
    let Some((env, controller)) = routing_to_web("drill-restart", PolicyBuilder::web()).await
    else {
        return;
    };
    let until = drill_to(&env, "web-east", "8s").await;
    drop(controller);
    let controller = ControllerProcess::start(&env, &[]);
    env.wait_policy("web", WAIT, "Drill=True after the restart", running)
        .await;
    assert_eq!(
        env.split_weights("web").await,
        Some(support::weights(&ON_EAST)),
        "the restarted controller kept the drill"
    );
    let late = ended_on_time(&env, until).await;
    drop(controller);
    support::figure(format!(
        "a drill across a restart: traffic back {late:.1?} after its end time"
    ));
}

#[tokio::test]
async fn a_drill_survives_a_change_of_leader_and_still_ends_on_time() {
    let Some(env) = test_env!() else { return };
    env.ready_backends(&WEB_BACKENDS).await;
    let election = election_args(&env.ns);
    let election: Vec<&str> = election.iter().map(String::as_str).collect();
    let a = ControllerProcess::start(&env, &election);
    let b = ControllerProcess::start(&env, &election);
    env.apply(&PolicyBuilder::web());
    env.wait_weights("web", &ON_WEB, WAIT).await;
    let until = drill_to(&env, "web-east", "12s").await;
    let leader_a = metric(&a.admin_get("/metrics").await.1, "failover_leader") == Some(1.0);
    let (mut leader, standby) = if leader_a { (a, b) } else { (b, a) };
    leader.signal("KILL");
    let took_over = support::wait_until(WAIT, || async {
        metric(&standby.admin_get("/metrics").await.1, "failover_leader") == Some(1.0)
    })
    .await;
    assert!(took_over, "the standby never led");
    assert!(
        DateTime::<Utc>::from(SystemTime::now()) < until,
        "the standby took over after the drill's end; the test proves nothing"
    );
    assert_eq!(
        env.split_weights("web").await,
        Some(support::weights(&ON_EAST)),
        "the new leader kept the drill"
    );
    let late = ended_on_time(&env, until).await;
    drop((standby, leader));
    support::figure(format!(
        "a drill across a change of leader: traffic back {late:.1?} after its end time"
    ));
}
