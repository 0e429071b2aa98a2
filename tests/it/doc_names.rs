//! Docs that cannot drift from the code: every name the docs write that the code, the chart or
//! the CRD define (flags, chart values, annotations and labels, condition types and reasons,
//! Event reasons, metric names) must be one they define, and every one they define must be
//! named in some doc. The docs are the README, docs/ and the chart's README.

use std::collections::BTreeSet;

use regex::Regex;

use crate::support::{plugin_binary, repo_root};

/// The names the code, the chart and the CRD define, by kind.
#[derive(Debug, Default)]
struct Defined {
    /// Flags of the controller, the plugin and the benchmark.
    flags: BTreeSet<String>,
    /// Flags of the controller and the plugin, which a doc must name.
    own_flags: BTreeSet<String>,
    /// Every series name as written in the exposition (counters with `_total`, histograms with
    /// their `_bucket`, `_count` and `_sum`).
    metrics: BTreeSet<String>,
    /// The names a doc must use for each series (no histogram parts).
    series: BTreeSet<String>,
    /// Every path of the chart's values (each map's path, and each leaf's).
    values: BTreeSet<String>,
    /// The leaves' paths, which a doc must name.
    value_leaves: BTreeSet<String>,
    /// `failover.dev/...` names: annotations, labels, the API version.
    annotations: BTreeSet<String>,
    /// Condition types and every reason (of conditions and Events).
    conditions: BTreeSet<String>,
}

/// Flags from the foreign tools the docs show commands of (helm, kubectl, cargo).
const FOREIGN_FLAGS: [&str; 8] = [
    "--set",
    "--set-json",
    "--server-side",
    "--force-conflicts",
    "--create-namespace",
    "--for",
    "--help",
    "--version",
];

fn flags_in(help: &str) -> impl Iterator<Item = String> + '_ {
    let flag = Regex::new(r"--[a-z][a-z0-9-]*").expect("re");
    flag.find_iter(help)
        .map(|m| m.as_str().to_string())
        .collect::<Vec<_>>()
        .into_iter()
}

