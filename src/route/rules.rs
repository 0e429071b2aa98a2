//! What a route says, normalized across kinds (the apex it serves, its weighted backends), so
//! the route the controller wants and the one in the cluster compare as plain values, ignoring
//! the API server's defaults. Each route kind converts to and from it.

/// What a route says, normalized across kinds: the apex it serves and its weighted backends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteRules {
    /// The apex Service (TrafficSplit root, HTTPRoute parent).
    pub apex: String,
    /// The apex port the route attaches to (HTTPRoute only).
    pub apex_port: Option<i32>,
    /// The backends in route order.
    pub backends: Vec<RouteBackend>,
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
