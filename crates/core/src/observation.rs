//! What the sources know of a backend, in the form the decision reads: the keys that name
//! Services and policies, a backend's observation (endpoint counts, or why they cannot be
//! trusted), and its health reading. The local watches, the remote clusters and the health
//! pollers fill these; the gather step hands them to the decision.

use std::{fmt, ops::Deref, sync::Arc};

use chrono::{DateTime, Utc};

use crate::api::ReadinessFrom;

/// A namespace's name behind one thin pointer: a key holds a word for its namespace, where a
/// shared `str` took two, and a clone shares the name. The core makes each one afresh; a cache
/// that keeps many keys of one namespace makes them share one name (the controller's caches
/// intern them).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace(Arc<Box<str>>);

impl Namespace {
    /// A name of its own.
    pub fn new(name: &str) -> Self {
        Self(Arc::new(name.into()))
    }

    /// Whether a clone of this name is held elsewhere (an interner forgets a name only it holds).
    pub fn is_shared(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }
}

/// Found by the `str` (its hash, equality and order are the `str`'s).
impl std::borrow::Borrow<str> for Namespace {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl Deref for Namespace {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self.0, f)
    }
}

impl From<&str> for Namespace {
    fn from(name: &str) -> Self {
        Self::new(name)
    }
}

/// A policy by namespace and name: of its own type, so a backend's key never passes for a
/// policy's (a policy and its apex Service often share a name).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyKey {
    /// Namespace of the policy.
    pub namespace: Namespace,
    /// Name of the policy (inline when 24 bytes or shorter).
    pub name: compact_str::CompactString,
}

impl PolicyKey {
    /// A key from borrowed parts.
    pub fn new(namespace: &str, name: &str) -> Self {
        Self::in_namespace(Namespace::new(namespace), name)
    }

    /// A key in a namespace already held.
    pub fn in_namespace(namespace: Namespace, name: &str) -> Self {
        Self {
            namespace,
            name: name.into(),
        }
    }
}

impl fmt::Display for PolicyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A Service in another cluster, whose readiness stands for a backend's.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RemoteService {
    /// The cluster, as its Secret names it.
    pub cluster: String,
    /// The Service's namespace there.
    pub namespace: String,
    /// The Service's name there.
    pub service: String,
}

impl RemoteService {
    /// The remote Service a backend's `readinessFrom` names, its defaults filled in: the
    /// policy's namespace, the backend's own Service.
    pub fn of(from: &ReadinessFrom, policy_namespace: &str, backend_service: &str) -> Self {
        Self {
            cluster: from.cluster.clone(),
            namespace: from
                .namespace
                .clone()
                .unwrap_or_else(|| policy_namespace.to_string()),
            service: from
                .service
                .clone()
                .unwrap_or_else(|| backend_service.to_string()),
        }
    }
}

/// What the controller observed of one backend Service.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BackendObservation {
    /// The Service object exists.
    pub service_exists: bool,
    /// Number of EndpointSlices labelled with the Service's name.
    pub slices: u32,
    /// Ready endpoints over all slices.
    pub ready_endpoints: i32,
    /// All endpoints over all slices.
    pub total_endpoints: i32,
    /// Of those, the endpoints terminating (their Pod is being deleted: a rollout or a scale
    /// down), which the capacity rules do not count as capacity the backend is missing.
    pub terminating_endpoints: i32,
    /// Whether the counts can be trusted, and when they were last confirmed.
    pub availability: Availability,
    /// The last reading of the policy's health query for this backend, if it has one.
    pub health: Option<Reading>,
}

impl BackendObservation {
    /// An existing Service with one slice of `total` endpoints, `ready` of them ready.
    pub fn counted(ready: i32, total: i32) -> Self {
        Self {
            service_exists: true,
            slices: 1,
            ready_endpoints: ready,
            total_endpoints: total,
            ..Self::default()
        }
    }
}

