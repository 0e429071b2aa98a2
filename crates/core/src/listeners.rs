//! What each Gateway's listeners admit: the Gateway owner's consent to the routes the
//! controller writes there. A Gateway accepts a route on a listener only when the listener's
//! `allowedRoutes` admits the route's namespace (`from: Same`, `All`, or `Selector` over the
//! namespace's labels) and its kind (`kinds`, else the kinds of the listener's protocol). A
//! policy claims a hostname on a listener only where its route can be accepted there
//! ([`crate::tenancy::Gateways`]), so a namespace the Gateway was not built for takes nothing from
//! the one it was.
//!
//! Held compactly: per Gateway, each listener's name, port and what it admits (kinds as a bit
//! set); per namespace, its labels, read only by a listener's selector. What the controller has
//! not seen (a Gateway not created yet, not watchable, or a namespace's labels unknown) it does
//! not judge: the route attaches as asked and the Gateway answers in the route's status.
//!
//! Under a shard (`--shard`, a selector on namespaces' labels) the same namespaces' labels say
//! which policies this controller owns ([`Listeners::in_shard`]). Shards never talk to each
//! other, so a listener is routed by one shard only, by a rule that needs no arbiter: the shard
//! that holds every namespace the listener admits, else the shard of the Gateway's namespace.
//! Another shard's policy leaves that listener out of its route and claims nothing there
//! (`Attached=False`, reason `ListenerOfAnotherShard`), so no hostname on it is claimed twice.

use std::collections::{BTreeMap, HashMap};

use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use crate::{
    labels::{Labels, Selector},
    route::{RouteKind, RouteParent},
};

/// The Gateway API's group, the only group whose route kinds a listener's `kinds` names here.
const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

/// The Gateway API's Gateway resource, as the controller watches it and what-if lists it.
pub fn resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(GATEWAY_GROUP, "v1", "Gateway"))
}

/// Route kinds as a bit set (bit [`RouteKind::index`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Kinds(u8);

impl Kinds {
    const ALL: Kinds = Kinds(u8::MAX);

    fn of(kinds: &[RouteKind]) -> Self {
        Kinds(kinds.iter().fold(0, |set, k| set | (1 << k.index())))
    }

    fn has(self, kind: RouteKind) -> bool {
        self.0 & (1 << kind.index()) != 0
    }

    /// The kinds a listener of `protocol` admits when its `allowedRoutes.kinds` names none, as
    /// the Gateway API defines them; every kind for a protocol it does not define.
    fn of_protocol(protocol: &str) -> Self {
        match protocol {
            "HTTP" | "HTTPS" => Kinds::of(&[RouteKind::HttpRoute, RouteKind::GrpcRoute]),
            "TLS" => Kinds::of(&[RouteKind::TlsRoute, RouteKind::TcpRoute]),
            "TCP" => Kinds::of(&[RouteKind::TcpRoute]),
            "UDP" => Kinds::default(),
            _ => Kinds::ALL,
        }
    }
}

/// Which namespaces' routes a listener admits (`allowedRoutes.namespaces.from`).
#[derive(Clone, Debug, PartialEq, Eq)]
enum From {
    /// The Gateway's own namespace (the default).
    Same,
    /// Every namespace.
    All,
    /// The namespaces whose labels meet every requirement; `None`: a selector this controller
    /// cannot read, which it does not judge.
    Selector(Option<Selector>),
}

/// One listener of a Gateway, as far as admission goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listener {
    /// Its name (`sectionName` names it).
    pub name: Box<str>,
    /// Its port.
    pub port: i32,
    from: From,
    kinds: Kinds,
}

/// A Gateway's listeners, as far as admission goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GatewayListeners(Box<[Listener]>);

impl GatewayListeners {
    /// The listeners of a Gateway object's `spec` (a listener it cannot read is left out).
    pub fn of_spec(spec: &Value) -> Self {
        let listeners = spec["listeners"].as_array().into_iter().flatten();
        Self(listeners.filter_map(listener).collect())
    }

    /// Whether any listener admits by a selector (and so reads namespaces' labels).
    fn selects(&self) -> bool {
        self.0.iter().any(|l| matches!(l.from, From::Selector(_)))
    }
}

