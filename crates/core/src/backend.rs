//! What a backend is: a kind and a name, in the policy's namespace. Everything particular to a
//! kind is here, in one table matched on [`BackendKind`]: how a route names a backend of the
//! kind, and which EndpointSlice label ties slices to it (its readiness source). The rest of the
//! controller passes a [`BackendRef`] or a [`BackendKey`] along without looking at the kind.

use std::fmt;

use compact_str::CompactString;

use crate::observation::Namespace;

/// The kinds a backend can be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BackendKind {
    /// A Service: its readiness is its EndpointSlices', and routes send traffic to it.
    #[default]
    Service,
}

/// What is particular to one kind of backend.
#[derive(Debug)]
pub struct BackendKindSpec {
    /// The API group a route's `backendRefs` name it in (empty: the core group).
    pub group: &'static str,
    /// The kind as the API names it, in a route's `backendRefs`.
    pub kind: &'static str,
    /// The label that ties an EndpointSlice to a backend of this kind, its value the backend's
    /// name: the kind's readiness source.
    pub slice_label: &'static str,
}

/// A Service.
const SERVICE: BackendKindSpec = BackendKindSpec {
    group: "",
    kind: "Service",
    slice_label: crate::endpoints::SERVICE_NAME_LABEL,
};

impl BackendKind {
    /// Every kind.
    pub const ALL: [BackendKind; 1] = [BackendKind::Service];

    /// What is particular to this kind.
    pub fn spec(self) -> &'static BackendKindSpec {
        match self {
            BackendKind::Service => &SERVICE,
        }
    }

    /// The kind a route's backend reference names by its group and kind (unset: the core group,
    /// and `Service`, as the Gateway API defaults them); `None` for a kind that is no backend's.
    pub fn of_reference(group: Option<&str>, kind: Option<&str>) -> Option<Self> {
        let group = group.unwrap_or("");
        let kind = kind.unwrap_or(SERVICE.kind);
        Self::ALL
            .into_iter()
            .find(|k| k.spec().group == group && k.spec().kind == kind)
    }

    /// The backend an EndpointSlice's labels tie it to: the first kind whose label it carries,
    /// with that label's value.
    pub fn of_slice(labels: &std::collections::BTreeMap<String, String>) -> Option<(Self, &str)> {
        Self::ALL
            .into_iter()
            .find_map(|k| Some((k, labels.get(k.spec().slice_label)?.as_str())))
    }
}

/// A backend by kind and name, in the policy's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendRef {
    /// Its kind.
    pub kind: BackendKind,
    /// Its name (inline when 24 bytes or shorter).
    pub name: CompactString,
}

impl BackendRef {
    /// A Service, by name.
    pub fn service(name: &str) -> Self {
        Self {
            kind: BackendKind::Service,
            name: name.into(),
        }
    }

    /// Its key in a namespace.
    pub fn key(&self, namespace: &str) -> BackendKey {
        BackendKey {
            kind: self.kind,
            namespace: Namespace::new(namespace),
            name: self.name.clone(),
        }
    }
}

/// As messages name a backend: its name alone.
impl fmt::Display for BackendRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// A backend by kind, namespace and name: the key of the readiness caches and the index.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendKey {
    /// Its kind.
    pub kind: BackendKind,
    /// Its namespace.
    pub namespace: Namespace,
    /// Its name (inline when 24 bytes or shorter).
    pub name: CompactString,
}

impl BackendKey {
    /// A key from borrowed parts.
    pub fn new(kind: BackendKind, namespace: &str, name: &str) -> Self {
        Self::in_namespace(kind, Namespace::new(namespace), name)
    }

    /// A key in a namespace already held.
    pub fn in_namespace(kind: BackendKind, namespace: Namespace, name: &str) -> Self {
        Self {
            kind,
            namespace,
            name: name.into(),
        }
    }

    /// A Service's key.
    pub fn service(namespace: &str, name: &str) -> Self {
        Self::new(BackendKind::Service, namespace, name)
    }
}

/// As logs name a backend: `namespace/name`.
impl fmt::Display for BackendKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_reference_names_a_service_by_default_and_no_other_kind() {
        assert_eq!(
            BackendKind::of_reference(None, None),
            Some(BackendKind::Service)
        );
        assert_eq!(
            BackendKind::of_reference(Some(""), Some("Service")),
            Some(BackendKind::Service)
        );
        assert_eq!(
            BackendKind::of_reference(Some("multicluster.x-k8s.io"), Some("ServiceImport")),
            None
        );
    }

    #[test]
    fn a_slice_is_tied_to_the_backend_its_label_names() {
        let labels = [(
            crate::endpoints::SERVICE_NAME_LABEL.to_string(),
            "web".to_string(),
        )]
        .into();
        assert_eq!(
            BackendKind::of_slice(&labels),
            Some((BackendKind::Service, "web"))
        );
        assert_eq!(BackendKind::of_slice(&Default::default()), None);
    }

    #[test]
    fn a_backend_reads_as_its_name_and_its_key_as_namespace_and_name() {
        let web = BackendRef::service("web");
        assert_eq!(web.to_string(), "web");
        assert_eq!(web.key("ns").to_string(), "ns/web");
        assert_eq!(web.key("ns"), BackendKey::service("ns", "web"));
    }
}
