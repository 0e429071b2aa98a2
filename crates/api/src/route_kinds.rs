//! The one table of route kinds: a row per kind ([`route_kinds!`](crate::route_kinds)), from
//! which every list of kinds is expanded. Here: the [`Output`] a policy asks for, with the names
//! derived from the kind's (its label, plural, CRD, `Ready` reasons), the spec field the kind owns,
//! the status field that names its route, the CRD rules of each Gateway API kind and the rule
//! that `routeRef` stands alone. In the core: the `RouteKind` key, the kinds table and the
//! Gateway kinds table. A kind added is a row, with its spec and status fields and the chart's
//! RBAC; no list can lack it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{FailoverPolicyStatus, rules::GatewayRouteRules};

/// Hands every route kind's row to `$expand!`, in the order of the rows.
///
/// A row is: the variant and its docs; the kind's name as the API spells it and in lower case
/// (the plural is the lower case and `s`); its API group; the spec field it owns (what
/// `routeRef` leaves unset); the status field that names its route; and, for a Gateway API kind,
/// its spec field, the name of its rules, whether it came after HTTPRoute (its field is then
/// refused without its output, and it matches no path), what it asks of hostnames, and the
/// traffic its routes take on a listener.
#[macro_export]
macro_rules! route_kinds {
    ($expand:ident) => {
        $expand! {
            /// An SMI TrafficSplit (`split.smi-spec.io`).
            TrafficSplit: "TrafficSplit", "trafficsplit" in "split.smi-spec.io",
                own "trafficSplit.name", status traffic_split;
            /// A Gateway API HTTPRoute (`gateway.networking.k8s.io/v1`) attached to Gateways or to
            /// the apex Service.
            HttpRoute: "HTTPRoute", "httproute" in "gateway.networking.k8s.io",
                own "httpRoute", status http_route,
                gateway http_route HTTP_ROUTE (false, $crate::rules::Hostnames::Any) Http;
            /// A Gateway API GRPCRoute (`gateway.networking.k8s.io/v1`): it takes the HTTP
            /// requests of its hostnames, as an HTTPRoute does.
            GrpcRoute: "GRPCRoute", "grpcroute" in "gateway.networking.k8s.io",
                own "grpcRoute", status grpc_route,
                gateway grpc_route GRPC_ROUTE (true, $crate::rules::Hostnames::Any) Http;
            /// A Gateway API TLSRoute (`gateway.networking.k8s.io/v1`): TLS passthrough by SNI.
            TlsRoute: "TLSRoute", "tlsroute" in "gateway.networking.k8s.io",
                own "tlsRoute", status tls_route,
                gateway tls_route TLS_ROUTE
                    (true, $crate::rules::Hostnames::Required($crate::rules::TLS_HOSTNAMES)) Tls;
            /// A Gateway API TCPRoute (`gateway.networking.k8s.io/v1`).
            TcpRoute: "TCPRoute", "tcproute" in "gateway.networking.k8s.io",
                own "tcpRoute", status tcp_route,
                gateway tcp_route TCP_ROUTE
                    (true, $crate::rules::Hostnames::Refused($crate::rules::TCP_HOSTNAMES)) Tcp;
        }
    };
}

/// `Some` of the expression given, or `None` without one (a row's optional part).
macro_rules! some_or_none {
    () => {
        None
    };
    ($some:expr) => {
        Some($some)
    };
}

/// The spec field that names a kind's route: the field it owns, or that field's `name` for a
/// Gateway API kind (whose field is the route's whole shape).
macro_rules! name_field {
    ($own:literal) => {
        concat!("spec.", $own)
    };
    ($own:literal, $field:ident) => {
        concat!("spec.", $own, ".name")
    };
}

/// The `Ready` reasons that name one kind, derived from its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reasons {
    /// A route of the route's name exists and is not the policy's (`<Kind>Conflict`).
    pub conflict: &'static str,
    /// Writing the route failed (`<Kind>WriteFailed`).
    pub write_failed: &'static str,
    /// The kind's CRD is not installed (`<Kind>CRDMissing`).
    pub crd_missing: &'static str,
}

