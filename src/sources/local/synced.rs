//! Which watches have delivered their first complete list, for `/readyz` and for reconciles,
//! which wait until the caches they read can answer.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use tokio::sync::watch;

use failover_core::apis::WatchKind;

/// The first-list state of every watch, by kind.
#[derive(Clone, Debug)]
pub struct Synced {
    kinds: Arc<watch::Sender<BTreeMap<WatchKind, bool>>>,
}

impl Default for Synced {
    fn default() -> Self {
        Self {
            kinds: Arc::new(watch::Sender::new(BTreeMap::new())),
        }
    }
}

impl Synced {
    /// Registers a watch that has not listed yet.
    pub fn expect(&self, kind: WatchKind) {
        self.kinds.send_modify(|k| {
            k.entry(kind).or_insert(false);
        });
    }

    /// Records that a watch has listed; returns whether it had not before.
    pub fn done(&self, kind: WatchKind) -> bool {
        self.kinds
            .send_if_modified(|k| k.insert(kind, true) != Some(true))
    }

    /// The watches that have not listed yet.
    pub fn pending(&self) -> Vec<WatchKind> {
        self.kinds
            .borrow()
            .iter()
            .filter(|(_, done)| !**done)
            .map(|(kind, _)| *kind)
            .collect()
    }

    /// Whether all these watches have listed.
    pub fn all_done(&self, kinds: &[WatchKind]) -> bool {
        let listed = self.kinds.borrow();
        kinds.iter().all(|kind| listed.get(kind) == Some(&true))
    }

    /// Resolves when a watch lists (or starts), from the moment it is called.
    pub fn changed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.kinds.subscribe();
        async move {
            let _ = rx.changed().await;
        }
    }

    /// Waits up to `timeout` until these watches have listed; returns whether they have.
    pub async fn wait_for(&self, kinds: &[WatchKind], timeout: Duration) -> bool {
        let mut rx = self.kinds.subscribe();
        let all =
            |k: &BTreeMap<WatchKind, bool>| kinds.iter().all(|kind| k.get(kind) == Some(&true));
        tokio::time::timeout(timeout, rx.wait_for(all))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_kind_is_pending_until_its_first_list_is_done() {
        let synced = Synced::default();
        let inputs = WatchKind::DECISION_INPUTS;
        synced.expect(WatchKind::EndpointSlice);
        synced.expect(WatchKind::Service);
        assert_eq!(synced.pending(), inputs);
        synced.done(WatchKind::EndpointSlice);
        assert!(!synced.wait_for(&inputs, Duration::from_millis(10)).await);
        assert!(!synced.all_done(&inputs));
        synced.done(WatchKind::Service);
        assert!(synced.pending().is_empty());
        assert!(synced.all_done(&inputs));
        assert!(synced.wait_for(&inputs, Duration::from_millis(10)).await);
    }
}
