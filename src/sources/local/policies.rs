//! The policy table: every FailoverPolicy of the watched scope, held once, keyed by namespace
//! and name, in the form the pipeline reads. The policy watch fills it and the work queue reads
//! it.
//!
//! The table is a [`Store`]: a relist is applied in place, and a listed policy whose version did
//! not change is no change at all (nothing is woken for it, nothing is validated).
//!
//! Each policy is held as
//! - its identity: uid, generation, resource version, creation time, whether it is being
//!   deleted, whether it holds the finalizer that restores what it scaled;
//! - its spec as validated ([`Spec`]), once per generation: the policy watch validates a policy
//!   whose uid and generation it has not seen (a query's check and parse, which compiles regexes,
//!   off the thread that serves `/healthz`), and every reconcile, the index, the claims and the
//!   health poller read that one value. A change of metadata or status (an annotation, the
//!   controller's own status write) validates nothing again;
//! - its status as last written, compact ([`LastStatus`]: what the decide and status steps read,
//!   and a digest of the whole); an invalid policy's status is held whole too, as its status step
//!   keeps it (what is in place).
//!
//! The object itself is not kept: the watch event's object seeds the health poller's readings
//! and is dropped.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{Resource, ResourceExt, runtime::watcher};

use crate::sources::{
    namespaces::{Namespaces, object_key},
    store::{self, Keep, Store},
};
use failover_core::{
    api::{FailoverPolicy, FailoverPolicyStatus},
    last_status::LastStatus,
    observation::{Namespace, PolicyKey},
    policy::{SpecProblem, ValidPolicy, Validated},
    route::{Claim, RouteTarget},
    tenancy::Gateways,
};

/// A policy's spec, as validated for its generation.
#[derive(Clone, Debug)]
pub enum Spec {
    /// Valid: what the pipeline reads.
    Valid(Arc<ValidPolicy>),
    /// Invalid: the problems, and what its status step keeps.
    Invalid(Arc<Invalid>),
}

/// An invalid policy: why, the route it owns, and its status as last written, whole.
#[derive(Debug)]
pub struct Invalid {
    /// Every rule it breaks.
    pub problems: Arc<[SpecProblem]>,
    /// The route it owns (its status names it; it stays in place while the spec is invalid).
    pub target: RouteTarget,
    /// Its apex Service: its route, in place, still claims it.
    pub service: Box<str>,
    /// Its status as the watch last delivered it.
    pub status: Option<FailoverPolicyStatus>,
}

impl Spec {
    /// The valid policy, if it is one.
    pub fn valid(&self) -> Option<&Arc<ValidPolicy>> {
        match self {
            Spec::Valid(valid) => Some(valid),
            Spec::Invalid(_) => None,
        }
    }

    /// Everything the policy's route claims: what it may attach to (an invalid policy's route
    /// stays in place, so it still claims what it routes).
    pub fn claims(&self, namespace: &str, gateways: &Gateways) -> Vec<Claim> {
        match self {
            Spec::Valid(valid) => gateways.claims(valid),
            Spec::Invalid(invalid) => {
                gateways.route_claims(namespace, &invalid.service, &invalid.target)
            }
        }
    }

    /// The route the policy owns.
    pub fn target(&self) -> &RouteTarget {
        match self {
            Spec::Valid(valid) => &valid.route,
            Spec::Invalid(invalid) => &invalid.target,
        }
    }
}

/// Who a policy is: what the pipeline reads of its metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Identity {
    /// Its uid (the owner of its route, the writer of its status).
    pub uid: Box<str>,
    /// Its generation.
    pub generation: Option<i64>,
    /// Its resource version, when it is a number (as etcd-backed API servers issue them).
    pub version: Option<u64>,
    /// Its creationTimestamp, in seconds (none: `i64::MAX`, the youngest of all).
    pub created: i64,
    /// Whether it is being deleted, and whether it holds the finalizer.
    pub lifecycle: Lifecycle,
}

