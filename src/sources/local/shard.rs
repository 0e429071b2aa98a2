//! This controller's shard (`--shard`, a selector on namespaces' labels): N controllers, each
//! with its own selector and Lease, own disjoint parts of the cluster's policies.
//!
//! The API server cannot filter a watch by its objects' namespaces' labels, so the policy and
//! group watches stay cluster-wide and each event of a namespace outside the shard is dropped
//! as it arrives: the table, the index, the claims, the per-policy metrics and every reconcile
//! hold this shard's policies only. The Namespace watch (which the listeners read anyway) says
//! which namespaces are in it ([`failover_core::listeners::Listeners::in_shard`]). When a
//! namespace joins or leaves the shard, both watches list again, once the moves have settled:
//! a relist replaces the table in place, so the policies of a namespace that left are
//! forgotten (never deleted: the other shard routes them now) and those of one that joined
//! are taken up. Watches whose objects are not per policy (EndpointSlices, Services, routes,
//! Gateways) stay whole: the policies that read them are this shard's.

use std::{future::ready, sync::Arc, time::Duration};

use futures::{Stream, StreamExt, stream::BoxStream};
use kube::{Resource, runtime::watcher};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::sources::Context;
use failover_core::apis::WatchKind;

/// How long the shard's watches wait after a namespace moved before they list again: a label
/// set on many namespaces at once costs one relist.
const SETTLE: Duration = Duration::from_secs(1);

/// How long between the warnings while the namespaces have not listed.
const NAMESPACES_WAIT: Duration = Duration::from_secs(30);

/// A counter of the namespaces that joined or left the shard.
#[derive(Debug)]
pub struct ShardMoves(watch::Sender<u64>);

impl Default for ShardMoves {
    fn default() -> Self {
        Self(watch::Sender::new(0))
    }
}

impl ShardMoves {
    /// A namespace joined or left the shard.
    pub fn moved(&self) {
        self.0.send_modify(|n| *n += 1);
    }
}

/// The events `start` watches, of this shard's namespaces only, listed again whenever a
/// namespace joined or left the shard; `start`'s own stream as it is with no shard.
pub fn sharded<K, S>(
    ctx: Arc<Context>,
    kind: WatchKind,
    start: impl Fn() -> S + Send + 'static,
) -> BoxStream<'static, watcher::Event<K>>
where
    K: Resource + Send + 'static,
    S: Stream<Item = watcher::Event<K>> + Send + 'static,
{
    if !ctx.scope.sharded {
        return start().boxed();
    }
    let moves = ctx.caches.shard_moves.0.subscribe();
    let filtering = ctx.clone();
    let state = (moves, None::<BoxStream<'static, watcher::Event<K>>>);
    futures::stream::unfold(state, move |(mut moves, current)| {
        let ctx = ctx.clone();
        let current = current.map(Ok).unwrap_or_else(|| Err(start().boxed()));
        async move {
            let mut current = match current {
                Ok(current) => current,
                Err(fresh) => {
                    namespaces_listed(&ctx).await;
                    moves.borrow_and_update();
                    fresh
                }
            };
            tokio::select! {
                event = current.next() => Some((event, (moves, Some(current)))),
                Ok(()) = moves.changed() => {
                    tokio::time::sleep(SETTLE).await;
                    info!(watch = kind.as_str(), "a namespace joined or left the shard: listing again");
                    Some((None, (moves, None)))
                }
            }
        }
    })
    .filter_map(move |event| ready(event.filter(|e| in_shard(&filtering, e))))
    .boxed()
}

/// Whether an event is of this shard: the start and end of a list always are.
fn in_shard<K: Resource>(ctx: &Context, event: &watcher::Event<K>) -> bool {
    match event {
        watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o) => {
            let namespace = o.meta().namespace.as_deref().unwrap_or_default();
            ctx.caches.listeners.read().in_shard(namespace)
        }
        watcher::Event::Init | watcher::Event::InitDone => true,
    }
}

/// Waits until the namespaces have listed: until then no namespace is known to be the shard's.
async fn namespaces_listed(ctx: &Context) {
    while !(ctx.caches.synced)
        .wait_for(&[WatchKind::Namespace], NAMESPACES_WAIT)
        .await
    {
        warn!("the namespaces have not listed: this shard owns no policy until they do");
    }
}
