//! The generated route: the one object a policy owns and whose weights carry its decision.
//!
//! Each API lives in its own module with its typed resource: [`trafficsplit`] (SMI
//! `TrafficSplit`) and [`gateway`] (the Gateway API's `HTTPRoute`, `GRPCRoute`, `TLSRoute` and
//! `TCPRoute`, one generic kind described by data), each kind described once by a [`KindSpec`]
//! that [`KINDS`] lists ([`kind`]). Everything else in the controller sees a route
//! only through this module's kind-neutral types:
//!
//! - [`RouteTarget`]: which object a policy generates (kind, name, how it is written);
//! - [`RouteRules`]: what a route says, normalized (apex, backends, weights), so the desired
//!   route and the one in the cluster compare as plain values, ignoring server defaults;
//! - [`RouteView`]: what the controller keeps of a route in the cluster (owner, label, version,
//!   rules), never the whole object.
//!
//! Every kind is a row of the API crate's `route_kinds!` table, expanded here into
//! [`RouteKind`], [`KINDS`] and [`gateway::GATEWAY_KINDS`] ([`table`]). A new Gateway API kind is
//! a row (with its spec and status fields, and its CEL rules where it differs); a kind of
//! another API is also a new module (its [`KindSpec`] and its [`Form`]) and a [`Shape`] variant.

pub mod claim;
pub mod gateway;
pub mod kind;
mod object;
pub mod referenced;
pub mod rules;
mod table;
pub mod trafficsplit;
mod view;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::{ApiResource, DynamicObject, ObjectMeta};

pub use self::claim::{Claim, Traffic};
pub use self::gateway::{GatewayKind, GatewayShape};
pub use self::kind::{Form, KindSpec, RouteKind, VERBS};
pub use self::object::RouteObject;
pub use self::referenced::ReferencedRule;
pub use self::rules::{ParentKind, RouteBackend, RouteParent, RouteRules, RulesDigest};
pub use self::table::KINDS;
pub use self::view::RouteView;
use crate::{api::TrafficSplitApiVersion, backend::BackendRef, observation::Namespace};

/// The one field manager every write of this controller uses.
pub const FIELD_MANAGER: &str = "failover-controller";
pub use crate::api::rules::POLICY_LABEL;
/// The standard label naming the tool that manages an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// How the route of a policy is written: one variant per kind, its payload the kind's [`Form`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// An SMI TrafficSplit in this API version.
    TrafficSplit(TrafficSplitApiVersion),
    /// A Gateway API route (HTTPRoute, GRPCRoute, TLSRoute, TCPRoute).
    Gateway(Box<GatewayShape>),
    /// One named rule of a route the user owns (`spec.routeRef`).
    Referenced(Box<ReferencedRule>),
}

impl Shape {
    /// The route's form, as its kind's module gives it.
    pub fn form(&self) -> &dyn Form {
        match self {
            Shape::TrafficSplit(version) => version,
            Shape::Gateway(route) => &**route,
            Shape::Referenced(rule) => &**rule,
        }
    }
}

/// The object a policy generates and owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteTarget {
    /// Its name.
    pub name: compact_str::CompactString,
    /// Its kind and form.
    pub shape: Shape,
}

/// A route in the cluster, by kind, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouteKey {
    /// Its kind.
    pub kind: RouteKind,
    /// Its namespace.
    pub namespace: Namespace,
    /// Its name (inline when 24 bytes or shorter).
    pub name: compact_str::CompactString,
}

impl RouteTarget {
    /// The rule of a route the user owns, when the policy fails one over (`spec.routeRef`).
    pub fn referenced(&self) -> Option<&ReferencedRule> {
        match &self.shape {
            Shape::Referenced(rule) => Some(rule),
            _ => None,
        }
    }

    /// This route without the parents `refuse` says no to, and those parents (none for a kind
    /// without parents).
    pub fn without_parents(
        &self,
        refuse: impl Fn(&RouteParent) -> bool,
    ) -> (RouteTarget, Vec<RouteParent>) {
        let form = self.shape.form();
        let (refused, kept): (Vec<RouteParent>, Vec<RouteParent>) =
            form.parents().iter().cloned().partition(|p| refuse(p));
        let route = RouteTarget {
            name: self.name.clone(),
            shape: form.with_parents(kept),
        };
        (route, refused)
    }

