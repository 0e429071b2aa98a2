//! Indexes from the objects a policy references to the policies that reference them, kept
//! current from the policy watch, so an EndpointSlice, Service or TrafficSplit event wakes only
//! the policies it concerns instead of a scan of every policy.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::Arc,
};

use crate::{
    api::FailoverPolicy,
    digest::digest,
    observation::{Namespace, PolicyKey, RemoteService, ServiceKey},
    route::{RouteKey, RouteKind, RouteTarget},
    sources::local::policies::key_of,
};

/// What one policy references: its Services (sorted, distinct) and its route's name. Boxed
/// strings and vectors keep the index small: most entries hold one or two names.
#[derive(Clone, Debug, PartialEq, Eq)]
struct References {
    services: Vec<Box<str>>,
    route: (RouteKind, Box<str>),
    remote: Vec<RemoteService>,
}

impl References {
    fn of(policy: &FailoverPolicy) -> Self {
        let spec = &policy.spec;
        let mut services: Vec<Box<str>> = std::iter::once(&spec.service)
            .chain(std::iter::once(&spec.primary))
            .chain(spec.secondaries.iter().map(|s| &s.service))
            .map(|s| Box::from(s.as_str()))
            .collect();
        services.sort();
        services.dedup();
        let target = RouteTarget::of(policy);
        let namespace = policy.metadata.namespace.clone().unwrap_or_default();
        let remote = spec
            .remote_backends()
            .map(|(service, from)| RemoteService::of(from, &namespace, service))
            .collect();
        Self {
            services,
            route: (target.kind(), target.name.into()),
            remote,
        }
    }
}

/// Names of the policies that reference one object: nearly always one, held without a vector
/// (40,000 allocations fewer at 10,000 policies). Each name is the index's one copy of it.
#[derive(Debug)]
enum Names {
    One(Arc<str>),
    Many(Vec<Arc<str>>),
}

impl Names {
    fn iter(&self) -> std::slice::Iter<'_, Arc<str>> {
        match self {
            Names::One(name) => std::slice::from_ref(name).iter(),
            Names::Many(names) => names.iter(),
        }
    }

    fn add(&mut self, policy: &Arc<str>) {
        if self.iter().any(|n| *n == *policy) {
            return;
        }
        match self {
            Names::One(name) => {
                *self = Names::Many(vec![std::mem::take(name), policy.clone()]);
            }
            Names::Many(names) => names.push(policy.clone()),
        }
    }

    /// Removes a policy; returns whether none is left.
    fn remove(&mut self, policy: &str) -> bool {
        match self {
            Names::One(name) => **name == *policy,
            Names::Many(names) => {
                names.retain(|n| **n != *policy);
                if let [one] = names.as_mut_slice() {
                    *self = Names::One(std::mem::take(one));
                }
                matches!(self, Names::Many(names) if names.is_empty())
            }
        }
    }
}

/// Service → policies and generated route (TrafficSplit or HTTPRoute) name → policies, within
/// each namespace.
#[derive(Debug, Default)]
pub struct PolicyIndex {
    /// By a digest of the Service's key: the keys' names took 40,000 allocations at 10,000
    /// policies. Two keys with one digest (one chance in 2^64 for a pair) would only share
    /// their policies, each woken by the other's changes.
    by_service: HashMap<u64, Names>,
    /// By a digest of the route's key.
    by_route: HashMap<u64, Names>,
    /// Each indexed policy's name, once: every entry naming the policy shares it (a policy is
    /// named under each of its Services and its route, five copies for three backends).
    names: HashSet<Arc<str>>,
    /// Policies indexed. What each references is not kept: the policy table holds the policy,
    /// and a change hands the index the version it indexed before (3.7 MiB of references at
    /// 10,000 policies before).
    policies: usize,
    /// Policies per output kind.
    kinds: HashMap<RouteKind, usize>,
    /// Remote Service → the policies reading their readiness from it.
    by_remote: HashMap<RemoteService, Vec<PolicyKey>>,
}

