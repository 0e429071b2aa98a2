//! One store for a watched kind: what the controller keeps of each object, by key, with every
//! watch event applied in place.
//!
//! kube-runtime's reflector store keeps a second map while a relist runs (the first list, an API
//! server restart, an expired watch) and swaps the maps at its end, so a relist held every object
//! twice while it ran. Here a relist is applied in place, so no object is ever held twice: each
//! listed object replaces its entry at once and is stamped with the relist's number
//! ([`Relist`]); when the list ends, the entries it did not stamp are gone (stamp and sweep). A
//! listed object that says nothing new is no change at all: nothing is woken for it.
//!
//! The store also says how far its watch has delivered ([`EventEffect::complete_through`]): an
//! applied or deleted object's version at once; during a relist, whose objects come in no order
//! of versions, the highest listed version once it has ended. The memory of this replica's
//! writes forgets the writes up to it.
//!
//! The EndpointSlice and Service counts (`local::readiness`) keep their own nested entries, one
//! per Service with its slices inside, stamped with the same [`Relist`].

use std::hash::Hash;

use indexmap::IndexMap;

use kube::runtime::watcher;

/// The number of a watch's relist, running or last run; each entry is stamped with the relist
/// that last listed it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Relist(u32);

impl Relist {
    /// A new relist starts.
    pub fn begin(&mut self) {
        self.0 = self.0.wrapping_add(1);
    }

    /// Whether an entry stamped `stamp` was listed by this relist.
    pub fn listed(self, stamp: Relist) -> bool {
        self == stamp
    }
}

/// How a store keeps the objects of its watch: each object's key and version, whether it says
/// anything new, and what is kept of it. An object that says nothing new is never converted.
pub trait Keep<O> {
    /// What the store keys its entries by.
    type Key: Hash + Eq + Clone;
    /// What it keeps of each object.
    type Entry;
    /// The object's key; `None` leaves the object out (no name, say).
    fn key(&self, object: &O) -> Option<Self::Key>;
    /// The object's resourceVersion, when it is a number (as etcd-backed API servers issue them).
    fn version(&self, object: &O) -> Option<u64>;
    /// Whether `object` says nothing the entry `held` does not.
    fn unchanged(&self, held: &Self::Entry, object: &O) -> bool;
    /// What is kept of the object.
    fn entry(&mut self, object: O) -> Self::Entry;
}

/// What one watch event changed in a store.
#[derive(Debug, PartialEq)]
pub enum EntryChange<K, V> {
    /// The object is new or changed; `previous` is what the store held before, if anything.
    Upserted {
        /// Its key.
        key: K,
        /// The entry before.
        previous: Option<V>,
    },
    /// The object is gone: deleted, or not listed by a relist.
    Deleted {
        /// Its key.
        key: K,
        /// The entry it had.
        entry: V,
    },
}

/// What applying one watch event did.
#[derive(Debug, PartialEq)]
pub struct EventEffect<K, V> {
    /// What changed.
    pub changes: Vec<EntryChange<K, V>>,
    /// The version through which the store now has every event of its watch, when this event
    /// moved it.
    pub complete_through: Option<u64>,
    /// This event ended a complete list.
    pub listed: bool,
}

impl<K, V> Default for EventEffect<K, V> {
    fn default() -> Self {
        Self {
            changes: Vec::new(),
            complete_through: None,
            listed: false,
        }
    }
}

/// Every object of one watched kind, by key.
#[derive(Debug)]
pub struct Store<K, V> {
    /// Entries side by side, in an `IndexMap`: a hash map keeps about a third of its buckets
    /// spare and grows by doubling, so spare buckets of a whole entry cost more than the entries
    /// at some sizes; here a spare bucket is one index.
    entries: IndexMap<K, (V, Relist)>,
    relist: Relist,
    /// The highest version listed by the relist running.
    relist_highest: Option<u64>,
    listed: bool,
}

impl<K, V> Default for Store<K, V> {
    fn default() -> Self {
        Self {
            entries: IndexMap::new(),
            relist: Relist::default(),
            relist_highest: None,
            listed: false,
        }
    }
}

