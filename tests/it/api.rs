//! The FailoverPolicy API as users meet it: `kubectl apply` of valid and invalid policies against
//! a real API server, printer columns, `kubectl explain`, the generated CRD kept current, and
//! the Rust-side validation agreeing with the CRD's rules.

use std::{fs, path::PathBuf};

use failover::{
    api::{FailoverPolicy, FailoverPolicySpec},
    crd,
    pipeline::validate::{validate, validate_spec},
};
use serde::Deserialize;

use crate::support::{self, repo_root, test_env};

#[derive(Deserialize)]
struct InvalidCase {
    name: String,
    expect: String,
    policy: serde_json::Value,
}

fn invalid_cases() -> Vec<InvalidCase> {
    let text = fs::read_to_string(repo_root().join("tests/it/cases/invalid-policies.yaml"))
        .expect("reading invalid-policies.yaml");
    serde_yaml::from_str(&text).expect("parsing invalid-policies.yaml")
}

fn yaml_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(repo_root().join(dir))
        .expect("listing samples")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn generated_files_are_current() {
    let generated = [
        (
            "charts/failover-controller/crds/failoverpolicies.failover.dev.yaml",
            crd::failover_policy_yaml().expect("crd yaml"),
        ),
        (
            "charts/failover-controller/templates/trafficsplit-crd.yaml",
            crd::traffic_split_chart_template().expect("template"),
        ),
    ];
    for (file, expected) in generated {
        let on_disk = fs::read_to_string(repo_root().join(file)).unwrap_or_default();
        assert!(
            on_disk == expected,
            "{file} is stale; regenerate with: cargo run --bin crd-gen -- --chart charts/failover-controller --api-reference docs/api-reference.md"
        );
    }
}

#[test]
fn crd_gen_output_is_deterministic() {
    assert_eq!(
        crd::failover_policy_yaml().expect("yaml"),
        crd::failover_policy_yaml().expect("yaml")
    );
}

#[test]
fn rust_validation_accepts_every_valid_sample() {
    for file in yaml_files("samples") {
        let text = fs::read_to_string(&file).expect("sample");
        let value: serde_json::Value = serde_yaml::from_str(&text).expect("yaml");
        let spec: FailoverPolicySpec =
            serde_json::from_value(value["spec"].clone()).expect("sample spec deserializes");
        assert_eq!(
            validate_spec(&spec),
            Ok(()),
            "{} should be valid",
            file.display()
        );
    }
}

/// Every case the API server rejects is also rejected by the Rust-side validation (or cannot be
/// deserialized), except unknown fields, which only strict decoding catches.
#[test]
fn rust_validation_rejects_what_the_crd_rejects() {
    let cases = invalid_cases();
    assert!(cases.len() >= 30, "the table must stay large");
    let mut checked = 0;
    for case in cases {
        let policy = serde_json::from_value::<FailoverPolicy>(case.policy.clone());
        if let Ok(mut policy) = policy {
            let reserialized = serde_json::to_value(&policy.spec).expect("serialize");
            if has_unknown_fields(&case.policy["spec"], &reserialized) {
                continue;
            }
            policy.metadata.namespace = Some("default".into());
            let problems = validate(&policy)
                .map(|_| ())
                .expect_err(&format!("case {} should be invalid in Rust too", case.name));
            let expected_field = case
                .expect
                .trim_start_matches("spec.")
                .split(['[', ' ', ':'])
                .next()
                .unwrap_or_default()
                .to_string();
            assert!(
                problems.iter().any(|p| p.field.contains(&expected_field)),
                "case {}: Rust named {problems:?}, the API server names {}",
                case.name,
                case.expect
            );
        }
        checked += 1;
    }
    assert!(checked >= 25);
}

/// Whether `input` has object keys that did not survive a round trip through the Rust type.
fn has_unknown_fields(input: &serde_json::Value, roundtrip: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (input, roundtrip) {
        (Value::Object(a), Value::Object(b)) => a
            .iter()
            .any(|(k, v)| b.get(k).is_none_or(|w| has_unknown_fields(v, w))),
        (Value::Array(a), Value::Array(b)) => {
            a.iter().zip(b).any(|(x, y)| has_unknown_fields(x, y))
        }
        _ => false,
    }
}

