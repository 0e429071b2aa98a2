//! The Gateway API route kinds (`gateway.networking.k8s.io/v1`): HTTPRoute, GRPCRoute, TLSRoute
//! and TCPRoute, one generic kind described by data ([`GATEWAY_KINDS`], from the kinds' rows: the
//! spec field that shapes it and what it claims on a listener; its names and rules come with
//! its `Output`). A policy's route of any of them is a [`GatewayShape`] (its parents, hostnames, path prefix and backends' port), and
//! the resource, as far as this controller reads and writes it, is one typed form for every kind
//! ([`resource`]): parents, hostnames, one rule of weighted backends.

mod resource;

use std::collections::BTreeSet;

use kube::core::{ApiResource, DynamicObject, ObjectMeta};

pub use self::resource::*;
pub use super::table::GATEWAY_KINDS;
use super::{
    ParentKind, RouteBackend, RouteObject, RouteParent, RouteRules, RouteTarget, RouteView, Shape,
    claim::Traffic,
    kind::{self, Form, KindSpec, Module, RouteKind},
};
use crate::api::{
    FailoverPolicy, FailoverPolicySpec, GatewayParent, GatewayRouteSpec,
    rules::{self, CrossFieldRule, GatewayRouteRules, Hostnames},
};

/// What differs between the Gateway API route kinds, besides the names their rows derive: the
/// spec field that shapes the route and what its routes take on a Gateway listener (a row of
/// [`GATEWAY_KINDS`], expanded from the kind's row in the table of kinds).
pub struct GatewayKind {
    /// Its key.
    pub kind: RouteKind,
    /// The spec field that shapes the route.
    pub field: fn(&FailoverPolicySpec) -> Option<&GatewayRouteSpec>,
    /// What its routes take on a Gateway listener.
    pub traffic: Traffic,
}

/// How to install the standard Gateway API CRDs.
const INSTALL: &str = "install the Gateway API's standard CRDs (v1.6 or later serves GRPCRoute, TLSRoute and TCPRoute as v1), e.g. kubectl apply -f https://github.com/kubernetes-sigs/gateway-api/releases/download/v1.6.3/standard-install.yaml";

/// The [`KindSpec`] of a Gateway API kind: one module serves them all.
pub const fn kind_spec(kind: RouteKind) -> KindSpec {
    KindSpec::new(
        kind,
        INSTALL,
        Module {
            resource: api_resource,
            view,
            target,
            checks,
            fields_set,
        },
    )
}

impl GatewayKind {
    /// The Gateway kind of a route kind (`None` for a kind of another API).
    pub fn of(kind: RouteKind) -> Option<&'static GatewayKind> {
        GATEWAY_KINDS.iter().find(|g| g.kind == kind)
    }

    /// The CRD rules of the output and its field.
    fn rules(&self) -> &'static GatewayRouteRules {
        // Every Gateway kind's row names its rules.
        self.kind
            .output()
            .gateway_rules()
            .unwrap_or(&rules::HTTP_ROUTE)
    }
}

/// The API resource of a Gateway API kind's routes.
fn api_resource(kind: RouteKind) -> ApiResource {
    let output = kind.output();
    ApiResource {
        group: GATEWAY_GROUP.into(),
        version: "v1".into(),
        api_version: format!("{GATEWAY_GROUP}/v1"),
        kind: output.kind().into(),
        plural: output.plural().into(),
    }
}

/// How a Gateway API route is written: its kind, where it attaches, what it matches, the
/// backends' port.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GatewayShape {
    /// Its kind.
    pub kind: RouteKind,
    /// The parents: the apex Service and the Gateways, as the policy asks.
    pub parents: Vec<RouteParent>,
    /// The hostnames it serves.
    pub hostnames: Vec<String>,
    /// The path prefix it matches (`None`: every request).
    pub path_prefix: Option<String>,
    /// The backends' port.
    pub port: i32,
}

impl GatewayShape {
    /// The route of this kind a policy asks for.
    pub(crate) fn of(kind: RouteKind, apex: &str, route: &GatewayRouteSpec) -> Self {
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
            kind,
            parents: service.into_iter().chain(gateways).collect(),
            hostnames: route.hostnames.clone(),
            path_prefix: route.path_prefix.clone().filter(|p| p != "/"),
            port: route.port,
        }
    }

    /// What differs for its kind.
    pub fn gateway_kind(&self) -> &'static GatewayKind {
        // A shape is only made of a kind of GATEWAY_KINDS.
        GatewayKind::of(self.kind).unwrap_or(&GATEWAY_KINDS[0])
    }
}

