//! Backend readiness, kept as compact per-backend counts built from EndpointSlice and Service
//! watch events. Nothing is decided here: the counts are what the decision reads. A slice is
//! counted for the backend its label names, the label of the backend's kind
//! ([`BackendKind::of_slice`]); the Service watch says whether each Service backend exists.
//!
//! Only counts are kept, never whole objects: memory grows with the number of slices, not with
//! their size. A Service's endpoints are summed over its slices per address family and the
//! largest family counts, so a dual-stack Service (one IPv4 and one IPv6 slice listing the same
//! Pods) is not counted twice.

use std::collections::HashMap;

use indexmap::IndexMap;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher;
use smallvec::SmallVec;

use crate::sources::{namespaces::Namespaces, store::Relist};
pub use failover_core::endpoints::SERVICE_NAME_LABEL;
use failover_core::{
    backend::{BackendKey, BackendKind},
    digest::digest,
    endpoints::{self, SliceCounts},
    observation::BackendObservation,
};

/// One slice of a Service: a digest of its name, its counts, and the relist of the slice watch
/// that last listed it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Slice {
    name: u64,
    counts: SliceCounts,
    listed: Relist,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct ServiceEntry {
    exists: bool,
    /// The relist of the Service watch that last listed it.
    listed: Relist,
    /// Each slice: a Service has one or a few, and one is held without an allocation.
    slices: SmallVec<[Slice; 1]>,
}

impl ServiceEntry {
    fn set_slice(&mut self, name: &str, counts: SliceCounts, listed: Relist) {
        let name = digest(name);
        match self.slices.iter_mut().find(|s| s.name == name) {
            Some(slice) => {
                slice.counts = counts;
                slice.listed = listed;
            }
            None => {
                self.slices.push(Slice {
                    name,
                    counts,
                    listed,
                });
            }
        }
    }

    fn remove_slice(&mut self, name: &str) {
        let name = digest(name);
        self.slices.retain(|s| s.name != name);
    }

    fn has_slice(&self, name: &str) -> bool {
        let name = digest(name);
        self.slices.iter().any(|s| s.name == name)
    }
}

impl ServiceEntry {
    fn observation(&self) -> BackendObservation {
        endpoints::observe(self.exists, self.slices.iter().map(|s| &s.counts))
    }

    fn is_empty(&self) -> bool {
        !self.exists && self.slices.is_empty()
    }
}

fn slice_id(namespace: &str, slice: &str) -> Box<str> {
    format!("{namespace}/{slice}").into()
}

/// The Service a slice's name says it belongs to: the EndpointSlice controller names each slice
/// `<service>-<suffix>`.
fn named_service(slice: &str) -> Option<&str> {
    slice.rsplit_once('-').map(|(service, _)| service)
}

/// The backend a slice belongs to, its name and its counts; `None` without a backend kind's
/// label.
fn counted(
    slice: &EndpointSlice,
    namespaces: &Namespaces,
) -> Option<(BackendKey, String, SliceCounts)> {
    let ns = slice.metadata.namespace.as_deref()?;
    let name = slice.metadata.name.clone()?;
    let (kind, backend) = BackendKind::of_slice(slice.metadata.labels.as_ref()?)?;
    Some((
        BackendKey::in_namespace(kind, namespaces.intern(ns), backend),
        name,
        SliceCounts::of(slice),
    ))
}

/// Readiness of every Service in the watched scope.
///
/// Which Service a slice is counted for is what its name says (see [`named_service`]), unless
/// `moved` says otherwise: only a slice whose Service differs from its name (one not named by
/// the EndpointSlice controller, or relabelled) costs an entry; a slice named for its Service
/// costs none, as its name already says it.
///
/// A relist (of slices or of Services) is applied in place, never buffered, as the one
/// [`crate::sources::store::Store`] applies it: each listed object updates its entry at once and
/// is stamped with the relist ([`Relist`]), and when the list ends, what it did not stamp is
/// gone. The entries are nested (a Service and its slices, fed by two watches), so they are not
/// a `Store` of their own. A buffered relist held every slice's counts and every
/// Service's key a second time, with a copy of every observation to compare against.
#[derive(Debug, Default)]
pub struct ReadinessStore {
    services: IndexMap<BackendKey, ServiceEntry>,
    /// The backend a slice (by `namespace/slice`) is counted for, when its name says another.
    moved: HashMap<Box<str>, (BackendKind, Box<str>)>,
    /// The number of the slice watch's relist running or last run.
    slice_relist: Relist,
    /// The number of the Service watch's relist running or last run.
    service_relist: Relist,
    /// The names the keys share.
    namespaces: Namespaces,
}