/// Where a policy is in its life, as its metadata says: whether it is being deleted, and whether
/// it holds the finalizer that restores the workloads it scaled
/// ([`failover_core::api::SCALE_FINALIZER`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    /// Not being deleted, without the finalizer.
    Live,
    /// Not being deleted, holding the finalizer (a workload it raised is not restored yet).
    LiveHolding,
    /// Being deleted while holding the finalizer: the reconcile's cleanup state runs.
    Cleanup,
    /// Being deleted without the finalizer: it goes, with nothing left to undo.
    Leaving,
}

impl Lifecycle {
    fn of(policy: &FailoverPolicy) -> Self {
        let holds = policy
            .finalizers()
            .iter()
            .any(|f| f == failover_core::api::SCALE_FINALIZER);
        match (policy.metadata.deletion_timestamp.is_some(), holds) {
            (false, false) => Lifecycle::Live,
            (false, true) => Lifecycle::LiveHolding,
            (true, true) => Lifecycle::Cleanup,
            (true, false) => Lifecycle::Leaving,
        }
    }

    /// Whether the policy is being deleted.
    pub fn deleting(self) -> bool {
        matches!(self, Lifecycle::Cleanup | Lifecycle::Leaving)
    }

    /// Whether the policy holds the finalizer.
    pub fn holds_finalizer(self) -> bool {
        matches!(self, Lifecycle::LiveHolding | Lifecycle::Cleanup)
    }
}

impl Identity {
    fn of(policy: &FailoverPolicy) -> Self {
        let meta = &policy.metadata;
        Self {
            uid: meta.uid.as_deref().unwrap_or_default().into(),
            generation: meta.generation,
            version: version_of(policy),
            created: meta
                .creation_timestamp
                .as_ref()
                .map_or(i64::MAX, |t| t.0.as_second()),
            lifecycle: Lifecycle::of(policy),
        }
    }

    /// Whether this is the identity of the same object at the same generation.
    fn same_generation(&self, policy: &FailoverPolicy) -> bool {
        self.generation.is_some()
            && policy.metadata.generation == self.generation
            && policy.metadata.uid.as_deref() == Some(&*self.uid)
    }
}

/// A policy as the table holds it, with its key.
#[derive(Clone, Debug)]
pub struct PolicyEntry {
    /// Its namespace and name.
    pub key: PolicyKey,
    /// Who it is.
    pub identity: Identity,
    /// Its spec, validated for its generation.
    pub spec: Spec,
    /// Its status as last written, compact.
    pub last: Option<LastStatus>,
}

impl PolicyEntry {
    /// A reference to the policy, for its Events.
    pub fn object_reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(FailoverPolicy::api_version(&()).into()),
            kind: Some(FailoverPolicy::kind(&()).into()),
            namespace: Some(self.key.namespace.to_string()),
            name: Some(self.key.name.to_string()),
            uid: Some(self.identity.uid.to_string()),
            resource_version: self.identity.version.map(|v| v.to_string()),
            field_path: None,
        }
    }
}

/// A policy as the table keeps it, boxed in the table's map so that the map's spare buckets
/// (a hash map keeps about a third of them empty) cost a pointer each, not an entry.
#[derive(Debug)]
struct Entry {
    identity: Identity,
    spec: Spec,
    last: Option<LastStatus>,
}

/// What a watch event changed in the table.
#[derive(Clone, Debug)]
pub enum TableChange {
    /// The policy is new or changed.
    Upserted {
        /// The policy now.
        held: Box<PolicyEntry>,
        /// The policy before, if the table held it.
        previous: Option<Box<PolicyEntry>>,
        /// The watch event's object (its status seeds the health poller's readings).
        object: Arc<FailoverPolicy>,
        /// Its spec was validated anew (a new generation).
        revalidated: bool,
    },
    /// The policy is gone (as the table held it).
    Deleted(Box<PolicyEntry>),
    /// A complete list has been applied (the first list, or a relist).
    Listed,
}

/// Every policy of the watched scope.
#[derive(Debug, Default)]
pub struct PolicyTable {
    store: Store<PolicyKey, Box<Entry>>,
    /// The names the keys share.
    namespaces: Namespaces,
}

