//! `pin`, `unpin`, `suspend`, `resume`: server-side apply of one spec field under this plugin's
//! own field manager, so the change shows who made it (`managedFields`) and a later
//! `kubectl apply` of the user's manifest does not fight over other fields.

use anyhow::bail;
use failover::api::FailoverPolicy;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};

/// The field manager of every change the plugin makes.
pub const FIELD_MANAGER: &str = "kubectl-failover";

/// Sets `spec.pin`, after checking that the backend belongs to the policy.
pub async fn pin(api: &Api<FailoverPolicy>, name: &str, backend: &str) -> anyhow::Result<()> {
    let policy = api.get(name).await?;
    let spec = &policy.spec;
    let backends: Vec<&str> = std::iter::once(spec.primary.as_str())
        .chain(spec.secondaries.iter().map(|s| s.service.as_str()))
        .collect();
    if !backends.contains(&backend) {
        bail!(
            "{backend} is not a backend of {name}; its backends are {}",
            backends.join(", ")
        );
    }
    apply(api, name, json!({ "pin": backend })).await?;
    println!("failoverpolicy/{name} pinned to {backend}");
    Ok(())
}

/// Removes `spec.pin`.
pub async fn unpin(api: &Api<FailoverPolicy>, name: &str) -> anyhow::Result<()> {
    clear(api, name, "pin").await?;
    println!("failoverpolicy/{name} unpinned");
    Ok(())
}

/// Sets or removes `spec.suspend`.
pub async fn suspend(api: &Api<FailoverPolicy>, name: &str, on: bool) -> anyhow::Result<()> {
    if on {
        apply(api, name, json!({ "suspend": true })).await?;
        println!("failoverpolicy/{name} suspended");
    } else {
        clear(api, name, "suspend").await?;
        println!("failoverpolicy/{name} resumed");
    }
    Ok(())
}

/// Server-side apply of these spec fields.
async fn apply(api: &Api<FailoverPolicy>, name: &str, spec: Value) -> anyhow::Result<()> {
    let body = json!({
        "apiVersion": "failover.dev/v1alpha1",
        "kind": "FailoverPolicy",
        "metadata": { "name": name },
        "spec": spec,
    });
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    Ok(())
}

/// Removes a spec field: gives up this plugin's ownership of it (which removes it when only the
/// plugin set it), then clears it if another manager had set it too.
async fn clear(api: &Api<FailoverPolicy>, name: &str, field: &str) -> anyhow::Result<()> {
    apply(api, name, json!({})).await?;
    let policy = api.get(name).await?;
    let still_set = serde_json::to_value(&policy.spec)?.get(field).is_some();
    if still_set {
        let patch = json!({ "spec": { field: null } });
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        api.patch(name, &params, &Patch::Merge(&patch)).await?;
    }
    Ok(())
}