fn listener(value: &Value) -> Option<Listener> {
    let allowed = &value["allowedRoutes"];
    let from = match allowed["namespaces"]["from"].as_str() {
        Some("All") => From::All,
        Some("Selector") => From::Selector(Selector::of_object(&allowed["namespaces"]["selector"])),
        _ => From::Same,
    };
    let named = allowed["kinds"].as_array().filter(|k| !k.is_empty());
    let kinds = match named {
        Some(named) => Kinds::of(
            &named
                .iter()
                .filter(|k| k["group"].as_str().unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP)
                .filter_map(|k| RouteKind::named(k["kind"].as_str()?))
                .collect::<Vec<_>>(),
        ),
        None => Kinds::of_protocol(value["protocol"].as_str().unwrap_or_default()),
    };
    Some(Listener {
        name: value["name"].as_str()?.into(),
        port: i32::try_from(value["port"].as_i64()?).ok()?,
        from,
        kinds,
    })
}

/// Whether a Gateway takes a policy's route on a parent reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// The controller has not seen the Gateway: the route attaches as asked and the Gateway
    /// answers; the parent's listener is as the reference names it.
    Unknown,
    /// These listeners (by name) admit the route.
    Listeners(Vec<Box<str>>),
    /// No listener the reference names admits the route: the `Attached` reason, and why in one
    /// line (naming the listener, never another namespace).
    Refused {
        /// `NoMatchingParent` or `NotAllowedByListeners`, as the Gateway API names them.
        reason: &'static str,
        /// Why.
        message: String,
    },
}

/// Every Gateway's listeners and the labels of the namespaces a selector reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listeners {
    /// By namespace, then name: a reconcile looks a Gateway up by reference, without a key
    /// to build.
    gateways: HashMap<Box<str>, HashMap<Box<str>, GatewayListeners>>,
    labels: HashMap<Box<str>, Box<Labels>>,
    /// The namespaces whose policies this controller owns (`--shard`); `None`: every one.
    shard: Option<Selector>,
}

/// What a change of a namespace's labels changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LabelsChanged {
    /// What a listener admits or which shard routes it may read differently now.
    pub admission: bool,
    /// The namespace joined or left this controller's shard.
    pub shard: bool,
}

impl Listeners {
    /// No Gateway or namespace seen yet, for a controller that owns the namespaces `shard`
    /// selects (`None`: every namespace).
    pub fn sharded(shard: Option<Selector>) -> Self {
        Self {
            shard,
            ..Self::default()
        }
    }

    /// Whether this controller owns the policies of `namespace`: every namespace without a
    /// shard; under one, a namespace whose labels it has seen and its selector picks.
    pub fn in_shard(&self, namespace: &str) -> bool {
        match &self.shard {
            None => true,
            Some(shard) => self.labels.get(namespace).is_some_and(|l| shard.matches(l)),
        }
    }

    /// Records a Gateway's listeners (`None`: the Gateway is gone); whether what it admits
    /// changed.
    pub fn set_gateway(
        &mut self,
        namespace: &str,
        name: &str,
        listeners: Option<GatewayListeners>,
    ) -> bool {
        match listeners {
            Some(l) if self.gateway(namespace, name) == Some(&l) => false,
            Some(l) => {
                let of_namespace = self.gateways.entry(namespace.into()).or_default();
                of_namespace.insert(name.into(), l);
                true
            }
            None => {
                let Some(of_namespace) = self.gateways.get_mut(namespace) else {
                    return false;
                };
                let removed = of_namespace.remove(name).is_some();
                if of_namespace.is_empty() {
                    self.gateways.remove(namespace);
                }
                removed
            }
        }
    }

    fn gateway(&self, namespace: &str, name: &str) -> Option<&GatewayListeners> {
        self.gateways.get(namespace)?.get(name)
    }

    /// The Gateways held that `keep` does not keep.
    pub fn gateways_but(&self, keep: impl Fn(&str, &str) -> bool) -> Vec<(String, String)> {
        let all = self
            .gateways
            .iter()
            .flat_map(|(ns, of_namespace)| of_namespace.keys().map(move |name| (&**ns, &**name)));
        all.filter(|(ns, name)| !keep(ns, name))
            .map(|(ns, name)| (ns.to_string(), name.to_string()))
            .collect()
    }

    /// Records a namespace's labels (`None`: the namespace is gone); what that changes.
    pub fn set_namespace(
        &mut self,
        namespace: &str,
        labels: Option<&BTreeMap<String, String>>,
    ) -> LabelsChanged {
        let labels: Option<Box<Labels>> = labels.map(|l| {
            l.iter()
                .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
                .collect()
        });
        let changed = self.labels.get(namespace) != labels.as_ref();
        let was_in_shard = self.in_shard(namespace);
        match labels {
            Some(labels) => {
                self.labels.insert(namespace.into(), labels);
            }
            None => {
                self.labels.remove(namespace);
            }
        }
        let shard = was_in_shard != self.in_shard(namespace);
        let mut gateways = self.gateways.values().flat_map(HashMap::values);
        // Under a shard, any namespace's labels may move a listener to another shard.
        let moved = self.shard.is_some() && shard && !self.gateways.is_empty();
        let admission = moved || changed && gateways.any(GatewayListeners::selects);
        LabelsChanged { admission, shard }
    }

