//! The SMI `TrafficSplit` resource (`split.smi-spec.io`), as far as this controller reads and
//! writes it, and the CRD that tests and the demo install on clusters that have none.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaPropsOrArray,
};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