/// How the table takes the spec of a policy a watch event applies.
#[derive(Debug)]
pub enum Validation {
    /// As the table holds it for this uid and generation: none was needed.
    Held,
    /// Validated afresh for this generation.
    Fresh(Validated),
    /// This generation waits for its validation: the spec and generation the table holds stay
    /// (the policy routes by them until then); the rest (metadata, status) is this version's.
    Pending,
}

/// How the table keeps a policy: its spec as validated (fresh, or carried over from the version
/// before), the generation it was validated for when that is not the object's; the applied
/// object itself is kept aside for the change it makes.
struct Holding<'a> {
    namespaces: &'a Namespaces,
    spec: Option<Spec>,
    generation: Option<Option<i64>>,
    revalidated: bool,
    applied: Option<Arc<FailoverPolicy>>,
}

impl Keep<FailoverPolicy> for Holding<'_> {
    type Key = PolicyKey;
    type Entry = Box<Entry>;

    fn key(&self, policy: &FailoverPolicy) -> Option<PolicyKey> {
        self.namespaces.key_of(&policy.metadata)
    }

    fn version(&self, policy: &FailoverPolicy) -> Option<u64> {
        version_of(policy)
    }

    fn unchanged(&self, held: &Box<Entry>, policy: &FailoverPolicy) -> bool {
        // A version held while its generation waited for validation is not this validated one.
        held.identity.version.is_some()
            && held.identity.version == version_of(policy)
            && held.identity.generation == policy.metadata.generation
    }

    fn entry(&mut self, policy: FailoverPolicy) -> Box<Entry> {
        let spec = match self.spec.take() {
            Some(spec) => spec,
            // Never expected: the watch validates what the table does not hold.
            None => {
                self.revalidated = true;
                spec_of(&policy, failover_core::validate::validated(&policy))
            }
        };
        let mut identity = Identity::of(&policy);
        if let Some(generation) = self.generation {
            identity.generation = generation;
        }
        let entry = Box::new(Entry {
            identity,
            last: policy.status.as_ref().map(LastStatus::of),
            spec,
        });
        self.applied = Some(Arc::new(policy));
        entry
    }
}

/// A policy's spec as held, from its validation.
fn spec_of(policy: &FailoverPolicy, valid: Validated) -> Spec {
    match valid {
        Ok(valid) => Spec::Valid(valid),
        Err(problems) => Spec::Invalid(Arc::new(Invalid {
            problems,
            target: RouteTarget::of(policy),
            service: policy.spec.service.as_str().into(),
            status: policy.status.clone(),
        })),
    }
}

fn version_of(policy: &FailoverPolicy) -> Option<u64> {
    policy.metadata.resource_version.as_deref()?.parse().ok()
}

impl PolicyTable {
    /// An empty table whose keys share the names of `namespaces`.
    pub fn new(namespaces: Namespaces) -> Self {
        Self {
            store: Store::default(),
            namespaces,
        }
    }

    /// The policy, if the table has it.
    pub fn get(&self, key: &PolicyKey) -> Option<PolicyEntry> {
        self.store.get(key).map(|entry| held(key, entry))
    }

    /// Whether this version of a policy must be validated before [`Self::apply`] takes it: the
    /// table holds no validation of its uid and generation.
    pub fn needs_validation(&self, policy: &FailoverPolicy) -> bool {
        self.held_spec(policy).is_none()
    }

    /// The spec the table holds of this policy's uid and generation.
    fn held_spec(&self, policy: &FailoverPolicy) -> Option<&Spec> {
        let entry = self.store.get(&key_of(policy)?)?;
        entry
            .identity
            .same_generation(policy)
            .then_some(&entry.spec)
    }

