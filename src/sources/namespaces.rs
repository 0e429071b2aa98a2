//! The namespaces' names the caches hold, each held once: every key a cache keeps in a namespace
//! shares its name, so no key holds a copy of its own, however many keys a namespace has: a
//! key's namespace is one word and no allocation of its own. A name no key holds any more is
//! forgotten when the set has doubled since it was last swept, so the set stays within twice the
//! namespaces in use.

use std::{collections::HashSet, sync::Arc};

use parking_lot::Mutex;

use failover_core::observation::{Namespace, PolicyKey};
use kube::api::ObjectMeta;

/// The smallest set a sweep runs on.
const FIRST_SWEEP: usize = 64;

/// The names in use, shared by every cache that holds keys (a clone is the same set).
#[derive(Clone, Debug, Default)]
pub struct Namespaces(Arc<Mutex<Seen>>);

/// The names in use, and the size at which the next sweep runs.
#[derive(Debug, Default)]
struct Seen {
    names: HashSet<Namespace>,
    sweep_at: usize,
}

impl Seen {
    /// Forgets every name only this set holds (no clone can appear meanwhile: a name is handed
    /// out only under the set's lock).
    fn sweep(&mut self) {
        self.names.retain(Namespace::is_shared);
        self.sweep_at = (self.names.len() * 2).max(FIRST_SWEEP);
    }
}

/// An object's key (its namespace and name), its namespace's name made by `namespace`; `None`
/// when it has no namespace or no name.
pub fn object_key(
    meta: &ObjectMeta,
    namespace: impl FnOnce(&str) -> Namespace,
) -> Option<PolicyKey> {
    Some(PolicyKey::in_namespace(
        namespace(meta.namespace.as_deref()?),
        meta.name.as_deref()?,
    ))
}

impl Namespaces {
    /// The key a cache keeps an object by: its namespace's name shared.
    pub fn key_of(&self, meta: &ObjectMeta) -> Option<PolicyKey> {
        object_key(meta, |name| self.intern(name))
    }

    /// The shared name of this namespace.
    pub fn intern(&self, name: &str) -> Namespace {
        let mut seen = self.0.lock();
        if let Some(shared) = seen.names.get(name) {
            return shared.clone();
        }
        if seen.names.len() >= seen.sweep_at.max(FIRST_SWEEP) {
            seen.sweep();
        }
        let shared = Namespace::new(name);
        seen.names.insert(shared.clone());
        shared
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_one_namespace_share_its_name() {
        let namespaces = Namespaces::default();
        let a = namespaces.intern("shop");
        let b = namespaces.clone().intern("shop");
        assert_eq!(a, b);
        assert!(a.is_shared());
        assert_eq!(namespaces.0.lock().names.len(), 1);
    }

    #[test]
    fn an_objects_key_shares_its_namespaces_name_and_a_lookups_key_does_not() {
        let namespaces = Namespaces::default();
        let meta = |name: &str| ObjectMeta {
            namespace: Some("shop".into()),
            name: Some(name.into()),
            ..ObjectMeta::default()
        };
        let kept = namespaces.key_of(&meta("web")).expect("a key");
        let other = namespaces.key_of(&meta("api")).expect("a key");
        assert_eq!((&*kept.namespace, &*kept.name), ("shop", "web"));
        assert!(kept.namespace.is_shared() && other.namespace.is_shared());
        assert_eq!(namespaces.0.lock().names.len(), 1);
        let lookup = object_key(&meta("web"), Namespace::new).expect("a key");
        assert!(lookup == kept && !lookup.namespace.is_shared());
        assert_eq!(object_key(&ObjectMeta::default(), Namespace::new), None);
    }

    #[test]
    fn a_namespace_no_key_holds_is_forgotten_by_a_sweep() {
        let namespaces = Namespaces::default();
        let held = namespaces.intern("still-held");
        drop(namespaces.intern("let-go"));
        let mut seen = namespaces.0.lock();
        seen.sweep();
        assert!(seen.names.contains("still-held"));
        assert!(!seen.names.contains("let-go"));
        assert!(seen.sweep_at >= FIRST_SWEEP);
        drop(held);
    }

    #[test]
    fn the_set_stays_within_twice_the_namespaces_in_use() {
        let namespaces = Namespaces::default();
        let held: Vec<_> = (0..10)
            .map(|n| namespaces.intern(&format!("held-{n}")))
            .collect();
        for n in 0..1_000 {
            drop(namespaces.intern(&format!("passing-{n}")));
        }
        let seen = namespaces.0.lock().names.len();
        assert!(seen <= FIRST_SWEEP.max(2 * held.len()), "{seen} names kept");
    }
}
