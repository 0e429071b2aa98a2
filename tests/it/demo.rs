//! The newcomer's path: the README's first command, `hack/demo.sh`, run end to end as a newcomer
//! runs it (and `hack/demo.sh --node` where the node tests run), checked for what it prints at
//! every step and for what it leaves behind.

use std::{collections::BTreeMap, time::Duration};

use failover_core::{api::FailoverPolicy, route::RouteTarget};

use crate::support::{
    self, ScriptRun, Step, assert_node_possible, cluster_tests_skipped, node_tests_skipped,
    processes_naming, sample_policies,
};

/// How long a demo may run, its first build of the controller included.
const DEMO_LIMIT: Duration = Duration::from_secs(20 * 60);

/// The weights of every route a step printed (the TrafficSplit and HTTPRoute tables), by route
/// name: rows of `NAME a,b,c 1,0,0`.
fn routes(step: &Step) -> BTreeMap<String, Vec<i64>> {
    step.lines
        .iter()
        .filter_map(|line| {
            let [name, backends, weights] = line.split_whitespace().collect::<Vec<_>>()[..] else {
                return None;
            };
            let weights: Vec<i64> = weights
                .split(',')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?;
            (weights.len() == backends.split(',').count()).then(|| (name.to_string(), weights))
        })
        .collect()
}

/// The step prints each of `texts`.
fn shows(step: &Step, texts: &[&str]) {
    let missing: Vec<&&str> = texts
        .iter()
        .filter(|t| !step.text().contains(**t))
        .collect();
    assert!(
        missing.is_empty(),
        "demo step '{}' does not show {missing:?}:\n{}",
        step.title,
        step.text()
    );
}

/// Fails naming the step when a route's weights are not these.
fn expect(step: &Step, route: &str, weights: &[i64]) {
    let routes = routes(step);
    assert_eq!(
        routes.get(route).map(Vec::as_slice),
        Some(weights),
        "demo step '{}': route {route} should have weights {weights:?}; the step printed:\n{}",
        step.title,
        step.text()
    );
}

/// The route each sample policy owns, with its policy.
fn sample_routes() -> Vec<(String, FailoverPolicy)> {
    sample_policies()
        .into_iter()
        .map(|(_, p)| (RouteTarget::of(&p).name.to_string(), p))
        .collect()
}

/// Every route of the samples is printed, with weights not all zero, and where the step says
/// traffic is on the primaries: everything on the primary (or the pinned backend, or the
/// drill's), except a failback ramp's first step.
fn expect_every_route(step: &Step, on_primaries: bool) {
    let printed = routes(step);
    for (route, policy) in sample_routes() {
        let weights = printed.get(&route).unwrap_or_else(|| {
            panic!(
                "demo step '{}': route {route} is not shown:\n{}",
                step.title,
                step.text()
            )
        });
        assert!(
            weights.iter().any(|w| *w > 0),
            "demo step '{}': route {route} has no weight at all: {weights:?}",
            step.title
        );
        if !on_primaries {
            continue;
        }
        let backends: Vec<&str> = std::iter::once(policy.spec.primary.as_str())
            .chain(policy.spec.secondaries.iter().map(|s| s.service.as_str()))
            .collect();
        let total: i64 = weights.iter().sum();
        let first_ramp_step = policy
            .spec
            .failback
            .as_ref()
            .and_then(|f| f.ramp.as_ref())
            .map(|r| i64::from(r.steps[0]));
        // A pin, else a drill, takes all of it (a drill sample's end time is far off).
        let drill = policy.spec.drill.as_ref().map(|d| d.to.as_str());
        let to = policy.spec.pin.as_deref().or(drill).unwrap_or(backends[0]);
        let share = |i: usize| weights[i] * 100 / total;
        let index = backends.iter().position(|b| *b == to).unwrap_or(0);
        let on_it = share(index);
        let expected = match first_ramp_step {
            Some(first) if step.title.starts_with("once failbackAfter") && to == backends[0] => {
                first
            }
            _ => 100,
        };
        assert_eq!(
            on_it, expected,
            "demo step '{}': route {route} should send {expected}% to {to}: {weights:?}",
            step.title
        );
    }
}

