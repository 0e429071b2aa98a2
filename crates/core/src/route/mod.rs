//! The generated route: the one object a policy owns and whose weights carry its decision.
//!
//! Two kinds exist, each in its own module with its typed resource: [`trafficsplit`] (SMI
//! `TrafficSplit`) and [`httproute`] (Gateway API `HTTPRoute`). Everything else in the controller
//! sees a route only through this module's kind-neutral types:
//!
//! - [`RouteTarget`]: which object a policy generates (kind, name, how it is written);
//! - [`RouteRules`]: what a route says, normalized (apex, backends, weights), so the desired
//!   route and the one in the cluster compare as plain values, ignoring server defaults;
//! - [`RouteView`]: what the controller keeps of a route in the cluster (owner, label, version,
//!   rules), never the whole object.
//!
//! A third output kind is a new module here plus one arm in each `match` of this file.

pub mod claim;
pub mod httproute;
pub mod rules;
pub mod trafficsplit;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::{ApiResource, DynamicObject, ObjectMeta};

pub use self::claim::Claim;
pub use self::rules::{ParentKind, RouteBackend, RouteParent, RouteRules, RulesDigest};
use crate::{
    api::{FailoverPolicy, HttpRouteSpec, Output, TrafficSplitApiVersion, conditions::ready},
    digest::digest,
    observation::Namespace,
};

/// The one field manager every write of this controller uses.
pub const FIELD_MANAGER: &str = "failover-controller";
pub use crate::api::rules::POLICY_LABEL;
/// The standard label naming the tool that manages an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// How the route of a policy is written.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// An SMI TrafficSplit in this API version.
    TrafficSplit(TrafficSplitApiVersion),
    /// A Gateway API HTTPRoute.
    HttpRoute(Box<HttpShape>),
}

/// How an HTTPRoute is written: where it attaches, what it matches, the backends' port.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HttpShape {
    /// The parents: the apex Service and the Gateways, as the policy asks.
    pub parents: Vec<RouteParent>,
    /// The hostnames it serves.
    pub hostnames: Vec<String>,
    /// The path prefix it matches (`None`: every request).
    pub path_prefix: Option<String>,
    /// The backends' port.
    pub port: i32,
}

impl HttpShape {
    /// The HTTPRoute a policy asks for.
    fn of(apex: &str, route: &HttpRouteSpec) -> Self {
        let service = route.attaches_to_service().then(|| RouteParent {
            kind: ParentKind::Service,
            namespace: None,
            name: apex.to_string(),
            section_name: None,
            port: route.parent_port,
        });
        let gateways = route.gateways.iter().map(|g| RouteParent {
            kind: ParentKind::Gateway,
            namespace: g.namespace.clone(),
            name: g.name.clone(),
            section_name: g.section_name.clone(),
            port: g.port,
        });
        Self {
            parents: service.into_iter().chain(gateways).collect(),
            hostnames: route.hostnames.clone(),
            path_prefix: route.path_prefix.clone().filter(|p| p != "/"),
            port: route.port,
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

/// The kinds of route, without their form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RouteKind {
    /// SMI TrafficSplit.
    TrafficSplit,
    /// Gateway API HTTPRoute.
    HttpRoute,
}

impl RouteKind {
    /// Every kind.
    pub const ALL: [RouteKind; 2] = [RouteKind::TrafficSplit, RouteKind::HttpRoute];

    /// The kind as the API names it.
    pub fn as_str(self) -> &'static str {
        match self {
            RouteKind::TrafficSplit => "TrafficSplit",
            RouteKind::HttpRoute => "HTTPRoute",
        }
    }

    /// The kind in lower case, as metric labels (and watches) name it.
    pub fn metric_label(self) -> &'static str {
        match self {
            RouteKind::TrafficSplit => "trafficsplit",
            RouteKind::HttpRoute => "httproute",
        }
    }

    /// What the controller keeps of an object of this kind.
    pub fn view(self, object: &DynamicObject) -> RouteView {
        let rules = match self {
            RouteKind::TrafficSplit => object
                .clone()
                .try_parse::<trafficsplit::TrafficSplit>()
                .ok()
                .map(|split| trafficsplit::rules(&split)),
            RouteKind::HttpRoute => {
                return object
                    .clone()
                    .try_parse::<httproute::HttpRoute>()
                    .map_or_else(
                        |_| RouteView::new(&object.metadata, None),
                        |route| RouteView::of_http_route(&route),
                    );
            }
        };
        RouteView::new(&object.metadata, rules.as_ref())
    }