fn help(binary: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> String {
    let out = std::process::Command::new(binary)
        .args(args)
        .arg("--help")
        .output()
        .expect("--help");
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn flags() -> (BTreeSet<String>, BTreeSet<String>) {
    let mut own = BTreeSet::new();
    own.extend(flags_in(&help(
        env!("CARGO_BIN_EXE_failover-controller"),
        &[],
    )));
    let plugin = plugin_binary();
    // Every command the plugin's help lists, and each one's flags.
    let top = help(&plugin, &[]);
    let commands: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.contains(&"what-if"), "{top}");
    for command in commands {
        own.extend(flags_in(&help(&plugin, &[command])));
    }
    // The benchmark's options, from its source (an example, not built for the tests).
    let source = std::fs::read_to_string(repo_root().join("examples/benchmark/main.rs"))
        .expect("benchmark source");
    let arg = Regex::new(r#"#\[arg\(long(?: = "([a-z-]+)")?[^\]]*\)\]\s*(\w+):"#).expect("re");
    let mut all: BTreeSet<String> = arg
        .captures_iter(&source)
        .map(|c| {
            let name = c
                .get(1)
                .map_or_else(|| c[2].replace('_', "-"), |m| m.as_str().to_string());
            format!("--{name}")
        })
        .collect();
    all.extend(own.iter().cloned());
    all.extend(FOREIGN_FLAGS.map(String::from));
    own.retain(|f| f != "--help" && f != "--version");
    (all, own)
}

fn metrics() -> (BTreeSet<String>, BTreeSet<String>) {
    // Families with no series yet describe nothing: give each one series first.
    let registry = failover::runtime::metrics::Metrics::new();
    registry.register_error_kinds(&failover::pipeline::reconcile::Error::KINDS);
    registry.set_cluster_state("east", true, Some(chrono::Utc::now()));
    registry.cluster_watch_restart("east");
    let text = registry.encode();
    let (mut all, mut series) = (BTreeSet::new(), BTreeSet::new());
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
        match kind {
            "counter" => {
                all.insert(format!("{name}_total"));
                series.insert(format!("{name}_total"));
            }
            "histogram" => {
                for part in ["", "_bucket", "_count", "_sum"] {
                    all.insert(format!("{name}{part}"));
                }
                series.insert(name.to_string());
            }
            _ => {
                all.insert(name.to_string());
                series.insert(name.to_string());
            }
        }
    }
    (all, series)
}

/// The chart's values as the schema describes them: a map of the chart's own (the schema refuses
/// unknown keys) holds values; any other map (labels, resources, a security context) is one
/// value, whatever keys it holds.
fn values() -> (BTreeSet<String>, BTreeSet<String>) {
    fn walk(
        prefix: &str,
        schema: &serde_json::Value,
        all: &mut BTreeSet<String>,
        leaves: &mut BTreeSet<String>,
    ) {
        // The chart's own maps refuse unknown keys; Kubernetes objects (a security context) and
        // resource requirements are passed through as they are.
        let own = schema.get("additionalProperties") == Some(&serde_json::Value::Bool(false))
            && prefix != "resources";
        match schema
            .get("properties")
            .and_then(|p| p.as_object())
            .filter(|_| own || prefix.is_empty())
        {
            Some(properties) => {
                if !prefix.is_empty() {
                    all.insert(prefix.to_string());
                }
                for (key, property) in properties {
                    let path = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    walk(&path, property, all, leaves);
                }
            }
            None => {
                all.insert(prefix.to_string());
                leaves.insert(prefix.to_string());
            }
        }
    }
    let text =
        std::fs::read_to_string(repo_root().join("charts/failover-controller/values.schema.json"))
            .expect("values.schema.json");
    let schema: serde_json::Value = serde_json::from_str(&text).expect("the schema is JSON");
    let (mut all, mut leaves) = (BTreeSet::new(), BTreeSet::new());
    walk("", &schema, &mut all, &mut leaves);
    // `global` is Helm's, for a parent chart; not a value of this chart's.
    all.remove("global");
    leaves.remove("global");
    (all, leaves)
}

/// Whether a path is a value, or a key inside a free-form one.
fn is_value(d: &Defined, path: &str) -> bool {
    d.values.contains(path)
        || d.value_leaves
            .iter()
            .any(|leaf| path.starts_with(&format!("{leaf}.")))
}

/// Every `failover.dev/...` name in the code and the chart's templates.
fn annotations() -> BTreeSet<String> {
    let name = Regex::new(r"failover\.dev/[a-z0-9][a-z0-9.-]*[a-z0-9]").expect("re");
    let mut found = BTreeSet::new();
    for dir in ["src", "crates", "charts/failover-controller/templates"] {
        for file in files(&repo_root().join(dir), &["rs", "yaml", "tpl"]) {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            found.extend(name.find_iter(&text).map(|m| m.as_str().to_string()));
        }
    }
    found
}

/// Condition types and reasons: every string constant of the API's conditions module, and the
/// `Ready` reasons each route kind's row derives from its name.
fn conditions() -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo_root().join("crates/api/src/conditions.rs"))
        .expect("conditions.rs");
    let constant = Regex::new(r#"pub const [A-Z_]+: &str = "([A-Za-z]+)";"#).expect("re");
    let kinds = failover_core::api::Output::ALL
        .into_iter()
        .flat_map(|output| {
            let reasons = output.reasons();
            [reasons.conflict, reasons.write_failed, reasons.crd_missing]
        });
    constant
        .captures_iter(&text)
        .map(|c| c[1].to_string())
        .chain(kinds.map(String::from))
        .collect()
}

fn defined() -> Defined {
    let (flags, own_flags) = flags();
    let (metrics, series) = metrics();
    let (values, value_leaves) = values();
    Defined {
        flags,
        own_flags,
        metrics,
        series,
        values,
        value_leaves,
        annotations: annotations(),
        conditions: conditions(),
    }
}

