//! `pin`, `unpin`, `suspend`, `resume`: server-side apply of one spec field under a field manager
//! of the plugin's own, so the change shows who made it (`managedFields`) and a later
//! `kubectl apply` of the user's manifest does not fight over other fields.
//!
//! Each control has a manager of its own (`kubectl-failover-pin`, `kubectl-failover-suspend`):
//! server-side apply removes every field a manager owned and left out of its next apply, so with
//! one manager for both, `unpin` (an apply without `pin`) would also resume a suspended policy.

use anyhow::bail;
use failover::api::FailoverPolicy;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};

/// The spec fields the plugin sets, each under its own field manager.
#[derive(Clone, Copy)]
enum Control {
    Pin,
    Suspend,
}

impl Control {
    fn field(self) -> &'static str {
        match self {
            Control::Pin => "pin",
            Control::Suspend => "suspend",
        }
    }

    fn manager(self) -> &'static str {
        match self {
            Control::Pin => "kubectl-failover-pin",
            Control::Suspend => "kubectl-failover-suspend",
        }
    }
}

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
    apply(api, name, Control::Pin, json!({ "pin": backend })).await?;
    println!("failoverpolicy/{name} pinned to {backend}");
    Ok(())
}

/// Removes `spec.pin`.
pub async fn unpin(api: &Api<FailoverPolicy>, name: &str) -> anyhow::Result<()> {
    clear(api, name, Control::Pin).await?;
    println!("failoverpolicy/{name} unpinned");
    Ok(())
}

/// Sets or removes `spec.suspend`.
pub async fn suspend(api: &Api<FailoverPolicy>, name: &str, on: bool) -> anyhow::Result<()> {
    if on {
        apply(api, name, Control::Suspend, json!({ "suspend": true })).await?;
        println!("failoverpolicy/{name} suspended");
    } else {
        clear(api, name, Control::Suspend).await?;
        println!("failoverpolicy/{name} resumed");
    }
    Ok(())
}

/// Server-side apply of these spec fields, under the control's field manager.
async fn apply(
    api: &Api<FailoverPolicy>,
    name: &str,
    control: Control,
    spec: Value,
) -> anyhow::Result<()> {
    let body = json!({
        "apiVersion": "failover.dev/v1alpha1",
        "kind": "FailoverPolicy",
        "metadata": { "name": name },
        "spec": spec,
    });
    api.patch(
        name,
        &PatchParams::apply(control.manager()).force(),
        &Patch::Apply(&body),
    )
    .await?;
    Ok(())
}

/// Removes a spec field: gives up the control's ownership of it (which removes it when only the
/// plugin set it), then clears it if another manager had set it too.
async fn clear(api: &Api<FailoverPolicy>, name: &str, control: Control) -> anyhow::Result<()> {
    apply(api, name, control, json!({})).await?;
    let policy = api.get(name).await?;
    let still_set = serde_json::to_value(&policy.spec)?
        .get(control.field())
        .is_some();
    if still_set {
        let patch = json!({ "spec": { control.field(): null } });
        let params = PatchParams {
            field_manager: Some(control.manager().into()),
            ..Default::default()
        };
        api.patch(name, &params, &Patch::Merge(&patch)).await?;
    }
    Ok(())
}
