//! Backend readiness, kept as compact per-Service counts built from EndpointSlice and Service
//! watch events. Nothing is decided here: the counts are what the decision reads.
//!
//! Only counts are kept, never whole objects: memory grows with the number of slices, not with
//! their size. A Service's endpoints are summed over its slices per address family and the
//! largest family counts, so a dual-stack Service (one IPv4 and one IPv6 slice listing the same
//! Pods) is not counted twice.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher;

use crate::observation::{BackendObservation, ServiceKey};

/// Label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Endpoint counts of one EndpointSlice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SliceCounts {
    ipv6: bool,
    ready: i32,
    total: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct ServiceEntry {
    exists: bool,
    /// Each slice's name and counts (a Service has one or a few slices).
    slices: Vec<(Box<str>, SliceCounts)>,
}

impl ServiceEntry {
    fn set_slice(&mut self, name: &str, counts: SliceCounts) {
        match self.slices.iter_mut().find(|(n, _)| **n == *name) {
            Some((_, c)) => *c = counts,
            None => {
                // Most Services have one slice: room for exactly the ones they have.
                self.slices.reserve_exact(1);
                self.slices.push((name.into(), counts));
            }
        }
    }

    fn remove_slice(&mut self, name: &str) {
        self.slices.retain(|(n, _)| **n != *name);
    }
}

impl ServiceEntry {
    fn observation(&self) -> BackendObservation {
        let (mut ready4, mut total4, mut ready6, mut total6) = (0i32, 0i32, 0i32, 0i32);
        for (_, c) in &self.slices {
            if c.ipv6 {
                ready6 = ready6.saturating_add(c.ready);
                total6 = total6.saturating_add(c.total);
            } else {
                ready4 = ready4.saturating_add(c.ready);
                total4 = total4.saturating_add(c.total);
            }
        }
        let (ready_endpoints, total_endpoints) = if (ready6, total6) > (ready4, total4) {
            (ready6, total6)
        } else {
            (ready4, total4)
        };
        BackendObservation {
            service_exists: self.exists,
            slices: u32::try_from(self.slices.len()).unwrap_or(u32::MAX),
            ready_endpoints,
            total_endpoints,
            unavailable: None,
            refused: false,
            as_of: None,
            awaiting: false,
            health: None,
        }
    }

    fn is_empty(&self) -> bool {
        !self.exists && self.slices.is_empty()
    }
}

/// Counts ready and total endpoints of one slice. An endpoint is ready when its `ready`
/// condition is true or unset, as the EndpointSlice API defines.
fn slice_counts(slice: &EndpointSlice) -> SliceCounts {
    let endpoints = slice.endpoints.as_slice();
    let ready = endpoints
        .iter()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .count();
    SliceCounts {
        ipv6: slice.address_type == "IPv6",
        ready: i32::try_from(ready).unwrap_or(i32::MAX),
        total: i32::try_from(endpoints.len()).unwrap_or(i32::MAX),
    }
}

fn slice_id(namespace: &str, slice: &str) -> Box<str> {
    format!("{namespace}/{slice}").into()
}

/// The Service a slice belongs to, its name and its counts; `None` without the service label.
fn counted(slice: &EndpointSlice) -> Option<(ServiceKey, String, SliceCounts)> {
    let ns = slice.metadata.namespace.as_deref()?;
    let name = slice.metadata.name.clone()?;
    let service = slice.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)?;
    Some((ServiceKey::new(ns, service), name, slice_counts(slice)))
}

/// Readiness of every Service in the watched scope.
#[derive(Debug, Default)]
pub struct ReadinessStore {
    services: HashMap<ServiceKey, ServiceEntry>,
    /// Which Service each slice (by `namespace/slice`) was counted for.
    slice_service: HashMap<Box<str>, Box<str>>,
    /// Slice counts received during a relist (compact, never whole objects), applied at its end.
    relist_slices: Option<Vec<(ServiceKey, String, SliceCounts)>>,
    /// Services received during a relist, applied at its end.
    relist_services: Option<HashSet<ServiceKey>>,
}

