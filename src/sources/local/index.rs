//! Indexes from the objects a policy references to the policies that reference them, kept
//! current from the policy watch, so an EndpointSlice, Service or TrafficSplit event wakes only
//! the policies it concerns instead of a scan of every policy.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use indexmap::IndexMap;

use compact_str::CompactString;
use smallvec::SmallVec;

use failover_core::{
    backend::{BackendKey, BackendRef},
    digest::digest,
    observation::{Namespace, PolicyKey, RemoteService},
    policy::ValidPolicy,
    route::{RouteKey, RouteKind},
};

/// What one policy references: its apex Service and backends (sorted, distinct) and its route's
/// name.
#[derive(Clone, Debug, PartialEq, Eq)]
struct References {
    backends: Vec<BackendRef>,
    route: (RouteKind, CompactString),
    remote: Vec<RemoteService>,
}

impl References {
    fn of(policy: &ValidPolicy) -> Self {
        // The apex is a Service: its readiness wakes the policy as a Service backend's does.
        let mut backends: Vec<BackendRef> = std::iter::once(BackendRef::service(&policy.service))
            .chain(policy.backend_refs().cloned())
            .collect();
        backends.sort();
        backends.dedup();
        Self {
            backends,
            route: (policy.route.kind(), policy.route.name.clone()),
            remote: policy
                .backends
                .iter()
                .filter_map(|b| b.remote.as_deref().cloned())
                .collect(),
        }
    }
}

/// Names of the policies that reference one object: nearly always one, held without a vector
/// (one name costs no allocation of the list's own), its name inline when 24 bytes or shorter.
type Names = SmallVec<[CompactString; 1]>;

/// Backend (or apex Service) → policies and generated route (TrafficSplit or HTTPRoute) name → policies, within
/// each namespace.
#[derive(Debug, Default)]
pub struct PolicyIndex {
    /// By a digest of the backend's key, so the index holds no copy of a backend's name. Two
    /// keys with one digest (one chance in 2^64 for a pair) would only share their policies,
    /// each woken by the other's changes.
    by_service: IndexMap<u64, Names>,
    /// By a digest of the route's key.
    by_route: IndexMap<u64, Names>,
    /// Policies indexed (the valid ones). What each references is not kept: the policy table
    /// holds the validated policy, and a change hands the index the version it indexed before,
    /// so a policy's references are held once, by the table.
    policies: usize,
    /// Policies per output kind.
    kinds: HashMap<RouteKind, usize>,
    /// Remote Service → the policies reading their readiness from it.
    by_remote: HashMap<RemoteService, Vec<PolicyKey>>,
}

impl PolicyIndex {
    /// The policies that reference a backend (or a Service as their apex).
    pub fn policies_for_service(&self, service: &BackendKey) -> Vec<PolicyKey> {
        Self::lookup(&self.by_service, digest(service), &service.namespace)
    }

    /// The policies whose generated route has this kind, namespace and name.
    pub fn policies_for_route(&self, route: &RouteKey) -> Vec<PolicyKey> {
        Self::lookup(&self.by_route, digest(route), &route.namespace)
    }

    /// The policies reading readiness from this remote Service.
    pub fn policies_for_remote(&self, remote: &RemoteService) -> Vec<PolicyKey> {
        self.by_remote.get(remote).cloned().unwrap_or_default()
    }

    /// The policies reading readiness from any Service of this cluster.
    pub fn policies_for_cluster(&self, cluster: &str) -> Vec<PolicyKey> {
        let mut policies: Vec<PolicyKey> = self
            .by_remote
            .iter()
            .filter(|(r, _)| r.cluster == cluster)
            .flat_map(|(_, p)| p.iter().cloned())
            .collect();
        policies.sort();
        policies.dedup();
        policies
    }

    /// The remote namespaces policies read from, per cluster, each with the namespace of a policy
    /// reading it: (policy namespace, remote namespace).
    pub fn remote_namespaces(&self) -> BTreeMap<String, BTreeSet<(String, String)>> {
        let mut wanted: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
        for (remote, policies) in &self.by_remote {
            let namespaces = wanted.entry(remote.cluster.clone()).or_default();
            for policy in policies {
                namespaces.insert((policy.namespace.to_string(), remote.namespace.clone()));
            }
        }
        wanted
    }

    /// Whether any policy outputs a route of this kind.
    pub fn uses(&self, kind: RouteKind) -> bool {
        self.kinds.get(&kind).is_some_and(|n| *n > 0)
    }

    /// Number of policies indexed.
    pub fn len(&self) -> usize {
        self.policies
    }

    /// No policy is indexed.
    pub fn is_empty(&self) -> bool {
        self.policies == 0
    }