/// Whether a backend's counts can be trusted, and when they were last confirmed: one state, so a
/// refused namespace, counts not known yet and counts from a cluster gone silent never
/// contradict each other.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Availability {
    /// The counts are confirmed now.
    #[default]
    Counted,
    /// The counts stand as last confirmed then (a remote cluster's last answer, as a status
    /// recorded it).
    AsOf(DateTime<Utc>),
    /// The counts are not known yet: their source (a remote cluster) has not answered since the
    /// controller started, and its `staleAfter` has not passed. The readiness the previous
    /// status recorded stands meanwhile, so a restart of the controller moves no traffic;
    /// without one, the backend counts as not ready, for `why`.
    Awaiting {
        /// Why the counts are not known.
        why: String,
        /// When they were last confirmed, if ever.
        as_of: Option<DateTime<Utc>>,
    },
    /// The counts cannot be trusted: they come from a cluster that is not answering (or not
    /// declared). The backend counts as not ready, with `why` as the reason.
    Unavailable {
        /// Why.
        why: String,
        /// When they were last confirmed, if ever.
        as_of: Option<DateTime<Utc>>,
    },
    /// The cluster does not grant the policy's namespace the remote namespace: it is not read at
    /// all. The text says which rule refused it.
    Refused(String),
}

impl Availability {
    /// As a status recorded a remote backend: not available for the recorded `why` when set,
    /// else counted as of `as_of` (now when none).
    pub fn recorded(why: Option<String>, as_of: Option<DateTime<Utc>>) -> Self {
        match (why, as_of) {
            (Some(why), as_of) => Self::Unavailable { why, as_of },
            (None, Some(at)) => Self::AsOf(at),
            (None, None) => Self::Counted,
        }
    }

    /// Why the counts cannot be trusted now (not known yet, unavailable or refused); `None`
    /// when they can.
    pub fn untrusted(&self) -> Option<&str> {
        match self {
            Self::Counted | Self::AsOf(_) => None,
            Self::Awaiting { why, .. } | Self::Unavailable { why, .. } | Self::Refused(why) => {
                Some(why)
            }
        }
    }

    /// When the counts were last confirmed, when that is not now.
    pub fn as_of(&self) -> Option<DateTime<Utc>> {
        match self {
            Self::AsOf(at) => Some(*at),
            Self::Awaiting { as_of, .. } | Self::Unavailable { as_of, .. } => *as_of,
            Self::Counted | Self::Refused(_) => None,
        }
    }
}

/// One answer of a backend's health query.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The value (`None`: the query returned no data).
    pub value: Option<f64>,
    /// When it was read.
    pub read_at: DateTime<Utc>,
}

/// What is known of one backend's health query.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reading {
    /// Its last answer (`None`: it has not answered yet, and gives no verdict).
    pub sample: Option<Sample>,
    /// The error of the latest query, while it fails (the sample is then the last good one).
    pub failing: Option<String>,
    /// The reason (of the `HealthQueryFailed` condition) when the query is refused, never sent:
    /// an address the admin did not allow, a query reading outside the policy's namespace.
    pub refused: Option<&'static str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_key_holds_one_word_for_its_namespace() {
        assert_eq!(size_of::<Namespace>(), size_of::<usize>());
        assert_eq!(
            size_of::<PolicyKey>(),
            size_of::<usize>() + size_of::<compact_str::CompactString>()
        );
        let (a, b) = (Namespace::new("team-a"), Namespace::new("team-b"));
        assert!(a < b && a == Namespace::new("team-a"));
        assert_eq!(format!("{a} {a:?}"), "team-a \"team-a\"");
    }

    #[test]
    fn a_clone_of_a_namespace_shares_its_name_and_a_new_one_does_not() {
        let a = Namespace::new("namespace-shared");
        assert!(!a.is_shared());
        let b = a.clone();
        assert!(Arc::ptr_eq(&a.0, &b.0) && a.is_shared());
        let c = Namespace::new("namespace-shared");
        assert!(!Arc::ptr_eq(&a.0, &c.0) && a == c);
    }

    #[test]
    fn a_recorded_remote_backend_is_unavailable_for_its_reason_else_counted_as_of_then() {
        let then = DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default();
        let silent = Availability::recorded(Some("cluster east unreachable".into()), Some(then));
        assert_eq!(silent.untrusted(), Some("cluster east unreachable"));
        assert_eq!(silent.as_of(), Some(then));
        let counted = Availability::recorded(None, Some(then));
        assert_eq!((counted.untrusted(), counted.as_of()), (None, Some(then)));
        assert_eq!(Availability::recorded(None, None), Availability::Counted);
        let refused = Availability::Refused("no grant".into());
        assert_eq!(
            (refused.untrusted(), refused.as_of()),
            (Some("no grant"), None)
        );
    }
}
