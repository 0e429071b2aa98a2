//! The policy watch: every FailoverPolicy into the policy table and the index, and what each
//! policy asks of the sources (the remote namespaces it reads, its health queries, as the
//! validate step makes them).

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::{ResourceExt, runtime::watcher};
use tracing::warn;

use super::runner::Request;
use crate::{
    api::FailoverPolicy,
    apis::WatchKind,
    observation::PolicyKey,
    policy::{SpecProblem, Validated},
    runtime::{heap, policy_metrics::PolicyLabels},
    sources::{
        Context,
        health::Health,
        local::policies::{Change, key_of},
        remote::secrets,
        watch::{events, scoped, slim},
    },
    validate::validated,
};

/// Policies → the table and the index; out come the policies to reconcile (each new or changed
/// one), and word that a complete list is in the table.
pub fn policy_requests(ctx: Arc<Context>) -> impl Stream<Item = Request> + Send + 'static {
    let events = events(
        scoped(&ctx.gate.client, ctx.namespace.as_deref()),
        WatchKind::FailoverPolicy,
        Default::default(),
        ctx.clone(),
    );
    let validating = ctx.clone();
    events
        .map(|event| event.modify(slim::<FailoverPolicy>))
        .then(move |event| validation(validating.clone(), event))
        .flat_map(move |(event, fresh)| {
            let (changes, seen) = ctx.table.write().apply(event, fresh);
            // Statuses this replica wrote are forgotten once the table has them.
            if let Some(version) = seen {
                ctx.gate.recent_status.seen_through(version, |_| true);
            }
            let requests: Vec<Request> = changes.iter().flat_map(|c| follow(&ctx, c)).collect();
            futures::stream::iter(requests)
        })
}

/// What validating one policy should cost at most: a query at every limit of
/// `crate::health_query` is checked and parsed well within it. Longer is logged, for the
/// limits' sake.
const VALIDATION_BUDGET: std::time::Duration = std::time::Duration::from_millis(100);

/// The event, and its policy as validated when it has a health query and the table holds no
/// validation of its generation: on a blocking thread, one at a time, as its query's regexes
/// are compiled (within the limits of `crate::health_query`, a few milliseconds each), never on
/// the thread that serves `/healthz` and renews the Lease.
async fn validation(
    ctx: Arc<Context>,
    event: watcher::Event<FailoverPolicy>,
) -> (watcher::Event<FailoverPolicy>, Option<Validated>) {
    static ONE_AT_A_TIME: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);
    let policy = match &event {
        watcher::Event::Apply(p) | watcher::Event::InitApply(p) => p,
        _ => return (event, None),
    };
    if !ctx.table.read().needs_validation(policy) {
        return (event, None);
    }
    let _turn = ONE_AT_A_TIME.acquire().await;
    let copy = policy.clone();
    let fresh = tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        let valid = validated(&copy);
        let took = started.elapsed();
        if took > VALIDATION_BUDGET {
            warn!(
                namespace = copy.namespace().unwrap_or_default(),
                policy = copy.name_any(),
                took_ms = took.as_millis() as u64,
                "validating a policy took longer than its budget"
            );
        }
        // What compiling the query's regexes freed stays in this thread's arena otherwise.
        heap::trim();
        valid
    })
    .await
    .unwrap_or_else(|_| {
        Err(Arc::from([SpecProblem {
            field: "spec".into(),
            message: "could not be validated".into(),
        }]))
    });
    (event, Some(fresh))
}

/// Brings the index, the claims, the remote watches, the health pollers and the metrics in
/// line with one change; the requests it makes (the policy, and the policies whose claim
/// changed hands).
fn follow(ctx: &Context, change: &Change) -> Vec<Request> {
    let requests: Vec<PolicyKey> = match change {
        Change::Applied {
            policy,
            previous,
            revalidated,
        } => {
            ctx.index.write().upsert(previous.as_deref(), policy);
            let had_health = previous.as_ref().is_some_and(|p| p.spec.health.is_some());
            match revalidated {
                Some(valid) => follow_health(&ctx.health, policy, valid),
                // A health query removed: its poller stops.
                None if had_health && policy.spec.health.is_none() => {
                    if let Some(key) = key_of(policy) {
                        ctx.health.follow(key, Some(policy), None);
                    }
                }
                None => {}
            }
            let handed = ctx.claims.write().upsert(previous.as_deref(), policy);
            key_of(policy).into_iter().chain(handed).collect()
        }
        Change::Deleted(policy) => {
            ctx.index.write().remove(policy);
            let handed = ctx.claims.write().remove(policy);
            if let Some(key) = key_of(policy) {
                ctx.health.follow(key.clone(), None, None);
                ctx.metrics().forget_policy(&PolicyLabels {
                    namespace: key.namespace.to_string(),
                    policy: key.name.into(),
                });
            }
            handed
        }
        Change::Listed => return vec![Request::Listed],
    };
    // Remote clusters watch exactly the namespaces policies read from; the cluster Secrets are
    // watched once any policy reads from a remote cluster.
    let wanted = ctx.index.read().remote_namespaces();
    let remote = &ctx.remote;
    remote.want(wanted, || {
        tokio::spawn(secrets::feed(
            ctx.gate.client.clone(),
            remote.clone(),
            ctx.metrics().clone(),
        ));
    });
    requests.into_iter().map(Request::One).collect()
}

/// Each valid policy with a health query gets a poller; a changed, invalid or deleted policy's
/// follows. The poller gets the policy as the validate step made it.
fn follow_health(health: &Health, policy: &FailoverPolicy, valid: &Validated) {
    let Some(key) = key_of(policy) else { return };
    let valid = valid.as_deref().ok().filter(|v| v.health.is_some());
    health.follow(key, Some(policy), valid);
}
