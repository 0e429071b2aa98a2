//! The repository's samples (`samples/`), read with the crate's own types, as the API server
//! reads them (any YAML layout, several documents to a file).

use failover_core::api::FailoverPolicy;
use serde::Deserialize;

use super::repo_root;

/// The policies of `samples/` (not `samples/invalid/`), read with the crate's own types from
/// every YAML document of every file: (file, policy).
pub fn sample_policies() -> Vec<(String, FailoverPolicy)> {
    let mut files: Vec<_> = std::fs::read_dir(repo_root().join("samples"))
        .expect("samples/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    let mut policies = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("sample");
        let name = file
            .file_name()
            .expect("name")
            .to_string_lossy()
            .to_string();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value = serde_yaml::Value::deserialize(document)
                .unwrap_or_else(|e| panic!("{name} is not YAML: {e}"));
            if value.get("kind").and_then(|k| k.as_str()) == Some("FailoverPolicy") {
                let policy = serde_yaml::from_value(value)
                    .unwrap_or_else(|e| panic!("{name} is not a FailoverPolicy: {e}"));
                policies.push((name.clone(), policy));
            }
        }
    }
    assert!(!policies.is_empty(), "no FailoverPolicy in samples/");
    policies
}