    /// The `Ready` reason when a route of this kind and the route's name is not the policy's.
    pub fn conflict_reason(self) -> &'static str {
        match self {
            RouteKind::TrafficSplit => ready::TRAFFIC_SPLIT_CONFLICT,
            RouteKind::HttpRoute => ready::HTTP_ROUTE_CONFLICT,
        }
    }

    /// The `Ready` reason when writing a route of this kind failed.
    pub fn write_failed_reason(self) -> &'static str {
        match self {
            RouteKind::TrafficSplit => ready::TRAFFIC_SPLIT_WRITE_FAILED,
            RouteKind::HttpRoute => ready::HTTP_ROUTE_WRITE_FAILED,
        }
    }

    /// The `Ready` reason when the CRD of this kind is not installed.
    pub fn crd_missing_reason(self) -> &'static str {
        match self {
            RouteKind::TrafficSplit => ready::TRAFFIC_SPLIT_CRD_MISSING,
            RouteKind::HttpRoute => ready::HTTP_ROUTE_CRD_MISSING,
        }
    }

    /// The spec field that names the route of this kind.
    pub fn name_field(self) -> &'static str {
        match self {
            RouteKind::TrafficSplit => "spec.trafficSplit.name",
            RouteKind::HttpRoute => "spec.httpRoute.name",
        }
    }
}

impl From<Output> for RouteKind {
    fn from(output: Output) -> Self {
        match output {
            Output::TrafficSplit => RouteKind::TrafficSplit,
            Output::HttpRoute => RouteKind::HttpRoute,
        }
    }
}

impl RouteTarget {
    /// This route without the parents `refuse` says no to, and those parents (none for a
    /// TrafficSplit, which has no parents).
    pub fn without_parents(
        &self,
        refuse: impl Fn(&RouteParent) -> bool,
    ) -> (RouteTarget, Vec<RouteParent>) {
        let Shape::HttpRoute(http) = &self.shape else {
            return (self.clone(), Vec::new());
        };
        let (refused, kept): (Vec<RouteParent>, Vec<RouteParent>) =
            http.parents.iter().cloned().partition(|p| refuse(p));
        let shape = Shape::HttpRoute(Box::new(HttpShape {
            parents: kept,
            ..(**http).clone()
        }));
        (
            RouteTarget {
                name: self.name.clone(),
                shape,
            },
            refused,
        )
    }

    /// The route a policy generates: the name it sets (default: the policy's name) and the form.
    pub fn of(policy: &FailoverPolicy) -> Self {
        let spec = &policy.spec;
        let policy_name = policy.metadata.name.clone().unwrap_or_default();
        match (spec.output, &spec.http_route) {
            (Output::HttpRoute, Some(route)) => Self {
                name: route.name.clone().unwrap_or(policy_name).into(),
                shape: Shape::HttpRoute(Box::new(HttpShape::of(&spec.service, route))),
            },
            // Validation refuses HTTPRoute without httpRoute; the port then is never used.
            (Output::HttpRoute, None) => Self {
                name: policy_name.into(),
                shape: Shape::HttpRoute(Box::new(HttpShape::of(
                    &spec.service,
                    &HttpRouteSpec::on_port(0),
                ))),
            },
            (Output::TrafficSplit, _) => Self {
                name: spec
                    .traffic_split
                    .name
                    .clone()
                    .unwrap_or(policy_name)
                    .into(),
                shape: Shape::TrafficSplit(spec.traffic_split.api_version),
            },
        }
    }

    /// The kind of route.
    pub fn kind(&self) -> RouteKind {
        match self.shape {
            Shape::TrafficSplit(_) => RouteKind::TrafficSplit,
            Shape::HttpRoute(_) => RouteKind::HttpRoute,
        }
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
        match &self.shape {
            Shape::TrafficSplit(version) => trafficsplit::resource(*version),
            Shape::HttpRoute(_) => httproute::resource(),
        }
    }

