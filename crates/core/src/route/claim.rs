//! What a policy routes: its apex Service, and on each Gateway listener its route may attach to,
//! each hostname and path (HTTPRoute, GRPCRoute), each SNI hostname (TLSRoute) or every
//! connection (TCPRoute). Two policies must not route one thing; the policy watch keeps
//! the table of who holds each claim. What a policy claims is decided where what it may attach
//! to is ([`crate::tenancy::Gateways::claims`]).

use std::fmt::{self, Write};

use sha2::{Digest, Sha256};

use super::kind::RouteKind;
use crate::observation::{Namespace, PolicyKey};

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
        /// What the route takes there.
        traffic: Traffic,
        /// The Gateway, `namespace/name`.
        gateway: Box<str>,
        /// Its listener, by name or port, when the policy names one.
        listener: Option<Box<str>>,
        /// The hostname (`*` when the route names none: every hostname of the listener).
        hostname: Box<str>,
        /// The path prefix.
        path: Box<str>,
    },
    /// One named rule of a route the user owns (`spec.routeRef`).
    Rule {
        /// The route's namespace (the policy's).
        namespace: Namespace,
        /// The route's kind.
        kind: RouteKind,
        /// The route's name.
        route: Box<str>,
        /// The rule's name.
        rule: Box<str>,
    },
}

/// What a route takes on a Gateway listener: HTTP requests by hostname and path (an HTTPRoute
/// and a GRPCRoute of one hostname collide, as they do in the proxies), TLS connections by SNI
/// hostname, or every TCP connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Traffic {
    /// HTTP requests, by hostname and path.
    Http,
    /// TLS connections, by SNI hostname.
    Tls,
    /// Every connection of the listener.
    Tcp,
}

impl fmt::Display for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Claim::Apex { service, .. } => write!(f, "{APEX}{service}"),
            Claim::Rule {
                kind, route, rule, ..
            } => write!(f, "{RULE}{rule} of {} {route}", kind.as_str()),
            Claim::Listener {
                traffic,
                gateway,
                listener,
                hostname,
                path,
            } => {
                match traffic {
                    Traffic::Http => write!(f, "hostname {hostname} path {path}")?,
                    Traffic::Tls => write!(f, "TLS connections to {hostname}")?,
                    Traffic::Tcp => write!(f, "TCP connections")?,
                }
                write!(f, " on Gateway {gateway}")?;
                match listener {
                    Some(l) => write!(f, " listener {l}"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// How a claim of an apex Service is named.
const APEX: &str = "apex Service ";
/// How a claim of a rule of a route the user owns is named.
const RULE: &str = "rule ";

/// A claim by its digest: the first 8 bytes of the SHA-256 of the claim as conditions name it
/// (its `Display`), after `<namespace>/` for a claim within the policy's namespace (an apex
/// Service, a rule of a route: their names do not say the namespace; a listener claim names its
/// Gateway, namespace and all). What the claims table holds and the status records, so it is
/// the same in every process and release; a tenant cannot choose a claim whose digest is
/// another's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimId(pub u64);

impl ClaimId {
    /// The digest of a claim a policy of `namespace` made, named by `text` (as conditions name
    /// it, and as statuses before the digests listed it).
    pub fn of_text(namespace: &str, text: &str) -> Self {
        let mut hasher = Sha256::new();
        if text.starts_with(APEX) || text.starts_with(RULE) {
            hasher.update(namespace.as_bytes());
            hasher.update(b"/");
        }
        hasher.update(text.as_bytes());
        Self::of(hasher)
    }

    fn of(hasher: Sha256) -> Self {
        let digest = hasher.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        Self(u64::from_be_bytes(first))
    }

    /// The digest as the status writes it: 16 hex digits.
    pub fn hex(self) -> String {
        format!("{:016x}", self.0)
    }

    /// A digest the status wrote.
    pub fn parse_hex(text: &str) -> Option<Self> {
        (text.len() == 16)
            .then(|| u64::from_str_radix(text, 16).ok().map(Self))
            .flatten()
    }
}

/// The claim's text written into the hash as it is formatted, without a `String` between.
struct Hashing(Sha256);

impl Write for Hashing {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.update(s.as_bytes());
        Ok(())
    }
}

impl Claim {
    /// Its digest ([`ClaimId`]).
    pub fn id(&self) -> ClaimId {
        let mut hashing = Hashing(Sha256::new());
        // Writing into a hash never fails.
        let _ = match self {
            Claim::Apex { namespace, .. } | Claim::Rule { namespace, .. } => {
                write!(hashing, "{namespace}/{self}")
            }
            Claim::Listener { .. } => write!(hashing, "{self}"),
        };
        ClaimId::of(hashing.0)
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
    fn a_claims_digest_is_that_of_its_text_and_reads_back_from_hex() {
        let claim = Claim::Apex {
            namespace: Namespace::new("shop"),
            service: "api".into(),
        };
        assert_eq!(claim.id(), ClaimId::of_text("shop", "apex Service api"));
        let elsewhere = Claim::Apex {
            namespace: Namespace::new("other"),
            service: "api".into(),
        };
        assert_ne!(
            claim.id(),
            elsewhere.id(),
            "one apex name in two namespaces"
        );
        let listener = Claim::Listener {
            traffic: Traffic::Http,
            gateway: "infra/edge".into(),
            listener: None,
            hostname: "shop.example.com".into(),
            path: "/".into(),
        };
        assert_eq!(
            listener.id(),
            ClaimId::of_text("shop", &listener.to_string()),
            "a listener claim is the same whoever makes it"
        );
        assert_eq!(
            listener.id(),
            ClaimId::of_text("other", &listener.to_string())
        );
        // The first bytes of SHA-256("apex Service api"): the same in every release.
        assert_eq!(ClaimId::parse_hex(&claim.id().hex()), Some(claim.id()));
        assert_eq!(claim.id().hex().len(), 16);
        assert_eq!(ClaimId::parse_hex("xyz"), None);
    }

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