    /// The valid spec the table holds of this policy's uid, of any generation: what a new
    /// generation may take over unparsed (its health query, when the text is the same).
    pub fn held_valid(&self, policy: &FailoverPolicy) -> Option<Arc<ValidPolicy>> {
        let entry = self.store.get(&key_of(policy)?)?;
        let same_uid = policy.metadata.uid.as_deref() == Some(&*entry.identity.uid);
        same_uid.then(|| entry.spec.valid().cloned()).flatten()
    }

    /// The policies whose route names a Gateway that `names` picks (by the Gateway's
    /// namespace and name, and the policy's namespace).
    pub fn on_gateways(&self, names: impl Fn(&str, &str, &str) -> bool) -> Vec<PolicyEntry> {
        self.store
            .keys()
            .filter_map(|key| {
                let entry = self.store.get(key)?;
                let on = entry.spec.target().parents().iter().any(|p| {
                    p.kind == failover_core::route::ParentKind::Gateway
                        && names(
                            p.namespace.as_deref().unwrap_or(&key.namespace),
                            &p.name,
                            &key.namespace,
                        )
                });
                on.then(|| held(key, entry))
            })
            .collect()
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
    /// has every event of the policy watch, when this event moved it. `validation` says how the
    /// applied policy's spec is taken: as held, validated afresh (when
    /// [`Self::needs_validation`] said so), or pending its validation.
    pub fn apply(
        &mut self,
        event: watcher::Event<FailoverPolicy>,
        validation: Validation,
    ) -> (Vec<TableChange>, Option<u64>) {
        let revalidated = matches!(validation, Validation::Fresh(_));
        let mut generation = None;
        let spec = match (&event, validation) {
            (watcher::Event::Apply(p) | watcher::Event::InitApply(p), Validation::Fresh(valid)) => {
                Some(spec_of(p, valid))
            }
            (watcher::Event::Apply(p) | watcher::Event::InitApply(p), Validation::Pending) => {
                let entry = key_of(p).and_then(|key| self.store.get(&key));
                let same_uid =
                    entry.filter(|e| p.metadata.uid.as_deref() == Some(&*e.identity.uid));
                // A policy the table does not hold yet appears once validated.
                let Some(entry) = same_uid else {
                    return (Vec::new(), None);
                };
                generation = Some(entry.identity.generation);
                Some(refreshed(entry.spec.clone(), p))
            }
            (watcher::Event::Apply(p) | watcher::Event::InitApply(p), Validation::Held) => {
                self.held_spec(p).cloned().map(|spec| refreshed(spec, p))
            }
            _ => None,
        };
        let mut holding = Holding {
            namespaces: &self.namespaces,
            revalidated,
            spec,
            generation,
            applied: None,
        };
        let applied = self.store.apply(event, &mut holding);
        let mut object = holding.applied;
        let mut changes: Vec<TableChange> = applied
            .changes
            .into_iter()
            .filter_map(|change| match change {
                store::EntryChange::Upserted { key, previous } => Some(TableChange::Upserted {
                    held: Box::new(self.get(&key)?),
                    previous: previous.map(|p| Box::new(held(&key, &p))),
                    object: object.take()?,
                    revalidated: holding.revalidated,
                }),
                store::EntryChange::Deleted { key, entry } => {
                    Some(TableChange::Deleted(Box::new(held(&key, &entry))))
                }
            })
            .collect();
        if applied.listed {
            changes.push(TableChange::Listed);
        }
        (changes, applied.complete_through)
    }
}

/// A held spec carried over to a new version of the same generation: an invalid policy's
/// whole status is the new version's.
fn refreshed(spec: Spec, policy: &FailoverPolicy) -> Spec {
    match spec {
        Spec::Valid(_) => spec,
        Spec::Invalid(invalid) => Spec::Invalid(Arc::new(Invalid {
            problems: invalid.problems.clone(),
            target: invalid.target.clone(),
            service: invalid.service.clone(),
            status: policy.status.clone(),
        })),
    }
}

fn held(key: &PolicyKey, entry: &Entry) -> PolicyEntry {
    PolicyEntry {
        key: key.clone(),
        identity: entry.identity.clone(),
        spec: entry.spec.clone(),
        last: entry.last.clone(),
    }
}

/// A policy's key; `None` without a namespace or name.
pub fn key_of(policy: &FailoverPolicy) -> Option<PolicyKey> {
    object_key(&policy.metadata, Namespace::new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use failover_core::{
        api::{FailoverPolicySpec, SecondaryBackend},
        last_status::Compact,
    };

    fn policy(name: &str, version: &str) -> FailoverPolicy {
        let mut p = FailoverPolicy::new(
            name,
            FailoverPolicySpec {
                service: "web".into(),
                primary: "web-a".into(),
                secondaries: vec![SecondaryBackend::new("web-b")],
                ..Default::default()
            },
        );
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some(format!("uid-{name}"));
        p.metadata.generation = Some(1);
        p.metadata.resource_version = Some(version.into());
        p
    }

    /// Applies an event, validating what the table asks to have validated.
    fn apply(table: &mut PolicyTable, event: watcher::Event<FailoverPolicy>) -> Vec<TableChange> {
        let validation = match &event {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p)
                if table.needs_validation(p) =>
            {
                Validation::Fresh(failover_core::validate::validated(p))
            }
            _ => Validation::Held,
        };
        table.apply(event, validation).0
    }

    fn names(changes: &[TableChange]) -> Vec<String> {
        changes
            .iter()
            .map(|c| match c {
                TableChange::Upserted { held, .. } => format!("+{}", held.key.name),
                TableChange::Deleted(held) => format!("-{}", held.key.name),
                TableChange::Listed => "listed".to_string(),
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
    fn a_policy_is_held_validated_with_its_identity_and_its_last_status() {
        let mut table = PolicyTable::default();
        let mut written = policy("a", "7");
        written.status = Some(failover_core::api::FailoverPolicyStatus {
            observed_generation: Some(1),
            active_backends: vec!["web-a".into()],
            ..Default::default()
        });
        apply(&mut table, watcher::Event::Apply(written.clone()));
        let held = table.get(&PolicyKey::new("ns", "a")).expect("held");
        assert_eq!(
            (
                &*held.identity.uid,
                held.identity.generation,
                held.identity.version
            ),
            ("uid-a", Some(1), Some(7))
        );
        assert_eq!(
            held.spec
                .valid()
                .map(|v| v.backend_names().collect::<Vec<_>>()),
            Some(vec!["web-a", "web-b"])
        );
        let last = held.last.expect("a last status");
        assert!(last.is(written.status.as_ref().expect("status")));
        assert_eq!(last.active().collect::<Vec<_>>(), ["web-a"]);

        // An invalid policy keeps its whole status, and the route it would own.
        let mut invalid = written.clone();
        invalid.metadata.generation = Some(2);
        invalid.metadata.resource_version = Some("8".into());
        invalid.spec.primary = String::new();
        apply(&mut table, watcher::Event::Apply(invalid.clone()));
        let held = table.get(&PolicyKey::new("ns", "a")).expect("held");
        let Spec::Invalid(kept) = &held.spec else {
            panic!("an empty primary is invalid")
        };
        assert_eq!(kept.status, invalid.status);
        assert_eq!(kept.target.name, "a");
    }

    #[test]
    fn a_policy_is_validated_once_per_generation() {
        let mut table = PolicyTable::default();
        let versioned = |version: &str, generation: i64| {
            let mut p = policy("a", version);
            p.metadata.generation = Some(generation);
            p
        };
        assert!(table.needs_validation(&versioned("1", 1)));
        let changes = apply(&mut table, watcher::Event::Apply(versioned("1", 1)));
        assert!(matches!(
            changes.as_slice(),
            [TableChange::Upserted {
                revalidated: true,
                ..
            }]
        ));
        // An annotation or a status write: a new version of the same generation.
        assert!(!table.needs_validation(&versioned("2", 1)));
        let changes = apply(&mut table, watcher::Event::Apply(versioned("2", 1)));
        assert!(matches!(
            changes.as_slice(),
            [TableChange::Upserted {
                revalidated: false,
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