    /// What the route must say, with one weight per backend (primary first).
    pub fn rules<'a>(
        &self,
        apex: &str,
        backends: impl Iterator<Item = &'a str>,
        weights: &[i32],
    ) -> RouteRules {
        let backends = |port: Option<i32>| {
            backends
                .zip(weights)
                .map(|(service, weight)| RouteBackend {
                    service: service.to_string(),
                    port,
                    weight: i64::from(*weight),
                })
                .collect()
        };
        match &self.shape {
            Shape::TrafficSplit(_) => RouteRules {
                apex: apex.to_string(),
                parents: Vec::new(),
                hostnames: Vec::new(),
                path_prefix: None,
                backends: backends(None),
            },
            Shape::HttpRoute(http) => RouteRules {
                apex: String::new(),
                parents: http.parents.clone(),
                hostnames: http.hostnames.clone(),
                path_prefix: http.path_prefix.clone(),
                backends: backends(Some(http.port)),
            },
        }
    }

    /// The whole object to create or apply: owner reference, labels and rules.
    pub fn object(&self, meta: ObjectMeta, rules: &RouteRules) -> DynamicObject {
        match &self.shape {
            Shape::TrafficSplit(version) => trafficsplit::object(*version, meta, rules),
            Shape::HttpRoute(_) => httproute::object(meta, rules),
        }
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

/// What the controller keeps of a route in the cluster: digests where a comparison is all it
/// is used for (three allocations fewer per route than the strings).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteView {
    /// A digest of the uid of its controlling owner, if any.
    pub controller: Option<u64>,
    /// A digest of the value of its [`POLICY_LABEL`].
    pub policy_label: Option<u64>,
    /// Its resourceVersion, when a number (as etcd-backed API servers issue them).
    pub resource_version: Option<u64>,
    /// A digest of what it says, when it has the form this controller writes.
    pub rules: Option<RulesDigest>,
    /// What its parents' controllers said of it (an HTTPRoute's `status.parents`).
    pub answers: Vec<httproute::ParentAnswer>,
}

impl RouteView {
    /// The view of an object's metadata and (normalized) rules.
    pub fn new(meta: &ObjectMeta, rules: Option<&RouteRules>) -> Self {
        Self {
            controller: meta
                .owner_references
                .as_deref()
                .unwrap_or_default()
                .iter()
                .find(|o| o.controller == Some(true))
                .map(|o| digest(o.uid.as_str())),
            policy_label: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(POLICY_LABEL))
                .map(|policy| digest(policy.as_str())),
            resource_version: meta
                .resource_version
                .as_deref()
                .and_then(|v| v.parse().ok()),
            rules: rules.map(RulesDigest::of),
            answers: Vec::new(),
        }
    }

    /// The view of an HTTPRoute: its metadata, rules and its parents' answers.
    pub fn of_http_route(route: &httproute::HttpRoute) -> Self {
        Self {
            answers: httproute::answers(route),
            ..Self::new(&route.metadata, httproute::rules(route).as_ref())
        }
    }

    /// Whether the object is controlled by the owner with this uid.
    pub fn owned_by(&self, uid: &str) -> bool {
        self.controller == Some(digest(uid))
    }

    /// Whether its [`POLICY_LABEL`] names this policy.
    pub fn labelled_for(&self, policy: &str) -> bool {
        self.policy_label == Some(digest(policy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_route_attaches_to_the_service_unless_gateways_replace_it() {
        let mut route = HttpRouteSpec::on_port(8080);
        let kinds = |route: &HttpRouteSpec| -> Vec<ParentKind> {
            HttpShape::of("web", route)
                .parents
                .iter()
                .map(|p| p.kind)
                .collect()
        };
        assert_eq!(kinds(&route), [ParentKind::Service]);
        route.gateways = vec![crate::api::GatewayParent {
            name: "edge".into(),
            namespace: Some("infra".into()),
            section_name: None,
            port: None,
        }];
        assert_eq!(kinds(&route), [ParentKind::Gateway]);
        route.service_parent = Some(true);
        assert_eq!(kinds(&route), [ParentKind::Service, ParentKind::Gateway]);
    }

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
        let mut route = HttpRouteSpec::on_port(8080);
        route.parent_port = Some(80);
        let target = RouteTarget {
            name: "web".into(),
            shape: Shape::HttpRoute(Box::new(HttpShape::of("web", &route))),
        };
        let rules = target.rules("web", ["a", "b"].into_iter(), &[1, 0]);
        assert_eq!(rules.parents[0].port, Some(80));
        assert_eq!(
            rules.backends,
            vec![
                RouteBackend {
                    service: "a".into(),
                    port: Some(8080),
                    weight: 1
                },
                RouteBackend {
                    service: "b".into(),
                    port: Some(8080),
                    weight: 0
                }
            ]
        );
    }
}