impl<K: Hash + Eq + Clone, V> Store<K, V> {
    /// The entry of an object, if the store has it.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.entries.get(key).map(|(entry, _)| entry)
    }

    /// Every key.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.entries.keys()
    }

    /// Number of objects kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No object is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A complete list has been applied.
    pub fn listed(&self) -> bool {
        self.listed
    }

    /// Applies one watch event, keeping its object as `keep` says.
    pub fn apply<O>(
        &mut self,
        event: watcher::Event<O>,
        keep: &mut impl Keep<O, Key = K, Entry = V>,
    ) -> EventEffect<K, V> {
        match event {
            watcher::Event::Init => {
                self.relist.begin();
                self.relist_highest = Some(0);
                EventEffect::default()
            }
            watcher::Event::InitApply(object) => {
                if let (Some(highest), Some(version)) =
                    (&mut self.relist_highest, keep.version(&object))
                {
                    *highest = (*highest).max(version);
                }
                EventEffect {
                    changes: self.upsert(object, keep).into_iter().collect(),
                    ..EventEffect::default()
                }
            }
            watcher::Event::Apply(object) => EventEffect {
                complete_through: keep.version(&object),
                changes: self.upsert(object, keep).into_iter().collect(),
                listed: false,
            },
            watcher::Event::Delete(object) => {
                let changes = keep.key(&object).and_then(|key| {
                    let (entry, _) = self.entries.swap_remove(&key)?;
                    Some(EntryChange::Deleted { key, entry })
                });
                EventEffect {
                    complete_through: keep.version(&object),
                    changes: changes.into_iter().collect(),
                    listed: false,
                }
            }
            watcher::Event::InitDone => {
                self.listed = true;
                EventEffect {
                    changes: self.sweep(),
                    complete_through: self.relist_highest.take(),
                    listed: true,
                }
            }
        }
    }

    fn upsert<O>(
        &mut self,
        object: O,
        keep: &mut impl Keep<O, Key = K, Entry = V>,
    ) -> Option<EntryChange<K, V>> {
        let key = keep.key(&object)?;
        let relist = self.relist;
        if let Some((held, stamp)) = self.entries.get_mut(&key) {
            *stamp = relist;
            if keep.unchanged(held, &object) {
                return None;
            }
            let previous = std::mem::replace(held, keep.entry(object));
            return Some(EntryChange::Upserted {
                key,
                previous: Some(previous),
            });
        }
        self.entries
            .insert(key.clone(), (keep.entry(object), relist));
        Some(EntryChange::Upserted {
            key,
            previous: None,
        })
    }

    /// Ends a relist: the entries it did not stamp are gone.
    fn sweep(&mut self) -> Vec<EntryChange<K, V>> {
        let relist = self.relist;
        self.entries
            .extract_if(.., |_, (_, stamp)| !relist.listed(*stamp))
            .map(|(key, (entry, _))| EntryChange::Deleted { key, entry })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An object of the tests: a key, a version and a value; kept whole.
    #[derive(Clone, Debug, PartialEq)]
    struct Object(&'static str, u64, &'static str);

    struct Whole;

    impl Keep<Object> for Whole {
        type Key = &'static str;
        type Entry = Object;
        fn key(&self, object: &Object) -> Option<&'static str> {
            Some(object.0)
        }
        fn version(&self, object: &Object) -> Option<u64> {
            Some(object.1)
        }
        fn unchanged(&self, held: &Object, object: &Object) -> bool {
            held == object
        }
        fn entry(&mut self, object: Object) -> Object {
            object
        }
    }

    fn keys(applied: &EventEffect<&'static str, Object>) -> Vec<String> {
        applied
            .changes
            .iter()
            .map(|c| match c {
                EntryChange::Upserted { key, .. } => format!("+{key}"),
                EntryChange::Deleted { key, .. } => format!("-{key}"),
            })
            .collect()
    }

    #[test]
    fn a_relist_replaces_in_place_and_drops_what_it_did_not_list() {
        let mut store: Store<&str, Object> = Store::default();
        store.apply(watcher::Event::Init, &mut Whole);
        store.apply(watcher::Event::InitApply(Object("a", 1, "a")), &mut Whole);
        store.apply(watcher::Event::InitApply(Object("b", 2, "b")), &mut Whole);
        let done = store.apply(watcher::Event::InitDone, &mut Whole);
        assert!(done.listed && store.listed());
        assert_eq!(done.complete_through, Some(2));

        store.apply(watcher::Event::Init, &mut Whole);
        let same = store.apply(watcher::Event::InitApply(Object("a", 1, "a")), &mut Whole);
        assert!(same.changes.is_empty(), "an unchanged object wakes nothing");
        let new = store.apply(watcher::Event::InitApply(Object("c", 5, "c")), &mut Whole);
        assert_eq!(keys(&new), ["+c"]);
        assert!(store.get(&"c").is_some(), "in the store at once");
        assert!(store.get(&"b").is_some(), "not listed yet, still answers");
        assert_eq!(
            new.complete_through, None,
            "a relist completes nothing until it ends"
        );
        let done = store.apply(watcher::Event::InitDone, &mut Whole);
        assert_eq!(keys(&done), ["-b"]);
        assert_eq!(done.complete_through, Some(5));
        let mut left: Vec<_> = store.keys().copied().collect();
        left.sort_unstable();
        assert_eq!(left, ["a", "c"]);
    }

    #[test]
    fn an_event_replaces_or_removes_an_entry_and_completes_through_its_version() {
        let mut store: Store<&str, Object> = Store::default();
        store.apply(watcher::Event::Apply(Object("a", 1, "one")), &mut Whole);
        let changed = store.apply(watcher::Event::Apply(Object("a", 2, "two")), &mut Whole);
        assert_eq!(
            changed.changes,
            [EntryChange::Upserted {
                key: "a",
                previous: Some(Object("a", 1, "one"))
            }]
        );
        assert_eq!(changed.complete_through, Some(2));
        let gone = store.apply(watcher::Event::Delete(Object("a", 3, "two")), &mut Whole);
        assert_eq!(keys(&gone), ["-a"]);
        assert_eq!(gone.complete_through, Some(3));
        assert!(store.is_empty());
    }
}
