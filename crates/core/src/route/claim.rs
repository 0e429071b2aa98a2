//! What a policy routes: its apex Service, and each hostname and path on each Gateway listener
//! its HTTPRoute may attach to. Two policies must not route one thing; the policy watch keeps
//! the table of who holds each claim.

use std::fmt;

use super::{ParentKind, RouteTarget, Shape};
use crate::{
    observation::{Namespace, PolicyKey},
    policy::ValidPolicy,
    tenancy::Gateways,
};

/// One thing a policy routes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Claim {
    /// An apex Service.
    Apex {
        /// Its namespace (the policy's).
        namespace: Namespace,
        /// Its name.
        service: Box<str>,
    },
    /// A hostname and path on a Gateway listener.
    Listener {
        /// The Gateway, `namespace/name`.
        gateway: Box<str>,
        /// Its listener, by name or port, when the policy names one.
        listener: Option<Box<str>>,
        /// The hostname (`*` when the route names none: every hostname of the listener).
        hostname: Box<str>,
        /// The path prefix.
        path: Box<str>,
    },
}

impl fmt::Display for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Claim::Apex { service, .. } => write!(f, "apex Service {service}"),
            Claim::Listener {
                gateway,
                listener,
                hostname,
                path,
            } => {
                write!(f, "hostname {hostname} path {path} on Gateway {gateway}")?;
                match listener {
                    Some(l) => write!(f, " listener {l}"),
                    None => Ok(()),
                }
            }
        }
    }
}

impl Claim {
    /// Everything a policy claims: what its route may attach to.
    pub fn of(policy: &ValidPolicy, gateways: &Gateways) -> Vec<Claim> {
        Self::of_route(&policy.namespace, &policy.service, &policy.route, gateways)
    }

    /// Everything a route claims: `service` is its policy's apex, `namespace` its policy's. Its
    /// parents are those [`Gateways::attachable`] keeps, as written: a Gateway the admin does
    /// not allow the policy is claimed on no listener.
    pub fn of_route(
        namespace: &str,
        service: &str,
        route: &RouteTarget,
        gateways: &Gateways,
    ) -> Vec<Claim> {
        let apex = || Claim::Apex {
            namespace: Namespace::new(namespace),
            service: service.into(),
        };
        let (route, _) = gateways.attachable(namespace, route);
        let route = match &route.shape {
            Shape::TrafficSplit(_) => return vec![apex()],
            Shape::HttpRoute(route) => route,
        };
        let hostnames: Vec<&str> = if route.hostnames.is_empty() {
            vec!["*"]
        } else {
            route.hostnames.iter().map(String::as_str).collect()
        };
        let path = route.path_prefix.as_deref().unwrap_or("/");
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
                    let listener = parent
                        .section_name
                        .clone()
                        .or(parent.port.map(|p| format!("port {p}")));
                    hostnames
                        .iter()
                        .map(|hostname| Claim::Listener {
                            gateway: gateway.as_str().into(),
                            listener: listener.as_deref().map(Box::from),
                            hostname: (*hostname).into(),
                            path: path.into(),
                        })
                        .collect()
                }
            })
            .collect()
    }
}

/// The policy holding a claim, as a policy of namespace `reader` may read of it (its author
/// reads its status and Events): named when it is of the same namespace, else only "a policy in
/// another namespace", so nothing of another namespace is told.
pub fn holder_seen_from(holder: &PolicyKey, reader: &str) -> String {
    if &*holder.namespace == reader {
        format!("policy {holder}")
    } else {
        "a policy in another namespace".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_is_named_only_to_a_reader_of_its_namespace() {
        let holder = PolicyKey::new("b", "old");
        assert_eq!(holder_seen_from(&holder, "b"), "policy b/old");
        assert_eq!(
            holder_seen_from(&holder, "a"),
            "a policy in another namespace"
        );
    }
}
