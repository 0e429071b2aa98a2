//! Step 1 of the pipeline: one helper for every watch of the controller: list then watch, with
//! kube-runtime's backoff on errors, and what happens reported to a [`Report`]: for the local
//! cluster, first lists in [`Synced`], missing CRDs and errors in the log and metrics; for a
//! remote cluster, its liveness.
//! Each watch then feeds its own consumer (a readiness count, a route view, the policy store).

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

/// Where a watch reports what happens to it.
pub trait Report: Send + Sync {
    /// The watch is about to start.
    fn starting(&self, _kind: &'static str) {}
    /// An event arrived (the API server answers).
    fn event(&self, _kind: &'static str) {}
    /// A complete list arrived.
    fn listed(&self, kind: &'static str);
    /// The watch failed; it retries with backoff.
    fn failed(&self, kind: &'static str, error: &watcher::Error);
}

/// The local cluster's watches: first lists in [`Synced`], missing CRDs in [`Apis`], errors in
/// the metrics and the log.
#[derive(Clone)]
pub struct WatchContext {
    /// Counters of watch restarts.
    pub metrics: Arc<Metrics>,
    /// First-list state of every watch.
    pub synced: Synced,
    /// The APIs found missing.
    pub apis: Apis,
}

impl Report for WatchContext {
    fn starting(&self, kind: &'static str) {
        self.synced.expect(kind);
    }

    fn listed(&self, kind: &'static str) {
        if self.synced.done(kind) {
            info!(kind, "first list received");
        }
        if let Some(api) = NeededApi::of_watch(kind) {
            self.apis.present(api);
        }
    }

    fn failed(&self, kind: &'static str, error: &watcher::Error) {
        self.metrics.watch_restart(kind);
        match NeededApi::of_watch(kind).filter(|_| not_found(error)) {
            Some(api) => self.apis.missing(api),
            None => warn!(kind, error = %describe(error), "watch failed; retrying"),
        }
    }
}

/// The events of one watch, errors reported and retried: the stream never ends on its own.
///
/// Initial lists come in pages of 100 objects, so the start-up peak of memory (one page of JSON
/// and its decoded objects at a time) stays small.
pub fn events<K>(
    api: Api<K>,
    kind: &'static str,
    config: watcher::Config,
    report: Arc<dyn Report>,
) -> impl Stream<Item = watcher::Event<K>> + Send + 'static + use<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    report.starting(kind);
    watcher::watcher(api, config.page_size(100))
        .backoff(backoff())
        .filter_map(move |event| {
            let report = report.clone();
            async move {
                match event {
                    Ok(event) => {
                        // `Init` comes before the list is even asked for: it is no answer.
                        if !matches!(event, watcher::Event::Init) {
                            report.event(kind);
                        }
                        if matches!(event, watcher::Event::InitDone) {
                            report.listed(kind);
                        }
                        Some(event)
                    }
                    Err(e) => {
                        report.failed(kind, &e);
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
pub fn describe(error: &watcher::Error) -> String {
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
