//! One helper for every watch of the controller: list then watch, with kube-runtime's backoff
//! on errors, every error counted and logged, and the first complete list recorded in
//! [`Synced`]. Each watch then feeds its own consumer (a readiness count, a route view, the
//! policy store).

use std::{fmt::Debug, sync::Arc, time::Duration};

use futures::{Stream, StreamExt};
use kube::{
    Api, Resource,
    runtime::{
        WatchStreamExt,
        watcher::{self, ExponentialBackoff},
    },
};
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use crate::{
    metrics::Metrics,
    observe::{
        apis::{Apis, NeededApi},
        synced::Synced,
    },
};

/// First retry delay of a failed watch.
const RETRY_FIRST: Duration = Duration::from_millis(250);
/// Longest retry delay of a failed watch: an API server that comes back is seen within seconds
/// (client-go's default waits up to 30 s).
const RETRY_MAX: Duration = Duration::from_secs(3);

/// What a watch needs besides its API: its name, where it counts errors and sync.
#[derive(Clone)]
pub struct WatchContext {
    /// Counters of watch restarts.
    pub metrics: Arc<Metrics>,
    /// First-list state of every watch.
    pub synced: Synced,
    /// The APIs found missing.
    pub apis: Apis,
}

/// The events of one watch, errors counted and retried: the stream never ends on its own.
///
/// Initial lists come in pages of 100 objects, so the start-up peak of memory (one page of JSON
/// and its decoded objects at a time) stays small.
pub fn events<K>(
    api: Api<K>,
    kind: &'static str,
    config: watcher::Config,
    ctx: &WatchContext,
) -> impl Stream<Item = watcher::Event<K>> + Send + 'static + use<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let ctx = ctx.clone();
    ctx.synced.expect(kind);
    watcher::watcher(api, config.page_size(100))
        .backoff(backoff())
        .filter_map(move |event| {
            let ctx = ctx.clone();
            async move {
                match event {
                    Ok(event) => {
                        if matches!(event, watcher::Event::InitDone) {
                            if ctx.synced.done(kind) {
                                info!(kind, "first list received");
                            }
                            if let Some(api) = NeededApi::of_watch(kind) {
                                ctx.apis.present(api);
                            }
                        }
                        Some(event)
                    }
                    Err(e) => {
                        ctx.metrics.watch_restart(kind);
                        match NeededApi::of_watch(kind).filter(|_| not_found(&e)) {
                            Some(api) => ctx.apis.missing(api),
                            None => warn!(kind, error = %describe(&e), "watch failed; retrying"),
                        }
                        None
                    }
                }
            }
        })
}

/// kube-runtime's exponential backoff (with jitter), tuned to reconnect fast.
fn backoff() -> ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(RETRY_FIRST)
        .with_max_delay(RETRY_MAX)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into()
}

/// The API server does not serve the watched resource (its CRD is not installed).
fn not_found(error: &watcher::Error) -> bool {
    matches!(error, watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s)) if s.code == 404)
}

/// A watch error as a short sentence.
fn describe(error: &watcher::Error) -> String {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => crate::writer::describe(e),
        watcher::Error::WatchError(status) => format!("{} ({})", status.message, status.reason),
        other => other.to_string(),
    }
}

/// The same event, its object turned into something else.
pub fn map_event<K, T>(event: watcher::Event<K>, f: impl FnOnce(K) -> T) -> watcher::Event<T> {
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(f(o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(f(o)),
        watcher::Event::InitApply(o) => watcher::Event::InitApply(f(o)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// Drops what the controller never reads from a cached object (managed fields and the
/// client-side-apply copy of the whole object), which is most of its size.
pub fn slim<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
    if let Some(annotations) = obj.meta_mut().annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}
