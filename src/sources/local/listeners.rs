//! What the Gateways' listeners admit ([`crate::listeners`]), as the Gateway and Namespace
//! watches feed it, and the claims re-ranked when it changes: a Gateway whose listeners now
//! admit a namespace (or no longer do), or a namespace whose labels a listener's selector reads,
//! changes what the policies on that Gateway may claim there, and wakes them.
//!
//! The Gateways are watched where the policies are (the whole cluster, or the one namespace);
//! the namespaces only cluster-wide, metadata only. Each event replaces the shared
//! [`failover_core::listeners::Listeners`] in place when no reconcile holds it, else a copy of it (copy on write): a
//! reconcile reads one consistent view without a lock.

use std::{collections::HashSet, sync::Arc};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, api::DynamicObject, core::PartialObjectMeta, runtime::watcher};

use failover_core::listeners::{self, GatewayListeners};

use crate::sources::{
    Context,
    local::claims,
    watch::{events, map_event},
};
use failover_core::apis::WatchKind;

/// A Gateway by namespace and name.
type GatewayKey = (String, String);

/// Gateways and namespaces → the listeners; each change re-ranks the claims it touches.
pub async fn admission_feeds(ctx: &Arc<Context>) {
    futures::join!(gateway_feed(ctx), namespace_feed(ctx));
}

/// Gateways → what their listeners admit.
async fn gateway_feed(ctx: &Arc<Context>) {
    let client = ctx.client.clone();
    let api: Api<DynamicObject> = match ctx.scope.namespace.as_deref() {
        Some(ns) => Api::namespaced_with(client, ns, &listeners::resource()),
        None => Api::all_with(client, &listeners::resource()),
    };
    // The Gateways of a relist, until it ends: those it did not list are gone.
    let mut relisted: Option<HashSet<GatewayKey>> = None;
    events(api, WatchKind::Gateway, Default::default(), ctx.clone())
        .for_each(|event| {
            let keyed = map_event(event, |gateway: DynamicObject| {
                let key = (
                    gateway.metadata.namespace.clone().unwrap_or_default(),
                    gateway.metadata.name.clone().unwrap_or_default(),
                );
                (key, GatewayListeners::of_spec(&gateway.data["spec"]))
            });
            let changed = apply_gateway(ctx, &mut relisted, keyed);
            if !changed.is_empty() {
                rerank(ctx, |namespace, name, _| {
                    changed.iter().any(|(n, g)| n == namespace && g == name)
                });
            }
            async {}
        })
        .await;
}

/// One Gateway event into the listeners; the Gateways whose listeners changed.
fn apply_gateway(
    ctx: &Context,
    relisted: &mut Option<HashSet<GatewayKey>>,
    event: watcher::Event<(GatewayKey, GatewayListeners)>,
) -> Vec<GatewayKey> {
    let mut shared = ctx.caches.listeners.write();
    let listeners = Arc::make_mut(&mut shared);
    let (upserted, gone) = match event {
        watcher::Event::Init => {
            *relisted = Some(HashSet::new());
            (None, Vec::new())
        }
        watcher::Event::InitApply((key, l)) => {
            if let Some(seen) = relisted.as_mut() {
                seen.insert(key.clone());
            }
            (Some((key, l)), Vec::new())
        }
        watcher::Event::Apply((key, l)) => (Some((key, l)), Vec::new()),
        watcher::Event::Delete((key, _)) => (None, vec![key]),
        watcher::Event::InitDone => {
            let seen = relisted.take().unwrap_or_default();
            let gone = listeners
                .gateways_but(|ns, name| seen.contains(&(ns.to_string(), name.to_string())));
            (None, gone)
        }
    };
    let upserted = upserted.into_iter().filter_map(|(key, l)| {
        listeners
            .set_gateway(&key.0, &key.1, Some(l))
            .then_some(key)
    });
    let upserted: Vec<GatewayKey> = upserted.collect();
    let gone = gone
        .into_iter()
        .filter(|key| listeners.set_gateway(&key.0, &key.1, None));
    upserted.into_iter().chain(gone).collect()
}

/// Namespaces (metadata only, cluster-wide) → their labels, which listeners' selectors read.
/// A controller of one namespace does not read them: a selector is not judged there.
async fn namespace_feed(ctx: &Arc<Context>) {
    if ctx.scope.namespace.is_some() {
        ctx.caches.synced.expect(WatchKind::Namespace);
        ctx.caches.synced.done(WatchKind::Namespace);
        return;
    }
    let api: Api<PartialObjectMeta<Namespace>> = Api::all(ctx.client.clone());
    events(api, WatchKind::Namespace, Default::default(), ctx.clone())
        .for_each(|event| {
            let (name, labels) = match &event {
                watcher::Event::Apply(ns) | watcher::Event::InitApply(ns) => {
                    (ns.metadata.name.clone(), ns.metadata.labels.as_ref())
                }
                watcher::Event::Delete(ns) => (ns.metadata.name.clone(), None),
                watcher::Event::Init | watcher::Event::InitDone => (None, None),
            };
            if let Some(name) = name {
                let mut shared = ctx.caches.listeners.write();
                let changed = Arc::make_mut(&mut shared).set_namespace(&name, labels);
                drop(shared);
                if changed.shard {
                    ctx.caches.shard_moves.moved();
                    // Which shard routes a listener may have moved: every policy on a Gateway.
                    rerank(ctx, |_, _, _| true);
                } else if changed.admission {
                    rerank(ctx, |_, _, policy_namespace| policy_namespace == name);
                }
            }
            async {}
        })
        .await;
}

/// Claims again what each policy on a Gateway `on` picks (by the Gateway's namespace and name
/// and the policy's namespace) may claim, and wakes those policies and every claimant of a
/// claim whose holder changed. The claims are made under the claims table's lock, reading the
/// listeners there, as the policy watch makes them: whichever comes second sees the other's.
fn rerank(ctx: &Context, on: impl Fn(&str, &str, &str) -> bool) {
    let affected = ctx.caches.table.read().on_gateways(on);
    if affected.is_empty() {
        return;
    }
    let mut woken = Vec::with_capacity(affected.len());
    {
        let mut table = ctx.caches.claims.write();
        let gateways = ctx.gateways();
        let at = chrono::Utc::now().timestamp_millis();
        for held in &affected {
            let now = claims::claimant(held, None, &gateways);
            woken.extend(table.update(&held.key, Some(&now), at));
            woken.push(held.key.clone());
        }
    }
    ctx.wake.policies(woken);
}
