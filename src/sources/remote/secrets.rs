//! The cluster Secrets: each Secret labelled `failover.dev/cluster: <name>` in the controller's
//! namespace declares a cluster with the kubeconfig under its `kubeconfig` key (the same shape as
//! other multi-cluster tools' cluster secrets), and optionally `failover.dev/stale-after` and
//! `failover.dev/namespaces` (which policy namespaces may read which namespaces there; without
//! it, each its namesake).

use std::{collections::BTreeSet, sync::Arc};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client, ResourceExt,
    config::{KubeConfigOptions, Kubeconfig},
    runtime::watcher,
};
use tracing::{info, warn};

use super::{CLUSTER_LABEL, Clusters, DEFAULT_STALE_AFTER, Declared, STALE_AFTER_ANNOTATION};
use crate::{
    runtime::{api_client, metrics::Metrics},
    sources::watch::{WatchReport, describe, events},
};
use failover_core::{
    api::rules::parse_duration,
    apis::WatchKind,
    message,
    tenancy::{NAMESPACES_ANNOTATION, NamespaceGrants},
};

/// The Secret watch counts its errors and logs them; it holds up nothing else.
struct SecretsReport {
    metrics: Arc<Metrics>,
}

impl WatchReport for SecretsReport {
    fn listed(&self, _kind: WatchKind) {}

    fn failed(&self, kind: WatchKind, error: &watcher::Error) {
        self.metrics.watch_restart(kind);
        warn!(%kind, error = %describe(error), "watch of the cluster Secrets failed; retrying");
    }
}

/// Keeps `clusters` in step with the cluster Secrets of its namespace, for ever.
pub async fn feed(client: Client, clusters: Clusters, metrics: Arc<Metrics>) {
    let api: Api<Secret> = Api::namespaced(client, &clusters.secret_namespace);
    // A Secret list that never completes (no permission, say) holds nothing up for longer than
    // the default staleAfter.
    tokio::spawn({
        let clusters = clusters.clone();
        async move {
            tokio::time::sleep(DEFAULT_STALE_AFTER).await;
            clusters.secrets_read();
        }
    });
    let report: Arc<dyn WatchReport> = Arc::new(SecretsReport { metrics });
    let mut listed: Option<BTreeSet<String>> = None;
    let mut stream = std::pin::pin!(events(
        api,
        WatchKind::Secret,
        watcher::Config::default().labels(CLUSTER_LABEL),
        report
    ));
    while let Some(event) = stream.next().await {
        match event {
            watcher::Event::Apply(secret) => {
                declare(&clusters, &secret).await;
            }
            watcher::Event::InitApply(secret) => {
                if let Some(name) = declare(&clusters, &secret).await {
                    listed.get_or_insert_default().insert(name);
                }
            }
            watcher::Event::Delete(secret) => {
                if let Some(name) = cluster_name(&secret) {
                    info!(cluster = %name, "cluster Secret deleted");
                    clusters.remove(&name);
                }
            }
            watcher::Event::Init => listed = Some(BTreeSet::new()),
            watcher::Event::InitDone => {
                let seen = listed.take().unwrap_or_default();
                for name in clusters.names().into_iter().filter(|n| !seen.contains(n)) {
                    clusters.remove(&name);
                }
                clusters.secrets_read();
            }
        }
    }
}

fn cluster_name(secret: &Secret) -> Option<String> {
    secret.labels().get(CLUSTER_LABEL).cloned()
}

/// Declares the cluster of one Secret; returns its name.
async fn declare(clusters: &Clusters, secret: &Secret) -> Option<String> {
    let name = cluster_name(secret)?;
    let version = secret.resource_version().unwrap_or_default();
    match client_of(secret).await {
        Ok((client, declared)) => {
            info!(cluster = %name, secret = %secret.name_any(), stale_after_ms = declared.stale_after.as_millis() as u64, grants = %declared.grants.describe(), "cluster declared");
            clusters.run(&name, client, declared, &version);
        }
        Err(why) => {
            let error = format!("its Secret {} cannot be used: {why}", secret.name_any());
            warn!(cluster = %name, "{error}");
            clusters.broken(&name, error, grants_of(secret).ok());
        }
    }
    Some(name)
}

/// The namespace grants a Secret declares.
fn grants_of(secret: &Secret) -> Result<NamespaceGrants, String> {
    NamespaceGrants::parse(
        secret
            .annotations()
            .get(NAMESPACES_ANNOTATION)
            .map(String::as_str),
    )
}

/// The client, `staleAfter` and namespace grants a Secret declares.
async fn client_of(secret: &Secret) -> Result<(Client, Declared), String> {
    let stale_after = match secret.annotations().get(STALE_AFTER_ANNOTATION) {
        Some(text) => parse_duration(text).map_err(|e| format!("{STALE_AFTER_ANNOTATION}: {e}"))?,
        None => DEFAULT_STALE_AFTER,
    };
    let grants = grants_of(secret)?;
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get("kubeconfig"))
        .ok_or("it has no kubeconfig key")?;
    let text = std::str::from_utf8(&bytes.0).map_err(|_| "its kubeconfig is not text")?;
    // The parser's words quote the text they choke on: only where it choked is said.
    let kubeconfig = Kubeconfig::from_yaml(text)
        .map_err(|e| format!("its kubeconfig does not parse{}", position(&e.to_string())))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| format!("its kubeconfig is not usable: {}", message::with_causes(&e)))?;
    let client = api_client::client(config).map_err(|e| {
        format!(
            "no client from its kubeconfig: {}",
            message::with_causes(&e)
        )
    })?;
    Ok((
        client,
        Declared {
            stale_after,
            grants,
        },
    ))
}

/// ` (line L, column C)` from a YAML parser's error, or nothing: never the error's other words.
fn position(error: &str) -> String {
    let numbers = |after: &str| {
        let at = error.find(after)? + after.len();
        let digits: String = error[at..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse::<u64>().ok()
    };
    match (numbers("line"), numbers("column")) {
        (Some(line), Some(column)) => format!(" (line {line}, column {column})"),
        (Some(line), None) => format!(" (line {line})"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubeconfig_that_does_not_parse_is_named_by_position_only() {
        let error = "failed to parse kubeconfig YAML: error: line 1 column 10: unclosed bracket '['\n --> <input>:1:10\n  |\n1 | this is: [not a kubeconfig";
        assert_eq!(position(error), " (line 1, column 10)");
        assert_eq!(
            position("invalid type: string \"s3cr3t\", expected a map"),
            ""
        );
    }
}