#[tokio::test]
async fn every_valid_sample_applies() {
    let Some(env) = test_env!() else { return };
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
async fn every_invalid_policy_is_rejected_naming_its_field() {
    let Some(env) = test_env!() else { return };
    let cases = invalid_cases();
    let mut failures = Vec::new();
    for case in &cases {
        let yaml = serde_yaml::to_string(&case.policy).expect("yaml");
        let out = env.kubectl_stdin(&["apply", "-f", "-"], &yaml);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            failures.push(format!("{}: was accepted", case.name));
        } else if !stderr.contains(&case.expect) {
            failures.push(format!(
                "{}: error does not contain {:?}: {}",
                case.name,
                case.expect,
                stderr.trim()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    support::figure(format!(
        "{} invalid policies rejected with a message naming the field",
        cases.len()
    ));
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

#[tokio::test]
async fn trafficsplit_name_cannot_change() {
    let Some(env) = test_env!() else { return };
    let policy = |split: &str| {
        format!(
            "apiVersion: failover.dev/v1alpha1\nkind: FailoverPolicy\nmetadata: {{name: web}}\nspec:\n  service: web\n  primary: web-a\n  secondaries: [{{service: web-b}}]\n  trafficSplit: {{name: {split}}}\n"
        )
    };
    env.apply_policy(&policy("one"));
    let out = env.kubectl_stdin(&["apply", "-f", "-"], &policy("two"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("spec.trafficSplit.name"));
}

#[tokio::test]
async fn kubectl_get_shows_printer_columns_and_explain_shows_docs() {
    let Some(env) = test_env!() else { return };
    env.kubectl(&[
        "apply",
        "-f",
        repo_root()
            .join("samples/failoverpolicy.yaml")
            .to_str()
            .expect("path"),
    ]);
    let out = env.kubectl(&["get", "failoverpolicies"]);
    let header = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        squash(&header),
        "NAME PRIMARY ACTIVE PHASE READY AGE",
        "{header}"
    );
    let out = env.kubectl(&["get", "fp", "-o", "wide"]);
    let header = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        squash(&header),
        "NAME PRIMARY ACTIVE PHASE READY AGE SERVICE STRATEGY TRAFFICSPLIT REASON LAST-FAILOVER",
        "{header}"
    );
    let out = env.kubectl(&["explain", "failoverpolicy.spec.strategy"]);
    let text = squash(&String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Ordered"), "{text}");
    assert!(
        text.contains("sends all of it to the first ready secondary in list order"),
        "{text}"
    );
}

/// Every text file of the repository's own that may cite a kept run: the docs, the README, the
/// code's module docs and the benchmark's.
fn citing_files() -> Vec<PathBuf> {
    fn walk(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() && !path.ends_with("bench-runs") {
                walk(&path, out);
            } else if path
                .extension()
                .is_some_and(|e| e == "md" || e == "rs" || e == "sh")
            {
                out.push(path);
            }
        }
    }
    let mut files = vec![repo_root().join("README.md")];
    for dir in ["docs", "src", "examples", "tests", "hack"] {
        walk(&repo_root().join(dir), &mut files);
    }
    files
}

#[test]
fn every_kept_run_the_docs_and_code_cite_exists() {
    let kept: Vec<String> = fs::read_dir(repo_root().join("docs/bench-runs"))
        .expect("docs/bench-runs")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    // A link (`bench-runs/<file>`) names a file; a citation in words (`docs/bench-runs, run
    // 20261125-1245`) names a run by its start, which some file must have.
    let link = regex::Regex::new(r"bench-runs/([0-9]{8}-[0-9]{4}[A-Za-z0-9._-]*)").expect("re");
    let stamp = regex::Regex::new(r"\b(20[0-9]{6}-[0-9]{4})\b").expect("re");
    let run = regex::Regex::new(r"\bruns? (20[0-9]{6}-[0-9]{4})\b").expect("re");
    let mut missing = Vec::new();
    let mut cited = 0;
    for file in citing_files() {
        let text = fs::read_to_string(&file).unwrap_or_default();
        let relative = file.strip_prefix(repo_root()).unwrap_or(&file).display();
        for (n, line) in text.lines().enumerate() {
            for c in link.captures_iter(line) {
                cited += 1;
                let name = c[1].trim_end_matches(['.', ',']);
                if !kept.iter().any(|k| k == name) {
                    missing.push(format!("{relative}:{}: {name}", n + 1));
                }
            }
            // A stamp counts on a line that names the folder, or after the word "run".
            let stamps: Vec<String> = if line.contains("bench-runs") {
                stamp
                    .captures_iter(line)
                    .map(|c| c[1].to_string())
                    .collect()
            } else {
                run.captures_iter(line).map(|c| c[1].to_string()).collect()
            };
            for run in stamps {
                cited += 1;
                if !kept.iter().any(|k| k.starts_with(&run)) {
                    missing.push(format!("{relative}:{}: a run of {run}", n + 1));
                }
            }
        }
    }
    assert!(
        cited > 10,
        "only {cited} citations found: the scan reads nothing"
    );
    assert!(
        missing.is_empty(),
        "cited runs not in docs/bench-runs: {missing:#?}"
    );
}
