//! What a policy routes: its apex Service, and each hostname and path on each Gateway listener
//! its HTTPRoute names. Two policies must not route one thing; the policy watch keeps the table
//! of who holds each claim.

use std::fmt;

use crate::{
    api::{FailoverPolicy, Output},
    observation::Namespace,
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
    /// Everything a policy claims.
    pub fn of(policy: &FailoverPolicy) -> Vec<Claim> {
        let spec = &policy.spec;
        let namespace = policy.metadata.namespace.as_deref().unwrap_or_default();
        let route = spec.http_route.as_ref();
        let on_apex =
            spec.output == Output::TrafficSplit || route.is_some_and(|r| r.attaches_to_service());
        let apex = on_apex.then(|| Claim::Apex {
            namespace: Namespace::new(namespace),
            service: spec.service.as_str().into(),
        });
        let listeners = route
            .filter(|_| spec.output == Output::HttpRoute)
            .into_iter()
            .flat_map(|r| {
                let hostnames: Vec<&str> = if r.hostnames.is_empty() {
                    vec!["*"]
                } else {
                    r.hostnames.iter().map(String::as_str).collect()
                };
                let path = r.path_prefix.as_deref().unwrap_or("/");
                r.gateways.iter().flat_map(move |g| {
                    let listener = g
                        .section_name
                        .clone()
                        .or(g.port.map(|p| format!("port {p}")));
                    hostnames
                        .clone()
                        .into_iter()
                        .map(move |hostname| Claim::Listener {
                            gateway: g.describe(namespace).into(),
                            listener: listener.as_deref().map(Box::from),
                            hostname: hostname.into(),
                            path: path.into(),
                        })
                })
            });
        apex.into_iter().chain(listeners).collect()
    }
}
