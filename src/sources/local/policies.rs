//! The policy table: every FailoverPolicy of the watched scope, held once, keyed by namespace
//! and name. The policy watch fills it and the work queue reads it.
//!
//! The table is a [`Store`]: a relist is applied in place, and a listed policy whose version did
//! not change is no change at all (nothing is woken for it, nothing is encoded).
//!
//! Each policy is held as its compact JSON, one allocation, and decoded when a reconcile takes
//! it. Measured on a policy of the benchmark (three backends, its status written): 2,190 bytes
//! in 32 allocations as an object, 1,532 bytes as JSON, about 1 KiB less per policy with the
//! allocator's overhead (10 MiB at 10,000 policies); decoding it takes 3.8 µs (release build),
//! once per reconcile.
//!
//! The JSON is held LZ4-compressed against a dictionary: the JSON of one policy of the table,
//! the first one seen with a status. Policies written by one controller share their field
//! names, condition reasons and message shapes, so what is left is their names, uids and times:
//! a 1,544-byte policy of the benchmark's shape compresses to 229 bytes against another's JSON
//! (and to 809 without a dictionary). Every entry keeps the dictionary it was compressed with,
//! so choosing a better one later never touches the entries already held. The watch event's object itself feeds the index and the health pollers;
//! the version it replaces (or the one deleted) is decoded once for the index, which keeps no
//! copy of what each policy references.
//!
//! Beside it, an entry of a policy with a health query holds the policy as validated
//! ([`Validated`]), once per generation: the policy watch validates such a policy whose
//! generation it has not seen (its query's check and parse, which compiles regexes, off the
//! thread that serves `/healthz`), and every reconcile and the health poller read that result.
//! A change of metadata or status (an annotation, the controller's own status write) validates
//! nothing again. Any other policy (no regex to compile) is validated by each reconcile:
//! holding every policy's validated form took the churn phase at 10,000 policies from a peak of
//! 40.2 to 55.1 MiB, its heap from 16.6 to 28.3 MiB and its live allocations from 93,445 to
//! 241,178 (docs/bench-runs, runs 20261126-0156 and 20261126-1222, the second stopped by hand).

use std::sync::Arc;

use kube::runtime::watcher;
use tracing::warn;

use crate::{
    api::FailoverPolicy,
    observation::PolicyKey,
    policy::Validated,
    sources::store::{self, Keep, Store},
};

/// What a watch event changed in the table.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// The policy is new or changed; `previous` is the version the table held before, if any.
    Applied {
        /// The policy now.
        policy: Arc<FailoverPolicy>,
        /// The version before.
        previous: Option<Box<FailoverPolicy>>,
        /// The policy as validated, when this version was validated anew (a new generation of
        /// a policy with a health query).
        revalidated: Option<Validated>,
    },
    /// The policy is gone (the version the table held).
    Deleted(Box<FailoverPolicy>),
    /// A complete list has been applied (the first list, or a relist).
    Listed,
}

#[derive(Debug)]
struct Entry {
    /// The policy as compact JSON, compressed against `dictionary`.
    packed: Box<[u8]>,
    /// The dictionary it was compressed against.
    dictionary: Arc<[u8]>,
    /// Its resource version, when it is a number (as etcd-backed API servers issue them).
    version: Option<u64>,
    /// The policy as validated, for a policy with a health query only.
    valid: Option<Validation>,
}

/// A policy as validated, and which policy and generation it is of.
#[derive(Debug)]
struct Validation {
    valid: Validated,
    uid: Option<String>,
    generation: Option<i64>,
}

impl Validation {
    /// Whether this is the validation of `policy`'s uid and generation.
    fn of(&self, policy: &FailoverPolicy) -> bool {
        self.generation.is_some()
            && policy.metadata.generation == self.generation
            && policy.metadata.uid == self.uid
    }
}

/// A policy as the table holds it: the object and, for a policy with a health query, its
/// validated form.
#[derive(Clone, Debug)]
pub struct Held {
    /// The policy.
    pub policy: Arc<FailoverPolicy>,
    /// Its spec as validated for its generation, when the table holds it (a policy with a health
    /// query); else the reconcile validates it.
    pub valid: Option<Validated>,
}

