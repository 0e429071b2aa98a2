//! `status --watch`: after the first listing, each policy is printed again whenever it changes,
//! and a deleted one is said to be, until the command is interrupted (kubectl's `get -w`, one
//! block per policy). A watch that fails resumes by itself.

use std::{collections::HashMap, io::Write as _};

use failover_core::api::FailoverPolicy;
use futures::StreamExt;
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
    let mut events = std::pin::pin!(watcher(api.clone(), config).default_backoff());
    while let Some(event) = events.next().await {
        let text = match event {
            Ok(watcher::Event::Apply(policy) | watcher::Event::InitApply(policy)) => {
                let version = policy.resource_version();
                if shown.insert(key(&policy), version.clone()) == Some(version) {
                    continue;
                }
                screen(&show::render(std::slice::from_ref(&policy), format)?)
            }
            Ok(watcher::Event::Delete(policy)) => {
                shown.remove(&key(&policy));
                screen(&deleted(&policy, format)?)
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => continue,
            // The watch resumes by itself, after a pause that grows while it keeps failing.
            Err(e) => {
                eprintln!("watch interrupted ({e}); resuming");
                continue;
            }
        };
        let mut out = std::io::stdout().lock();
        write!(out, "\n{text}")?;
        out.flush()?;
    }
    Ok(())
}

/// A deleted policy, in the chosen format.
fn deleted(policy: &FailoverPolicy, format: Format) -> anyhow::Result<String> {
    let (namespace, name) = key(policy);
    let view = serde_json::json!([{ "namespace": namespace, "name": name, "deleted": true }]);
    Ok(match format {
        Format::Text => format!("{name} (namespace {namespace}) deleted\n"),
        Format::Json => serde_json::to_string_pretty(&view)? + "\n",
        Format::Yaml => serde_yaml::to_string(&view)?,
    })
}

fn key(policy: &FailoverPolicy) -> (String, String) {
    (policy.namespace().unwrap_or_default(), policy.name_any())
}
