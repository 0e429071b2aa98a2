//! The Gateway API `HTTPRoute` resource (`gateway.networking.k8s.io/v1`), typed as far as this
//! controller reads and writes it: one parent (the apex Service, the mesh pattern Linkerd 2.14+
//! and Istio read) and one rule whose weighted backend references are the policy's backends.
//!
//! Why not the `gateway-api` crate: its current release (0.22) is built on kube 4 and
//! k8s-openapi 0.28, so it would bring a second kube and k8s-openapi into the build; the few
//! fields used here are typed below instead. Fields not listed are ignored when reading.

use kube::{
    CustomResource,
    api::ObjectMeta,
    core::{ApiResource, DynamicObject},
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rules::{RouteBackend, RouteRules};

/// API group of the parent reference to a Service, as Linkerd documents it.
const CORE_GROUP: &str = "core";

/// An HTTPRoute, with the fields this controller sets.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "HTTPRoute",
    root = "HttpRoute",
    plural = "httproutes",
    namespaced,
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteSpec {
    /// The objects the route attaches to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parent_refs: Vec<ParentReference>,
    /// The routing rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<HttpRouteRule>,
}

/// A parent of the route.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ParentReference {
    /// API group of the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind of the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name of the parent.
    pub name: String,
    /// Port of the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// One rule of the route.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteRule {
    /// The weighted backends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backend_refs: Vec<BackendRef>,
}

/// A weighted backend of a rule.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BackendRef {
    /// API group of the backend ("" for core).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind of the backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name of the backend.
    pub name: String,
    /// Port of the backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// Relative weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

/// The API resource of HTTPRoutes.
pub fn resource() -> ApiResource {
    ApiResource::erase::<HttpRoute>(&())
}

/// The HTTPRoute that routes as `rules` say.
pub fn object(meta: ObjectMeta, rules: &RouteRules) -> DynamicObject {
    let spec = HttpRouteSpec {
        parent_refs: vec![ParentReference {
            group: Some(CORE_GROUP.into()),
            kind: Some("Service".into()),
            name: rules.apex.clone(),
            port: rules.apex_port,
        }],
        rules: vec![HttpRouteRule {
            backend_refs: rules
                .backends
                .iter()
                .map(|b| BackendRef {
                    group: Some(String::new()),
                    kind: Some("Service".into()),
                    name: b.service.clone(),
                    port: b.port,
                    weight: Some(i32::try_from(b.weight).unwrap_or(i32::MAX)),
                })
                .collect(),
        }],
    };
    let mut object = DynamicObject::new("", &resource());
    object.metadata = meta;
    object.data = serde_json::json!({ "spec": spec });
    object
}

/// What an HTTPRoute says, when it has the form this controller writes (one Service parent,
/// one rule of Service backends); `None` otherwise, so any other form is rewritten.
pub fn rules(route: &HttpRoute) -> Option<RouteRules> {
    let [parent] = route.spec.parent_refs.as_slice() else {
        return None;
    };
    let [rule] = route.spec.rules.as_slice() else {
        return None;
    };
    let service_kind = |kind: &Option<String>| kind.as_deref().is_none_or(|k| k == "Service");
    let parent_is_service =
        parent.group.as_deref() == Some(CORE_GROUP) && parent.kind.as_deref() == Some("Service");
    let backends_are_services = rule
        .backend_refs
        .iter()
        .all(|b| b.group.as_deref().is_none_or(str::is_empty) && service_kind(&b.kind));
    (parent_is_service && backends_are_services).then(|| RouteRules {
        apex: parent.name.clone(),
        apex_port: parent.port,
        backends: rule
            .backend_refs
            .iter()
            .map(|b| RouteBackend {
                service: b.name.clone(),
                port: b.port,
                // The API server defaults an unset weight to 1.
                weight: i64::from(b.weight.unwrap_or(1)),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written() -> RouteRules {
        RouteRules {
            apex: "web".into(),
            apex_port: Some(80),
            backends: vec![RouteBackend {
                service: "web-a".into(),
                port: Some(8080),
                weight: 1,
            }],
        }
    }

    #[test]
    fn a_written_route_reads_back_as_its_rules() {
        let object = object(ObjectMeta::default(), &written());
        let route: HttpRoute = serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {}, "spec": object.data["spec"],
        }))
        .expect("route");
        assert_eq!(rules(&route), Some(written()));
    }

    #[test]
    fn another_form_reads_as_none() {
        let mut route = HttpRoute::default();
        route.spec.parent_refs = vec![ParentReference {
            name: "gw".into(),
            ..Default::default()
        }];
        assert_eq!(rules(&route), None);
    }
}
