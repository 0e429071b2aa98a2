//! The type of `spec.httpRoute`, `spec.grpcRoute`, `spec.tlsRoute` and `spec.tcpRoute`: the
//! generated Gateway API route, attached to Gateways (the edge: Envoy Gateway, Traefik, NGINX,
//! Istio's gateway, Cilium), to the apex Service (the mesh pattern Linkerd and Istio read), or to
//! both. What differs by kind (a TLSRoute's required hostname, a TCPRoute's lack of any, a path
//! for HTTPRoute only) is stated in [`super::rules`]' rules of each kind.

use garde::Validate;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::rules::{
    self, DNS1123_LABEL, DNS1123_SUBDOMAIN, HOSTNAME, MAX_GATEWAYS, MAX_HOSTNAMES, MAX_LABEL,
    MAX_PATH, MAX_SUBDOMAIN, PATH_PREFIX, dns1123_label, dns1123_subdomain, http_hostname,
    http_path_prefix,
};

/// The generated Gateway API route.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct GatewayRouteSpec {
    /// Name of the route (default: the policy's name). It cannot be changed later. A route of
    /// this name that the policy does not own is never touched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN), pattern(DNS1123_SUBDOMAIN))]
    #[garde(inner(length(min = 1, max = MAX_SUBDOMAIN), custom(dns1123_subdomain)))]
    pub name: Option<String>,

    /// The Gateways the route attaches to (its `parentRefs` of kind Gateway), e.g. the edge
    /// Gateway of the cluster; 0 to 16. A Gateway in another namespace must allow routes from
    /// the policy's namespace (its listeners' `allowedRoutes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_GATEWAYS))]
    #[x_kube(validation = rules::DISTINCT_GATEWAYS.element_rule())]
    #[x_kube(validation = rules::SAME_GATEWAY_NEEDS_SECTION.element_rule())]
    #[garde(length(max = MAX_GATEWAYS), dive)]
    pub gateways: Vec<GatewayParent>,

    /// Whether the route also attaches to the apex Service (`spec.service`), the mesh pattern
    /// Linkerd 2.14+ and Istio read. Default: true when no Gateway is listed, false otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub service_parent: Option<bool>,

    /// The port of the apex Service the route attaches to (parentRef port); default: every port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    #[garde(inner(range(min = 1, max = 65535)))]
    pub parent_port: Option<i32>,

    /// The hostnames the route serves (e.g. `shop.example.com`, `*.example.com`): HTTP Host
    /// headers, or for a TLSRoute the SNI names (at least one); none for a TCPRoute. Default:
    /// whatever the Gateway's listeners serve. 0 to 16.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_HOSTNAMES), inner(length(min = 1, max = MAX_SUBDOMAIN), pattern(HOSTNAME)))]
    #[garde(length(max = MAX_HOSTNAMES), inner(length(min = 1, max = MAX_SUBDOMAIN), custom(http_hostname)))]
    pub hostnames: Vec<String>,

    /// The path prefix the route matches, e.g. `/api`; default `/`: every request. HTTPRoute
    /// only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_PATH), pattern(PATH_PREFIX))]
    #[x_kube(validation = rules::path_prefix_rule())]
    #[garde(inner(length(min = 1, max = MAX_PATH), custom(http_path_prefix)))]
    pub path_prefix: Option<String>,

    /// The port of the backend Services that traffic goes to (backendRef port, required by the
    /// Gateway API for Service backends).
    #[schemars(range(min = 1, max = 65535))]
    #[garde(range(min = 1, max = 65535))]
    pub port: i32,
}

impl GatewayRouteSpec {
    /// A route with this backend port and nothing else set: attached to the apex Service.
    pub fn on_port(port: i32) -> Self {
        Self {
            name: None,
            gateways: Vec::new(),
            service_parent: None,
            parent_port: None,
            hostnames: Vec::new(),
            path_prefix: None,
            port,
        }
    }

    /// Whether the route attaches to the apex Service (see [`Self::service_parent`]).
    pub fn attaches_to_service(&self) -> bool {
        self.service_parent.unwrap_or(self.gateways.is_empty())
    }
}

/// A Gateway the route attaches to.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct GatewayParent {
    /// The Gateway's name.
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN), pattern(DNS1123_SUBDOMAIN))]
    #[garde(length(min = 1, max = MAX_SUBDOMAIN), custom(dns1123_subdomain))]
    pub name: String,

    /// The Gateway's namespace (default: the policy's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_LABEL), pattern(DNS1123_LABEL))]
    #[garde(inner(length(min = 1, max = MAX_LABEL), custom(dns1123_label)))]
    pub namespace: Option<String>,

    /// One listener of the Gateway, by name (default: every listener that allows the route).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN), pattern(DNS1123_SUBDOMAIN))]
    #[garde(inner(length(min = 1, max = MAX_SUBDOMAIN), custom(dns1123_subdomain)))]
    pub section_name: Option<String>,

    /// The listeners of the Gateway on this port (default: every port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    #[garde(inner(range(min = 1, max = 65535)))]
    pub port: Option<i32>,
}

impl GatewayParent {
    /// The Gateway `namespace/name` (the policy's namespace when it names none), for messages.
    pub fn describe(&self, policy_namespace: &str) -> String {
        format!(
            "{}/{}",
            self.namespace.as_deref().unwrap_or(policy_namespace),
            self.name
        )
    }
}
