//! What each generated route in the cluster says, kept as a [`RouteView`] per route (owner,
//! label, version and a digest of its rules), never whole objects. Fed by the TrafficSplit and
//! HTTPRoute watches; read by [`crate::pipeline::gather`].

use std::collections::HashMap;

use kube::runtime::watcher;

use crate::route::{RouteKey, RouteKind, RouteView};

/// Every route of the watched scope, by kind, namespace and name.
///
/// A relist is applied in place: each listed route replaces its view at once and is stamped with
/// the relist's number (one count per kind); when the list ends, the routes of that kind it did
/// not stamp are gone. Nothing is held twice.
#[derive(Debug, Default)]
pub struct RouteStore {
    views: HashMap<RouteKey, (RouteView, u32)>,
    relists: HashMap<RouteKind, u32>,
}

impl RouteStore {
    /// What the cluster says of a route, if it exists.
    pub fn get(&self, key: &RouteKey) -> Option<&RouteView> {
        self.views.get(key).map(|(view, _)| view)
    }

    /// Number of routes kept.
    pub fn len(&self) -> usize {
        self.views.len()
    }

    /// No route is kept.
    pub fn is_empty(&self) -> bool {
        self.views.is_empty()
    }

    /// Applies one watch event of routes of one kind, each already turned into its key and
    /// view; returns the routes that changed.
    pub fn apply(
        &mut self,
        kind: RouteKind,
        event: watcher::Event<(RouteKey, RouteView)>,
    ) -> Vec<RouteKey> {
        match event {
            watcher::Event::Apply((key, view)) | watcher::Event::InitApply((key, view)) => {
                self.set(key, view).into_iter().collect()
            }
            watcher::Event::Delete((key, _)) => {
                self.views.remove(&key).map(|_| key).into_iter().collect()
            }
            watcher::Event::Init => {
                let relist = self.relists.entry(kind).or_default();
                *relist = relist.wrapping_add(1);
                Vec::new()
            }
            watcher::Event::InitDone => self.drop_unlisted(kind),
        }
    }

    fn set(&mut self, key: RouteKey, view: RouteView) -> Option<RouteKey> {
        let relist = self.relists.get(&key.kind).copied().unwrap_or_default();
        match self.views.get_mut(&key) {
            Some((old, listed)) => {
                *listed = relist;
                (*old != view).then(|| {
                    *old = view;
                    key
                })
            }
            None => {
                self.views.insert(key.clone(), (view, relist));
                Some(key)
            }
        }
    }

    /// Ends a relist of one kind: routes of that kind not listed are gone.
    fn drop_unlisted(&mut self, kind: RouteKind) -> Vec<RouteKey> {
        let relist = self.relists.get(&kind).copied().unwrap_or_default();
        let mut gone = Vec::new();
        self.views.retain(|key, (_, listed)| {
            let kept = key.kind != kind || *listed == relist;
            if !kept {
                gone.push(key.clone());
            }
            kept
        });
        gone
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
            store.apply(ts, watcher::Event::InitApply((key(ts, "b"), view("2")))),
            vec![key(ts, "b")],
            "a listed route is in place at once"
        );
        assert!(store.get(&key(ts, "a")).is_some(), "until the list ends");
        let changed = store.apply(ts, watcher::Event::InitDone);
        assert_eq!(changed, vec![key(ts, "a")]);
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
                .is_empty()
        );
        assert_eq!(store.len(), 1);
    }
}
