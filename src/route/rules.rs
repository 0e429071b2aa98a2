//! What a route says, normalized across kinds (the apex it serves or the parents it attaches to,
//! its hostnames and path, its weighted backends), so the route the controller wants and the one
//! in the cluster compare as plain values, ignoring the API server's defaults. Each route kind
//! converts to and from it.

/// What a route says, normalized across kinds.
#[derive(Clone, Debug, PartialEq, Eq)]
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteBackend {
    /// The backend Service.
    pub service: String,
    /// Its port (HTTPRoute only).
    pub port: Option<i32>,
    /// Its weight.
    pub weight: i64,
}
