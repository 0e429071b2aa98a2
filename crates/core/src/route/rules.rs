//! What a route says, normalized across kinds (the apex it serves or the parents it attaches to,
//! its hostnames and path, its weighted backends), so the route the controller wants and the one
//! in the cluster compare as plain values, ignoring the API server's defaults. Each route kind
//! converts to and from it.

use crate::{backend::BackendRef, digest::digest};

/// What a route says, normalized across kinds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RouteRules {
    /// The apex Service (a TrafficSplit's root); empty for an HTTPRoute, whose parents say where
    /// it attaches.
    pub apex: String,
    /// Where an HTTPRoute attaches (the apex Service, Gateways), in the order written.
    pub parents: Vec<RouteParent>,
    /// The hostnames an HTTPRoute serves (empty: whatever its parents serve).
    pub hostnames: Vec<String>,
    /// The path prefix an HTTPRoute matches (`None`: `/`, every request).
    pub path_prefix: Option<String>,
    /// The backends in route order.
    pub backends: Vec<RouteBackend>,
}

/// What an HTTPRoute attaches to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ParentKind {
    /// A Service: the mesh pattern (GAMMA).
    Service,
    /// A Gateway.
    Gateway,
}

impl ParentKind {
    /// The kind as the API names it.
    pub fn as_str(self) -> &'static str {
        match self {
            ParentKind::Service => "Service",
            ParentKind::Gateway => "Gateway",
        }
    }
}

/// One parent of an HTTPRoute, as its `parentRefs` name it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouteParent {
    /// Service or Gateway.
    pub kind: ParentKind,
    /// Its namespace, when the reference names one (else the route's).
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// One listener of a Gateway, by name.
    pub section_name: Option<String>,
    /// The port (of the Service, or of the Gateway's listeners).
    pub port: Option<i32>,
}

impl RouteParent {
    /// `Gateway infra/edge` or `Service web`, with the listener or port when set, for messages.
    pub fn describe(&self, route_namespace: &str) -> String {
        let mut text = format!(
            "{} {}/{}",
            self.kind.as_str(),
            self.namespace.as_deref().unwrap_or(route_namespace),
            self.name
        );
        if let Some(section) = &self.section_name {
            text.push_str(&format!(" (listener {section})"));
        }
        if let Some(port) = self.port {
            text.push_str(&format!(" (port {port})"));
        }
        text
    }
}

/// One weighted backend of a route.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RouteBackend {
    /// The backend.
    pub backend: BackendRef,
    /// Its port (HTTPRoute only).
    pub port: Option<i32>,
    /// Its weight.
    pub weight: i64,
}

/// What the controller keeps of a route's rules: a digest of them all, to tell whether the route
/// says what the controller wants, and each backend's weight, keyed by a digest of its Service's
/// name, for the status to describe the route as it stands: one allocation per route, whatever
/// its rules say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RulesDigest {
    rules: u64,
    weights: Box<[(u64, i64)]>,
}

impl RulesDigest {
    /// The digest of these rules.
    pub fn of(rules: &RouteRules) -> Self {
        Self {
            rules: digest(rules),
            weights: rules
                .backends
                .iter()
                .map(|b| (digest(b.backend.name.as_str()), b.weight))
                .collect(),
        }
    }

    /// The weight the route gives this Service (its first backend of that name), if it has it.
    pub fn weight(&self, service: &str) -> Option<i64> {
        let service = digest(service);
        self.weights
            .iter()
            .find(|(s, _)| *s == service)
            .map(|(_, w)| *w)
    }

    /// Whether these are the digest of `rules`.
    pub fn says(&self, rules: &RouteRules) -> bool {
        self.rules == digest(rules)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(weights: &[(&str, i64)]) -> RouteRules {
        RouteRules {
            apex: "web".into(),
            parents: Vec::new(),
            hostnames: Vec::new(),
            path_prefix: None,
            backends: weights
                .iter()
                .map(|(service, weight)| RouteBackend {
                    backend: BackendRef::service(service),
                    port: None,
                    weight: *weight,
                })
                .collect(),
        }
    }

    #[test]
    fn a_digest_tells_the_rules_it_was_taken_of_and_their_weights() {
        let taken = RulesDigest::of(&rules(&[("a", 100), ("b", 0)]));
        assert!(taken.says(&rules(&[("a", 100), ("b", 0)])));
        assert!(!taken.says(&rules(&[("a", 0), ("b", 100)])));
        assert!(!taken.says(&rules(&[("b", 0), ("a", 100)])), "order counts");
        assert_eq!(taken.weight("a"), Some(100));
        assert_eq!(taken.weight("b"), Some(0));
        assert_eq!(taken.weight("c"), None);
    }
}
