//! What a policy's author may make the controller reach and read.
//!
//! Creating a FailoverPolicy is a right within one namespace; the controller runs with the reach
//! of the whole cluster (its network position, the Prometheus it may ask, the credentials of the
//! remote clusters). Three rules keep a policy within what its own namespace grants, each set by
//! the cluster admin:
//!
//! - **Addresses** ([`Addresses`]): a health query goes only to an address the admin allowed
//!   (`--prometheus-allowed-addresses`, and always `--prometheus-address`). Any other is refused
//!   before a request is sent.
//! - **Series** ([`crate::health_query`]): every selector of a health query gets the policy's
//!   namespace as a matcher on the namespace label (`--prometheus-namespace-label`, default
//!   `namespace`), so a query reads only its namespace's series; a selector naming another
//!   namespace, and `info()`, are refused. The query is parsed and printed again by the
//!   `promql-parser` crate, the parser prom-label-proxy's approach needs (a selector can hide in
//!   any function, aggregation, subquery or `or` branch; editing the text would miss one), once
//!   per policy generation and within cost limits, never per query run (the `query_cost`
//!   example prints what it costs). Templates owned by the admin were the other way: they take
//!   from authors the PromQL they know and add an object to manage.
//! - **Remote namespaces** ([`NamespaceGrants`]): a policy reads the readiness of a remote
//!   namespace only when the cluster's Secret grants it to the policy's namespace (annotation
//!   [`NAMESPACES_ANNOTATION`]; without it, each namespace reads its namesake only). A refused
//!   namespace is not watched.
//!
//! - **Gateways** ([`Gateways`]): a policy's route attaches to a Gateway of its own
//!   namespace, or of another namespace only where the admin allowed it (`--allowed-gateways`):
//!   a Gateway's `allowedRoutes` admits routes, not the tenants who would have the controller
//!   write them, and a tenant without any right on HTTPRoutes must not get one on a shared
//!   Gateway. The Gateway's owner consents too: a listener admits the route's namespace and kind
//!   or not ([`crate::listeners`]). A Gateway either refuses is left out of the route
//!   (`Attached=False`, reason `GatewayNotAllowed`, `NotAllowedByListeners` or
//!   `NoMatchingParent`), and the policy claims nothing on it: what a policy may not attach to
//!   it cannot take from the namespace that may.
//!
//! Each refusal names the field and the rule, in the policy's status, and never what the admin
//! allowed or granted to others.

use std::sync::Arc;

use crate::{
    api::conditions::attached,
    listeners::{Admission, Listeners},
    observation::Namespace,
    policy::ValidPolicy,
    route::{Claim, ParentKind, RouteParent, RouteTarget, Shape, Traffic},
};

/// The annotation of a cluster Secret that grants policy namespaces remote namespaces:
/// `from=to` pairs separated by commas, `*` for any on either side.
pub const NAMESPACES_ANNOTATION: &str = "failover.dev/namespaces";

/// The addresses health queries may go to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Addresses {
    allowed: Vec<String>,
}

impl Addresses {
    /// The allowed addresses and the controller's own Prometheus (always allowed).
    pub fn new(allowed: &[String], default: Option<&str>) -> Self {
        let allowed = allowed
            .iter()
            .map(String::as_str)
            .chain(default)
            .map(|a| a.trim().trim_end_matches('/').to_string())
            .filter(|a| !a.is_empty())
            .collect();
        Self { allowed }
    }