impl ReadinessStore {
    /// An empty store whose keys share the names of `namespaces`.
    pub fn new(namespaces: Namespaces) -> Self {
        Self {
            namespaces,
            ..Self::default()
        }
    }

    /// What is known of one backend.
    pub fn observe(&self, backend: &BackendKey) -> BackendObservation {
        self.services
            .get(backend)
            .map(ServiceEntry::observation)
            .unwrap_or_default()
    }

    /// Number of Services tracked.
    pub fn len(&self) -> usize {
        self.services.len()
    }

    /// No Service is tracked.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    /// Applies one EndpointSlice watch event; returns the backends whose observation changed.
    pub fn apply_slice_event(&mut self, event: watcher::Event<EndpointSlice>) -> Vec<BackendKey> {
        match event {
            watcher::Event::Apply(slice) | watcher::Event::InitApply(slice) => {
                self.upsert_slice(&slice)
            }
            watcher::Event::Delete(slice) => {
                let (Some(ns), Some(name)) = (
                    slice.metadata.namespace.as_deref(),
                    slice.metadata.name.as_deref(),
                ) else {
                    return Vec::new();
                };
                self.remove_slice(ns, name).into_iter().collect()
            }
            watcher::Event::Init => {
                self.slice_relist.begin();
                Vec::new()
            }
            watcher::Event::InitDone => self.drop_unlisted_slices(),
        }
    }

