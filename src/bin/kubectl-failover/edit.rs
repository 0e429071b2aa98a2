//! `pin`, `unpin`, `suspend`, `resume`: server-side apply of one spec field under a field manager
//! of the plugin's own, so the change shows who made it (`managedFields`) and a later
//! `kubectl apply` of the user's manifest does not fight over other fields.
//!
//! Each control has a manager of its own (`kubectl-failover-pin`, `kubectl-failover-suspend`):
//! server-side apply removes every field a manager owned and left out of its next apply, so with
//! one manager for both, `unpin` (an apply without `pin`) would also resume a suspended policy.
//!
//! A change then waits until the controller's status has observed the new generation, so what
//! is printed (and `status` right after) is the state after the change, not before it.

use std::time::Duration;

use anyhow::bail;
use failover::api::{FailoverPolicy, conditions::READY};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};

use crate::{Verdict, Wait, screen, show};

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
pub async fn pin(
    api: &Api<FailoverPolicy>,
    name: &str,
    backend: &str,
    wait: Wait,
) -> anyhow::Result<Verdict> {
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
    let changed = apply(api, name, Control::Pin, json!({ "pin": backend })).await?;
    println!("failoverpolicy/{name} pinned to {backend}");
    acted_on(api, &changed, wait).await
}

/// Removes `spec.pin`.
pub async fn unpin(api: &Api<FailoverPolicy>, name: &str, wait: Wait) -> anyhow::Result<Verdict> {
    let changed = clear(api, name, Control::Pin).await?;
    println!("failoverpolicy/{name} unpinned");
    acted_on(api, &changed, wait).await
}

/// Sets or removes `spec.suspend`.
pub async fn suspend(
    api: &Api<FailoverPolicy>,
    name: &str,
    on: bool,
    wait: Wait,
) -> anyhow::Result<Verdict> {
    let changed = if on {
        let changed = apply(api, name, Control::Suspend, json!({ "suspend": true })).await?;
        println!("failoverpolicy/{name} suspended");
        changed
    } else {
        let changed = clear(api, name, Control::Suspend).await?;
        println!("failoverpolicy/{name} resumed");
        changed
    };
    acted_on(api, &changed, wait).await
}

/// Waits until the controller's status observes the changed policy's generation, then prints
/// its `Ready` condition; without a wait (`--timeout 0s`), returns at once.
async fn acted_on(
    api: &Api<FailoverPolicy>,
    changed: &FailoverPolicy,
    wait: Wait,
) -> anyhow::Result<Verdict> {
    let (name, generation) = (changed.name_any(), changed.metadata.generation.unwrap_or(0));
    if wait.timeout.is_zero() {
        return Ok(Verdict::Ready);
    }
    let deadline = tokio::time::Instant::now() + wait.timeout;
    loop {
        let policy = api.get(&name).await?;
        let observed = show::written_status(&policy).and_then(|s| s.observed_generation);
        if observed.is_some_and(|g| g >= generation) {
            if let Some(c) = show::condition(&policy, READY) {
                let line = format!("  {READY}={} {}: {}", c.status, c.reason, c.message);
                println!("{}", screen(&line));
            }
            return Ok(show::verdict(std::slice::from_ref(&policy)));
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "the controller has not acted on generation {generation} of {name} within {:?} (its status is of generation {}): is it running?",
                wait.timeout,
                observed.unwrap_or(0)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Server-side apply of these spec fields, under the control's field manager.
async fn apply(
    api: &Api<FailoverPolicy>,
    name: &str,
    control: Control,
    spec: Value,
) -> anyhow::Result<FailoverPolicy> {
    let body = json!({
        "apiVersion": "failover.dev/v1alpha1",
        "kind": "FailoverPolicy",
        "metadata": { "name": name },
        "spec": spec,
    });
    Ok(api
        .patch(
            name,
            &PatchParams::apply(control.manager()).force(),
            &Patch::Apply(&body),
        )
        .await?)
}

/// Removes a spec field: gives up the control's ownership of it (which removes it when only the
/// plugin set it), then clears it if another manager had set it too.
async fn clear(
    api: &Api<FailoverPolicy>,
    name: &str,
    control: Control,
) -> anyhow::Result<FailoverPolicy> {
    let policy = apply(api, name, control, json!({})).await?;
    let still_set = serde_json::to_value(&policy.spec)?
        .get(control.field())
        .is_some();
    if still_set {
        let patch = json!({ "spec": { control.field(): null } });
        let params = PatchParams {
            field_manager: Some(control.manager().into()),
            ..Default::default()
        };
        return Ok(api.patch(name, &params, &Patch::Merge(&patch)).await?);
    }
    Ok(policy)
}
