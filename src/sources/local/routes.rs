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
        own_write: impl Fn(&RouteKey, &RouteView) -> bool,
    ) -> Applied {
        let store = &mut self.kinds[kind.index()];
        let applied = store.apply(event, &mut Views);
        let mut changed = Vec::with_capacity(applied.changes.len());
        let mut echoes = 0;
        for change in applied.changes {
            match change {
                EntryChange::Upserted {
                    key,
                    previous: Some(before),
                } if store
                    .get(&key)
                    .is_some_and(|now| now.only_rules_differ(&before) && own_write(&key, now)) =>
                {
                    echoes += 1;
                }
                EntryChange::Upserted { key, .. } | EntryChange::Deleted { key, .. } => {
                    changed.push(key);
                }
            }
        }
        Applied {
            changed,
            echoes,
            complete_through: applied.complete_through,
        }
    }
}

/// What one watch event changed in a kind's routes.
#[derive(Debug, Default, PartialEq)]
pub struct Applied {
    /// The routes changed: their policies are woken.
    pub changed: Vec<RouteKey>,
    /// How many changes only delivered this replica's own write of a route's rules (`own_write`
    /// said so), with nothing else of the route changed: they wake nobody.
    pub echoes: usize,
    /// The version through which the watch has delivered every event, when it says.
    pub complete_through: Option<u64>,
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

    /// Applies an event that is nobody's own write.
    fn apply(
        store: &mut RouteStore,
        kind: RouteKind,
        event: watcher::Event<(RouteKey, RouteView)>,
    ) -> Applied {
        store.apply(kind, event, |_, _| false)
    }

    #[test]
    fn a_relist_of_one_kind_drops_only_its_own_missing_routes() {
        let mut store = RouteStore::default();
        let ts = RouteKind::TrafficSplit;
        let hr = RouteKind::HttpRoute;
        apply(
            &mut store,
            ts,
            watcher::Event::Apply((key(ts, "a"), view("1"))),
        );
        apply(
            &mut store,
            hr,
            watcher::Event::Apply((key(hr, "a"), view("1"))),
        );
        apply(&mut store, ts, watcher::Event::Init);
        assert_eq!(
            apply(
                &mut store,
                ts,
                watcher::Event::InitApply((key(ts, "b"), view("2")))
            )
            .changed,
            vec![key(ts, "b")],
            "a listed route is in place at once"
        );
        assert!(store.get(&key(ts, "a")).is_some(), "until the list ends");
        let applied = apply(&mut store, ts, watcher::Event::InitDone);
        assert_eq!(applied.changed, vec![key(ts, "a")]);
        assert_eq!(applied.complete_through, Some(2));
        assert!(store.get(&key(ts, "a")).is_none());
        assert!(store.get(&key(hr, "a")).is_some(), "other kinds are kept");
    }

    #[test]
    fn an_unchanged_route_reports_no_change() {
        let mut store = RouteStore::default();
        let ts = RouteKind::TrafficSplit;
        apply(
            &mut store,
            ts,
            watcher::Event::Apply((key(ts, "a"), view("1"))),
        );
        assert!(
            apply(
                &mut store,
                ts,
                watcher::Event::Apply((key(ts, "a"), view("1")))
            )
            .changed
            .is_empty()
        );
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn a_routes_own_write_wakes_nobody_and_anything_else_changed_with_it_does() {
        let mut store = RouteStore::default();
        let ts = RouteKind::TrafficSplit;
        let own = |_: &RouteKey, view: &RouteView| view.resource_version == Some(2);
        store.apply(ts, watcher::Event::Apply((key(ts, "a"), view("1"))), own);
        let written = store.apply(ts, watcher::Event::Apply((key(ts, "a"), view("2"))), own);
        assert_eq!((written.changed.len(), written.echoes), (0, 1));
        assert_eq!(
            store.get(&key(ts, "a")).and_then(|v| v.resource_version),
            Some(2),
            "the store holds it all the same"
        );
        let relabelled = RouteView {
            policy_label: Some(7),
            ..view("2")
        };
        let edited = store.apply(ts, watcher::Event::Apply((key(ts, "a"), relabelled)), own);
        assert_eq!(
            (edited.changed, edited.echoes),
            (vec![key(ts, "a")], 0),
            "a label changed with it: not only the write"
        );
        let created = store.apply(ts, watcher::Event::Apply((key(ts, "b"), view("2"))), own);
        assert_eq!(
            (created.changed, created.echoes),
            (vec![key(ts, "b")], 0),
            "a route created wakes its policy"
        );
    }
}