    /// Applies one Service (metadata) watch event; returns the Services whose observation changed.
    pub fn apply_service_event<M: kube::Resource>(
        &mut self,
        event: watcher::Event<M>,
    ) -> Vec<BackendKey> {
        let namespaces = self.namespaces.clone();
        let key_of = |m: &M| {
            Some(BackendKey::in_namespace(
                BackendKind::Service,
                namespaces.intern(m.meta().namespace.as_deref()?),
                m.meta().name.as_deref()?,
            ))
        };
        match event {
            watcher::Event::Apply(svc) | watcher::Event::InitApply(svc) => key_of(&svc)
                .and_then(|k| self.set_exists(k, true))
                .into_iter()
                .collect(),
            watcher::Event::Delete(svc) => key_of(&svc)
                .and_then(|k| self.set_exists(k, false))
                .into_iter()
                .collect(),
            watcher::Event::Init => {
                self.service_relist.begin();
                Vec::new()
            }
            watcher::Event::InitDone => {
                let relist = self.service_relist;
                let gone: Vec<BackendKey> = self
                    .services
                    .iter()
                    .filter(|(k, e)| {
                        k.kind == BackendKind::Service && e.exists && !relist.listed(e.listed)
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                gone.into_iter()
                    .filter_map(|k| self.set_exists(k, false))
                    .collect()
            }
        }
    }

    fn set_exists(&mut self, key: BackendKey, exists: bool) -> Option<BackendKey> {
        let listed = self.service_relist;
        let entry = self.services.entry(key.clone()).or_default();
        entry.listed = listed;
        if entry.exists == exists {
            if entry.is_empty() {
                self.services.swap_remove(&key);
            }
            return None;
        }
        entry.exists = exists;
        if entry.is_empty() {
            self.services.swap_remove(&key);
        }
        Some(key)
    }

    fn upsert_slice(&mut self, slice: &EndpointSlice) -> Vec<BackendKey> {
        let (Some(ns), Some(slice_name)) = (
            slice.metadata.namespace.as_deref(),
            slice.metadata.name.as_deref(),
        ) else {
            return Vec::new();
        };
        let counted = counted(slice, &self.namespaces);
        let service = counted.as_ref().map(|(service, _, _)| service.clone());
        let mut changed = Vec::new();
        // A slice whose label changed (or was removed) leaves its old backend.
        if let Some(old) = self.counted_for(ns, slice_name)
            && service.as_ref().is_none_or(|s| *s != old)
        {
            changed.extend(self.remove_slice(ns, slice_name));
        }
        let Some((service, _, counts)) = counted else {
            return changed;
        };
        let listed = self.slice_relist;
        let entry = self.services.entry(service.clone()).or_default();
        let before = entry.observation();
        entry.set_slice(slice_name, counts, listed);
        let after = entry.observation();
        if named_service(slice_name) != Some(&*service.name) {
            self.moved.insert(
                slice_id(ns, slice_name),
                (service.kind, service.name.as_str().into()),
            );
        }
        if before != after {
            changed.push(service);
        }
        changed
    }

    /// The backend a slice is counted for, if it is.
    fn counted_for(&self, namespace: &str, slice_name: &str) -> Option<BackendKey> {
        if !self.moved.is_empty()
            && let Some((kind, backend)) = self.moved.get(&*slice_id(namespace, slice_name))
        {
            return Some(BackendKey::new(*kind, namespace, backend));
        }
        let named = named_service(slice_name)?;
        BackendKind::ALL.into_iter().find_map(|kind| {
            let backend = BackendKey::new(kind, namespace, named);
            self.services
                .get(&backend)?
                .has_slice(slice_name)
                .then_some(backend)
        })
    }

    fn remove_slice(&mut self, namespace: &str, slice_name: &str) -> Option<BackendKey> {
        let service = self.counted_for(namespace, slice_name)?;
        if !self.moved.is_empty() {
            self.moved.remove(&*slice_id(namespace, slice_name));
        }
        let entry = self.services.get_mut(&service)?;
        let before = entry.observation();
        entry.remove_slice(slice_name);
        let after = entry.observation();
        if entry.is_empty() {
            self.services.swap_remove(&service);
        }
        (before != after).then_some(service)
    }

    /// Ends a relist of the slices: the slices it did not list are gone; returns the Services
    /// that changed.
    fn drop_unlisted_slices(&mut self) -> Vec<BackendKey> {
        let relist = self.slice_relist;
        let mut changed = Vec::new();
        for (key, entry) in &mut self.services {
            if entry.slices.iter().all(|s| relist.listed(s.listed)) {
                continue;
            }
            let before = entry.observation();
            entry.slices.retain(|s| relist.listed(s.listed));
            if entry.observation() != before {
                changed.push(key.clone());
            }
        }
        self.services.retain(|_, e| !e.is_empty());
        let services = &self.services;
        self.moved.retain(|id, (kind, backend)| {
            id.split_once('/').is_some_and(|(namespace, slice)| {
                services
                    .get(&BackendKey::new(*kind, namespace, backend))
                    .is_some_and(|e| e.has_slice(slice))
            })
        });
        changed
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};
    use kube::api::ObjectMeta;

    use super::*;

    fn slice(name: &str, service: &str, family: &str, ready: &[Option<bool>]) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                labels: Some([(SERVICE_NAME_LABEL.to_string(), service.to_string())].into()),
                ..Default::default()
            },
            address_type: family.into(),
            endpoints: ready
                .iter()
                .map(|r| Endpoint {
                    addresses: vec!["10.0.0.1".into()],
                    conditions: Some(EndpointConditions {
                        ready: *r,
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn synced() -> ReadinessStore {
        let mut store = ReadinessStore::default();
        store.apply_slice_event(watcher::Event::Init);
        store.apply_slice_event(watcher::Event::InitDone);
        store
    }

    #[test]
    fn sums_ready_endpoints_over_slices_and_counts_unset_as_ready() {
        let mut store = synced();
        store.apply_slice_event(watcher::Event::Apply(slice(
            "a-1",
            "a",
            "IPv4",
            &[Some(true), None],
        )));
        let changed = store.apply_slice_event(watcher::Event::Apply(slice(
            "a-2",
            "a",
            "IPv4",
            &[Some(false)],
        )));
        assert_eq!(changed, vec![BackendKey::service("ns", "a")]);
        let o = store.observe(&BackendKey::service("ns", "a"));
        assert_eq!((o.ready_endpoints, o.total_endpoints, o.slices), (2, 3, 2));
    }

    #[test]
    fn terminating_endpoints_are_counted_apart() {
        let mut leaving = slice("a-1", "a", "IPv4", &[Some(true), Some(false), Some(false)]);
        if let Some(conditions) = leaving.endpoints[2].conditions.as_mut() {
            conditions.terminating = Some(true);
        }
        let o = endpoints::observe_service(true, &[leaving]);
        assert_eq!(
            (
                o.ready_endpoints,
                o.total_endpoints,
                o.terminating_endpoints
            ),
            (1, 3, 1)
        );
    }

    #[test]
    fn dual_stack_slices_are_not_counted_twice() {
        let mut store = synced();
        store.apply_slice_event(watcher::Event::Apply(slice(
            "a-4",
            "a",
            "IPv4",
            &[Some(true), Some(true)],
        )));
        store.apply_slice_event(watcher::Event::Apply(slice(
            "a-6",
            "a",
            "IPv6",
            &[Some(true), Some(true)],
        )));
        assert_eq!(
            store
                .observe(&BackendKey::service("ns", "a"))
                .ready_endpoints,
            2
        );
    }

    #[test]
    fn unchanged_counts_report_no_change() {
        let mut store = synced();
        store.apply_slice_event(watcher::Event::Apply(slice(
            "a-1",
            "a",
            "IPv4",
            &[Some(true)],
        )));
        let changed = store.apply_slice_event(watcher::Event::Apply(slice(
            "a-1",
            "a",
            "IPv4",
            &[Some(true)],
        )));
        assert!(changed.is_empty());
    }

    #[test]
    fn deleting_last_slice_empties_the_service() {
        let mut store = synced();
        store.apply_slice_event(watcher::Event::Apply(slice(
            "a-1",
            "a",
            "IPv4",
            &[Some(true)],
        )));
        let changed =
            store.apply_slice_event(watcher::Event::Delete(slice("a-1", "a", "IPv4", &[])));
        assert_eq!(changed.len(), 1);
        assert_eq!(
            store.observe(&BackendKey::service("ns", "a")),
            BackendObservation::default()
        );
        assert!(store.is_empty());
    }

    #[test]
    fn a_relist_applies_each_slice_at_once_and_drops_the_unlisted_at_its_end() {
        let mut store = synced();
        let ready =
            |name: &str, service: &str, ready: bool| slice(name, service, "IPv4", &[Some(ready)]);
        store.apply_slice_event(watcher::Event::Apply(ready("a-1", "a", true)));
        store.apply_slice_event(watcher::Event::Apply(ready("b-1", "b", true)));
        store.apply_slice_event(watcher::Event::Init);
        assert!(
            store
                .apply_slice_event(watcher::Event::InitApply(ready("a-1", "a", true)))
                .is_empty(),
            "an unchanged slice changes nothing"
        );
        assert_eq!(
            store.apply_slice_event(watcher::Event::InitApply(ready("c-1", "c", false))),
            vec![BackendKey::service("ns", "c")],
            "a listed slice counts at once"
        );
        // A slice not listed yet still counts until the list ends.
        assert_eq!(
            store
                .observe(&BackendKey::service("ns", "b"))
                .ready_endpoints,
            1
        );
        let changed = store.apply_slice_event(watcher::Event::InitDone);
        assert_eq!(changed, vec![BackendKey::service("ns", "b")]);
        assert_eq!(
            store
                .observe(&BackendKey::service("ns", "b"))
                .ready_endpoints,
            0
        );
        assert_eq!(
            store
                .observe(&BackendKey::service("ns", "a"))
                .ready_endpoints,
            1
        );
        // The dropped slice is forgotten: listed again, it counts again.
        assert_eq!(
            store.apply_slice_event(watcher::Event::Apply(ready("b-1", "b", true))),
            vec![BackendKey::service("ns", "b")]
        );
    }

    #[test]
    fn service_existence_is_tracked() {
        use k8s_openapi::api::core::v1::Service;
        let mut store = synced();
        let svc = Service {
            metadata: ObjectMeta {
                name: Some("a".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let named = |name: &str| Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..svc.metadata.clone()
            },
            ..Default::default()
        };
        store.apply_service_event::<Service>(watcher::Event::Init);
        let changed = store.apply_service_event(watcher::Event::InitApply(svc.clone()));
        assert_eq!(changed, vec![BackendKey::service("ns", "a")], "at once");
        store.apply_service_event(watcher::Event::InitApply(named("b")));
        assert!(
            store
                .apply_service_event::<Service>(watcher::Event::InitDone)
                .is_empty()
        );
        assert!(
            store
                .observe(&BackendKey::service("ns", "a"))
                .service_exists
        );
        store.apply_service_event(watcher::Event::Delete(svc));
        assert!(
            !store
                .observe(&BackendKey::service("ns", "a"))
                .service_exists
        );
        // A relist that no longer lists b: b is gone when it ends.
        store.apply_service_event::<Service>(watcher::Event::Init);
        assert!(
            store
                .observe(&BackendKey::service("ns", "b"))
                .service_exists
        );
        let changed = store.apply_service_event::<Service>(watcher::Event::InitDone);
        assert_eq!(changed, vec![BackendKey::service("ns", "b")]);
        assert!(
            !store
                .observe(&BackendKey::service("ns", "b"))
                .service_exists
        );
    }

    #[test]
    fn slice_moving_to_another_service_leaves_the_old_one() {
        let mut store = synced();
        store.apply_slice_event(watcher::Event::Apply(slice(
            "x",
            "a",
            "IPv4",
            &[Some(true)],
        )));
        let mut changed = store.apply_slice_event(watcher::Event::Apply(slice(
            "x",
            "b",
            "IPv4",
            &[Some(true)],
        )));
        changed.sort();
        assert_eq!(
            changed,
            vec![
                BackendKey::service("ns", "a"),
                BackendKey::service("ns", "b")
            ]
        );
        assert_eq!(
            store
                .observe(&BackendKey::service("ns", "a"))
                .ready_endpoints,
            0
        );
    }

    #[test]
    fn a_slice_named_for_its_service_costs_no_entry_and_still_moves_and_goes() {
        let mut store = synced();
        let one = |service: &str| slice("web-x1", service, "IPv4", &[Some(true)]);
        store.apply_slice_event(watcher::Event::Apply(one("web")));
        assert!(store.moved.is_empty(), "the name says the Service");
        assert_eq!(
            store
                .observe(&BackendKey::service("ns", "web"))
                .ready_endpoints,
            1
        );

        store.apply_slice_event(watcher::Event::Apply(one("api")));
        assert_eq!(
            store
                .observe(&BackendKey::service("ns", "web"))
                .ready_endpoints,
            0
        );
        assert_eq!(
            store
                .observe(&BackendKey::service("ns", "api"))
                .ready_endpoints,
            1
        );
        assert_eq!(
            store.moved.len(),
            1,
            "relabelled: its Service is remembered"
        );

        store.apply_slice_event(watcher::Event::Apply(one("web")));
        assert_eq!(
            store
                .observe(&BackendKey::service("ns", "api"))
                .ready_endpoints,
            0
        );
        assert_eq!(
            store
                .observe(&BackendKey::service("ns", "web"))
                .ready_endpoints,
            1
        );
        assert!(store.moved.is_empty());

        let changed = store.apply_slice_event(watcher::Event::Delete(one("web")));
        assert_eq!(changed, vec![BackendKey::service("ns", "web")]);
        assert!(store.is_empty());
    }
}
