//! The FailoverPolicy CRD as generated and as users meet it: the generated files kept current and
//! deterministic, printer columns in `kubectl get`, documentation in `kubectl explain`.

use std::fs;

use failover_core::crd;

use crate::support::{repo_root, squash, test_env};

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
        "NAME PRIMARY ACTIVE PHASE READY PINNED DRILL SUSPENDED AGE",
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
        "NAME PRIMARY ACTIVE PHASE READY PINNED DRILL SUSPENDED AGE SERVICE STRATEGY TRAFFICSPLIT REASON LAST-FAILOVER",
        "{header}"
    );
    // The `failover` category lists every policy.
    let out = env.kubectl(&["get", "failover", "-o", "name"]);
    let names = String::from_utf8_lossy(&out.stdout);
    assert!(
        names.starts_with("failoverpolicy.failover.dev/"),
        "{names}{}",
        String::from_utf8_lossy(&out.stderr)
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