    fn lookup(map: &IndexMap<u64, Names>, key: u64, namespace: &Namespace) -> Vec<PolicyKey> {
        map.get(&key)
            .map(|names| {
                names
                    .iter()
                    .map(|name| PolicyKey {
                        namespace: namespace.clone(),
                        name: name.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Indexes a policy's change: `before` as indexed before, `after` now (none: an invalid or
    /// deleted policy, which references nothing the pipeline reads).
    pub fn update(
        &mut self,
        key: &PolicyKey,
        before: Option<&ValidPolicy>,
        after: Option<&ValidPolicy>,
    ) {
        let old = before.map(References::of);
        let refs = after.map(References::of);
        if old == refs {
            return;
        }
        if let Some(old) = old {
            self.unlink_all(key, &old);
            self.policies = self.policies.saturating_sub(1);
        }
        if let Some(refs) = refs {
            self.link_all(key, &refs);
            self.policies += 1;
        }
    }

    fn link_all(&mut self, key: &PolicyKey, refs: &References) {
        let name = &key.name;
        for backend in &refs.backends {
            link(&mut self.by_service, backend_key(key, backend), name);
        }
        link(&mut self.by_route, route_key(key, refs), name);
        *self.kinds.entry(refs.route.0).or_default() += 1;
        for remote in &refs.remote {
            let policies = self.by_remote.entry(remote.clone()).or_default();
            if !policies.contains(key) {
                policies.push(key.clone());
            }
        }
    }

    fn unlink_all(&mut self, key: &PolicyKey, refs: &References) {
        for backend in &refs.backends {
            unlink(&mut self.by_service, backend_key(key, backend), &key.name);
        }
        unlink(&mut self.by_route, route_key(key, refs), &key.name);
        if let Some(n) = self.kinds.get_mut(&refs.route.0) {
            *n = n.saturating_sub(1);
        }
        for remote in &refs.remote {
            if let Some(policies) = self.by_remote.get_mut(remote) {
                policies.retain(|p| p != key);
                if policies.is_empty() {
                    self.by_remote.remove(remote);
                }
            }
        }
    }
}

fn backend_key(policy: &PolicyKey, backend: &BackendRef) -> BackendKey {
    BackendKey {
        kind: backend.kind,
        namespace: policy.namespace.clone(),
        name: backend.name.clone(),
    }
}

fn route_key(policy: &PolicyKey, refs: &References) -> RouteKey {
    RouteKey {
        kind: refs.route.0,
        namespace: policy.namespace.clone(),
        name: refs.route.1.clone(),
    }
}

fn link(map: &mut IndexMap<u64, Names>, target: impl std::hash::Hash, policy: &str) {
    let names = map.entry(digest(&target)).or_default();
    if !names.iter().any(|n| **n == *policy) {
        names.push(policy.into());
    }
}

fn unlink(map: &mut IndexMap<u64, Names>, target: impl std::hash::Hash, policy: &str) {
    let target = digest(&target);
    if let Some(names) = map.get_mut(&target) {
        names.retain(|n| **n != *policy);
        if names.is_empty() {
            map.swap_remove(&target);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use failover_core::api::{FailoverPolicy, FailoverPolicySpec, SecondaryBackend};

    fn policy(name: &str, primary: &str, secondaries: &[&str]) -> ValidPolicy {
        let mut p = FailoverPolicy::new(
            name,
            FailoverPolicySpec {
                service: "apex".into(),
                primary: primary.into(),
                secondaries: secondaries
                    .iter()
                    .map(|s| SecondaryBackend::new(*s))
                    .collect(),
                ..Default::default()
            },
        );
        p.metadata.namespace = Some("ns".into());
        failover_core::validate::validate(&p).expect("valid")
    }

    fn key(name: &str) -> PolicyKey {
        PolicyKey::new("ns", name)
    }

    #[test]
    fn finds_policies_by_backend_service_and_forgets_removed_references() {
        let mut index = PolicyIndex::default();
        index.update(&key("p1"), None, Some(&policy("p1", "a", &["b"])));
        index.update(&key("p2"), None, Some(&policy("p2", "a", &["c"])));
        let svc = |n: &str| BackendKey::service("ns", n);
        assert_eq!(index.policies_for_service(&svc("a")).len(), 2);
        assert_eq!(
            index.policies_for_service(&svc("b")),
            vec![PolicyKey::new("ns", "p1")]
        );
        // p1 stops referencing b.
        index.update(
            &key("p1"),
            Some(&policy("p1", "a", &["b"])),
            Some(&policy("p1", "a", &["d"])),
        );
        assert!(index.policies_for_service(&svc("b")).is_empty());
        index.update(&key("p2"), Some(&policy("p2", "a", &["c"])), None);
        assert_eq!(index.len(), 1);
        assert_eq!(
            index.policies_for_service(&svc("a")),
            vec![PolicyKey::new("ns", "p1")]
        );
        assert!(
            index
                .policies_for_service(&BackendKey::service("other", "a"))
                .is_empty()
        );
        let route = RouteKey {
            kind: RouteKind::TrafficSplit,
            namespace: "ns".into(),
            name: "p1".into(),
        };
        assert_eq!(
            index.policies_for_route(&route),
            vec![PolicyKey::new("ns", "p1")]
        );
        assert!(index.uses(RouteKind::TrafficSplit));
        assert!(!index.uses(RouteKind::HttpRoute));
    }

    #[test]
    fn a_removed_policy_leaves_nothing_behind() {
        let mut index = PolicyIndex::default();
        let p1 = policy("p1", "a", &["b", "c"]);
        index.update(&key("p1"), None, Some(&p1));
        index.update(&key("p1"), Some(&p1), Some(&policy("p1", "a", &["d"])));
        assert!(
            index
                .policies_for_service(&BackendKey::service("ns", "b"))
                .is_empty()
        );
        index.update(&key("p1"), Some(&policy("p1", "a", &["d"])), None);
        assert!(index.by_service.is_empty() && index.by_route.is_empty());
        assert!(index.is_empty());
    }
}
