//! The APIs the controller needs: the FailoverPolicy CRD always, a route kind's CRD when a policy
//! outputs that kind; each named with how to install it. A route kind's API and watch are its
//! [`crate::route::KindSpec`]'s.

use crate::route::RouteKind;

/// Whether an API the controller needs is served, as the controller last found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiState {
    /// Served, or not known to be missing.
    Served,
    /// Known to be missing: its CRD is not installed.
    Missing,
}

/// An API the controller needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NeededApi {
    /// The FailoverPolicy CRD.
    FailoverPolicy,
    /// The FailoverGroup CRD.
    FailoverGroup,
    /// The CRD of a route kind.
    Route(RouteKind),
}

impl NeededApi {
    /// Every API the controller may need: the FailoverPolicy CRD, then each route kind's.
    pub fn all() -> impl Iterator<Item = NeededApi> {
        [NeededApi::FailoverPolicy, NeededApi::FailoverGroup]
            .into_iter()
            .chain(RouteKind::ALL.map(NeededApi::Route))
    }

    /// The API a route kind is written through.
    pub fn of_route(kind: RouteKind) -> Self {
        NeededApi::Route(kind)
    }

    /// The CRD's name.
    pub fn crd(self) -> &'static str {
        match self {
            NeededApi::FailoverPolicy => "failoverpolicies.failover.dev",
            NeededApi::FailoverGroup => "failovergroups.failover.dev",
            NeededApi::Route(kind) => kind.spec().crd,
        }
    }

    /// How to install it.
    pub fn install(self) -> &'static str {
        match self {
            NeededApi::FailoverPolicy | NeededApi::FailoverGroup => {
                "install the chart (it ships the CRD) or run: cargo run --bin crd-gen | kubectl apply -f -"
            }
            NeededApi::Route(kind) => kind.spec().install,
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
    /// FailoverGroups.
    FailoverGroup,
    /// The generated routes of one kind.
    Route(RouteKind),
    /// The Secrets declaring remote clusters.
    Secret,
    /// Gateways: what their listeners admit.
    Gateway,
    /// Namespaces (metadata only): the labels a listener's selector reads.
    Namespace,
}

impl WatchKind {
    /// The kinds watched in the local cluster, as the `watch_restarts` metric labels them: the
    /// decision inputs, the policies, and each route kind.
    pub const LOCAL: [WatchKind; 6 + RouteKind::ALL.len()] = {
        let mut local = [WatchKind::EndpointSlice; 6 + RouteKind::ALL.len()];
        local[1] = WatchKind::Service;
        local[2] = WatchKind::FailoverPolicy;
        local[3] = WatchKind::FailoverGroup;
        local[4] = WatchKind::Gateway;
        local[5] = WatchKind::Namespace;
        let mut i = 0;
        while i < RouteKind::ALL.len() {
            local[6 + i] = WatchKind::Route(RouteKind::ALL[i]);
            i += 1;
        }
        local
    };

    /// The kinds the claims need listed before they are made: what the Gateways' listeners
    /// admit.
    pub const ADMISSION: [WatchKind; 2] = [WatchKind::Gateway, WatchKind::Namespace];

    /// The kinds a decision needs listed before it can trust the caches.
    pub const DECISION_INPUTS: [WatchKind; 2] = [WatchKind::EndpointSlice, WatchKind::Service];

    /// The kind in lower case, as logs and metric labels name it.
    pub fn as_str(self) -> &'static str {
        match self {
            WatchKind::EndpointSlice => "endpointslice",
            WatchKind::Service => "service",
            WatchKind::FailoverPolicy => "failoverpolicy",
            WatchKind::FailoverGroup => "failovergroup",
            WatchKind::Route(kind) => kind.metric_label(),
            WatchKind::Secret => "secret",
            WatchKind::Gateway => "gateway",
            WatchKind::Namespace => "namespace",
        }
    }

    /// The route kind this watch feeds, if it watches routes.
    pub fn route(self) -> Option<RouteKind> {
        match self {
            WatchKind::Route(kind) => Some(kind),
            _ => None,
        }
    }

    /// The CRD this watch needs, if its kind is one.
    pub fn api(self) -> Option<NeededApi> {
        match self {
            WatchKind::FailoverPolicy => Some(NeededApi::FailoverPolicy),
            WatchKind::FailoverGroup => Some(NeededApi::FailoverGroup),
            WatchKind::Route(kind) => Some(NeededApi::Route(kind)),
            _ => None,
        }
    }
}

impl RouteKind {
    /// The watch of this route kind.
    pub fn watch(self) -> WatchKind {
        WatchKind::Route(self)
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
    use crate::route::KINDS;

    #[test]
    fn each_route_watch_feeds_its_route_kind_and_needs_its_crd() {
        for kind in RouteKind::ALL {
            assert_eq!(kind.watch().route(), Some(kind));
            assert_eq!(kind.watch().api(), Some(NeededApi::of_route(kind)));
        }
        assert_eq!(WatchKind::Service.api(), None);
    }

    #[test]
    fn route_watches_and_apis_keep_their_labels_and_messages() {
        let labels = WatchKind::LOCAL.map(WatchKind::as_str);
        let (others, routes) = labels.split_at(labels.len() - KINDS.len());
        assert_eq!(
            others,
            [
                "endpointslice",
                "service",
                "failoverpolicy",
                "failovergroup",
                "gateway",
                "namespace",
            ]
        );
        assert!(
            routes
                .iter()
                .eq(KINDS.iter().map(|kind| &kind.metric_label))
        );
        let messages: Vec<String> = NeededApi::all()
            .take(4)
            .map(NeededApi::missing_message)
            .collect();
        assert_eq!(
            messages,
            [
                "the CRD failoverpolicies.failover.dev is not installed; install the chart (it ships the CRD) or run: cargo run --bin crd-gen | kubectl apply -f -",
                "the CRD failovergroups.failover.dev is not installed; install the chart (it ships the CRD) or run: cargo run --bin crd-gen | kubectl apply -f -",
                "the CRD trafficsplits.split.smi-spec.io is not installed; install a mesh's SMI extension, or the chart with --set trafficSplitCRD.install=true, or run: cargo run --bin crd-gen -- --with-traffic-split | kubectl apply -f -",
                "the CRD httproutes.gateway.networking.k8s.io is not installed; install the Gateway API's standard CRDs (v1.6 or later serves GRPCRoute, TLSRoute and TCPRoute as v1), e.g. kubectl apply -f https://github.com/kubernetes-sigs/gateway-api/releases/download/v1.6.3/standard-install.yaml",
            ]
        );
    }
}