/// The API's side of the rows: [`Output`] and what it derives, and the kinds' CRD rules.
macro_rules! outputs {
    ($(
        $(#[$doc:meta])*
        $variant:ident: $name:literal, $lower:literal in $group:literal,
            own $own:literal, status $status:ident
            $(, gateway $field:ident $rules:ident ($newer:literal, $hostnames:expr) $traffic:ident)?;
    )*) => {
        /// The kind of object the controller generates.
        #[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Output {
            $( $(#[$doc])* #[serde(rename = $name)] $variant, )*
        }

        impl Output {
            /// Every output, in the order of the rows.
            pub const ALL: [Output; [$($name),*].len()] = [$(Output::$variant),*];

            /// The kind's name, as in the API.
            pub const fn kind(self) -> &'static str {
                match self { $(Output::$variant => $name,)* }
            }

            /// The kind's name in lower case, as metric labels and logs name it.
            pub const fn label(self) -> &'static str {
                match self { $(Output::$variant => $lower,)* }
            }

            /// The kind's API group.
            pub const fn group(self) -> &'static str {
                match self { $(Output::$variant => $group,)* }
            }

            /// The kind's plural, as its API resource names it.
            pub const fn plural(self) -> &'static str {
                match self { $(Output::$variant => concat!($lower, "s"),)* }
            }

            /// The name of the CRD that serves the kind.
            pub const fn crd(self) -> &'static str {
                match self { $(Output::$variant => concat!($lower, "s.", $group),)* }
            }

            /// The kind's `Ready` reasons.
            pub const fn reasons(self) -> Reasons {
                match self {
                    $(Output::$variant => Reasons {
                        conflict: concat!($name, "Conflict"),
                        write_failed: concat!($name, "WriteFailed"),
                        crd_missing: concat!($name, "CRDMissing"),
                    },)*
                }
            }

            /// The spec field the kind owns, below `spec` (what `routeRef` leaves unset).
            pub const fn own_field(self) -> &'static str {
                match self { $(Output::$variant => $own,)* }
            }

            /// The spec field that names the route of this kind.
            pub const fn name_field(self) -> &'static str {
                match self { $(Output::$variant => name_field!($own $(, $field)?),)* }
            }

            /// The CRD rules of a Gateway API kind (`None` for a kind of another API).
            pub const fn gateway_rules(self) -> Option<&'static GatewayRouteRules> {
                match self { $(Output::$variant => some_or_none!($(&kind_rules::$rules)?),)* }
            }

            /// The status field that names the route of this kind.
            pub fn status_name(self, status: &mut FailoverPolicyStatus) -> &mut Option<String> {
                match self { $(Output::$variant => &mut status.$status,)* }
            }

            /// The name of the route of this kind the status records.
            pub fn status_name_of(self, status: &FailoverPolicyStatus) -> Option<&str> {
                match self { $(Output::$variant => status.$status.as_deref(),)* }
            }
        }

        /// The CRD rules that come from the rows.
        pub mod kind_rules {
            use $crate::rules::*;

            $($(
                #[doc = concat!("Output `", $name, "` and `spec.", $own, "`.")]
                pub const $rules: GatewayRouteRules =
                    $crate::rules::gateway_route_rules!($name, $own, newer: $newer, hostnames: $hostnames);
            )?)*

            /// The rules of every Gateway API route output.
            pub const GATEWAY_ROUTES: &[&GatewayRouteRules] = &[$($(&$rules,)?)*];

            /// `routeRef` stands alone: no output and none of the fields the kinds own.
            pub const ROUTE_REF_ALONE: CrossFieldRule = CrossFieldRule {
                cel: concat!(
                    "!has(self.routeRef) || (self.output == 'TrafficSplit'",
                    $(" && !has(self.", $own, ")",)*
                    ")"
                ),
                message: concat!(
                    "routeRef names the route the policy fails over: leave output",
                    $(", ", $own,)*
                    " unset"
                ),
                field: ".routeRef",
            };
        }
    };
}

route_kinds!(outputs);

/// The first row's kind.
impl Default for Output {
    fn default() -> Self {
        Output::ALL[0]
    }
}