impl Form for GatewayShape {
    fn spec(&self) -> &'static KindSpec {
        self.kind.spec()
    }

    fn resource(&self) -> ApiResource {
        api_resource(self.kind)
    }

    fn rules(&self, _apex: &str, backends: Vec<RouteBackend>) -> RouteRules {
        RouteRules {
            apex: String::new(),
            parents: self.parents.clone(),
            hostnames: self.hostnames.clone(),
            path_prefix: self.path_prefix.clone(),
            backends: backends
                .into_iter()
                .map(|b| RouteBackend {
                    port: Some(self.port),
                    ..b
                })
                .collect(),
        }
    }

    fn object(&self, meta: ObjectMeta, rules: &RouteRules) -> DynamicObject {
        let has_hostnames = self.gateway_kind().traffic != Traffic::Tcp;
        object(&self.resource(), meta, rules, has_hostnames)
    }

    fn parents(&self) -> &[RouteParent] {
        &self.parents
    }

    fn with_parents(&self, parents: Vec<RouteParent>) -> Shape {
        Shape::Gateway(Box::new(GatewayShape {
            parents,
            ..self.clone()
        }))
    }
}

/// The route of a Gateway API kind a policy generates: named by its field's `name` (default:
/// the policy's name), of the form the field asks for.
fn target(kind: RouteKind, policy: &FailoverPolicy) -> RouteTarget {
    let spec = &policy.spec;
    // Validation refuses the output without its field; the port then is never used.
    let unset = GatewayRouteSpec::on_port(0);
    let route = GatewayKind::of(kind)
        .and_then(|gateway| (gateway.field)(spec))
        .unwrap_or(&unset);
    RouteTarget {
        name: route
            .name
            .clone()
            .unwrap_or_else(|| kind::policy_name(policy))
            .into(),
        shape: Shape::Gateway(Box::new(GatewayShape::of(kind, &spec.service, route))),
    }
}

/// What the controller keeps of a Gateway API route: its metadata, rules and its parents'
/// answers.
fn view(object: &RouteObject) -> RouteView {
    let spec = object.spec::<RouteSpec>();
    let rules = spec.as_ref().and_then(rules);
    RouteView {
        answers: object
            .status::<RouteStatus>()
            .map(|status| answers(&status))
            .unwrap_or_default(),
        named_rules: spec
            .as_ref()
            .map(|spec| {
                named_rules(
                    spec,
                    object.metadata.namespace.as_deref().unwrap_or_default(),
                )
            })
            .unwrap_or_default(),
        ..RouteView::new(&object.metadata, rules.as_ref())
    }
}

/// Whether `spec` sets the field of a Gateway API kind.
fn fields_set(kind: RouteKind, spec: &FailoverPolicySpec) -> bool {
    GatewayKind::of(kind).is_some_and(|gateway| (gateway.field)(spec).is_some())
}

/// The rules of the output of a Gateway API kind (what it needs, and that its backends fit the
/// one rule it writes) and of its field, each with whether it holds.
fn checks(kind: RouteKind, spec: &FailoverPolicySpec) -> Vec<(bool, &'static CrossFieldRule)> {
    let Some(gateway) = GatewayKind::of(kind) else {
        return Vec::new();
    };
    let rules = gateway.rules();
    let ours = RouteKind::from(spec.output) == kind;
    let route = (gateway.field)(spec);
    let mut checks = vec![
        (!ours || route.is_some(), &rules.needs_port),
        (
            !ours || spec.secondaries.len() < rules::MAX_ROUTE_BACKENDS,
            &rules::ROUTE_BACKENDS_FIT,
        ),
    ];
    if let Some(rule) = &rules.only_with_output {
        checks.push((ours || route.is_none(), rule));
    }
    if let Some(route) = route {
        checks.extend(field_checks(route, rules));
    }
    checks
}

