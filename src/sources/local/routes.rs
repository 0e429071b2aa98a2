//! What each generated route in the cluster says, kept as a [`RouteView`] per route (owner,
//! label, version and a digest of its rules), never whole objects. Fed by the watch of each route
//! kind, one [`Store`] per kind; read by [`crate::pipeline::gather`].

use kube::runtime::watcher;

use crate::sources::store::{EntryChange, Keep, Store};
use failover_core::route::{RouteKey, RouteKind, RouteView};

/// A route is kept as its view, already made by the watch.
struct Views;

impl Keep<(RouteKey, RouteView)> for Views {
    type Key = RouteKey;
    type Entry = RouteView;

    fn key(&self, (key, _): &(RouteKey, RouteView)) -> Option<RouteKey> {
        Some(key.clone())
    }

    fn version(&self, (_, view): &(RouteKey, RouteView)) -> Option<u64> {
        view.resource_version
    }

    fn unchanged(&self, held: &RouteView, (_, view): &(RouteKey, RouteView)) -> bool {
        held == view
    }

    fn entry(&mut self, (_, view): (RouteKey, RouteView)) -> RouteView {
        view
    }
}

/// Every route of the watched scope, by kind, namespace and name: one [`Store`] per kind, in
/// the order of [`RouteKind::ALL`].
#[derive(Debug, Default)]
pub struct RouteStore {
    kinds: [Store<RouteKey, RouteView>; RouteKind::ALL.len()],
}

impl RouteStore {
    fn of(&self, kind: RouteKind) -> &Store<RouteKey, RouteView> {
        &self.kinds[kind.index()]
    }

    /// What the cluster says of a route, if it exists.
    pub fn get(&self, key: &RouteKey) -> Option<&RouteView> {
        self.of(key.kind).get(key)
    }

    /// Number of routes kept.
    pub fn len(&self) -> usize {
        self.kinds.iter().map(Store::len).sum()
    }

    /// No route is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Applies one watch event of routes of one kind, each already turned into its key and
    /// view; returns the routes that changed, and the version through which the store has every
    /// event of that kind's watch, when this event moved it.
    pub fn apply(
        &mut self,
        kind: RouteKind,
        event: watcher::Event<(RouteKey, RouteView)>,
    ) -> (Vec<RouteKey>, Option<u64>) {
        let applied = self.kinds[kind.index()].apply(event, &mut Views);
        let changed = applied
            .changes
            .into_iter()
            .map(|change| match change {
                EntryChange::Upserted { key, .. } | EntryChange::Deleted { key, .. } => key,
            })
            .collect();
        (changed, applied.complete_through)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kind: RouteKind, name: &str) -> RouteKey {
        RouteKey {
            kind,
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn view(version: &str) -> RouteView {
        RouteView {
            resource_version: version.parse().ok(),
            ..RouteView::default()
        }
    }

    #[test]
    fn a_relist_of_one_kind_drops_only_its_own_missing_routes() {
        let mut store = RouteStore::default();
        let ts = RouteKind::TrafficSplit;
        let hr = RouteKind::HttpRoute;
        store.apply(ts, watcher::Event::Apply((key(ts, "a"), view("1"))));
        store.apply(hr, watcher::Event::Apply((key(hr, "a"), view("1"))));
        store.apply(ts, watcher::Event::Init);
        assert_eq!(
            store
                .apply(ts, watcher::Event::InitApply((key(ts, "b"), view("2"))))
                .0,
            vec![key(ts, "b")],
            "a listed route is in place at once"
        );
        assert!(store.get(&key(ts, "a")).is_some(), "until the list ends");
        let (changed, complete_through) = store.apply(ts, watcher::Event::InitDone);
        assert_eq!(changed, vec![key(ts, "a")]);
        assert_eq!(complete_through, Some(2));
        assert!(store.get(&key(ts, "a")).is_none());
        assert!(store.get(&key(hr, "a")).is_some(), "other kinds are kept");
    }

    #[test]
    fn an_unchanged_route_reports_no_change() {
        let mut store = RouteStore::default();
        let ts = RouteKind::TrafficSplit;
        store.apply(ts, watcher::Event::Apply((key(ts, "a"), view("1"))));
        assert!(
            store
                .apply(ts, watcher::Event::Apply((key(ts, "a"), view("1"))))
                .0
                .is_empty()
        );
        assert_eq!(store.len(), 1);
    }
}