impl PolicyIndex {
    /// The policies that reference a Service (as apex or backend).
    pub fn policies_for_service(&self, service: &ServiceKey) -> Vec<PolicyKey> {
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

    fn lookup(map: &HashMap<u64, Names>, key: u64, namespace: &Namespace) -> Vec<PolicyKey> {
        map.get(&key)
            .map(|names| {
                names
                    .iter()
                    .map(|n| PolicyKey {
                        namespace: namespace.clone(),
                        name: Box::from(&**n),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Indexes a new or changed policy; `previous` is the version indexed before, if any.
    pub fn upsert(&mut self, previous: Option<&FailoverPolicy>, policy: &FailoverPolicy) {
        let Some(key) = key_of(policy) else { return };
        let refs = References::of(policy);
        match previous.map(References::of) {
            Some(old) if old == refs => return,
            Some(old) => self.unlink_all(&key, &old),
            None => self.policies += 1,
        }
        let name = self.shared_name(&key.name);
        for svc in &refs.services {
            link(
                &mut self.by_service,
                ServiceKey {
                    namespace: key.namespace.clone(),
                    name: svc.clone(),
                },
                &name,
            );
        }
        link(&mut self.by_route, route_key(&key, &refs), &name);
        *self.kinds.entry(refs.route.0).or_default() += 1;
        for remote in &refs.remote {
            let policies = self.by_remote.entry(remote.clone()).or_default();
            if !policies.contains(&key) {
                policies.push(key.clone());
            }
        }
    }

    /// Forgets a policy (as it was indexed).
    pub fn remove(&mut self, policy: &FailoverPolicy) {
        let Some(key) = key_of(policy) else { return };
        self.unlink_all(&key, &References::of(policy));
        self.policies = self.policies.saturating_sub(1);
    }

    /// The index's copy of a policy's name.
    fn shared_name(&mut self, name: &str) -> Arc<str> {
        match self.names.get(name) {
            Some(shared) => shared.clone(),
            None => {
                let shared: Arc<str> = Arc::from(name);
                self.names.insert(shared.clone());
                shared
            }
        }
    }

    fn unlink_all(&mut self, key: &PolicyKey, refs: &References) {
        for svc in &refs.services {
            unlink(
                &mut self.by_service,
                ServiceKey {
                    namespace: key.namespace.clone(),
                    name: svc.clone(),
                },
                &key.name,
            );
        }
        unlink(&mut self.by_route, route_key(key, refs), &key.name);
        // The name is forgotten once no entry names it.
        if self
            .names
            .get(&*key.name)
            .is_some_and(|n| Arc::strong_count(n) == 1)
        {
            self.names.remove(&*key.name);
        }
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

fn route_key(policy: &PolicyKey, refs: &References) -> RouteKey {
    RouteKey {
        kind: refs.route.0,
        namespace: policy.namespace.clone(),
        name: refs.route.1.clone(),
    }
}

fn link(map: &mut HashMap<u64, Names>, target: impl std::hash::Hash, policy: &Arc<str>) {
    map.entry(digest(&target))
        .and_modify(|names| names.add(policy))
        .or_insert_with(|| Names::One(policy.clone()));
}

fn unlink(map: &mut HashMap<u64, Names>, target: impl std::hash::Hash, policy: &str) {
    let target = digest(&target);
    if let Some(names) = map.get_mut(&target)
        && names.remove(policy)
    {
        map.remove(&target);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{FailoverPolicySpec, SecondaryBackend};

    fn policy(name: &str, primary: &str, secondaries: &[&str]) -> FailoverPolicy {
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
        p
    }

    #[test]
    fn finds_policies_by_backend_service_and_forgets_removed_references() {
        let mut index = PolicyIndex::default();
        index.upsert(None, &policy("p1", "a", &["b"]));
        index.upsert(None, &policy("p2", "a", &["c"]));
        let svc = |n: &str| ServiceKey::new("ns", n);
        assert_eq!(index.policies_for_service(&svc("a")).len(), 2);
        assert_eq!(
            index.policies_for_service(&svc("b")),
            vec![PolicyKey::new("ns", "p1")]
        );
        // p1 stops referencing b.
        index.upsert(Some(&policy("p1", "a", &["b"])), &policy("p1", "a", &["d"]));
        assert!(index.policies_for_service(&svc("b")).is_empty());
        index.remove(&policy("p2", "a", &["c"]));
        assert_eq!(index.len(), 1);
        assert_eq!(
            index.policies_for_service(&svc("a")),
            vec![PolicyKey::new("ns", "p1")]
        );
        assert!(
            index
                .policies_for_service(&ServiceKey::new("other", "a"))
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
    fn a_policy_name_is_held_once_and_forgotten_with_the_policy() {
        let mut index = PolicyIndex::default();
        let p1 = policy("p1", "a", &["b", "c"]);
        index.upsert(None, &p1);
        let held = index.names.get("p1").map(Arc::strong_count);
        // The set, the apex, three backends and the route.
        assert_eq!(held, Some(6));
        index.upsert(Some(&p1), &policy("p1", "a", &["d"]));
        assert_eq!(index.names.get("p1").map(Arc::strong_count), Some(5));
        index.remove(&policy("p1", "a", &["d"]));
        assert!(index.names.is_empty());
        assert!(index.by_service.is_empty() && index.by_route.is_empty());
    }
}
