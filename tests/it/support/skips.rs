//! Tests skipped on purpose, and never quietly.
//!
//! A test skips only when its variable is set to `1` (`FAILOVER_SKIP_CLUSTER_TESTS`,
//! `FAILOVER_SKIP_NODE_TESTS`); without it, a missing prerequisite fails the test with the
//! command that provides it. A skip prints a loud line and, when `FAILOVER_SKIPS_FILE` names a
//! file (`hack/test.sh` sets it), appends `test<TAB>variable` to it, so the run's summary counts
//! every skipped test and why: cargo's output capture hides what a test prints, and a skipped
//! test reports `ok`.

use std::io::Write;

/// Skips cluster tests on purpose.
pub const SKIP_CLUSTER: &str = "FAILOVER_SKIP_CLUSTER_TESTS";
/// Skips the tests on a real node on purpose.
pub const SKIP_NODE: &str = "FAILOVER_SKIP_NODE_TESTS";

fn set(variable: &str) -> bool {
    std::env::var(variable).is_ok_and(|v| v == "1")
}

/// Records that the running test is skipped because `variable` is set. The test is named by its
/// thread (the test harness names each after its test), else by `what`.
pub fn record(what: &str, variable: &str) {
    let thread = std::thread::current();
    let test = thread.name().filter(|n| *n != "main").unwrap_or(what);
    eprintln!("\n!!! {variable}=1: SKIPPING {test} !!!\n");
    let file = std::env::var("FAILOVER_SKIPS_FILE").ok().and_then(|path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()
    });
    if let Some(mut file) = file {
        let _ = writeln!(file, "{test}\t{variable}");
    }
}

/// Whether the tests that need a control plane are skipped (then recorded for `test`).
pub fn cluster_tests_skipped(test: &str) -> bool {
    let skipped = set(SKIP_CLUSTER);
    if skipped {
        record(test, SKIP_CLUSTER);
    }
    skipped
}

/// Whether the tests on a real node are skipped (then recorded for `test`); they are also
/// skipped with the cluster tests.
pub fn node_tests_skipped(test: &str) -> bool {
    for variable in [SKIP_CLUSTER, SKIP_NODE] {
        if set(variable) {
            record(test, variable);
            return true;
        }
    }
    false
}