#[test]
fn the_demo_shows_every_step_of_a_failover_and_leaves_nothing_behind() {
    if cluster_tests_skipped("the demo") {
        return;
    }
    // Alone: the demo starts a control plane (and a node) of its own.
    let _alone = support::alone_blocking();
    let run = ScriptRun::of("hack/demo.sh", &[], DEMO_LIMIT);
    run.assert_success("hack/demo.sh");
    support::figure(format!("hack/demo.sh ran in {:.1?}", run.took));

    let invalid = run.step("an invalid policy is rejected");
    assert!(
        invalid
            .text()
            .contains("the primary must not also be listed as a secondary"),
        "demo step '{}': the API server's message is not shown:\n{}",
        invalid.title,
        invalid.text()
    );
    let ready = run.step("every primary is ready");
    expect_every_route(&ready, true);
    let held = run.step("every primary loses its ready endpoints");
    expect_every_route(&held, false);
    expect(&held, "api-ordered", &[1, 0, 0]);
    let over = run.step("once failoverAfter has passed");
    expect_every_route(&over, false);
    expect(&over, "api-ordered", &[0, 1, 0]);
    expect(&over, "suggest-equal", &[0, 1, 1, 1]);
    expect(&over, "cart-weighted", &[0, 300, 100]);
    expect(&over, "catalog-proportional", &[0, 10000, 0]);
    expect(&over, "orders", &[0, 1, 0]);
    shows(
        &run.step("capacity: inventory"),
        &["\"demand\"", "\"unserved\""],
    );
    shows(&run.step("a drill: ledger"), &["DrillRunning", "ledger-dr"]);
    let back_held = run.step("the primaries are ready again");
    expect_every_route(&back_held, false);
    expect(&back_held, "api-ordered", &[0, 1, 0]);
    let back = run.step("once failbackAfter has passed");
    expect_every_route(&back, true);
    let spill = run.step("a Proportional primary");
    expect(&spill, "catalog-proportional", &[7000, 3000, 0]);
    assert_left_nothing(&run);
}

#[test]
fn the_node_demo_moves_real_readiness_and_leaves_nothing_behind() {
    if node_tests_skipped("the demo on a real node") {
        return;
    }
    assert_node_possible();
    // Alone: the demo starts a control plane (and a node) of its own.
    let _alone = support::alone_blocking();
    let run = ScriptRun::of("hack/demo.sh", &["--node"], DEMO_LIMIT);
    run.assert_success("hack/demo.sh --node");
    support::figure(format!("hack/demo.sh --node ran in {:.1?}", run.took));
    for (prefix, weights, answering) in [
        ("every backend Pod is ready", [1, 0, 0], "web"),
        (
            "every primary Pod fails its readiness probe",
            [0, 1, 0],
            "web-east",
        ),
        ("they pass it again", [1, 0, 0], "web"),
    ] {
        let step = run.step(prefix);
        let requests = proxied(&step);
        assert!(
            requests.get(answering).is_some_and(|n| *n > 0)
                && requests.iter().all(|(b, n)| b == answering || *n == 0),
            "demo step '{}': the proxy's requests should all be answered by {answering}: {requests:?}",
            step.title
        );
        let shown: Vec<i64> = ["web", "web-east", "web-west"]
            .iter()
            .map(|backend| status_weight(&step, backend))
            .collect();
        assert_eq!(
            shown,
            weights,
            "demo step '{}': kubectl failover status should show weights {weights:?}:\n{}",
            step.title,
            step.text()
        );
    }
    assert_left_nothing(&run);
}

/// The requests a step says went through the proxy, by backend (and `failed`).
fn proxied(step: &Step) -> BTreeMap<String, i64> {
    let line = step
        .lines
        .iter()
        .find_map(|l| l.strip_prefix("requests through the proxy in 3 seconds: "))
        .unwrap_or_else(|| {
            panic!(
                "demo step '{}' shows no traffic:\n{}",
                step.title,
                step.text()
            )
        });
    line.split(" (of ")
        .next()
        .unwrap_or_default()
        .split(", ")
        .filter_map(|part| {
            let (backend, n) = part.rsplit_once(' ')?;
            Some((backend.to_string(), n.parse().ok()?))
        })
        .collect()
}

/// A backend's weight in a `kubectl failover status` table printed by a step.
fn status_weight(step: &Step, backend: &str) -> i64 {
    step.lines
        .iter()
        .find_map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            (cells.first() == Some(&backend) && cells.len() >= 5)
                .then(|| cells[4].parse().ok())
                .flatten()
        })
        .unwrap_or(-1)
}

/// The control plane the demo started is stopped and its directory removed.
fn assert_left_nothing(run: &ScriptRun) {
    let dir = run
        .output
        .lines()
        .find_map(|l| l.strip_prefix("control plane directory: "))
        .unwrap_or_else(|| panic!("the demo did not say where its control plane lives"))
        .trim()
        .to_string();
    assert!(
        !std::path::Path::new(&dir).exists(),
        "the demo left {dir} behind"
    );
    // The control plane's watchdog notices within a second that its directory is gone.
    let mut left = processes_naming(&dir);
    for _ in 0..50 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        left = processes_naming(&dir);
    }
    assert!(left.is_empty(), "the demo left processes behind: {left:#?}");
}
