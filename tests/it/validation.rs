//! A policy validated: every invalid policy of the table (`tests/it/cases/invalid-policies.yaml`)
//! rejected by `kubectl apply` against a real API server naming its field, the Rust-side
//! validation rejecting what the CRD rejects, and an immutable field kept.

use std::fs;

use failover_core::{api::FailoverPolicy, validate::validate};
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
