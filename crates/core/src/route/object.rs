//! A route as the controller reads it from the API server.
//!
//! Every route watch event and every route read back is one of these, so it is read in one pass:
//! its metadata typed, its `spec` and `status` kept as JSON for its kind's view to read by
//! reference. A [`DynamicObject`] would do for any kind too, but it flattens the object's other
//! fields, which makes serde buffer the whole object (managed fields included) before reading
//! it, and a kind's typed resource can only be had from it by serializing the whole object and
//! reading it again. The benchmark measured that cost in the controller's cold start and failover
//! latency (docs/benchmarks.md, "Reading routes").

use std::borrow::Cow;

use kube::core::{ApiResource, DynamicObject, DynamicResourceScope, ObjectMeta, Resource};
use serde::{Deserialize, de::DeserializeOwned};
use serde_json::Value;

/// A route of any kind: its metadata, and its `spec` and `status` as the API server sent them.
/// Other top-level fields (`apiVersion`, `kind`) are skipped: the watch that reads it knows them.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct RouteObject {
    /// Its metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Its `spec` (`null` when absent).
    #[serde(default)]
    pub spec: Value,
    /// Its `status` (`null` when absent).
    #[serde(default)]
    pub status: Value,
}

impl RouteObject {
    /// Its `spec`, read as the kind's spec type; `None` when it is not one.
    pub fn spec<S: DeserializeOwned>(&self) -> Option<S> {
        S::deserialize(&self.spec).ok()
    }

    /// Its `status`, read as the kind's status type; `None` when absent or not one.
    pub fn status<S: DeserializeOwned>(&self) -> Option<S> {
        if self.status.is_null() {
            return None;
        }
        S::deserialize(&self.status).ok()
    }
}

impl From<DynamicObject> for RouteObject {
    /// Moves the parts out of an object read as a [`DynamicObject`] (a write's answer).
    fn from(mut object: DynamicObject) -> Self {
        let mut take = |field: &str| {
            object
                .data
                .get_mut(field)
                .map(Value::take)
                .unwrap_or_default()
        };
        let (spec, status) = (take("spec"), take("status"));
        Self {
            metadata: object.metadata,
            spec,
            status,
        }
    }
}

/// Like [`DynamicObject`], its API resource is given at run time.
impl Resource for RouteObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(resource: &ApiResource) -> Cow<'_, str> {
        resource.group.as_str().into()
    }

    fn version(resource: &ApiResource) -> Cow<'_, str> {
        resource.version.as_str().into()
    }

    fn kind(resource: &ApiResource) -> Cow<'_, str> {
        resource.kind.as_str().into()
    }

    fn api_version(resource: &ApiResource) -> Cow<'_, str> {
        resource.api_version.as_str().into()
    }

    fn plural(resource: &ApiResource) -> Cow<'_, str> {
        resource.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_reads_the_same_from_the_wire_as_from_a_dynamic_object() {
        let wire = serde_json::json!({
            "apiVersion": "split.smi-spec.io/v1alpha2", "kind": "TrafficSplit",
            "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "7"},
            "spec": {"service": "web", "backends": []},
            "status": {"observed": true},
        });
        let read: RouteObject = serde_json::from_value(wire.clone()).expect("route");
        let dynamic: DynamicObject = serde_json::from_value(wire).expect("object");
        assert_eq!(RouteObject::from(dynamic), read);
        assert_eq!(read.metadata.name.as_deref(), Some("web"));
        assert_eq!(read.spec["service"], "web");
        assert_eq!(read.status["observed"], true);
    }

    #[test]
    fn a_route_without_status_has_none() {
        let read: RouteObject =
            serde_json::from_value(serde_json::json!({"metadata": {}, "spec": {}})).expect("route");
        assert_eq!(read.status::<Value>(), None);
        assert_eq!(read.spec::<Value>(), Some(serde_json::json!({})));
    }
}
