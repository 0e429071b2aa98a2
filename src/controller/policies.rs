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
        local::{claims, policies::TableChange},
        remote::secrets,
        watch::{events, scoped, slim},
    },
    validate::validated,
};

/// Policies → the table and the index; out come the policies to reconcile (each new or changed
/// one), and word that a complete list is in the table.
pub fn policy_requests(ctx: Arc<Context>) -> impl Stream<Item = Request> + Send + 'static {
    let events = events(
        scoped(&ctx.client, ctx.scope.namespace.as_deref()),
        WatchKind::FailoverPolicy,
        Default::default(),
        ctx.clone(),
    );
    let validating = ctx.clone();
    events
        .map(|event| event.modify(slim::<FailoverPolicy>))
        .then(move |event| validation(validating.clone(), event))
        .flat_map(move |(event, fresh)| {
            let (changes, seen) = ctx.caches.table.write().apply(event, fresh);
            // Statuses this replica wrote are forgotten once the table has them.
            if let Some(version) = seen {
                ctx.writer.recent_status.seen_through(version, |_| true);
            }
            let requests: Vec<Request> = changes.iter().flat_map(|c| follow(&ctx, c)).collect();
            futures::stream::iter(requests)
        })
}

/// What validating one policy should cost at most: a query at every limit of
/// `crate::health_query` is checked and parsed well within it. Longer is logged, for the
/// limits' sake.
const VALIDATION_BUDGET: std::time::Duration = std::time::Duration::from_millis(100);

/// The event, and its policy as validated when the table holds no validation of its uid and
/// generation. A policy with a health query is validated on a blocking thread, one at a time, as
/// its query's regexes are compiled (bounded by the limits of `crate::health_query`, yet too
/// long for that thread), never on the thread that serves `/healthz` and renews the Lease; any
/// other is cheap and is validated here.
async fn validation(
    ctx: Arc<Context>,
    event: watcher::Event<FailoverPolicy>,
) -> (watcher::Event<FailoverPolicy>, Option<Validated>) {
    static ONE_AT_A_TIME: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);
    let policy = match &event {
        watcher::Event::Apply(p) | watcher::Event::InitApply(p) => p,
        _ => return (event, None),
    };
    if !ctx.caches.table.read().needs_validation(policy) {
        return (event, None);
    }
    if policy.spec.health.is_none() {
        let valid = validated(policy);
        return (event, Some(valid));
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
fn follow(ctx: &Context, change: &TableChange) -> Vec<Request> {
    let caches = &ctx.caches;
    let requests: Vec<PolicyKey> = match change {
        TableChange::Upserted {
            held,
            previous,
            object,
            revalidated,
        } => {
            caches.index.write().update(
                &held.key,
                previous.as_ref().and_then(|p| p.spec.valid()).map(|v| &**v),
                held.spec.valid().map(|v| &**v),
            );
            if *revalidated {
                // A poller for a valid policy with a health query; a changed, invalid or
                // health-less one's stops.
                caches.health.follow(
                    held.key.clone(),
                    Some(object),
                    held.spec.valid().map(|v| &**v),
                );
            }
            let recorded = object.status.as_ref().map_or(&[][..], |s| &s.claims);
            let now = claims::claimant(held, recorded, &ctx.scope.gateways);
            let handed = caches
                .claims
                .write()
                .update(&held.key, Some(&now), seen_at());
            std::iter::once(held.key.clone()).chain(handed).collect()
        }
        TableChange::Deleted(held) => {
            caches
                .index
                .write()
                .update(&held.key, held.spec.valid().map(|v| &**v), None);
            let handed = caches.claims.write().update(&held.key, None, seen_at());
            caches.health.follow(held.key.clone(), None, None);
            ctx.metrics().forget_policy(&PolicyLabels {
                namespace: held.key.namespace.to_string(),
                policy: held.key.name.to_string(),
            });
            handed
        }
        TableChange::Listed => {
            caches.claims.write().listed();
            return vec![Request::Listed];
        }
    };
    watch_remote(ctx);
    requests.into_iter().map(Request::One).collect()
}

/// Remote clusters watch exactly the namespaces policies read from; the cluster Secrets are
/// watched once any policy reads from a remote cluster.
fn watch_remote(ctx: &Context) {
    let wanted = ctx.caches.index.read().remote_namespaces();
    let remote = &ctx.caches.remote;
    remote.want(wanted, || {
        tokio::spawn(secrets::feed(
            ctx.client.clone(),
            remote.clone(),
            ctx.metrics().clone(),
        ));
    });
}

/// Now, in milliseconds: when the claims table saw a change.
fn seen_at() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
