//! The Gateway API `HTTPRoute` route kind (`gateway.networking.k8s.io/v1`): its description
//! ([`KIND`]), a policy's HTTPRoute ([`HttpShape`]: its parents, hostnames, path prefix and
//! backends' port, from `spec.httpRoute`), the rules of `spec.httpRoute`, and the resource as far
//! as this controller reads and writes it ([`resource`]).

mod resource;

use std::collections::BTreeSet;

use kube::core::{ApiResource, DynamicObject, ObjectMeta};

pub use self::resource::*;
use super::{
    ParentKind, RouteBackend, RouteObject, RouteParent, RouteRules, RouteTarget, RouteView, Shape,
    kind::{self, Form, KindSpec, Reasons, RouteKind},
};
use crate::api::{
    self, FailoverPolicy, FailoverPolicySpec, FailoverPolicyStatus, GatewayParent, Output,
    conditions::ready,
    rules::{self, CrossFieldRule},
};

/// The HTTPRoute kind.
pub const KIND: KindSpec = KindSpec {
    kind: RouteKind::HttpRoute,
    name: "HTTPRoute",
    metric_label: "httproute",
    crd: "httproutes.gateway.networking.k8s.io",
    install: "install the Gateway API's standard CRDs (v1), e.g. kubectl apply -f https://github.com/kubernetes-sigs/gateway-api/releases/download/v1.6.3/standard-install.yaml",
    resource,
    view,
    target,
    checks,
    reasons: Reasons {
        conflict: ready::HTTP_ROUTE_CONFLICT,
        write_failed: ready::HTTP_ROUTE_WRITE_FAILED,
        crd_missing: ready::HTTP_ROUTE_CRD_MISSING,
    },
    name_field: "spec.httpRoute.name",
    status_name,
};

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
    pub(crate) fn of(apex: &str, route: &api::HttpRouteSpec) -> Self {
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

impl Form for HttpShape {
    fn spec(&self) -> &'static KindSpec {
        &KIND
    }

    fn resource(&self) -> ApiResource {
        resource()
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
        object(meta, rules)
    }

    fn parents(&self) -> &[RouteParent] {
        &self.parents
    }

    fn with_parents(&self, parents: Vec<RouteParent>) -> Shape {
        Shape::HttpRoute(Box::new(HttpShape {
            parents,
            ..self.clone()
        }))
    }
}

/// The HTTPRoute a policy generates: named by `spec.httpRoute.name` (default: the policy's
/// name), of the form `spec.httpRoute` asks for.
fn target(policy: &FailoverPolicy) -> RouteTarget {
    let spec = &policy.spec;
    match &spec.http_route {
        Some(route) => RouteTarget {
            name: route
                .name
                .clone()
                .unwrap_or_else(|| kind::policy_name(policy))
                .into(),
            shape: Shape::HttpRoute(Box::new(HttpShape::of(&spec.service, route))),
        },
        // Validation refuses HTTPRoute without httpRoute; the port then is never used.
        None => RouteTarget {
            name: kind::policy_name(policy).into(),
            shape: Shape::HttpRoute(Box::new(HttpShape::of(
                &spec.service,
                &api::HttpRouteSpec::on_port(0),
            ))),
        },
    }
}

/// What the controller keeps of an HTTPRoute: its metadata, rules and its parents' answers.
fn view(object: &RouteObject) -> RouteView {
    let rules = object.spec::<HttpRouteSpec>().and_then(|spec| rules(&spec));
    RouteView {
        answers: object
            .status::<HttpRouteStatus>()
            .map(|status| answers(&status))
            .unwrap_or_default(),
        ..RouteView::new(&object.metadata, rules.as_ref())
    }
}

/// The rules of output `HTTPRoute` (what it needs, and that its backends fit the one rule it
/// writes) and of `spec.httpRoute`'s parents, each with whether it holds.
fn checks(spec: &FailoverPolicySpec) -> Vec<(bool, &'static CrossFieldRule)> {
    let http_route = spec.output == Output::HttpRoute;
    let mut checks = vec![
        (
            !http_route || spec.http_route.is_some(),
            &rules::HTTP_ROUTE_NEEDS_PORT,
        ),
        (
            !http_route || spec.secondaries.len() < rules::MAX_ROUTE_BACKENDS,
            &rules::ROUTE_BACKENDS_FIT,
        ),
    ];
    checks.extend(parent_checks(spec));
    checks
}

/// The rules on `spec.httpRoute`'s parents, with whether each holds.
fn parent_checks(spec: &FailoverPolicySpec) -> Vec<(bool, &'static CrossFieldRule)> {
    let Some(route) = &spec.http_route else {
        return Vec::new();
    };
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
    vec![
        (
            route.service_parent != Some(false) || !route.gateways.is_empty(),
            &rules::HTTP_ROUTE_NEEDS_A_PARENT,
        ),
        (distinct, &rules::DISTINCT_GATEWAYS),
        (named_by_listener, &rules::SAME_GATEWAY_NEEDS_SECTION),
    ]
}

fn status_name(status: &mut FailoverPolicyStatus) -> &mut Option<String> {
    &mut status.http_route
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_route_attaches_to_the_service_unless_gateways_replace_it() {
        let mut route = api::HttpRouteSpec::on_port(8080);
        let kinds = |route: &api::HttpRouteSpec| -> Vec<ParentKind> {
            HttpShape::of("web", route)
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
}
