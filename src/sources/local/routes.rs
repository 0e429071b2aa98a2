//! What each generated route in the cluster says, kept as a [`RouteView`] per route (owner,
//! label, version and normalized rules), never whole objects. Fed by the TrafficSplit and
//! HTTPRoute watches; read by [`crate::pipeline::gather`].

use std::collections::HashMap;

use kube::runtime::watcher;

use crate::route::{RouteKey, RouteKind, RouteView};

/// Every route of the watched scope, by kind, namespace and name.
#[derive(Debug, Default)]
pub struct RouteStore {
    views: HashMap<RouteKey, RouteView>,
    relist: HashMap<RouteKind, HashMap<RouteKey, RouteView>>,
}

impl RouteStore {
    /// What the cluster says of a route, if it exists.
    pub fn get(&self, key: &RouteKey) -> Option<&RouteView> {
        self.views.get(key)
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
            watcher::Event::Apply((key, view)) => self.set(key, view).into_iter().collect(),
            watcher::Event::Delete((key, _)) => {
                self.views.remove(&key).map(|_| key).into_iter().collect()
            }
            watcher::Event::Init => {
                self.relist.insert(kind, HashMap::new());
                Vec::new()
            }
            watcher::Event::InitApply((key, view)) => match self.relist.get_mut(&kind) {
                Some(buffer) => {
                    buffer.insert(key, view);
                    Vec::new()
                }
                None => self.set(key, view).into_iter().collect(),
            },
            watcher::Event::InitDone => self.replace(kind),
        }
    }

    fn set(&mut self, key: RouteKey, view: RouteView) -> Option<RouteKey> {
        (self.views.get(&key) != Some(&view)).then(|| {
            self.views.insert(key.clone(), view);
            key
        })
    }

    /// Ends a relist of one kind: routes of that kind not listed are gone.
    fn replace(&mut self, kind: RouteKind) -> Vec<RouteKey> {
        let listed = self.relist.remove(&kind).unwrap_or_default();
        let gone: Vec<RouteKey> = self
            .views
            .keys()
            .filter(|k| k.kind == kind && !listed.contains_key(*k))
            .cloned()
            .collect();
        for key in &gone {
            self.views.remove(key);
        }
        let mut changed = gone;
        for (key, view) in listed {
            changed.extend(self.set(key, view));
        }
        changed
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
            controller_uid: None,
            policy_label: None,
            resource_version: Some(version.into()),
            rules: None,
            answers: Vec::new(),
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
        store.apply(ts, watcher::Event::InitApply((key(ts, "b"), view("2"))));
        let mut changed = store.apply(ts, watcher::Event::InitDone);
        changed.sort();
        assert_eq!(changed, vec![key(ts, "a"), key(ts, "b")]);
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