    /// Whether the Gateway `namespace/name` takes a route of `kind` from `route_namespace` on
    /// `parent` (its `sectionName`, else its `port`, else every listener).
    pub fn admit(
        &self,
        namespace: &str,
        parent: &RouteParent,
        route_namespace: &str,
        kind: RouteKind,
    ) -> Admission {
        let Some(gateway) = self.gateway(namespace, &parent.name) else {
            return Admission::Unknown;
        };
        let named: Vec<&Listener> = gateway
            .0
            .iter()
            .filter(|l| parent.section_name.as_deref().is_none_or(|s| *s == *l.name))
            .filter(|l| parent.port.is_none_or(|p| p == l.port))
            .collect();
        let Some(first) = named.first() else {
            return Admission::Refused {
                reason: crate::api::conditions::attached::NO_MATCHING_PARENT,
                message: format!("it has no listener{}", listener_named(parent)),
            };
        };
        let admitting: Vec<&Listener> = named
            .iter()
            .copied()
            .filter(|l| l.kinds.has(kind) && self.admits_namespace(l, namespace, route_namespace))
            .collect();
        let routed_here: Vec<Box<str>> = admitting
            .iter()
            .filter(|l| self.routed_here(l, namespace))
            .map(|l| l.name.clone())
            .collect();
        if !routed_here.is_empty() {
            return Admission::Listeners(routed_here);
        }
        if let Some(first) = admitting.first() {
            return Admission::Refused {
                reason: crate::api::conditions::attached::LISTENER_OF_ANOTHER_SHARD,
                message: format!(
                    "its listener {} admits namespaces of other shards, and the shard of the Gateway's namespace routes it (--shard)",
                    first.name
                ),
            };
        }
        Admission::Refused {
            reason: crate::api::conditions::attached::NOT_ALLOWED_BY_LISTENERS,
            message: format!(
                "its listener {} {}",
                first.name,
                self.why_not(first, namespace, route_namespace, kind)
            ),
        }
    }

    /// Whether a listener admits routes of `route_namespace` (the Gateway's: `namespace`).
    fn admits_namespace(
        &self,
        listener: &Listener,
        namespace: &str,
        route_namespace: &str,
    ) -> bool {
        match &listener.from {
            From::Same => namespace == route_namespace,
            From::All | From::Selector(None) => true,
            From::Selector(Some(selector)) => match self.labels.get(route_namespace) {
                Some(labels) => selector.matches(labels),
                None => true,
            },
        }
    }

    /// Whether this controller's shard routes on a listener of a Gateway of `namespace`: with no
    /// shard, always; else when the Gateway's namespace is in the shard, or every namespace seen
    /// that the listener admits is.
    fn routed_here(&self, listener: &Listener, namespace: &str) -> bool {
        let Some(shard) = &self.shard else {
            return true;
        };
        self.in_shard(namespace)
            || (self.labels.iter())
                .filter(|(admitted, _)| self.admits_namespace(listener, namespace, admitted))
                .all(|(_, labels)| shard.matches(labels))
    }

    /// Why a listener does not admit a route, in words that name no other namespace.
    fn why_not(
        &self,
        listener: &Listener,
        namespace: &str,
        route_namespace: &str,
        kind: RouteKind,
    ) -> String {
        if !self.admits_namespace(listener, namespace, route_namespace) {
            return match listener.from {
                From::Same => "admits routes of the Gateway's own namespace only (allowedRoutes.namespaces.from: Same)".to_string(),
                _ => format!("admits routes of the namespaces its selector picks, and namespace {route_namespace} is not one (allowedRoutes.namespaces.selector)"),
            };
        }
        format!(
            "does not admit {} (allowedRoutes.kinds, or its protocol's kinds)",
            kind.as_str()
        )
    }
}

