//! The type of `spec.routeRef`: one named rule of a Gateway API route the user owns, whose
//! weights the controller sets instead of generating a route of its own.

use garde::Validate;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rules::{DNS1123_SUBDOMAIN, MAX_SUBDOMAIN, dns1123_subdomain};

/// One named rule of a route the user owns.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct RouteRefSpec {
    /// The route's kind: `HTTPRoute` or `GRPCRoute`.
    #[garde(skip)]
    pub kind: RouteRefKind,

    /// The route's name, in the policy's namespace.
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN), pattern(DNS1123_SUBDOMAIN))]
    #[garde(length(min = 1, max = MAX_SUBDOMAIN), custom(dns1123_subdomain))]
    pub name: String,

    /// The rule, by its `name` (rules are named since Gateway API v1.4). The controller changes
    /// only the `weight` of this rule's backendRefs, which must be the policy's backends; every
    /// other field of the route stays the user's.
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN), pattern(DNS1123_SUBDOMAIN))]
    #[garde(length(min = 1, max = MAX_SUBDOMAIN), custom(dns1123_subdomain))]
    pub rule: String,
}

/// The kinds of route a policy may fail over by reference: those whose rules are named and
/// whose backendRefs carry weights.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RouteRefKind {
    /// A Gateway API HTTPRoute.
    #[default]
    #[serde(rename = "HTTPRoute")]
    HttpRoute,
    /// A Gateway API GRPCRoute.
    #[serde(rename = "GRPCRoute")]
    GrpcRoute,
}

impl RouteRefKind {
    /// The output of the same kind.
    pub fn output(self) -> super::Output {
        match self {
            RouteRefKind::HttpRoute => super::Output::HttpRoute,
            RouteRefKind::GrpcRoute => super::Output::GrpcRoute,
        }
    }
}
