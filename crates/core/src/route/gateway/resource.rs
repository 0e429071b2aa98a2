//! The Gateway API route resources (`gateway.networking.k8s.io/v1`), typed as far as this
//! controller reads and writes them, in the one form every kind it writes shares: its parents
//! (Gateways, the apex Service, or both), hostnames (none for a TCPRoute), one rule (an optional
//! path prefix, HTTPRoute only; the weighted backends, each named as its kind says), and the
//! answers its parents' controllers write into `status.parents`.
//!
//! Why not the `gateway-api` crate: its current release (0.22) is built on kube 4 and
//! k8s-openapi 0.28, so it would bring a second kube and k8s-openapi into the build; the few
//! fields used here are typed below instead. Any other field of a rule, match or backend is kept
//! (`other`), so a route carrying one is not of the form this controller writes, and is
//! rewritten.

use std::collections::BTreeMap;

use kube::core::{ApiResource, DynamicObject, ObjectMeta};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{
    backend::{BackendKind, BackendRef as Backend},
    digest::digest,
    route::rules::{ParentKind, RouteBackend, RouteParent, RouteRules, RulesDigest},
};

/// API group of the parent reference to a Service, as Linkerd documents it.
const CORE_GROUP: &str = "core";
/// API group of Gateways (and the default of a parent reference).
pub(super) const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";
/// The condition a parent's controller sets when it attaches the route.
pub const ACCEPTED: &str = "Accepted";
/// The condition a parent's controller sets when every backend reference resolves.
pub const RESOLVED_REFS: &str = "ResolvedRefs";

/// A Gateway API route's spec, with the fields this controller sets and reads.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteSpec {
    /// The objects the route attaches to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parent_refs: Vec<ParentReference>,
    /// The hostnames it serves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hostnames: Vec<String>,
    /// The routing rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RouteRule>,
}

/// A parent of the route.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ParentReference {
    /// API group of the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind of the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Namespace of the parent (default: the route's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of the parent.
    pub name: String,
    /// A listener of a Gateway, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    /// Port of the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// One rule of the route.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteRule {
    /// The rule's name (rules this controller writes have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Which requests the rule takes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matches: Vec<RouteMatch>,
    /// The weighted backends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backend_refs: Vec<BackendRef>,
    /// Any other field (filters, timeouts, …): not of this controller's form.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// Which requests a rule takes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteMatch {
    /// The path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathMatch>,
    /// Any other field (headers, method, query parameters): not of this controller's form.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// A path match.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct PathMatch {
    /// `PathPrefix` (the default), `Exact` or `RegularExpression`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// The path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// A weighted backend of a rule.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
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
    /// Any other field (namespace, filters): not of this controller's form.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// What the route's parents' controllers say of it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteStatus {
    /// One entry per parent a controller answers for.
    #[serde(default)]
    pub parents: Vec<RouteParentStatus>,
}

/// One parent's answer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteParentStatus {
    /// The parent answered for.
    pub parent_ref: ParentReference,
    /// The controller that answers.
    #[serde(default)]
    pub controller_name: String,
    /// Its conditions (`Accepted`, `ResolvedRefs`).
    #[serde(default)]
    pub conditions: Vec<RouteCondition>,
}

/// A condition of a parent's answer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteCondition {
    /// The condition's type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Why, in one word.
    #[serde(default)]
    pub reason: String,
    /// Why, for people.
    #[serde(default)]
    pub message: String,
}

/// What a parent's controller said of the route: whether it attached it, whether its backends
/// resolve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParentAnswer {
    /// The parent.
    pub parent: RouteParent,
    /// Its `Accepted` condition, if the controller set it.
    pub accepted: Option<RouteCondition>,
    /// Its `ResolvedRefs` condition, if the controller set it.
    pub resolved_refs: Option<RouteCondition>,
}

/// A parent as written: the group and kind always spelled out.
fn reference(parent: &RouteParent) -> ParentReference {
    let group = match parent.kind {
        ParentKind::Service => CORE_GROUP,
        ParentKind::Gateway => GATEWAY_GROUP,
    };
    ParentReference {
        group: Some(group.into()),
        kind: Some(parent.kind.as_str().into()),
        namespace: parent.namespace.clone(),
        name: parent.name.clone(),
        section_name: parent.section_name.clone(),
        port: parent.port,
    }
}

/// A parent as read: what it names, or `None` for a kind this controller never writes.
fn parent(reference: &ParentReference) -> Option<RouteParent> {
    let group = reference.group.as_deref().unwrap_or(GATEWAY_GROUP);
    let kind = match (group, reference.kind.as_deref().unwrap_or("Gateway")) {
        (CORE_GROUP | "", "Service") => ParentKind::Service,
        (GATEWAY_GROUP, "Gateway") => ParentKind::Gateway,
        _ => return None,
    };
    Some(RouteParent {
        kind,
        namespace: reference.namespace.clone(),
        name: reference.name.clone(),
        section_name: reference.section_name.clone(),
        port: reference.port,
    })
}