/// ` named X`, ` on port N`, or nothing, for a parent reference.
fn listener_named(parent: &RouteParent) -> String {
    match (&parent.section_name, parent.port) {
        (Some(name), Some(port)) => format!(" named {name} on port {port}"),
        (Some(name), None) => format!(" named {name}"),
        (None, Some(port)) => format!(" on port {port}"),
        (None, None) => "s".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::route::ParentKind;

    fn parent(section: Option<&str>, port: Option<i32>) -> RouteParent {
        RouteParent {
            kind: ParentKind::Gateway,
            namespace: Some("infra".into()),
            name: "edge".into(),
            section_name: section.map(String::from),
            port,
        }
    }

    /// The Gateway `infra/edge`: `web` (HTTP 80, every namespace), `tcp` (TCP 5432, its own
    /// namespace), `shops` (HTTPS 443, namespaces labelled `tier: shop`, GRPCRoutes only).
    fn edge() -> Listeners {
        let spec = json!({"listeners": [
            {"name": "web", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}},
            {"name": "tcp", "port": 5432, "protocol": "TCP"},
            {"name": "shops", "port": 443, "protocol": "HTTPS", "allowedRoutes": {
                "namespaces": {"from": "Selector", "selector": {"matchLabels": {"tier": "shop"}}},
                "kinds": [{"kind": "GRPCRoute"}]}},
        ]});
        let mut listeners = Listeners::default();
        assert!(listeners.set_gateway("infra", "edge", Some(GatewayListeners::of_spec(&spec))));
        assert!(
            !listeners.set_gateway("infra", "edge", Some(GatewayListeners::of_spec(&spec))),
            "the same listeners again are no change"
        );
        listeners.set_namespace(
            "shop",
            Some(&BTreeMap::from([("tier".into(), "shop".into())])),
        );
        listeners.set_namespace("other", Some(&BTreeMap::new()));
        listeners
    }

    fn names(admission: Admission) -> Vec<String> {
        match admission {
            Admission::Listeners(names) => names.iter().map(|n| n.to_string()).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_listener_admits_a_route_only_of_the_namespaces_and_kinds_it_allows() {
        let edge = edge();
        let http = RouteKind::HttpRoute;
        assert_eq!(
            names(edge.admit("infra", &parent(None, None), "other", http)),
            ["web"]
        );
        assert_eq!(
            names(edge.admit("infra", &parent(None, None), "shop", RouteKind::GrpcRoute)),
            ["web", "shops"]
        );
        assert_eq!(
            names(edge.admit(
                "infra",
                &parent(None, Some(5432)),
                "infra",
                RouteKind::TcpRoute
            )),
            ["tcp"]
        );
        assert_eq!(
            names(edge.admit(
                "infra",
                &parent(Some("tcp"), None),
                "infra",
                RouteKind::TcpRoute
            )),
            ["tcp"],
            "by name or by port, the same listener"
        );
        let refused = edge.admit(
            "infra",
            &parent(Some("tcp"), None),
            "other",
            RouteKind::TcpRoute,
        );
        assert_eq!(
            refused,
            Admission::Refused {
                reason: crate::api::conditions::attached::NOT_ALLOWED_BY_LISTENERS,
                message: "its listener tcp admits routes of the Gateway's own namespace only (allowedRoutes.namespaces.from: Same)".into(),
            }
        );
        let Admission::Refused { message, .. } = edge.admit(
            "infra",
            &parent(Some("shops"), None),
            "other",
            RouteKind::GrpcRoute,
        ) else {
            panic!("refused")
        };
        assert!(message.contains("namespace other is not one"), "{message}");
        let Admission::Refused { message, .. } =
            edge.admit("infra", &parent(Some("shops"), None), "shop", http)
        else {
            panic!("refused")
        };
        assert!(
            message.ends_with(
                "does not admit HTTPRoute (allowedRoutes.kinds, or its protocol's kinds)"
            ),
            "{message}"
        );
        let Admission::Refused { reason, message } =
            edge.admit("infra", &parent(None, Some(8443)), "infra", http)
        else {
            panic!("refused")
        };
        assert_eq!(
            (reason, message.as_str()),
            (
                crate::api::conditions::attached::NO_MATCHING_PARENT,
                "it has no listener on port 8443"
            )
        );
        assert_eq!(
            edge.admit(
                "infra",
                &RouteParent {
                    name: "unseen".into(),
                    ..parent(None, None)
                },
                "other",
                http
            ),
            Admission::Unknown
        );
    }

    #[test]
    fn a_gateway_a_relist_does_not_list_is_found_and_a_gone_gateway_is_unknown() {
        let mut edge = edge();
        let empty = GatewayListeners::default();
        assert!(edge.set_gateway("infra", "spare", Some(empty)));
        assert_eq!(
            edge.gateways_but(|_, name| name == "edge"),
            [("infra".to_string(), "spare".to_string())]
        );
        assert!(edge.set_gateway("infra", "edge", None));
        assert!(!edge.set_gateway("infra", "edge", None), "already gone");
        let http = RouteKind::HttpRoute;
        assert_eq!(
            edge.admit("infra", &parent(None, None), "other", http),
            Admission::Unknown
        );
    }

    #[test]
    fn a_namespace_label_change_matters_only_to_a_selector() {
        let mut edge = edge();
        let grpc = RouteKind::GrpcRoute;
        assert!(
            edge.set_namespace(
                "other",
                Some(&BTreeMap::from([("tier".into(), "shop".into())]))
            )
            .admission
        );
        assert_eq!(
            names(edge.admit("infra", &parent(Some("shops"), None), "other", grpc)),
            ["shops"]
        );
        let mut plain = Listeners::default();
        plain.set_gateway(
            "infra",
            "edge",
            Some(GatewayListeners::of_spec(
                &json!({"listeners": [{"name": "web", "port": 80, "protocol": "HTTP"}]}),
            )),
        );
        assert!(
            !plain
                .set_namespace("other", Some(&BTreeMap::new()))
                .admission,
            "no selector reads labels"
        );
    }

    #[test]
    fn under_shards_a_listener_shared_by_two_shards_is_routed_by_the_gateways_shard_alone() {
        let spec = json!({"listeners": [
            {"name": "web", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}},
            {"name": "team-a", "port": 8080, "protocol": "HTTP", "allowedRoutes": {"namespaces": {
                "from": "Selector", "selector": {"matchLabels": {"team": "a"}}}}},
        ]});
        let shard = |value: &str| {
            let mut l = Listeners::sharded(Some(
                Selector::parse(&format!("failover.dev/shard={value}")).expect("selector"),
            ));
            l.set_gateway("infra", "edge", Some(GatewayListeners::of_spec(&spec)));
            for (ns, shard, team) in [
                ("infra", "a", "x"),
                ("shop-a", "a", "a"),
                ("shop-b", "b", "b"),
            ] {
                let labels = BTreeMap::from([
                    ("failover.dev/shard".to_string(), shard.to_string()),
                    ("team".to_string(), team.to_string()),
                ]);
                l.set_namespace(ns, Some(&labels));
            }
            l
        };
        let (a, b) = (shard("a"), shard("b"));
        assert!(a.in_shard("shop-a") && !a.in_shard("shop-b") && !a.in_shard("unseen"));
        assert!(b.in_shard("shop-b") && !b.in_shard("shop-a"));
        let http = RouteKind::HttpRoute;
        let web = parent(Some("web"), None);
        assert_eq!(names(a.admit("infra", &web, "shop-a", http)), ["web"]);
        match b.admit("infra", &web, "shop-b", http) {
            Admission::Refused { reason, message } => {
                assert_eq!(reason, "ListenerOfAnotherShard");
                assert!(
                    message.contains("web") && !message.contains("shop-a"),
                    "{message}"
                );
            }
            other => panic!("shard b routes on a listener of shard a: {other:?}"),
        }
        // A listener that admits namespaces of one shard only is that shard's, wherever the
        // Gateway is.
        let team = parent(Some("team-a"), None);
        assert_eq!(names(a.admit("infra", &team, "shop-a", http)), ["team-a"]);
        // shop-a moves to shard b: the listener admits namespaces of shard b only, so shard b
        // routes it, though the Gateway is in shard a.
        let mut b = b;
        let labels = |shard: &str, team: &str| {
            BTreeMap::from([
                ("failover.dev/shard".to_string(), shard.to_string()),
                ("team".to_string(), team.to_string()),
            ])
        };
        let changed = b.set_namespace("shop-a", Some(&labels("b", "a")));
        assert_eq!(
            changed,
            LabelsChanged {
                admission: true,
                shard: true
            }
        );
        assert_eq!(names(b.admit("infra", &team, "shop-a", http)), ["team-a"]);
        // A namespace of shard a joins team a: the listener spans two shards, and the
        // Gateway's (a) routes it.
        let changed = b.set_namespace("shop-c", Some(&labels("a", "a")));
        assert_eq!(
            changed,
            LabelsChanged {
                admission: true,
                shard: false
            }
        );
        assert!(
            matches!(
                b.admit("infra", &team, "shop-a", http),
                Admission::Refused { .. }
            ),
            "team-a's listener admits namespaces of two shards, and infra is in shard a"
        );
    }
}
