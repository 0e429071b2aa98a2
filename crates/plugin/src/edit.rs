//! `pin`, `unpin`, `suspend`, `resume`, `drill`: server-side apply of one spec field under a field manager
//! of the plugin's own, so the change shows who made it (`managedFields`) and a later
//! `kubectl apply` of the user's manifest does not fight over other fields.
//!
//! Each control has a manager of its own (`kubectl-failover-pin`, `kubectl-failover-suspend`,
//! `kubectl-failover-drill`):
//! server-side apply removes every field a manager owned and left out of its next apply, so with
//! one manager for both, `unpin` (an apply without `pin`) would also resume a suspended policy.
//!
//! A change then waits until the controller's status has observed the new generation, so what
//! is printed (and `status` right after) is the state after the change, not before it.

use std::time::Duration;

use anyhow::bail;
use failover_core::api::{FailoverPolicy, conditions::READY};
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
    Drill,
}

impl Control {
    fn field(self) -> &'static str {
        match self {
            Control::Pin => "pin",
            Control::Suspend => "suspend",
            Control::Drill => "drill",
        }
    }

    fn manager(self) -> &'static str {
        match self {
            Control::Pin => "kubectl-failover-pin",
            Control::Suspend => "kubectl-failover-suspend",
            Control::Drill => "kubectl-failover-drill",
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
    check_backend(&policy, backend)?;
    let changed = apply(api, name, Control::Pin, json!({ "pin": backend })).await?;
    println!("failoverpolicy/{name} pinned to {backend}");
    acted_on(api, &changed, wait).await
}

/// Fails unless the backend is the policy's primary or one of its secondaries.
fn check_backend(policy: &FailoverPolicy, backend: &str) -> anyhow::Result<()> {
    let spec = &policy.spec;
    let backends: Vec<&str> = std::iter::once(spec.primary.as_str())
        .chain(spec.secondaries.iter().map(|s| s.service.as_str()))
        .collect();
    if !backends.contains(&backend) {
        bail!(
            "{backend} is not a backend of {}; its backends are {}",
            policy.name_any(),
            backends.join(", ")
        );
    }
    Ok(())
}

/// The longest drill: a drill is a rehearsal, not a way to route for days (that is `pin`).
pub const MAX_DRILL: Duration = Duration::from_secs(24 * 3600);

/// What a drill asks for.
pub struct DrillRequest<'a> {
    /// The backend that takes all traffic.
    pub to: &'a str,
    /// For how long.
    pub duration: Duration,
    /// Also to a backend that is not ready.
    pub force: bool,
}

/// Sets `spec.drill`: all traffic to a backend until now + the duration. Refused when the
/// status says the backend is not ready, unless forced.
pub async fn drill(
    api: &Api<FailoverPolicy>,
    name: &str,
    request: &DrillRequest<'_>,
    wait: Wait,
) -> anyhow::Result<Verdict> {
    let DrillRequest {
        to,
        duration,
        force,
    } = *request;
    if duration.is_zero() || duration > MAX_DRILL {
        bail!("--for must be more than 0s and at most 24h, not {duration:?}");
    }
    let policy = api.get(name).await?;
    check_backend(&policy, to)?;
    let backend =
        show::written_status(&policy).and_then(|s| s.backends.iter().find(|b| b.service == to));
    if !force && !backend.is_some_and(|b| b.ready) {
        let why = backend
            .and_then(|b| b.message.clone())
            .unwrap_or_else(|| "the controller has not reported it ready".into());
        bail!(
            "{to} is not ready ({why}); a drill to it is refused. --force sends all traffic to it anyway"
        );
    }
    let until = chrono::DateTime::from_timestamp((chrono::Utc::now() + duration).timestamp(), 0)
        .unwrap_or_default();
    let until = failover_core::api::Timestamp(until);
    let mut drill = json!({ "to": to, "until": until });
    if force {
        drill["force"] = json!(true);
    }
    let changed = apply(api, name, Control::Drill, json!({ "drill": drill })).await?;
    println!("failoverpolicy/{name} drill: all traffic to {to} until {until}");
    acted_on(api, &changed, wait).await
}

/// Ends a drill at once: removes `spec.drill`.
pub async fn abort_drill(
    api: &Api<FailoverPolicy>,
    name: &str,
    wait: Wait,
) -> anyhow::Result<Verdict> {
    let changed = clear(api, name, Control::Drill).await?;
    println!("failoverpolicy/{name} drill aborted");
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