/// Every policy of the watched scope.
#[derive(Debug, Default)]
pub struct PolicyTable {
    store: Store<PolicyKey, Entry>,
    /// What new entries are compressed against.
    dictionary: Dictionary,
}

/// How the table keeps a policy: packed, with its validation (fresh, or carried over from the
/// version before); the applied policy itself is kept aside for the change it makes.
struct Packing<'a> {
    dictionary: &'a mut Dictionary,
    valid: Option<Validation>,
    applied: Option<Arc<FailoverPolicy>>,
}

impl Keep<FailoverPolicy> for Packing<'_> {
    type Key = PolicyKey;
    type Entry = Entry;

    fn key(&self, policy: &FailoverPolicy) -> Option<PolicyKey> {
        key_of(policy)
    }

    fn version(&self, policy: &FailoverPolicy) -> Option<u64> {
        version_of(policy)
    }

    fn unchanged(&self, held: &Entry, policy: &FailoverPolicy) -> bool {
        held.version.is_some() && held.version == version_of(policy)
    }

    fn entry(&mut self, policy: FailoverPolicy) -> Entry {
        // Never expected to fail: the policy was decoded from JSON; an empty entry is read back
        // as undecodable (and logged) rather than held wrong.
        let json = serde_json::to_vec(&policy)
            .inspect_err(|error| warn!(policy = ?key_of(&policy), %error, "policy unencodable"))
            .unwrap_or_default();
        let dictionary = self.dictionary.for_policy(&json, policy.status.is_some());
        let entry = Entry {
            packed: lz4_flex::block::compress_prepend_size_with_dict(&json, &dictionary)
                .into_boxed_slice(),
            dictionary,
            version: version_of(&policy),
            valid: self.valid.take(),
        };
        self.applied = Some(Arc::new(policy));
        entry
    }
}

fn version_of(policy: &FailoverPolicy) -> Option<u64> {
    policy.metadata.resource_version.as_deref()?.parse().ok()
}

/// The JSON of one policy, new entries' dictionary: the first policy seen, until one with a
/// status is seen.
#[derive(Debug, Default)]
struct Dictionary {
    json: Option<Arc<[u8]>>,
    has_status: bool,
}

impl Dictionary {
    /// The dictionary for this policy's JSON, which becomes it if it is a better one.
    fn for_policy(&mut self, json: &[u8], has_status: bool) -> Arc<[u8]> {
        match &self.json {
            Some(json) if self.has_status || !has_status => json.clone(),
            _ => {
                self.has_status = has_status;
                self.json.insert(Arc::from(json)).clone()
            }
        }
    }
}

impl PolicyTable {
    /// The policy, if the table has it.
    pub fn get(&self, key: &PolicyKey) -> Option<Held> {
        let entry = self.store.get(key)?;
        Some(Held {
            policy: Arc::new(decode(key, entry)?),
            valid: entry.valid.as_ref().map(|v| v.valid.clone()),
        })
    }

    /// Whether this version of a policy must be validated before [`Self::apply`] takes it: it
    /// has a health query, and the table holds no validation of its uid and generation.
    pub fn needs_validation(&self, policy: &FailoverPolicy) -> bool {
        policy.spec.health.is_some() && self.held_validation(policy).is_none()
    }

    /// The validation the table holds of this policy's uid and generation.
    fn held_validation(&self, policy: &FailoverPolicy) -> Option<Validated> {
        let held = self.store.get(&key_of(policy)?)?.valid.as_ref()?;
        held.of(policy).then(|| held.valid.clone())
    }

    /// Every policy's key.
    pub fn keys(&self) -> Vec<PolicyKey> {
        self.store.keys().cloned().collect()
    }

    /// A complete list has been applied.
    pub fn listed(&self) -> bool {
        self.store.listed()
    }