/// The route of this resource that routes as `rules` say.
pub fn object(
    resource: &ApiResource,
    meta: ObjectMeta,
    rules: &RouteRules,
    has_hostnames: bool,
) -> DynamicObject {
    let matches = rules
        .path_prefix
        .as_ref()
        .map(|prefix| {
            vec![RouteMatch {
                path: Some(PathMatch {
                    type_: Some("PathPrefix".into()),
                    value: Some(prefix.clone()),
                }),
                other: BTreeMap::new(),
            }]
        })
        .unwrap_or_default();
    let spec = RouteSpec {
        parent_refs: rules.parents.iter().map(reference).collect(),
        hostnames: rules.hostnames.clone(),
        rules: vec![RouteRule {
            name: None,
            matches,
            backend_refs: rules
                .backends
                .iter()
                .map(|b| BackendRef {
                    group: Some(b.backend.kind.spec().group.into()),
                    kind: Some(b.backend.kind.spec().kind.into()),
                    name: b.backend.name.to_string(),
                    port: b.port,
                    weight: Some(i32::try_from(b.weight).unwrap_or(i32::MAX)),
                    other: BTreeMap::new(),
                })
                .collect(),
            other: BTreeMap::new(),
        }],
    };
    let mut object = DynamicObject::new("", resource);
    object.metadata = meta;
    object.data = serde_json::json!({ "spec": spec });
    // A list the route does not have is written empty, not left out: the create that made the
    // route owns its fields as an update, which a server-side apply leaving a field out does not
    // take away; an atomic list applied empty is emptied.
    if let Some(spec) = object.data["spec"].as_object_mut() {
        spec.entry("parentRefs")
            .or_insert_with(|| Value::Array(Vec::new()));
        if has_hostnames {
            spec.entry("hostnames")
                .or_insert_with(|| Value::Array(Vec::new()));
        }
    }
    object
}

/// The path prefix a rule's matches amount to, when they are of the form written here: none, or
/// one path prefix (`/`, the API server's default, reads as none). `Err` for any other form.
fn path_prefix(matches: &[RouteMatch]) -> Result<Option<String>, ()> {
    match matches {
        [] => Ok(None),
        [m] if m.other.values().all(Value::is_null) => {
            let path = m.path.clone().unwrap_or_default();
            if path.type_.as_deref().is_some_and(|t| t != "PathPrefix") {
                return Err(());
            }
            Ok(path.value.filter(|v| v != "/"))
        }
        _ => Err(()),
    }
}