    /// Whether a query may go to `address`: it is an allowed address or lies below one
    /// (`http://prom:9090` allows `http://prom:9090/tenant-a`), with no `..` or escapes.
    pub fn allows(&self, address: &str) -> bool {
        let address = address.trim_end_matches('/');
        if address.contains("..") || address.contains('%') || address.contains('@') {
            return false;
        }
        self.allowed.iter().any(|a| {
            address == a
                || address
                    .strip_prefix(a.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    }

    /// Why `address` is refused, naming the field and the rule, never the addresses the admin
    /// allowed (a tenant reads this in its status).
    pub fn refusal(&self, address: &str) -> String {
        format!(
            "spec.health.prometheus.address {address} is not one the cluster admin allows (--prometheus-allowed-addresses); no query is sent"
        )
    }
}

/// Where policies' routes may attach: the Gateways of other namespaces the admin allows, and
/// what each Gateway's listeners admit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gateways {
    /// `(namespace, name)` pairs; `*` as the name allows every Gateway of the namespace.
    allowed: Arc<[(String, String)]>,
    /// What the Gateways' listeners admit, as last seen.
    listeners: Arc<Listeners>,
}

/// A parent left out of a policy's route, and why: the `Attached` reason and its message in
/// one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedParent {
    /// The parent.
    pub parent: RouteParent,
    /// `GatewayNotAllowed`, `NotAllowedByListeners` or `NoMatchingParent`.
    pub reason: &'static str,
    /// Why, naming no other namespace than those the policy names.
    pub message: String,
}

impl Gateways {
    /// The allowed Gateways, each `namespace/name` or `namespace/*`.
    pub fn parse(allowed: &[String]) -> Result<Self, String> {
        let allowed = allowed
            .iter()
            .map(|g| g.trim())
            .filter(|g| !g.is_empty())
            .map(|g| {
                g.split_once('/')
                    .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
                    .map(|(ns, name)| (ns.to_string(), name.to_string()))
                    .ok_or_else(|| {
                        format!("--allowed-gateways: {g:?} is not namespace/name or namespace/*")
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            allowed: allowed.into(),
            listeners: Arc::default(),
        })
    }

    /// The same admin's allowance with what the Gateways' listeners admit now.
    pub fn with_listeners(&self, listeners: Arc<Listeners>) -> Self {
        Self {
            allowed: self.allowed.clone(),
            listeners,
        }
    }

    /// Why a Gateway parent of a route of `route` kind from `policy_namespace` is refused, if it
    /// is; a parent that is no Gateway is never refused here.
    fn refusal(
        &self,
        policy_namespace: &str,
        route: &RouteTarget,
        p: &RouteParent,
    ) -> Option<RefusedParent> {
        if p.kind != ParentKind::Gateway {
            return None;
        }
        let namespace = p.namespace.as_deref().unwrap_or(policy_namespace);
        let (reason, message) = if !self.allows(policy_namespace, namespace, &p.name) {
            (
                attached::GATEWAY_NOT_ALLOWED,
                format!(
                    "the cluster admin does not allow routes of namespace {policy_namespace} on it (--allowed-gateways)"
                ),
            )
        } else {
            match self
                .listeners
                .admit(namespace, p, policy_namespace, route.kind())
            {
                Admission::Refused { reason, message } => (reason, message),
                Admission::Unknown | Admission::Listeners(_) => return None,
            }
        };
        Some(RefusedParent {
            parent: p.clone(),
            reason,
            message,
        })
    }

    /// The listeners a Gateway parent resolves to, as claims name them: each admitting
    /// listener by name; a Gateway not seen, as the reference names it (its `sectionName`, its
    /// port, or none: the whole Gateway).
    fn listeners_of(
        &self,
        policy_namespace: &str,
        kind: crate::route::RouteKind,
        p: &RouteParent,
    ) -> Vec<Option<Box<str>>> {
        let namespace = p.namespace.as_deref().unwrap_or(policy_namespace);
        match self.listeners.admit(namespace, p, policy_namespace, kind) {
            Admission::Listeners(names) => names.into_iter().map(Some).collect(),
            Admission::Unknown | Admission::Refused { .. } => {
                let named = p
                    .section_name
                    .clone()
                    .or(p.port.map(|port| format!("port {port}")));
                vec![named.map(Box::from)]
            }
        }
    }

    /// Whether a policy of `policy_namespace` may attach to the Gateway `namespace/name`.
    pub fn allows(&self, policy_namespace: &str, namespace: &str, name: &str) -> bool {
        namespace == policy_namespace
            || self
                .allowed
                .iter()
                .any(|(ns, n)| ns == namespace && (n == "*" || n == name))
    }

    /// A policy's route as it may attach: without the Gateways of other namespaces the admin
    /// does not allow and those whose listeners do not admit it, and those Gateways with why.
    /// The one place a route's parents are decided: the route written and what its policy
    /// claims ([`Gateways::claims`]) both come from it, so a policy never claims what it may not
    /// attach to.
    pub fn attachable(
        &self,
        policy_namespace: &str,
        route: &RouteTarget,
    ) -> (RouteTarget, Vec<RefusedParent>) {
        let refused: Vec<RefusedParent> = route
            .parents()
            .iter()
            .filter_map(|p| self.refusal(policy_namespace, route, p))
            .collect();
        if refused.is_empty() {
            return (route.clone(), refused);
        }
        let (kept, _) = route.without_parents(|p| refused.iter().any(|r| r.parent == *p));
        (kept, refused)
    }

    /// Everything a policy claims: what its route may attach to.
    pub fn claims(&self, policy: &ValidPolicy) -> Vec<Claim> {
        self.route_claims(&policy.namespace, &policy.service, &policy.route)
    }

    /// Everything a route claims: `service` is its policy's apex, `namespace` its policy's. Its
    /// parents are those [`Gateways::attachable`] keeps, as written: a Gateway the admin does
    /// not allow the policy is claimed on no listener.
    pub fn route_claims(&self, namespace: &str, service: &str, route: &RouteTarget) -> Vec<Claim> {
        let apex = || Claim::Apex {
            namespace: Namespace::new(namespace),
            service: service.into(),
        };
        let (route, _) = self.attachable(namespace, route);
        let route = match &route.shape {
            Shape::TrafficSplit(_) => return vec![apex()],
            Shape::Referenced(rule) => {
                return vec![Claim::Rule {
                    namespace: Namespace::new(namespace),
                    kind: rule.kind,
                    route: route.name.as_str().into(),
                    rule: rule.rule.as_str().into(),
                }];
            }
            Shape::Gateway(route) => route,
        };
        let (kind, traffic) = (route.kind, route.gateway_kind().traffic);
        let hostnames: Vec<&str> = if route.hostnames.is_empty() || traffic == Traffic::Tcp {
            vec!["*"]
        } else {
            route.hostnames.iter().map(String::as_str).collect()
        };
        let path = match traffic {
            Traffic::Http => route.path_prefix.as_deref().unwrap_or("/"),
            Traffic::Tls | Traffic::Tcp => "",
        };
        route
            .parents
            .iter()
            .flat_map(|parent| match parent.kind {
                ParentKind::Service => vec![apex()],
                ParentKind::Gateway => {
                    let gateway = format!(
                        "{}/{}",
                        parent.namespace.as_deref().unwrap_or(namespace),
                        parent.name
                    );
                    let listeners = self.listeners_of(namespace, kind, parent);
                    listeners
                        .iter()
                        .flat_map(|listener| {
                            hostnames.iter().map(|hostname| Claim::Listener {
                                traffic,
                                gateway: gateway.as_str().into(),
                                listener: listener.clone(),
                                hostname: (*hostname).into(),
                                path: path.into(),
                            })
                        })
                        .collect()
                }
            })
            .collect()
    }
}

/// Which policy namespaces may read which namespaces of one remote cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceGrants {
    /// `None`: each namespace reads its namesake only (no annotation).
    pairs: Option<Vec<(String, String)>>,
}

impl NamespaceGrants {
    /// The grants of a cluster Secret's annotation (`None`: not annotated).
    pub fn parse(annotation: Option<&str>) -> Result<Self, String> {
        let Some(text) = annotation else {
            return Ok(Self::default());
        };
        let pairs = text
            .split([',', '\n'])
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .enumerate()
            .map(|(at, pair)| {
                // Errors name the pair by position: a tenant may read them in its status.
                let at = at + 1;
                let (from, to) = pair.split_once('=').ok_or_else(|| {
                    format!(
                        "{NAMESPACES_ANNOTATION}: pair {at} is not policy-namespace=remote-namespace"
                    )
                })?;
                let (from, to) = (from.trim(), to.trim());
                for side in [from, to] {
                    if side != "*" && crate::api::rules::dns1123_label(side, &()).is_err() {
                        return Err(format!(
                            "{NAMESPACES_ANNOTATION}: pair {at} holds something that is not a namespace or *"
                        ));
                    }
                }
                Ok((from.to_string(), to.to_string()))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Self { pairs: Some(pairs) })
    }

    /// Whether a policy of `policy_namespace` may read `remote_namespace`.
    pub fn allows(&self, policy_namespace: &str, remote_namespace: &str) -> bool {
        match &self.pairs {
            None => policy_namespace == remote_namespace,
            Some(pairs) => pairs.iter().any(|(from, to)| {
                (from == "*" || from == policy_namespace) && (to == "*" || to == remote_namespace)
            }),
        }
    }

    /// The rule a refusal names, without another namespace's grants (a tenant reads it).
    pub fn rule(&self) -> String {
        match &self.pairs {
            None => format!(
                "without the {NAMESPACES_ANNOTATION} annotation on its Secret, each namespace reads its namesake only"
            ),
            Some(_) => {
                format!("its Secret's {NAMESPACES_ANNOTATION} annotation grants no such pair")
            }
        }
    }

    /// The grants in words, for the controller's log (the admin's own text).
    pub fn describe(&self) -> String {
        match &self.pairs {
            None => format!(
                "no {NAMESPACES_ANNOTATION} annotation: each namespace reads its namesake only"
            ),
            Some(pairs) if pairs.is_empty() => format!("{NAMESPACES_ANNOTATION} grants nothing"),
            Some(pairs) => format!(
                "{NAMESPACES_ANNOTATION}: {}",
                pairs
                    .iter()
                    .map(|(f, t)| format!("{f}={t}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowed_addresses_and_the_paths_below_them_are_asked() {
        let addresses = Addresses::new(
            &["http://prom.monitoring:9090/".to_string()],
            Some("http://prometheus:9090"),
        );
        for yes in [
            "http://prometheus:9090",
            "http://prometheus:9090/",
            "http://prom.monitoring:9090/tenant",
        ] {
            assert!(addresses.allows(yes), "{yes}");
        }
        for no in [
            "http://169.254.169.254",
            "http://prometheus:90901",
            "http://prometheus:9090.evil",
            "http://prometheus:9090/../admin",
            "http://prometheus:9090@evil:80",
            "http://prometheus:9090/%2e%2e/admin",
        ] {
            assert!(!addresses.allows(no), "{no}");
        }
        assert!(!Addresses::new(&[], None).allows("http://prometheus:9090"));
        let refusal = addresses.refusal("http://x:1");
        assert!(
            refusal.contains("not one the cluster admin allows (--prometheus-allowed-addresses)")
                && !refusal.contains("prom.monitoring"),
            "{refusal}"
        );
    }

    #[test]
    fn a_gateway_of_another_namespace_is_attached_to_only_where_the_admin_allowed_it() {
        let gateways =
            Gateways::parse(&["infra/public".into(), "shared/*".into()]).expect("allowed");
        assert!(gateways.allows("shop", "shop", "own"), "its own namespace");
        assert!(gateways.allows("shop", "infra", "public"));
        assert!(gateways.allows("shop", "shared", "any"));
        assert!(!gateways.allows("shop", "infra", "internal"));
        assert!(!Gateways::default().allows("shop", "infra", "public"));
        assert!(Gateways::parse(&["public".into()]).is_err());
    }

    #[test]
    fn a_remote_namespace_is_read_only_where_the_cluster_grants_it() {
        let same = NamespaceGrants::parse(None).expect("default");
        assert!(same.allows("shop", "shop") && !same.allows("shop", "payments"));
        let granted = NamespaceGrants::parse(Some("shop=shop-dr, *=shared")).expect("grants");
        assert!(granted.allows("shop", "shop-dr") && granted.allows("payments", "shared"));
        assert!(
            !granted.allows("shop", "shop"),
            "the annotation says exactly what is granted"
        );
        let all = NamespaceGrants::parse(Some("*=*")).expect("all");
        assert!(all.allows("a", "b"));
        let none = NamespaceGrants::parse(Some("")).expect("nothing");
        assert!(!none.allows("shop", "shop"));
        for bad in ["shop", "shop=Shop", "a=b=c"] {
            assert!(NamespaceGrants::parse(Some(bad)).is_err(), "{bad}");
        }
        let refused =
            NamespaceGrants::parse(Some("a=b,secret-team=vault,Bad")).expect_err("the third pair");
        assert!(
            refused.ends_with("pair 3 is not policy-namespace=remote-namespace")
                && !refused.contains("vault"),
            "{refused}"
        );
        assert!(!granted.rule().contains("shared"), "{}", granted.rule());
    }
}