    /// Applies one watch event; returns what changed, and the version through which the table
    /// has every event of the policy watch, when this event moved it. `fresh` is the applied
    /// policy as validated, when [`Self::needs_validation`] said so.
    pub fn apply(
        &mut self,
        event: watcher::Event<FailoverPolicy>,
        fresh: Option<Validated>,
    ) -> (Vec<Change>, Option<u64>) {
        let valid = match &event {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) if p.spec.health.is_some() => {
                fresh
                    .clone()
                    .or_else(|| self.held_validation(p))
                    .map(|valid| Validation {
                        valid,
                        uid: p.metadata.uid.clone(),
                        generation: p.metadata.generation,
                    })
            }
            _ => None,
        };
        let mut packing = Packing {
            dictionary: &mut self.dictionary,
            valid,
            applied: None,
        };
        let applied = self.store.apply(event, &mut packing);
        let mut applied_policy = packing.applied;
        let mut changes: Vec<Change> = applied
            .changes
            .into_iter()
            .filter_map(|change| match change {
                store::Change::Applied { key, previous } => Some(Change::Applied {
                    policy: applied_policy.take()?,
                    previous: previous.and_then(|p| decode(&key, &p)).map(Box::new),
                    revalidated: fresh.clone(),
                }),
                store::Change::Deleted { key, entry } => {
                    decode(&key, &entry).map(|p| Change::Deleted(Box::new(p)))
                }
            })
            .collect();
        if applied.listed {
            changes.push(Change::Listed);
        }
        (changes, applied.complete_through)
    }
}

/// The policy an entry holds.
fn decode(key: &PolicyKey, entry: &Entry) -> Option<FailoverPolicy> {
    // Never expected to fail: the table encoded it itself.
    let undecodable = |error: &dyn std::fmt::Display| {
        warn!(namespace = %key.namespace, policy = %key.name, %error, "policy undecodable");
    };
    let json =
        lz4_flex::block::decompress_size_prepended_with_dict(&entry.packed, &entry.dictionary)
            .inspect_err(|e| undecodable(e))
            .ok()?;
    serde_json::from_slice(&json)
        .inspect_err(|e| undecodable(e))
        .ok()
}

