//! Which of the APIs the controller needs the cluster does not serve, as the watches find out
//! (a list answered with 404): the FailoverPolicy CRD always, a route kind's CRD when a policy
//! outputs that kind.
//!
//! Each missing API is named with how to install it: in one log line when it is found missing
//! (an ERROR for the FailoverPolicy CRD, without which nothing works; a WARN for a route API a
//! policy needs), repeated at most once a minute while it stays missing; in `/readyz`; in the
//! `failover_missing_api` metric; and, for a route API, in the `Ready` condition of every policy
//! that needs it. Watches keep retrying, so an API installed later is picked up without a
//! restart.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use parking_lot::Mutex;
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::runtime::metrics::Metrics;
use failover_core::apis::ApiState;
pub use failover_core::apis::NeededApi;

/// How often a missing API is named again in the log while it stays missing.
const LOG_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
struct State {
    missing: bool,
    logged: Option<Instant>,
}

/// What the watches found missing.
#[derive(Clone)]
pub struct Apis {
    states: Arc<Mutex<HashMap<NeededApi, State>>>,
    metrics: Arc<Metrics>,
    returned: Arc<watch::Sender<u64>>,
    /// Bumped when an API is first found missing.
    found_missing: Arc<watch::Sender<u64>>,
}

impl Apis {
    /// No API known to be missing yet.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            states: Arc::default(),
            metrics,
            returned: Arc::new(watch::Sender::new(0)),
            found_missing: Arc::new(watch::Sender::new(0)),
        }
    }

    /// A watch found its API missing.
    pub fn missing(&self, api: NeededApi) {
        let first = {
            let mut states = self.states.lock();
            let state = states.entry(api).or_default();
            !std::mem::replace(&mut state.missing, true)
        };
        self.metrics.set_missing_api(api.crd(), true);
        if first {
            self.found_missing.send_modify(|n| *n += 1);
        }
        match api {
            NeededApi::FailoverPolicy => self.log(api, |m| error!("{m}")),
            _ if first => info!(
                crd = api.crd(),
                "the CRD {} is not installed; policies that need it will say so",
                api.crd()
            ),
            _ => {}
        }
    }

    /// A watch listed its API: it is served.
    pub fn present(&self, api: NeededApi) {
        let was_missing = {
            let mut states = self.states.lock();
            states.remove(&api).is_some_and(|s| s.missing)
        };
        if was_missing {
            self.metrics.set_missing_api(api.crd(), false);
            info!(crd = api.crd(), "the CRD {} is installed now", api.crd());
            self.returned.send_modify(|n| *n += 1);
        }
    }

    /// Whether the API is known to be missing.
    pub fn is_missing(&self, api: NeededApi) -> bool {
        self.states.lock().get(&api).is_some_and(|s| s.missing)
    }

    /// Whether the API is served, as far as the controller knows.
    pub fn state(&self, api: NeededApi) -> ApiState {
        if self.is_missing(api) {
            ApiState::Missing
        } else {
            ApiState::Served
        }
    }

    /// A policy needs this API and it is missing: say so, at a bounded rate.
    pub fn needed(&self, api: NeededApi) {
        self.log(api, |m| warn!("{m}"));
    }

    /// The missing APIs among these, each as one sentence.
    pub fn missing_among(&self, apis: &[NeededApi]) -> Vec<String> {
        apis.iter()
            .filter(|a| self.is_missing(**a))
            .map(|a| a.missing_message())
            .collect()
    }

    /// Resolves when an API is found missing or comes back, from the moment it is called.
    pub fn changed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (mut missing, mut returned) =
            (self.found_missing.subscribe(), self.returned.subscribe());
        async move {
            tokio::select! {
                _ = missing.changed() => {}
                _ = returned.changed() => {}
            }
        }
    }

    /// Ticks each time a missing API turns up, so the policies that waited for it are queued.
    pub fn returned(&self) -> watch::Receiver<u64> {
        self.returned.subscribe()
    }

    fn log(&self, api: NeededApi, emit: impl FnOnce(&str)) {
        let due = {
            let mut states = self.states.lock();
            let state = states.entry(api).or_default();
            let due = state.logged.is_none_or(|t| t.elapsed() >= LOG_EVERY);
            if due {
                state.logged = Some(Instant::now());
            }
            due
        };
        if due {
            emit(&api.missing_message());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use failover_core::route::RouteKind;

    const TRAFFIC_SPLIT: NeededApi = NeededApi::Route(RouteKind::TrafficSplit);

    #[test]
    fn a_missing_api_is_named_at_most_once_a_minute_and_forgotten_once_served() {
        let apis = Apis::new(Arc::new(Metrics::new()));
        apis.missing(TRAFFIC_SPLIT);
        let mut said = Vec::new();
        for _ in 0..3 {
            apis.log(TRAFFIC_SPLIT, |m| said.push(m.to_string()));
        }
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(said[0].starts_with("the CRD trafficsplits.split.smi-spec.io is not installed"));
        assert_eq!(
            apis.missing_among(&[TRAFFIC_SPLIT, NeededApi::Route(RouteKind::HttpRoute)]),
            said
        );
        let returned = apis.returned();
        apis.present(TRAFFIC_SPLIT);
        assert!(!apis.is_missing(TRAFFIC_SPLIT));
        assert!(
            returned.has_changed().unwrap_or(false),
            "waiting policies are queued"
        );
    }
}