    /// This route without the hostnames `lost` (only a Gateway API route names hostnames).
    pub fn without_hostnames(&self, lost: &[&str]) -> RouteTarget {
        let mut route = self.clone();
        if let Shape::Gateway(shape) = &mut route.shape {
            shape.hostnames.retain(|h| !lost.contains(&h.as_str()));
        }
        route
    }

    /// The kind of route.
    pub fn kind(&self) -> RouteKind {
        self.shape.form().spec().kind
    }

    /// What the route attaches to (nothing, for a kind without parents).
    pub fn parents(&self) -> &[RouteParent] {
        self.shape.form().parents()
    }

    /// The key of this route in a namespace.
    pub fn key(&self, namespace: &str) -> RouteKey {
        RouteKey {
            kind: self.kind(),
            namespace: Namespace::new(namespace),
            name: self.name.as_str().into(),
        }
    }

    /// The API resource the route is written through.
    pub fn resource(&self) -> ApiResource {
        self.shape.form().resource()
    }

    /// What the route must say, with one weight per backend (primary first).
    pub fn rules<'a>(
        &self,
        apex: &str,
        backends: impl Iterator<Item = &'a BackendRef>,
        weights: &[i32],
    ) -> RouteRules {
        let backends = backends
            .zip(weights)
            .map(|(backend, weight)| RouteBackend {
                backend: backend.clone(),
                port: None,
                weight: i64::from(*weight),
            })
            .collect();
        self.shape.form().rules(apex, backends)
    }

    /// The whole object to create or apply: owner reference, labels and rules.
    pub fn object(&self, meta: ObjectMeta, rules: &RouteRules) -> DynamicObject {
        self.shape.form().object(meta, rules)
    }
}

/// The policy (by name and uid) as the controller of the route it generates.
pub fn owner(policy: &str, uid: &str) -> OwnerReference {
    use kube::Resource;
    OwnerReference {
        api_version: crate::api::FailoverPolicy::api_version(&()).into(),
        kind: crate::api::FailoverPolicy::kind(&()).into(),
        name: policy.to_string(),
        uid: uid.to_string(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The metadata of a generated route: name, namespace, owner and labels.
pub fn metadata(name: &str, namespace: &str, policy: &str, owner: OwnerReference) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        labels: Some(BTreeMap::from([
            (POLICY_LABEL.to_string(), policy.to_string()),
            (MANAGED_BY_LABEL.to_string(), FIELD_MANAGER.to_string()),
        ])),
        owner_references: Some(vec![owner]),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::GatewayRouteSpec;

    #[test]
    fn traffic_split_resource_follows_the_api_version() {
        let target = RouteTarget {
            name: "web".into(),
            shape: Shape::TrafficSplit(TrafficSplitApiVersion::V1Alpha1),
        };
        let r = target.resource();
        assert_eq!(r.api_version, "split.smi-spec.io/v1alpha1");
        assert_eq!(r.plural, "trafficsplits");
    }

    #[test]
    fn rules_pair_backends_with_weights_and_ports() {
        let mut route = GatewayRouteSpec::on_port(8080);
        route.parent_port = Some(80);
        let target = RouteTarget {
            name: "web".into(),
            shape: Shape::Gateway(Box::new(GatewayShape::of(
                RouteKind::HttpRoute,
                "web",
                &route,
            ))),
        };
        let (a, b) = (BackendRef::service("a"), BackendRef::service("b"));
        let rules = target.rules("web", [&a, &b].into_iter(), &[1, 0]);
        assert_eq!(rules.parents[0].port, Some(80));
        assert_eq!(
            rules.backends,
            vec![
                RouteBackend {
                    backend: BackendRef::service("a"),
                    port: Some(8080),
                    weight: 1
                },
                RouteBackend {
                    backend: BackendRef::service("b"),
                    port: Some(8080),
                    weight: 0
                }
            ]
        );
    }
}