impl ReadinessStore {
    /// What is known of one Service.
    pub fn observe(&self, namespace: &str, name: &str) -> BackendObservation {
        self.services
            .get(&ServiceKey::new(namespace, name))
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

    /// Applies one EndpointSlice watch event; returns the Services whose observation changed.
    pub fn apply_slice_event(&mut self, event: watcher::Event<EndpointSlice>) -> Vec<ServiceKey> {
        match event {
            watcher::Event::Apply(slice) => self.upsert_slice(&slice).into_iter().collect(),
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
                self.relist_slices = Some(Vec::new());
                Vec::new()
            }
            watcher::Event::InitApply(slice) => {
                match self.relist_slices.as_mut() {
                    Some(buffer) => buffer.extend(counted(&slice)),
                    None => return self.upsert_slice(&slice).into_iter().collect(),
                }
                Vec::new()
            }
            watcher::Event::InitDone => {
                let listed = self.relist_slices.take().unwrap_or_default();
                self.replace_slices(listed)
            }
        }
    }

    /// Applies one Service (metadata) watch event; returns the Services whose observation changed.
    pub fn apply_service_event<M: kube::Resource>(
        &mut self,
        event: watcher::Event<M>,
    ) -> Vec<ServiceKey> {
        let key_of = |m: &M| {
            Some(ServiceKey::new(
                m.meta().namespace.as_deref()?,
                m.meta().name.as_deref()?,
            ))
        };
        match event {
            watcher::Event::Apply(svc) => key_of(&svc)
                .and_then(|k| self.set_exists(k, true))
                .into_iter()
                .collect(),
            watcher::Event::Delete(svc) => key_of(&svc)
                .and_then(|k| self.set_exists(k, false))
                .into_iter()
                .collect(),
            watcher::Event::Init => {
                self.relist_services = Some(HashSet::new());
                Vec::new()
            }
            watcher::Event::InitApply(svc) => {
                if let Some(key) = key_of(&svc) {
                    match self.relist_services.as_mut() {
                        Some(buffer) => {
                            buffer.insert(key);
                        }
                        None => return self.set_exists(key, true).into_iter().collect(),
                    }
                }
                Vec::new()
            }
            watcher::Event::InitDone => {
                let listed = self.relist_services.take().unwrap_or_default();
                let mut changed = Vec::new();
                let known: Vec<ServiceKey> = self.services.keys().cloned().collect();
                for key in known {
                    if !listed.contains(&key) {
                        changed.extend(self.set_exists(key, false));
                    }
                }
                for key in listed {
                    changed.extend(self.set_exists(key, true));
                }
                changed
            }
        }
    }

    fn set_exists(&mut self, key: ServiceKey, exists: bool) -> Option<ServiceKey> {
        let entry = self.services.entry(key.clone()).or_default();
        if entry.exists == exists {
            if entry.is_empty() {
                self.services.remove(&key);
            }
            return None;
        }
        entry.exists = exists;
        if entry.is_empty() {
            self.services.remove(&key);
        }
        Some(key)
    }

    fn upsert_slice(&mut self, slice: &EndpointSlice) -> Vec<ServiceKey> {
        let (Some(ns), Some(slice_name)) = (
            slice.metadata.namespace.as_deref(),
            slice.metadata.name.as_deref(),
        ) else {
            return Vec::new();
        };
        let counted = counted(slice);
        let service = counted.as_ref().map(|(service, _, _)| service.clone());
        let slice_id = slice_id(ns, slice_name);
        let mut changed = Vec::new();
        // A slice whose service label changed (or was removed) leaves its old Service.
        if let Some(old) = self.slice_service.get(&slice_id)
            && service.as_ref().is_none_or(|s| *s.name != **old)
        {
            changed.extend(self.remove_slice(ns, slice_name));
        }
        let Some((service, _, counts)) = counted else {
            return changed;
        };
        let entry = self.services.entry(service.clone()).or_default();
        let before = entry.observation();
        entry.set_slice(slice_name, counts);
        let after = entry.observation();
        self.slice_service
            .insert(slice_id, service.name.as_str().into());
        if before != after {
            changed.push(service);
        }
        changed
    }

