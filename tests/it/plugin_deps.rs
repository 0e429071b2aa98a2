//! The `kubectl failover` plugin links nothing of the controller's I/O: its dependency tree, read
//! from `Cargo.lock` (every package a dependency could reach, whatever the features), has neither
//! the controller crate nor its admin server, metrics, rate limiter or counting allocator.
//!
//! `Cargo.lock` records one list of dependencies per package, whichever crate of the workspace
//! enabled them, so this tree holds at least what the plugin links: none of these names in it
//! means none in the binary.

use std::collections::{BTreeMap, BTreeSet};

use crate::support::repo_root;

/// What the plugin must not link: the controller crate and the crates only the controller uses.
const FORBIDDEN: [&str; 5] = [
    "failover-controller",
    "axum",
    "prometheus-client",
    "stats_alloc",
    "governor",
];

/// One package of the lock file: `name version`, and its dependencies as written
/// (`name`, `name version`, or `name version (source)`).
#[derive(Debug, Default)]
struct Package {
    name: String,
    version: String,
    dependencies: Vec<String>,
}

/// The packages of a lock file, read line by line (its `[[package]]` tables only).
fn packages(lock: &str) -> Vec<Package> {
    let quoted = |l: &str| l.trim().trim_end_matches(',').trim_matches('"').to_string();
    let mut out: Vec<Package> = Vec::new();
    let (mut in_package, mut in_dependencies) = (false, false);
    for line in lock.lines().map(str::trim) {
        if in_dependencies {
            in_dependencies = line != "]";
            if let (true, Some(package)) = (in_dependencies, out.last_mut()) {
                package.dependencies.push(quoted(line));
            }
            continue;
        }
        if line.starts_with('[') {
            in_package = line == "[[package]]";
            if in_package {
                out.push(Package::default());
            }
            continue;
        }
        let Some(package) = out.last_mut().filter(|_| in_package) else {
            continue;
        };
        if let Some(name) = line.strip_prefix("name = ") {
            package.name = quoted(name);
        } else if let Some(version) = line.strip_prefix("version = ") {
            package.version = quoted(version);
        } else if let Some(list) = line.strip_prefix("dependencies = [") {
            // Written one a line; an inline list is read all the same.
            in_dependencies = !list.ends_with(']');
            let inline = list.trim_end_matches(']').split(',').map(quoted);
            package
                .dependencies
                .extend(inline.filter(|d| !d.is_empty()));
        }
    }
    out
}

/// Every package reachable from `root` (by index into `packages`), each with the package it was
/// reached from (the root with none).
fn reachable(packages: &[Package], root: &str) -> BTreeMap<usize, Option<usize>> {
    let matches = |package: &Package, written: &str| {
        let mut parts = written.split_whitespace();
        parts.next() == Some(package.name.as_str())
            && parts
                .next()
                .is_none_or(|version| version == package.version)
    };
    let mut from = BTreeMap::new();
    let mut todo: Vec<usize> = Vec::new();
    for (i, package) in packages.iter().enumerate() {
        if package.name == root {
            from.insert(i, None);
            todo.push(i);
        }
    }
    while let Some(i) = todo.pop() {
        for written in &packages[i].dependencies {
            for (j, package) in packages.iter().enumerate() {
                if matches(package, written) && !from.contains_key(&j) {
                    from.insert(j, Some(i));
                    todo.push(j);
                }
            }
        }
    }
    from
}

/// The chain of packages from the root down to `index`, as `a -> b -> c`.
fn chain(packages: &[Package], from: &BTreeMap<usize, Option<usize>>, index: usize) -> String {
    let mut names = vec![packages[index].name.as_str()];
    let mut at = index;
    while let Some(Some(parent)) = from.get(&at) {
        names.push(packages[*parent].name.as_str());
        at = *parent;
    }
    names.reverse();
    names.join(" -> ")
}

#[test]
fn the_plugin_links_nothing_of_the_controllers_io() {
    let lock = std::fs::read_to_string(repo_root().join("Cargo.lock")).expect("Cargo.lock");
    let packages = packages(&lock);
    let from = reachable(&packages, "kubectl-failover");
    let names: BTreeSet<&str> = from.keys().map(|&i| packages[i].name.as_str()).collect();
    // The walk reached the plugin's own dependencies, so an empty result is not a pass.
    for needed in [
        "failover-api",
        "failover-core",
        "kube-client",
        "kube-runtime",
        "clap",
    ] {
        assert!(
            names.contains(needed),
            "{needed} is not in the plugin's tree: {names:?}"
        );
    }
    let found: Vec<String> = from
        .keys()
        .filter(|&&i| FORBIDDEN.contains(&packages[i].name.as_str()))
        .map(|&i| chain(&packages, &from, i))
        .collect();
    assert!(
        found.is_empty(),
        "the plugin's dependency tree reaches the controller's I/O:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_lock_reader_follows_versions_as_written() {
    let lock = r#"
[[package]]
name = "root"
version = "0.1.0"
dependencies = [
 "a 1.0.0",
 "b",
]

[[package]]
name = "a"
version = "1.0.0"

[[package]]
name = "a"
version = "2.0.0"
dependencies = [
 "axum",
]

[[package]]
name = "b"
version = "1.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
dependencies = ["c 1.0.0 (registry+https://github.com/rust-lang/crates.io-index)"]

[[package]]
name = "c"
version = "1.0.0"

[metadata]
name = "not a package"
"#;
    let packages = packages(lock);
    let from = reachable(&packages, "root");
    let reached: BTreeSet<String> = from
        .keys()
        .map(|&i| format!("{} {}", packages[i].name, packages[i].version))
        .collect();
    let expected = ["root 0.1.0", "a 1.0.0", "b 1.0.0", "c 1.0.0"].map(String::from);
    assert_eq!(reached, expected.into_iter().collect());
}