/// What a route says, when it has the form this controller writes (Service or Gateway
/// parents, one rule of backends of known kinds with at most a path prefix); `None` otherwise, so any
/// other form is rewritten.
pub fn rules(spec: &RouteSpec) -> Option<RouteRules> {
    let [rule] = spec.rules.as_slice() else {
        return None;
    };
    let parents = spec
        .parent_refs
        .iter()
        .map(parent)
        .collect::<Option<Vec<_>>>()?;
    let plain = |other: &BTreeMap<String, Value>| other.values().all(Value::is_null);
    if !plain(&rule.other) || rule.name.is_some() {
        return None;
    }
    let backends = rule
        .backend_refs
        .iter()
        .map(|b| {
            let kind = BackendKind::of_reference(b.group.as_deref(), b.kind.as_deref())?;
            plain(&b.other).then(|| RouteBackend {
                backend: Backend {
                    kind,
                    name: b.name.as_str().into(),
                },
                port: b.port,
                // The API server defaults an unset weight to 1.
                weight: i64::from(b.weight.unwrap_or(1)),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(RouteRules {
        apex: String::new(),
        parents,
        hostnames: spec.hostnames.clone(),
        path_prefix: path_prefix(&rule.matches).ok()?,
        backends,
    })
}

/// Each named rule of a route of `namespace`, with what it says as a policy's `spec.routeRef`
/// compares it ([`super::super::referenced::ReferencedRule`]: its backends by name, sorted, and
/// weights); a rule with a backend of a kind this controller does not know is left out, and a
/// backend of another namespace is named so that no policy's backend is its namesake.
pub fn named_rules(spec: &RouteSpec, namespace: &str) -> Box<[(u64, RulesDigest)]> {
    spec.rules
        .iter()
        .filter_map(|rule| {
            let name = rule.name.as_deref()?;
            let backends = rule
                .backend_refs
                .iter()
                .map(|b| {
                    let foreign = b.other.get("namespace").and_then(Value::as_str);
                    let name = match foreign {
                        Some(other) if other != namespace => format!("{other}/{}", b.name).into(),
                        _ => b.name.as_str().into(),
                    };
                    Some(RouteBackend {
                        backend: Backend {
                            kind: BackendKind::of_reference(b.group.as_deref(), b.kind.as_deref())?,
                            name,
                        },
                        port: None,
                        weight: i64::from(b.weight.unwrap_or(1)),
                    })
                })
                .collect::<Option<Vec<_>>>()?;
            Some((digest(name), RulesDigest::of(&referenced_rules(backends))))
        })
        .collect()
}

/// What a named rule says, as a referenced route compares it: its backends, by name.
pub fn referenced_rules(mut backends: Vec<RouteBackend>) -> RouteRules {
    backends.sort_by(|a, b| a.backend.name.cmp(&b.backend.name));
    RouteRules {
        apex: String::new(),
        parents: Vec::new(),
        hostnames: Vec::new(),
        path_prefix: None,
        backends,
    }
}

/// What the route's parents' controllers said of it, one answer per parent (the last one written
/// for a parent wins when several controllers answer).
pub fn answers(status: &RouteStatus) -> Vec<ParentAnswer> {
    let condition = |s: &RouteParentStatus, type_: &str| {
        s.conditions.iter().find(|c| c.type_ == type_).cloned()
    };
    status
        .parents
        .iter()
        .filter_map(|s| {
            Some(ParentAnswer {
                parent: parent(&s.parent_ref)?,
                accepted: condition(s, ACCEPTED),
                resolved_refs: condition(s, RESOLVED_REFS),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written() -> RouteRules {
        RouteRules {
            apex: String::new(),
            parents: vec![
                RouteParent {
                    kind: ParentKind::Service,
                    namespace: None,
                    name: "web".into(),
                    section_name: None,
                    port: Some(80),
                },
                RouteParent {
                    kind: ParentKind::Gateway,
                    namespace: Some("infra".into()),
                    name: "edge".into(),
                    section_name: Some("http".into()),
                    port: None,
                },
            ],
            hostnames: vec!["shop.example.com".into()],
            path_prefix: Some("/api".into()),
            backends: vec![RouteBackend {
                backend: Backend::service("web-a"),
                port: Some(8080),
                weight: 1,
            }],
        }
    }

    fn http() -> ApiResource {
        super::super::RouteKind::HttpRoute.resource()
    }

    fn read(spec: Value) -> RouteSpec {
        serde_json::from_value(spec).expect("route spec")
    }

    #[test]
    fn a_written_route_reads_back_as_its_rules() {
        let object = object(&http(), ObjectMeta::default(), &written(), true);
        assert_eq!(rules(&read(object.data["spec"].clone())), Some(written()));
    }

    #[test]
    fn the_api_servers_defaults_read_as_what_was_written() {
        let mut unmatched = written();
        unmatched.path_prefix = None;
        let mut spec =
            object(&http(), ObjectMeta::default(), &unmatched, true).data["spec"].clone();
        // The API server fills in the default match and a Gateway reference's group and kind.
        spec["rules"][0]["matches"] =
            serde_json::json!([{"path": {"type": "PathPrefix", "value": "/"}}]);
        spec["parentRefs"][1]
            .as_object_mut()
            .expect("parent")
            .retain(|k, _| k != "group" && k != "kind");
        assert_eq!(rules(&read(spec)), Some(unmatched));
    }

    #[test]
    fn another_form_reads_as_none() {
        let object = object(&http(), ObjectMeta::default(), &written(), true);
        let mut headers = object.data["spec"].clone();
        headers["rules"][0]["matches"][0]["headers"] =
            serde_json::json!([{"name": "x", "value": "y"}]);
        assert_eq!(rules(&read(headers)), None);
        let mut filters = object.data["spec"].clone();
        filters["rules"][0]["filters"] = serde_json::json!([{"type": "RequestMirror"}]);
        assert_eq!(rules(&read(filters)), None);
        let mut exact = object.data["spec"].clone();
        exact["rules"][0]["matches"][0]["path"]["type"] = "Exact".into();
        assert_eq!(rules(&read(exact)), None);
    }

    #[test]
    fn each_parents_answer_is_read_from_the_status() {
        let status: RouteStatus = serde_json::from_value(serde_json::json!({"parents": [{
            "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "infra", "name": "edge", "sectionName": "http"},
            "controllerName": "traefik.io/gateway-controller",
            "conditions": [
                {"type": "Accepted", "status": "False", "reason": "NotAllowedByListeners", "message": "no listener allows it", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "ResolvedRefs", "status": "True", "reason": "ResolvedRefs", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            ],
        }]}))
        .expect("status");
        let answers = answers(&status);
        assert_eq!(answers.len(), 1);
        assert_eq!(answers[0].parent, written().parents[1]);
        let accepted = answers[0].accepted.clone().expect("Accepted");
        assert_eq!(
            (accepted.status.as_str(), accepted.reason.as_str()),
            ("False", "NotAllowedByListeners")
        );
    }
}
