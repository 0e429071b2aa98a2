//! `status --watch`: after the first listing, each policy is printed again whenever what is shown
//! of it changes, until the command is interrupted (kubectl's `get -w`, one block per policy).

use std::{collections::HashMap, io::Write as _};

use failover::api::FailoverPolicy;
use futures::TryStreamExt;
use kube::{
    Api, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};

use crate::{Format, screen, show};

/// Prints each change of the policies (one, or those matching `selector`) until interrupted;
/// `listed` are those printed already, as they were.
pub async fn follow(
    api: &Api<FailoverPolicy>,
    listed: &[FailoverPolicy],
    name: Option<&str>,
    selector: Option<&str>,
    format: Format,
) -> anyhow::Result<()> {
    let mut config = watcher::Config::default();
    if let Some(name) = name {
        config = config.fields(&format!("metadata.name={name}"));
    }
    if let Some(selector) = selector {
        config = config.labels(selector);
    }
    // Each policy's version as last printed: the watch's first events repeat the listing.
    let mut shown: HashMap<(String, String), Option<String>> = listed
        .iter()
        .map(|p| (key(p), p.resource_version()))
        .collect();
    let mut changes = std::pin::pin!(watcher(api.clone(), config).applied_objects());
    while let Some(policy) = changes.try_next().await? {
        let version = policy.resource_version();
        if shown.insert(key(&policy), version.clone()) == Some(version) {
            continue;
        }
        let text = screen(&show::render(std::slice::from_ref(&policy), format)?);
        let mut out = std::io::stdout().lock();
        write!(out, "\n{text}")?;
        out.flush()?;
    }
    Ok(())
}

fn key(policy: &FailoverPolicy) -> (String, String) {
    (policy.namespace().unwrap_or_default(), policy.name_any())
}