fn files(dir: &std::path::Path, extensions: &[&str]) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            if !path.ends_with("bench-runs") {
                out.extend(files(&path, extensions));
            }
        } else if path
            .extension()
            .is_some_and(|e| extensions.iter().any(|x| e == *x))
        {
            out.push(path);
        }
    }
    out
}

/// The docs, as (path from the repository's root, text).
fn docs() -> Vec<(String, String)> {
    let mut paths = vec![repo_root().join("README.md")];
    paths.extend(files(&repo_root().join("docs"), &["md"]));
    let chart_readme = repo_root().join("charts/failover-controller/README.md");
    if chart_readme.exists() {
        paths.push(chart_readme);
    }
    paths
        .into_iter()
        .map(|p| {
            let relative = p
                .strip_prefix(repo_root())
                .unwrap_or(&p)
                .display()
                .to_string();
            (relative, std::fs::read_to_string(&p).unwrap_or_default())
        })
        .collect()
}

/// The names one doc writes that nothing defines, each with its line.
fn undefined(text: &str, d: &Defined) -> Vec<String> {
    let span = Regex::new(r"`([^`\n]+)`").expect("re");
    let metric = Regex::new(r"\bfailover_[a-z0-9_]*[a-z0-9]\b").expect("re");
    let annotation = Regex::new(r"failover\.dev/[a-z0-9][a-z0-9.-]*[a-z0-9]").expect("re");
    let flag = Regex::new(r"^--([a-z][a-z0-9-]*)").expect("re");
    let value_path = Regex::new(r"^([a-z][A-Za-z0-9]*)((?:\.[A-Za-z0-9]+)+)$").expect("re");
    let set =
        Regex::new(r"--set(?:-json)? '?([A-Za-z0-9.]+)(?:\[[0-9]+\])?[.A-Za-z0-9]*=").expect("re");
    let reason = Regex::new(r"\breasons? ((?:`[A-Za-z]+`(?:,? (?:or |and )?)?)+)").expect("re");
    let literal =
        Regex::new(r"^([A-Z][A-Za-z]+)=(?:True|False)(?: ([A-Z][A-Za-z]+))?$").expect("re");
    let word = Regex::new(r"`([A-Za-z]+)`").expect("re");
    let top: BTreeSet<&str> = d
        .values
        .iter()
        .map(|v| v.split('.').next().unwrap_or_default())
        .collect();
    let mut problems = Vec::new();
    let mut reason_table = false;
    for (n, line) in text.lines().enumerate() {
        let at = |what: String| format!("line {}: {what}", n + 1);
        for m in metric.find_iter(line) {
            let after = &line[m.end()..];
            // A Rust path (`failover_core::status`) is a crate, not a series.
            if !after.starts_with("::") && !d.metrics.contains(m.as_str()) {
                problems.push(at(format!("metric {}", m.as_str())));
            }
        }
        for m in annotation.find_iter(line) {
            if !d.annotations.contains(m.as_str()) {
                problems.push(at(format!("name {}", m.as_str())));
            }
        }
        for c in set.captures_iter(line) {
            let path = c[1].trim_end_matches('.');
            if top.contains(path.split('.').next().unwrap_or_default()) && !is_value(d, path) {
                problems.push(at(format!("chart value {path}")));
            }
        }
        for c in span.captures_iter(line) {
            let s = c[1].trim();
            if let Some(f) = flag.captures(s) {
                let name = format!("--{}", &f[1]);
                if !d.flags.contains(&name) {
                    problems.push(at(format!("flag {name}")));
                }
            }
            if let Some(v) = value_path.captures(s)
                && top.contains(&v[1])
                && !is_value(d, s)
            {
                problems.push(at(format!("chart value {s}")));
            }
            if let Some(l) = literal.captures(s) {
                for name in [l.get(1), l.get(2)].into_iter().flatten() {
                    if !d.conditions.contains(name.as_str()) {
                        problems.push(at(format!("condition or reason {}", name.as_str())));
                    }
                }
            }
        }
        for c in reason.captures_iter(line) {
            for w in word.captures_iter(&c[1]) {
                if !d.conditions.contains(&w[1]) {
                    problems.push(at(format!("reason {}", &w[1])));
                }
            }
        }
        // Tables whose first column is a reason: each name in its first cell.
        if line.starts_with("| Reason |") {
            reason_table = true;
            continue;
        }
        if reason_table && line.starts_with('|') {
            let first = line.split('|').nth(1).unwrap_or_default();
            for w in word.captures_iter(first) {
                if !d.conditions.contains(&w[1]) {
                    problems.push(at(format!("reason {}", &w[1])));
                }
            }
        } else {
            reason_table = false;
        }
    }
    problems
}

