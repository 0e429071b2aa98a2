//! The APIs the controller needs: the FailoverPolicy CRD always, the TrafficSplit CRD and the
//! Gateway API's HTTPRoute CRD when a policy outputs one; each named with how to install it.

use crate::route::RouteKind;

/// An API the controller needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NeededApi {
    /// The FailoverPolicy CRD.
    FailoverPolicy,
    /// The SMI TrafficSplit CRD.
    TrafficSplit,
    /// The Gateway API HTTPRoute CRD.
    HttpRoute,
}

impl NeededApi {
    /// The API a route kind is written through.
    pub fn of_route(kind: RouteKind) -> Self {
        match kind {
            RouteKind::TrafficSplit => NeededApi::TrafficSplit,
            RouteKind::HttpRoute => NeededApi::HttpRoute,
        }
    }

    /// The CRD's name.
    pub fn crd(self) -> &'static str {
        match self {
            NeededApi::FailoverPolicy => "failoverpolicies.failover.dev",
            NeededApi::TrafficSplit => "trafficsplits.split.smi-spec.io",
            NeededApi::HttpRoute => "httproutes.gateway.networking.k8s.io",
        }
    }

    /// How to install it.
    pub fn install(self) -> &'static str {
        match self {
            NeededApi::FailoverPolicy => {
                "install the chart (it ships the CRD) or run: cargo run --bin crd-gen | kubectl apply -f -"
            }
            NeededApi::TrafficSplit => {
                "install a mesh's SMI extension, or the chart with --set trafficSplitCRD.install=true, or run: cargo run --bin crd-gen -- --with-traffic-split | kubectl apply -f -"
            }
            NeededApi::HttpRoute => {
                "install the Gateway API's standard CRDs (v1), e.g. kubectl apply -f https://github.com/kubernetes-sigs/gateway-api/releases/download/v1.6.3/standard-install.yaml"
            }
        }
    }

    /// One sentence: what is missing and how to install it.
    pub fn missing_message(self) -> String {
        format!(
            "the CRD {} is not installed; {}",
            self.crd(),
            self.install()
        )
    }
}

/// A kind of object the controller watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WatchKind {
    /// EndpointSlices: backend readiness (local, or of a remote cluster).
    EndpointSlice,
    /// Services: whether a backend exists (local, or of a remote cluster).
    Service,
    /// FailoverPolicies.
    FailoverPolicy,
    /// SMI TrafficSplits: the generated routes of that kind.
    TrafficSplit,
    /// Gateway API HTTPRoutes: the generated routes of that kind.
    HttpRoute,
    /// The Secrets declaring remote clusters.
    Secret,
}

impl WatchKind {
    /// The kinds watched in the local cluster, as the `watch_restarts` metric labels them.
    pub const LOCAL: [WatchKind; 5] = [
        WatchKind::EndpointSlice,
        WatchKind::Service,
        WatchKind::FailoverPolicy,
        WatchKind::TrafficSplit,
        WatchKind::HttpRoute,
    ];

    /// The kinds a decision needs listed before it can trust the caches.
    pub const DECISION_INPUTS: [WatchKind; 2] = [WatchKind::EndpointSlice, WatchKind::Service];

    /// The kind in lower case, as logs and metric labels name it.
    pub fn as_str(self) -> &'static str {
        match self {
            WatchKind::EndpointSlice => "endpointslice",
            WatchKind::Service => "service",
            WatchKind::FailoverPolicy => "failoverpolicy",
            WatchKind::TrafficSplit => "trafficsplit",
            WatchKind::HttpRoute => "httproute",
            WatchKind::Secret => "secret",
        }
    }

    /// The route kind this watch feeds, if it watches routes.
    pub fn route(self) -> Option<RouteKind> {
        match self {
            WatchKind::TrafficSplit => Some(RouteKind::TrafficSplit),
            WatchKind::HttpRoute => Some(RouteKind::HttpRoute),
            _ => None,
        }
    }

    /// The CRD this watch needs, if its kind is one.
    pub fn api(self) -> Option<NeededApi> {
        match self {
            WatchKind::FailoverPolicy => Some(NeededApi::FailoverPolicy),
            WatchKind::TrafficSplit => Some(NeededApi::TrafficSplit),
            WatchKind::HttpRoute => Some(NeededApi::HttpRoute),
            _ => None,
        }
    }
}

impl RouteKind {
    /// The watch of this route kind.
    pub fn watch(self) -> WatchKind {
        match self {
            RouteKind::TrafficSplit => WatchKind::TrafficSplit,
            RouteKind::HttpRoute => WatchKind::HttpRoute,
        }
    }
}

impl std::fmt::Display for WatchKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_route_watch_feeds_its_route_kind_and_needs_its_crd() {
        for kind in RouteKind::ALL {
            assert_eq!(kind.watch().route(), Some(kind));
            assert_eq!(kind.watch().api(), Some(NeededApi::of_route(kind)));
        }
        assert_eq!(WatchKind::Service.api(), None);
    }
}
