//! This cluster's watches that feed the local caches: EndpointSlices and Services (metadata
//! only) into the readiness counts, the routes of each kind into the route views, the Gateways
//! and namespaces into what listeners admit ([`super::listeners`]). Each event
//! updates one cache and wakes only the policies that reference what changed.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::{Api, core::PartialObjectMeta, runtime::watcher};

use super::{listeners::admission_feeds, readiness::ReadinessStore, shard::sharded};
use crate::sources::{
    Context,
    watch::{events, map_event, scoped},
};
use failover_core::{
    api::FailoverGroup,
    apis::WatchKind,
    backend::{BackendKey, BackendKind},
    route::{RouteKey, RouteKind, RouteObject},
};

/// Every watch that feeds a cache, run together.
pub async fn feeds(ctx: Arc<Context>) {
    futures::join!(
        readiness_feeds(&ctx),
        route_feeds(&ctx),
        group_feed(&ctx),
        admission_feeds(&ctx)
    );
}

/// FailoverGroups → the group table; a change wakes the members of the group, before and
/// after, which choose its site again.
async fn group_feed(ctx: &Arc<Context>) {
    let watching = ctx.clone();
    sharded(ctx.clone(), WatchKind::FailoverGroup, move || {
        let api = scoped::<FailoverGroup>(&watching.client, watching.scope.namespace.as_deref());
        events(
            api,
            WatchKind::FailoverGroup,
            Default::default(),
            watching.clone(),
        )
    })
    .for_each(|event| {
        let (members, seen) = ctx.caches.groups.write().apply(event);
        // Statuses this replica wrote are forgotten once the table has them.
        if let Some(version) = seen {
            ctx.writer
                .recent_group_status
                .seen_through(version, |_| true);
        }
        ctx.wake.policies(members);
        async {}
    })
    .await;
}

/// EndpointSlices → readiness counts; Services (metadata only) → whether each backend exists.
///
/// Changes wake nobody until both watches have listed once: every reconcile waits for those
/// lists, so the first lists' objects would each wake policies that have not decided yet and
/// queue a second reconcile of them all: a cold start reconciles each policy once.
async fn readiness_feeds(ctx: &Arc<Context>) {
    let (client, ns) = (&ctx.client, ctx.scope.namespace.as_deref());
    let slices = readiness_feed(
        ctx,
        events(
            scoped::<EndpointSlice>(client, ns),
            WatchKind::EndpointSlice,
            watcher::Config::default().labels(BackendKind::Service.spec().slice_label),
            ctx.clone(),
        ),
        ReadinessStore::apply_slice_event,
    );
    let services = readiness_feed(
        ctx,
        events(
            scoped::<PartialObjectMeta<Service>>(client, ns),
            WatchKind::Service,
            watcher::Config::default(),
            ctx.clone(),
        ),
        ReadinessStore::apply_service_event,
    );
    futures::join!(slices, services);
}

/// One watch into the readiness counts; once both have listed, each changed Service wakes the
/// policies that reference it.
async fn readiness_feed<K>(
    ctx: &Context,
    events: impl Stream<Item = watcher::Event<K>>,
    apply: fn(&mut ReadinessStore, watcher::Event<K>) -> Vec<BackendKey>,
) {
    events
        .for_each(|event| {
            let changed = apply(&mut ctx.caches.readiness.write(), event);
            if ctx.caches.inputs_listed() {
                ctx.wake_for_services(changed);
            }
            async {}
        })
        .await;
}

/// Each route kind of [`RouteKind::ALL`] → its route views: one watch per kind, all run
/// together. A watch whose CRD is missing retries until it is installed; a change wakes the
/// policy that names the route, to revert a hand edit or resolve a conflict.
async fn route_feeds(ctx: &Arc<Context>) {
    futures::future::join_all(RouteKind::ALL.map(|kind| route_feed(ctx, kind))).await;
}

/// The watch of one route kind, each object kept as its kind's view of it.
async fn route_feed(ctx: &Arc<Context>, kind: RouteKind) {
    let spec = kind.spec();
    let resource = spec.resource();
    let client = ctx.client.clone();
    let api: Api<RouteObject> = match ctx.scope.namespace.as_deref() {
        Some(ns) => Api::namespaced_with(client, ns, &resource),
        None => Api::all_with(client, &resource),
    };
    events(api, kind.watch(), Default::default(), ctx.clone())
        .for_each(|event| {
            let keyed = map_event(event, |object: RouteObject| {
                let key = RouteKey {
                    kind,
                    namespace: ctx
                        .caches
                        .namespaces
                        .intern(object.metadata.namespace.as_deref().unwrap_or_default()),
                    name: object.metadata.name.as_deref().unwrap_or_default().into(),
                };
                (key, spec.view(&object))
            });
            // Told before the writes seen are forgotten: the rules this replica wrote last.
            let recent = &ctx.writer.recent_routes;
            let applied = ctx.caches.routes.write().apply(kind, keyed, |key, view| {
                recent.wrote(key, view.resource_version, |rules| {
                    view.rules.as_ref() == Some(rules)
                })
            });
            if let Some(version) = applied.complete_through {
                recent.seen_through(version, |k| k.kind == kind);
            }
            for _ in 0..applied.echoes {
                ctx.metrics().echo(kind.metric_label());
            }
            ctx.wake_for_routes(applied.changed);
            async {}
        })
        .await;
}
