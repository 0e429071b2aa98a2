//! The SMI `TrafficSplit` resource (`split.smi-spec.io`), as far as this controller reads and
//! writes it, and the CRD that tests and the demo install on clusters that have none.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaPropsOrArray,
};
use kube::{
    CustomResource, CustomResourceExt,
    core::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta},
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rules::{RouteBackend, RouteRules};
use crate::api::TrafficSplitApiVersion;

/// An SMI TrafficSplit: the mesh sends the traffic of the root `service` to `backends` in
/// proportion to their weights.
#[derive(
    CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq,
)]
#[kube(
    group = "split.smi-spec.io",
    version = "v1alpha2",
    kind = "TrafficSplit",
    plural = "trafficsplits",
    singular = "trafficsplit",
    shortname = "ts",
    namespaced,
    derive = "Default",
    derive = "PartialEq",
    doc = "TrafficSplit allows users to incrementally direct percentages of traffic between various services.",
    printcolumn(name = "Service", type_ = "string", json_path = ".spec.service")
)]
#[serde(rename_all = "camelCase")]
pub struct TrafficSplitSpec {
    /// The apex (root) service clients call.
    pub service: String,
    /// The services that receive the root service's traffic, with relative weights.
    #[serde(default)]
    pub backends: Vec<TrafficSplitBackend>,
}

/// One weighted backend of a TrafficSplit.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TrafficSplitBackend {
    /// Name of the backend Service.
    pub service: String,
    /// Relative weight of this backend.
    pub weight: i64,
}

/// The API resource of TrafficSplits in one API version.
pub fn resource(version: TrafficSplitApiVersion) -> ApiResource {
    let version = version.as_str().rsplit('/').next().unwrap_or("v1alpha2");
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("split.smi-spec.io", version, "TrafficSplit"),
        "trafficsplits",
    )
}

/// The TrafficSplit that routes as `rules` say.
pub fn object(
    version: TrafficSplitApiVersion,
    meta: ObjectMeta,
    rules: &RouteRules,
) -> DynamicObject {
    let split = TrafficSplit {
        metadata: meta,
        spec: TrafficSplitSpec {
            service: rules.apex.clone(),
            backends: rules
                .backends
                .iter()
                .map(|b| TrafficSplitBackend {
                    service: b.service.clone(),
                    weight: b.weight,
                })
                .collect(),
        },
    };
    let mut object = DynamicObject::new("", &resource(version));
    object.metadata = split.metadata;
    object.data = serde_json::json!({ "spec": split.spec });
    object
}

/// What a TrafficSplit says.
pub fn rules(split: &TrafficSplit) -> RouteRules {
    RouteRules {
        apex: split.spec.service.clone(),
        parents: Vec::new(),
        hostnames: Vec::new(),
        path_prefix: None,
        backends: split
            .spec
            .backends
            .iter()
            .map(|b| RouteBackend {
                service: b.service.clone(),
                port: None,
                weight: b.weight,
            })
            .collect(),
    }
}

/// The SMI TrafficSplit CRD serving `v1alpha1` and `v1alpha2` (storage), for clusters without a
/// mesh's SMI extension. Both versions share one schema; `v1alpha1` weights may also be written
/// as quantities, as in the original SMI spec.
pub fn traffic_split_crd() -> CustomResourceDefinition {
    let mut crd = TrafficSplit::crd();
    if let Some(v2) = crd.spec.versions.first().cloned() {
        let mut v1 = v2.clone();
        v1.name = "v1alpha1".into();
        v1.storage = false;
        let weight = v1
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("spec"))
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("backends"))
            .and_then(|b| b.items.as_mut())
            .and_then(|items| match items {
                JSONSchemaPropsOrArray::Schema(item) => item.properties.as_mut(),
                JSONSchemaPropsOrArray::Schemas(_) => None,
            })
            .and_then(|p| p.get_mut("weight"));
        if let Some(weight) = weight {
            weight.type_ = None;
            weight.format = None;
            weight.x_kubernetes_int_or_string = Some(true);
        }
        crd.spec.versions = vec![v1, v2];
    }
    crd
}
