//! The SMI `TrafficSplit` route kind (`split.smi-spec.io`): its description ([`KIND`]), a
//! policy's TrafficSplit (written in the API version the policy asks for, routing its apex), the
//! resource as far as this controller reads and writes it, and the CRD that tests and the demo
//! install on clusters that have none.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaPropsOrArray,
};
use kube::{
    CustomResource, CustomResourceExt,
    core::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta},
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    RouteObject, RouteTarget, RouteView, Shape,
    kind::{self, Form, KindSpec, Module, RouteKind},
    rules::{RouteBackend, RouteRules},
};
use crate::{
    api::{FailoverPolicy, FailoverPolicySpec, TrafficSplitApiVersion, rules::CrossFieldRule},
    backend::BackendRef,
};

/// The TrafficSplit kind.
pub const KIND: KindSpec = KindSpec::new(
    RouteKind::TrafficSplit,
    "install a mesh's SMI extension, or the chart with --set trafficSplitCRD.install=true, or run: cargo run --bin crd-gen -- --with-traffic-split | kubectl apply -f -",
    Module {
        resource: watched,
        view,
        target,
        checks,
        fields_set: |_, spec| spec.traffic_split.name.is_some(),
    },
);

/// A policy's TrafficSplit is its API version: it routes the apex, and has no parents.
impl Form for TrafficSplitApiVersion {
    fn spec(&self) -> &'static KindSpec {
        &KIND
    }

    fn resource(&self) -> ApiResource {
        resource(*self)
    }

    fn rules(&self, apex: &str, backends: Vec<RouteBackend>) -> RouteRules {
        RouteRules {
            apex: apex.to_string(),
            parents: Vec::new(),
            hostnames: Vec::new(),
            path_prefix: None,
            backends,
        }
    }

    fn object(&self, meta: ObjectMeta, rules: &RouteRules) -> DynamicObject {
        object(*self, meta, rules)
    }

    fn with_parents(&self, _: Vec<super::RouteParent>) -> Shape {
        Shape::TrafficSplit(*self)
    }
}

/// The TrafficSplit a policy generates: named by `spec.trafficSplit.name` (default: the
/// policy's name), in the API version of `spec.trafficSplit.apiVersion`.
fn target(_: RouteKind, policy: &FailoverPolicy) -> RouteTarget {
    let split = &policy.spec.traffic_split;
    RouteTarget {
        name: split
            .name
            .clone()
            .unwrap_or_else(|| kind::policy_name(policy))
            .into(),
        shape: Shape::TrafficSplit(split.api_version),
    }
}

/// TrafficSplits are watched in the default API version, whichever version each was written in.
fn watched(_: RouteKind) -> ApiResource {
    resource(TrafficSplitApiVersion::default())
}

/// What the controller keeps of a TrafficSplit.
fn view(object: &RouteObject) -> RouteView {
    let rules = object.spec::<TrafficSplitSpec>().map(|spec| rules(&spec));
    RouteView::new(&object.metadata, rules.as_ref())
}

/// `spec.trafficSplit` has no rule across fields beyond those of its own schema.
fn checks(_: RouteKind, _: &FailoverPolicySpec) -> Vec<(bool, &'static CrossFieldRule)> {
    Vec::new()
}

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
                    service: b.backend.name.to_string(),
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
pub fn rules(spec: &TrafficSplitSpec) -> RouteRules {
    RouteRules {
        apex: spec.service.clone(),
        parents: Vec::new(),
        hostnames: Vec::new(),
        path_prefix: None,
        backends: spec
            .backends
            .iter()
            .map(|b| RouteBackend {
                // SMI's backends are Services, by name.
                backend: BackendRef::service(&b.service),
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