/// The rules on a route field, with whether each holds.
fn field_checks(
    route: &GatewayRouteSpec,
    rules: &'static GatewayRouteRules,
) -> Vec<(bool, &'static CrossFieldRule)> {
    let gateway = |g: &GatewayParent| (g.name.clone(), g.namespace.clone());
    let listener = |g: &GatewayParent| (gateway(g), g.section_name.clone(), g.port);
    let mut seen = BTreeSet::new();
    let distinct = route.gateways.iter().all(|g| seen.insert(listener(g)));
    let named_by_listener = route.gateways.iter().all(|g| {
        g.section_name.is_some()
            || g.port.is_some()
            || route
                .gateways
                .iter()
                .filter(|h| gateway(h) == gateway(g))
                .count()
                == 1
    });
    let mut checks = vec![
        (
            route.service_parent != Some(false) || !route.gateways.is_empty(),
            &rules.needs_a_parent,
        ),
        (distinct, &rules.distinct_gateways),
        (named_by_listener, &rules.same_gateway_needs_section),
    ];
    if let Some(rule) = &rules.no_path {
        checks.push((route.path_prefix.is_none(), rule));
    }
    match &rules.hostnames {
        Hostnames::Any => {}
        Hostnames::Required(rule) => checks.push((!route.hostnames.is_empty(), rule)),
        Hostnames::Refused(rule) => checks.push((route.hostnames.is_empty(), rule)),
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Output;

    #[test]
    fn an_http_route_attaches_to_the_service_unless_gateways_replace_it() {
        let mut route = GatewayRouteSpec::on_port(8080);
        let kinds = |route: &GatewayRouteSpec| -> Vec<ParentKind> {
            GatewayShape::of(RouteKind::HttpRoute, "web", route)
                .parents
                .iter()
                .map(|p| p.kind)
                .collect()
        };
        assert_eq!(kinds(&route), [ParentKind::Service]);
        route.gateways = vec![GatewayParent {
            name: "edge".into(),
            namespace: Some("infra".into()),
            section_name: None,
            port: None,
        }];
        assert_eq!(kinds(&route), [ParentKind::Gateway]);
        route.service_parent = Some(true);
        assert_eq!(kinds(&route), [ParentKind::Service, ParentKind::Gateway]);
    }

    fn policy(output: Output, route: GatewayRouteSpec) -> FailoverPolicy {
        let mut spec: FailoverPolicySpec = serde_json::from_value(serde_json::json!({
            "service": "db", "primary": "db-a", "secondaries": [{"service": "db-b"}],
        }))
        .expect("spec");
        spec.output = output;
        let field = match output {
            Output::GrpcRoute => &mut spec.grpc_route,
            Output::TlsRoute => &mut spec.tls_route,
            Output::TcpRoute => &mut spec.tcp_route,
            _ => &mut spec.http_route,
        };
        *field = Some(route);
        let mut policy = FailoverPolicy::new("db", spec);
        policy.metadata.namespace = Some("shop".into());
        policy
    }

    fn on_edge(hostnames: &[&str]) -> GatewayRouteSpec {
        GatewayRouteSpec {
            gateways: vec![GatewayParent {
                name: "edge".into(),
                namespace: None,
                section_name: Some("tls".into()),
                port: None,
            }],
            hostnames: hostnames.iter().map(|h| h.to_string()).collect(),
            ..GatewayRouteSpec::on_port(8443)
        }
    }

    #[test]
    fn each_kinds_route_is_written_through_its_own_resource_and_reads_back_as_written() {
        for (output, hostnames) in [
            (Output::HttpRoute, vec!["db.example.com"]),
            (Output::GrpcRoute, vec!["db.example.com"]),
            (Output::TlsRoute, vec!["db.example.com"]),
            (Output::TcpRoute, vec![]),
        ] {
            let target = RouteTarget::of(&policy(output, on_edge(&hostnames)));
            assert_eq!(target.kind().as_str(), output.kind());
            let (a, b) = (
                crate::backend::BackendRef::service("db-a"),
                crate::backend::BackendRef::service("db-b"),
            );
            let rules = target.rules("db", [&a, &b].into_iter(), &[0, 100]);
            let object = target.object(ObjectMeta::default(), &rules);
            let types = object.types.clone().expect("types");
            assert_eq!(types.api_version, "gateway.networking.k8s.io/v1");
            assert_eq!(types.kind, output.kind());
            let spec: RouteSpec =
                serde_json::from_value(object.data["spec"].clone()).expect("spec");
            assert_eq!(spec.hostnames.len(), hostnames.len(), "{output:?}");
            assert_eq!(spec.rules[0].backend_refs[1].weight, Some(100));
            assert_eq!(super::rules(&spec), Some(rules), "{output:?}");
        }
    }

    #[test]
    fn the_kind_rules_refuse_what_the_kind_cannot_route() {
        let broken = |output: Output, route: GatewayRouteSpec| -> Vec<&str> {
            let policy = policy(output, route);
            crate::route::KINDS
                .iter()
                .flat_map(|kind| kind.checks(&policy.spec))
                .filter(|(holds, _)| !holds)
                .map(|(_, rule)| rule.field)
                .collect()
        };
        assert_eq!(
            broken(Output::TlsRoute, on_edge(&[])),
            [".tlsRoute.hostnames"]
        );
        assert_eq!(
            broken(Output::TcpRoute, on_edge(&["db.example.com"])),
            [".tcpRoute.hostnames"]
        );
        let with_path = GatewayRouteSpec {
            path_prefix: Some("/api".into()),
            ..on_edge(&[])
        };
        assert_eq!(
            broken(Output::GrpcRoute, with_path),
            [".grpcRoute.pathPrefix"]
        );
        let mut astray = policy(Output::HttpRoute, on_edge(&[]));
        astray.spec.tcp_route = Some(on_edge(&[]));
        let astray: Vec<_> = crate::route::KINDS
            .iter()
            .flat_map(|kind| kind.checks(&astray.spec))
            .filter(|(holds, _)| !holds)
            .map(|(_, rule)| rule.field)
            .collect();
        assert_eq!(astray, [".tcpRoute"]);
        assert!(broken(Output::TcpRoute, on_edge(&[])).is_empty());
        assert!(broken(Output::TlsRoute, on_edge(&["db.example.com"])).is_empty());
    }
}