/// A policy's key; `None` without a namespace or name.
pub fn key_of(policy: &FailoverPolicy) -> Option<PolicyKey> {
    Some(PolicyKey::new(
        policy.metadata.namespace.as_deref()?,
        policy.metadata.name.as_deref()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::FailoverPolicySpec;

    fn policy(name: &str, version: &str) -> FailoverPolicy {
        let mut p = FailoverPolicy::new(name, FailoverPolicySpec::default());
        p.metadata.namespace = Some("ns".into());
        p.metadata.resource_version = Some(version.into());
        p
    }

    /// Applies an event, validating (as nothing) what the table asks to have validated.
    fn apply(table: &mut PolicyTable, event: watcher::Event<FailoverPolicy>) -> Vec<Change> {
        let fresh = match &event {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => table
                .needs_validation(p)
                .then(|| Err(Arc::from(Vec::new()))),
            _ => None,
        };
        table.apply(event, fresh).0
    }

    fn names(changes: &[Change]) -> Vec<String> {
        changes
            .iter()
            .map(|c| match c {
                Change::Applied { policy, .. } => {
                    format!("+{}", policy.metadata.name.as_deref().unwrap_or(""))
                }
                Change::Deleted(p) => format!("-{}", p.metadata.name.as_deref().unwrap_or("")),
                Change::Listed => "listed".to_string(),
            })
            .collect()
    }

    #[test]
    fn a_relist_replaces_in_place_and_drops_what_it_did_not_list() {
        let mut table = PolicyTable::default();
        assert!(!table.listed());
        apply(&mut table, watcher::Event::Init);
        assert_eq!(
            names(&apply(
                &mut table,
                watcher::Event::InitApply(policy("a", "1"))
            )),
            ["+a"]
        );
        apply(&mut table, watcher::Event::InitApply(policy("b", "1")));
        assert_eq!(
            names(&apply(&mut table, watcher::Event::InitDone)),
            ["listed"]
        );
        assert!(table.listed());

        apply(&mut table, watcher::Event::Init);
        // Unchanged: nothing to wake; changed: in the table at once, before the list ends.
        assert!(apply(&mut table, watcher::Event::InitApply(policy("a", "1"))).is_empty());
        apply(&mut table, watcher::Event::InitApply(policy("c", "2")));
        assert!(table.get(&PolicyKey::new("ns", "c")).is_some());
        assert!(
            table.get(&PolicyKey::new("ns", "b")).is_some(),
            "a policy not listed yet still answers"
        );
        assert_eq!(
            names(&apply(&mut table, watcher::Event::InitDone)),
            ["-b", "listed"]
        );
        let mut keys: Vec<String> = table.keys().into_iter().map(|k| k.name.into()).collect();
        keys.sort();
        assert_eq!(keys, ["a", "c"]);
    }

    #[test]
    fn a_new_version_replaces_the_policy_and_a_delete_removes_it() {
        let mut table = PolicyTable::default();
        apply(&mut table, watcher::Event::Apply(policy("a", "1")));
        assert_eq!(
            names(&apply(&mut table, watcher::Event::Apply(policy("a", "2")))),
            ["+a"]
        );
        assert_eq!(
            names(&apply(&mut table, watcher::Event::Delete(policy("a", "2")))),
            ["-a"]
        );
        assert!(table.keys().is_empty());
    }

    #[test]
    fn policies_are_held_compressed_and_read_back_whole_across_dictionaries() {
        let with_status = |name: &str, version: &str| {
            let mut p = policy(name, version);
            p.spec.primary = format!("{name}-primary");
            p.status = Some(crate::api::FailoverPolicyStatus {
                observed_generation: Some(1),
                active_backends: vec![format!("{name}-primary")],
                active_summary: Some(format!("{name}-primary")),
                ..Default::default()
            });
            p
        };
        let mut table = PolicyTable::default();
        // The first policy, without a status, is the dictionary until one with a status comes.
        apply(&mut table, watcher::Event::Apply(policy("plain", "1")));
        apply(&mut table, watcher::Event::Apply(with_status("first", "2")));
        apply(
            &mut table,
            watcher::Event::Apply(with_status("second", "3")),
        );
        for (name, version) in [("plain", "1"), ("first", "2"), ("second", "3")] {
            let expected = if name == "plain" {
                policy(name, version)
            } else {
                with_status(name, version)
            };
            let held = table.get(&PolicyKey::new("ns", name)).map(|h| h.policy);
            assert_eq!(held.as_deref(), Some(&expected), "{name}");
        }
        let entry = table
            .store
            .get(&PolicyKey::new("ns", "second"))
            .expect("held");
        let json = serde_json::to_vec(&with_status("second", "3")).unwrap_or_default();
        assert!(
            entry.packed.len() * 2 < json.len(),
            "{} bytes held for {} bytes of JSON",
            entry.packed.len(),
            json.len()
        );
    }

    #[test]
    fn a_policy_with_a_health_query_is_validated_once_per_generation() {
        let mut table = PolicyTable::default();
        let versioned = |version: &str, generation: i64| {
            let mut p = policy("a", version);
            p.metadata.generation = Some(generation);
            p.metadata.uid = Some("uid-a".into());
            p.spec.health = serde_json::from_value(
                serde_json::json!({"prometheus": {"query": "up", "max": 1.0}}),
            )
            .ok();
            p
        };
        assert!(
            !table.needs_validation(&policy("plain", "1")),
            "a reconcile validates a policy without a health query"
        );
        assert!(table.needs_validation(&versioned("1", 1)));
        table.apply(
            watcher::Event::Apply(versioned("1", 1)),
            Some(Err(Arc::from([]))),
        );
        // An annotation or a status write: a new version of the same generation.
        assert!(!table.needs_validation(&versioned("2", 1)));
        let (changes, _) = table.apply(watcher::Event::Apply(versioned("2", 1)), None);
        assert!(matches!(
            changes.as_slice(),
            [Change::Applied {
                revalidated: None,
                ..
            }]
        ));
        assert!(
            table.needs_validation(&versioned("3", 2)),
            "a new generation"
        );
        let mut recreated = versioned("4", 1);
        recreated.metadata.uid = Some("uid-b".into());
        assert!(
            table.needs_validation(&recreated),
            "a new object of the same name"
        );
    }
}
