//! This cluster's watches that feed the local caches: EndpointSlices and Services (metadata
//! only) into the readiness counts, TrafficSplits and HTTPRoutes into the route views. Each event
//! updates one cache and wakes only the policies that reference what changed.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::{core::PartialObjectMeta, runtime::watcher};

use super::readiness::{ReadinessStore, SERVICE_NAME_LABEL};
use crate::{
    apis::WatchKind,
    observation::ServiceKey,
    route::{
        RouteKey, RouteKind, RouteView,
        httproute::HttpRoute,
        trafficsplit::{self, TrafficSplit},
    },
    sources::{
        Context,
        watch::{events, map_event, scoped},
    },
};

/// Every watch that feeds a cache, run together.
pub async fn feeds(ctx: Arc<Context>) {
    futures::join!(readiness_feeds(&ctx), route_feeds(&ctx));
}

/// EndpointSlices → readiness counts; Services (metadata only) → whether each backend exists.
///
/// Changes wake nobody until both watches have listed once: every reconcile waits for those
/// lists, so the first lists' objects would each wake policies that have not decided yet and
/// queue a second reconcile of them all: a cold start reconciles each policy once.
async fn readiness_feeds(ctx: &Arc<Context>) {
    let (client, ns) = (&ctx.gate.client, ctx.namespace.as_deref());
    let slices = readiness_feed(
        ctx,
        events(
            scoped::<EndpointSlice>(client, ns),
            WatchKind::EndpointSlice,
            watcher::Config::default().labels(SERVICE_NAME_LABEL),
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
    apply: fn(&mut ReadinessStore, watcher::Event<K>) -> Vec<ServiceKey>,
) {
    events
        .for_each(|event| {
            let changed = apply(&mut ctx.readiness.write(), event);
            if ctx.inputs_listed() {
                ctx.wake_for_services(changed);
            }
            async {}
        })
        .await;
}

/// TrafficSplits and HTTPRoutes → route views (a watch whose CRD is missing retries until it is
/// installed); a change wakes the policy that
/// names the route, to revert a hand edit or resolve a conflict.
async fn route_feeds(ctx: &Arc<Context>) {
    let (client, ns) = (&ctx.gate.client, ctx.namespace.as_deref());
    let splits = feed_routes(
        events(
            scoped::<TrafficSplit>(client, ns),
            WatchKind::TrafficSplit,
            Default::default(),
            ctx.clone(),
        ),
        RouteKind::TrafficSplit,
        |s: TrafficSplit| RouteView::new(&s.metadata, Some(&trafficsplit::rules(&s))),
        ctx,
    );
    let routes = feed_routes(
        events(
            scoped::<HttpRoute>(client, ns),
            WatchKind::HttpRoute,
            Default::default(),
            ctx.clone(),
        ),
        RouteKind::HttpRoute,
        |r: HttpRoute| RouteView::of_http_route(&r),
        ctx,
    );
    futures::join!(splits, routes);
}

async fn feed_routes<K: kube::Resource>(
    stream: impl Stream<Item = watcher::Event<K>>,
    kind: RouteKind,
    view: impl Fn(K) -> RouteView,
    ctx: &Context,
) {
    stream
        .for_each(|event| {
            let keyed = map_event(event, |object: K| {
                let key = RouteKey {
                    kind,
                    namespace: object
                        .meta()
                        .namespace
                        .as_deref()
                        .unwrap_or_default()
                        .into(),
                    name: object.meta().name.as_deref().unwrap_or_default().into(),
                };
                (key, view(object))
            });
            let (changed, seen) = ctx.routes.write().apply(kind, keyed);
            if let Some(version) = seen {
                ctx.gate
                    .recent_routes
                    .seen_through(version, |k| k.kind == kind);
            }
            ctx.wake_for_routes(changed);
            async {}
        })
        .await;
}