/// The names that something defines and no doc names.
fn unnamed(docs: &[(String, String)], d: &Defined) -> Vec<String> {
    let all: String = docs
        .iter()
        .map(|(_, t)| t.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let ticked =
        |name: &str| all.contains(&format!("`{name}")) || all.contains(&format!("{name}`"));
    let mut missing = Vec::new();
    let checks = [
        ("flag", &d.own_flags),
        ("metric", &d.series),
        ("condition or reason", &d.conditions),
    ];
    for (kind, names) in checks {
        missing.extend(
            names
                .iter()
                .filter(|n| !ticked(n))
                .map(|n| format!("{kind} {n}")),
        );
    }
    let word = |path: &str| {
        Regex::new(&format!(
            r"(^|[^A-Za-z0-9.]){}([^A-Za-z0-9]|$)",
            regex::escape(path)
        ))
        .expect("re")
        .is_match(&all)
    };
    missing.extend(
        d.value_leaves
            .iter()
            .filter(|v| !word(v))
            .map(|v| format!("chart value {v}")),
    );
    missing.extend(
        d.annotations
            .iter()
            .filter(|a| !word(a))
            .map(|a| format!("name {a}")),
    );
    missing
}

#[test]
fn every_name_the_docs_write_is_defined_and_every_defined_name_is_documented() {
    let d = defined();
    assert!(d.own_flags.contains("--lease-duration") && d.own_flags.contains("--context"));
    assert!(
        d.series.contains("failover_reconciles_total"),
        "{:?}",
        d.series
    );
    assert!(d.conditions.contains("InvalidSpec") && d.conditions.contains("Ready"));
    let docs = docs();
    let mut problems: Vec<String> = docs
        .iter()
        .flat_map(|(path, text)| {
            undefined(text, &d)
                .into_iter()
                .map(move |p| format!("{path} {p}: defined nowhere"))
        })
        .collect();
    problems.extend(
        unnamed(&docs, &d)
            .into_iter()
            .map(|n| format!("{n}: defined and named in no doc")),
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_name_planted_in_a_doc_is_reported() {
    let d = defined();
    let planted = "\
The `failover_made_up_total` series, the `--made-up-flag` flag, the annotation
`failover.dev/made-up`, the chart value `networkPolicy.madeUp` (or `--set image.madeUp=1`),
`Ready=False MadeUpReason`, and reason `AlsoMadeUp`.
| Reason | Status |
|---|---|
| `TableMadeUp` | True |
";
    let found = undefined(planted, &d).join("\n");
    for name in [
        "metric failover_made_up_total",
        "flag --made-up-flag",
        "name failover.dev/made-up",
        "chart value networkPolicy.madeUp",
        "chart value image.madeUp",
        "condition or reason MadeUpReason",
        "reason AlsoMadeUp",
        "reason TableMadeUp",
    ] {
        assert!(found.contains(name), "{name} not reported:\n{found}");
    }
    let fine = "The `failover_reconciles_total` series, `--lease-duration`, `Ready=False InvalidSpec`, reason `ApexConflict`, `leaderElection.enabled`.";
    assert_eq!(undefined(fine, &d), Vec::<String>::new());
}