    fn remove_slice(&mut self, namespace: &str, slice_name: &str) -> Option<ServiceKey> {
        let service_name = self
            .slice_service
            .remove(&*slice_id(namespace, slice_name))?;
        let service = ServiceKey::new(namespace, &service_name);
        let entry = self.services.get_mut(&service)?;
        let before = entry.observation();
        entry.remove_slice(slice_name);
        let after = entry.observation();
        if entry.is_empty() {
            self.services.remove(&service);
        }
        (before != after).then_some(service)
    }

    /// Replaces all slice counts with a complete list, returning the Services that changed.
    fn replace_slices(
        &mut self,
        listed: Vec<(ServiceKey, String, SliceCounts)>,
    ) -> Vec<ServiceKey> {
        let before: HashMap<ServiceKey, BackendObservation> = self
            .services
            .iter()
            .map(|(k, e)| (k.clone(), e.observation()))
            .collect();
        self.slice_service.clear();
        for entry in self.services.values_mut() {
            entry.slices.clear();
        }
        self.services.retain(|_, e| !e.is_empty());
        for (service, slice_name, counts) in listed {
            self.slice_service.insert(
                slice_id(&service.namespace, &slice_name),
                service.name.as_str().into(),
            );
            self.services
                .entry(service)
                .or_default()
                .set_slice(&slice_name, counts);
        }
        let mut changed: HashSet<ServiceKey> = HashSet::new();
        for (key, old) in &before {
            if self
                .services
                .get(key)
                .map(ServiceEntry::observation)
                .unwrap_or_default()
                != *old
            {
                changed.insert(key.clone());
            }
        }
        for (key, entry) in &self.services {
            if !before.contains_key(key) && entry.observation() != BackendObservation::default() {
                changed.insert(key.clone());
            }
        }
        changed.into_iter().collect()
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
        assert_eq!(changed, vec![ServiceKey::new("ns", "a")]);
        let o = store.observe("ns", "a");
        assert_eq!((o.ready_endpoints, o.total_endpoints, o.slices), (2, 3, 2));
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
        assert_eq!(store.observe("ns", "a").ready_endpoints, 2);
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
        assert_eq!(store.observe("ns", "a"), BackendObservation::default());
        assert!(store.is_empty());
    }

    #[test]
    fn relist_replaces_state_and_reports_differences() {
        let mut store = synced();
        store.apply_slice_event(watcher::Event::Apply(slice(
            "a-1",
            "a",
            "IPv4",
            &[Some(true)],
        )));
        store.apply_slice_event(watcher::Event::Apply(slice(
            "b-1",
            "b",
            "IPv4",
            &[Some(true)],
        )));
        store.apply_slice_event(watcher::Event::Init);
        store.apply_slice_event(watcher::Event::InitApply(slice(
            "a-1",
            "a",
            "IPv4",
            &[Some(true)],
        )));
        store.apply_slice_event(watcher::Event::InitApply(slice(
            "c-1",
            "c",
            "IPv4",
            &[Some(false)],
        )));
        // During the relist the old state still answers.
        assert_eq!(store.observe("ns", "b").ready_endpoints, 1);
        let mut changed = store.apply_slice_event(watcher::Event::InitDone);
        changed.sort();
        assert_eq!(
            changed,
            vec![ServiceKey::new("ns", "b"), ServiceKey::new("ns", "c")]
        );
        assert_eq!(store.observe("ns", "b").ready_endpoints, 0);
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
        store.apply_service_event::<Service>(watcher::Event::Init);
        store.apply_service_event(watcher::Event::InitApply(svc.clone()));
        let changed = store.apply_service_event::<Service>(watcher::Event::InitDone);
        assert_eq!(changed, vec![ServiceKey::new("ns", "a")]);
        assert!(store.observe("ns", "a").service_exists);
        store.apply_service_event(watcher::Event::Delete(svc));
        assert!(!store.observe("ns", "a").service_exists);
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
            vec![ServiceKey::new("ns", "a"), ServiceKey::new("ns", "b")]
        );
        assert_eq!(store.observe("ns", "a").ready_endpoints, 0);
    }
}
