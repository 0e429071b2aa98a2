//! A route the user owns (`spec.routeRef`): one named rule of an HTTPRoute or GRPCRoute whose
//! backendRefs' weights the controller sets, and nothing else of the route.
//!
//! The route's `rules` list is atomic: server-side apply cannot co-own one weight in it. So the
//! controller writes one merge patch of `spec.rules`, made of the rules as it read them with only
//! that rule's weights changed ([`weights_patch`]), guarded by the resourceVersion it read: a
//! route changed meanwhile refuses the patch (409), and the controller reads it again. Every
//! other field (other rules, matches, filters, timeouts, parents) stays byte for byte. The
//! controller never creates, owns or deletes such a route.

use std::collections::BTreeMap;

use kube::core::{ApiResource, DynamicObject, ObjectMeta};
use serde_json::{Value, json};

use super::{
    RouteBackend, RouteRules, Shape,
    kind::{Form, KindSpec, RouteKind},
};
use crate::{
    api::{
        FailoverPolicy, FailoverPolicySpec, Output, RouteRefKind, RouteRefSpec,
        rules::{self, CrossFieldRule},
    },
    backend::{BackendKind, BackendRef as Backend},
    consent,
};

/// A policy's route by reference: the kind and the rule (the name is the target's).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReferencedRule {
    /// The route's kind.
    pub kind: RouteKind,
    /// The rule's name.
    pub rule: String,
}

impl ReferencedRule {
    /// The rule `spec.routeRef` names.
    pub fn of(route_ref: &RouteRefSpec) -> Self {
        Self {
            kind: match route_ref.kind {
                RouteRefKind::HttpRoute => RouteKind::HttpRoute,
                RouteRefKind::GrpcRoute => RouteKind::GrpcRoute,
            },
            rule: route_ref.rule.clone(),
        }
    }
}

impl Form for ReferencedRule {
    fn spec(&self) -> &'static KindSpec {
        self.kind.spec()
    }

    fn resource(&self) -> ApiResource {
        self.kind.resource()
    }

    /// The rule's backends and weights, by name (ports and order are the user's, so left out).
    fn rules(&self, _apex: &str, backends: Vec<RouteBackend>) -> RouteRules {
        super::gateway::referenced_rules(backends)
    }

    /// What the controller sets in the route: the named rule's weights (its name and
    /// namespace only; no owner, no label).
    fn object(&self, meta: ObjectMeta, rules: &RouteRules) -> DynamicObject {
        let mut object = DynamicObject::new("", &self.resource());
        object.metadata = ObjectMeta {
            name: meta.name,
            namespace: meta.namespace,
            ..Default::default()
        };
        let backend_refs: Vec<Value> = rules
            .backends
            .iter()
            .map(|b| json!({"name": b.backend.name.as_str(), "weight": b.weight}))
            .collect();
        object.data =
            json!({"spec": {"rules": [{"name": self.rule, "backendRefs": backend_refs}]}});
        object
    }

    fn with_parents(&self, _: Vec<super::RouteParent>) -> Shape {
        Shape::Referenced(Box::new(self.clone()))
    }
}

/// The route a policy with `spec.routeRef` fails over (`None` without it).
pub fn target(policy: &FailoverPolicy) -> Option<super::RouteTarget> {
    let route_ref = policy.spec.route_ref.as_ref()?;
    Some(super::RouteTarget {
        name: route_ref.name.as_str().into(),
        shape: Shape::Referenced(Box::new(ReferencedRule::of(route_ref))),
    })
}

/// The rules of `spec.routeRef`, each with whether it holds; `kinds` is the table of route kinds
/// (every kind's own fields must be left unset beside it).
pub fn checks(
    spec: &FailoverPolicySpec,
    kinds: &[&KindSpec],
) -> Vec<(bool, &'static CrossFieldRule)> {
    if spec.route_ref.is_none() {
        return Vec::new();
    }
    let alone =
        spec.output == Output::TrafficSplit && !kinds.iter().any(|kind| kind.fields_set(spec));
    vec![
        (alone, &rules::ROUTE_REF_ALONE),
        (
            spec.secondaries.len() < rules::MAX_ROUTE_BACKENDS,
            &rules::ROUTE_BACKENDS_FIT,
        ),
    ]
}

/// Why a route's rule cannot be failed over as the policy says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// There is no route of that kind and name.
    NoRoute,
    /// The route does not consent to this policy's changes ([`crate::consent`]).
    NotConsented,
    /// The route has no rule of that name.
    NoRule,
    /// The rule's backends are not the policy's: those of the policy it lacks, and those it has
    /// that the policy does not.
    Backends {
        /// The policy's backends the rule does not route to.
        missing: Vec<String>,
        /// The rule's backends the policy does not name.
        extra: Vec<String>,
    },
}

impl Mismatch {
    /// The `Ready` reason and message that say so, for the rule `rule` of `kind` `route`.
    pub fn verdict(&self, kind: RouteKind, route: &str, rule: &str) -> (&'static str, String) {
        use crate::api::conditions::ready;
        let kind = kind.as_str();
        match self {
            Mismatch::NoRoute => (
                ready::ROUTE_REF_NOT_FOUND,
                format!(
                    "routeRef: {kind} {route} does not exist in the policy's namespace; nothing is written until it does"
                ),
            ),
            Mismatch::NotConsented => (
                ready::ROUTE_REF_NOT_CONSENTED,
                format!(
                    "routeRef: {}",
                    consent::refused(&format!("{kind} {route}"), "the route")
                ),
            ),
            Mismatch::NoRule => (
                ready::ROUTE_REF_NOT_FOUND,
                format!(
                    "routeRef: {kind} {route} has no rule named {rule}; nothing is written until it has"
                ),
            ),
            Mismatch::Backends { missing, extra } => (
                ready::ROUTE_REF_BACKENDS_DIFFER,
                format!(
                    "routeRef: rule {rule} of {kind} {route} must route to exactly the policy's backends (missing: {}; not the policy's: {}); the route is left as it is",
                    list(missing),
                    list(extra)
                ),
            ),
        }
    }
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// The index of the rule named `rule` in a route's `spec`.
fn rule_index(spec: &Value, rule: &str) -> Option<usize> {
    spec["rules"]
        .as_array()?
        .iter()
        .position(|r| r["name"].as_str() == Some(rule))
}

/// A rule's backendRef as a policy names its backends: its kind (by its `group` and `kind`) and
/// name, when it is a backend of the route's own `namespace`; else how it reads, to name it as
/// not the policy's.
fn backend_of(reference: &Value, namespace: &str) -> Result<Backend, String> {
    let name = reference["name"].as_str().unwrap_or_default();
    let (group, kind) = (reference["group"].as_str(), reference["kind"].as_str());
    if let Some(other) = reference["namespace"].as_str()
        && other != namespace
    {
        return Err(format!("{name} of namespace {other}"));
    }
    match BackendKind::of_reference(group, kind) {
        Some(kind) => Ok(Backend {
            kind,
            name: name.into(),
        }),
        None => Err(format!(
            "{name} of kind {}{}",
            kind.unwrap_or("Service"),
            group
                .filter(|g| !g.is_empty())
                .map(|g| format!(".{g}"))
                .unwrap_or_default()
        )),
    }
}

/// A rule's backendRefs, in order, each as [`backend_of`] reads it.
fn backends(rule: &Value, namespace: &str) -> Vec<Result<Backend, String>> {
    rule["backendRefs"]
        .as_array()
        .map(|refs| refs.iter().map(|b| backend_of(b, namespace)).collect())
        .unwrap_or_default()
}

/// Whether the rule named `rule` of a route of `namespace` (its `spec`) routes to exactly the
/// backends `weights` names (in any order, each once): each backendRef compared by its group,
/// kind, namespace and name.
pub fn check(
    spec: &Value,
    namespace: &str,
    rule: &str,
    weights: &BTreeMap<Backend, i64>,
) -> Result<(), Mismatch> {
    let index = rule_index(spec, rule).ok_or(Mismatch::NoRule)?;
    let refs = backends(&spec["rules"][index], namespace);
    let missing: Vec<String> = weights
        .keys()
        .filter(|w| !refs.iter().any(|r| r.as_ref() == Ok(*w)))
        .map(|w| w.name.to_string())
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    let extra: Vec<String> = refs
        .iter()
        .filter_map(|r| match r {
            Err(foreign) => Some(foreign.clone()),
            Ok(b) if !weights.contains_key(b) || !seen.insert(b) => Some(b.name.to_string()),
            Ok(_) => None,
        })
        .collect();
    if missing.is_empty() && extra.is_empty() {
        Ok(())
    } else {
        Err(Mismatch::Backends { missing, extra })
    }
}

/// The JSON pointers (RFC 6901) of the weights the controller sets in a route's `spec`: those
/// of the rule named `rule`, below `/spec`. What a GitOps tool is told to leave alone.
pub fn weight_pointers(spec: &Value, rule: &str) -> Option<Vec<String>> {
    let index = rule_index(spec, rule)?;
    let count = spec["rules"][index]["backendRefs"].as_array()?.len();
    Some(
        (0..count)
            .map(|j| format!("/spec/rules/{index}/backendRefs/{j}/weight"))
            .collect(),
    )
}

/// The merge patch that has the policy `policy` give the rule named `rule` of a route, as read
/// (`meta`, `spec`), these weights; `None` when it has them already. Refused when the route does
/// not consent to the policy ([`crate::consent`]) or its rule does not fit ([`check`]).
pub fn patch_for(
    meta: &ObjectMeta,
    spec: &Value,
    policy: &str,
    rule: &str,
    weights: &BTreeMap<Backend, i64>,
) -> Result<Option<Value>, Mismatch> {
    if !consent::granted(meta.annotations.as_ref(), policy) {
        return Err(Mismatch::NotConsented);
    }
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    let version = meta.resource_version.as_deref().unwrap_or_default();
    weights_patch(spec, namespace, version, rule, weights)
}

/// The merge patch that gives the rule named `rule` of a route of `namespace` (its `spec`, read
/// at `resource_version`) these weights, by backend; `None` when it has them already. The
/// patch carries the route's `rules` as read, with only those weights changed, and the
/// resourceVersion, so the API server refuses it if the route changed since.
pub fn weights_patch(
    spec: &Value,
    namespace: &str,
    resource_version: &str,
    rule: &str,
    weights: &BTreeMap<Backend, i64>,
) -> Result<Option<Value>, Mismatch> {
    check(spec, namespace, rule, weights)?;
    let index = rule_index(spec, rule).ok_or(Mismatch::NoRule)?;
    let mut rules = spec["rules"].clone();
    let mut changed = false;
    if let Some(refs) = rules[index]["backendRefs"].as_array_mut() {
        for backend in refs {
            let weight = backend_of(backend, namespace)
                .ok()
                .and_then(|b| weights.get(&b))
                .copied();
            // The API server defaults an unset weight to 1.
            let current = backend["weight"].as_i64().unwrap_or(1);
            if let (Some(weight), Some(fields)) = (weight, backend.as_object_mut())
                && weight != current
            {
                fields.insert("weight".into(), json!(weight));
                changed = true;
            }
        }
    }
    Ok(changed.then(
        || json!({"metadata": {"resourceVersion": resource_version}, "spec": {"rules": rules}}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route() -> Value {
        json!({
            "parentRefs": [{"name": "edge", "sectionName": "http"}],
            "hostnames": ["shop.example.com"],
            "rules": [
                {"name": "static", "matches": [{"path": {"type": "PathPrefix", "value": "/static"}}],
                 "backendRefs": [{"name": "cdn", "port": 80, "weight": 1}]},
                {"name": "api", "matches": [{"path": {"type": "PathPrefix", "value": "/api"}}],
                 "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"add": [{"name": "x-env", "value": "prod"}]}}],
                 "timeouts": {"request": "10s"},
                 "backendRefs": [{"name": "api-a", "port": 8080, "weight": 1}, {"name": "api-b", "port": 8080, "weight": 0}]},
            ],
        })
    }

    fn weights(pairs: &[(&str, i64)]) -> BTreeMap<Backend, i64> {
        pairs
            .iter()
            .map(|(n, w)| {
                let backend = Backend {
                    kind: BackendKind::Service,
                    name: (*n).into(),
                };
                (backend, *w)
            })
            .collect()
    }

    /// Every JSON pointer (below `/spec`) where two values differ.
    fn differences(a: &Value, b: &Value, at: &str, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                for key in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                    differences(
                        &x[key],
                        y.get(key).unwrap_or(&Value::Null),
                        &format!("{at}/{key}"),
                        out,
                    );
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (p, q)) in x.iter().zip(y).enumerate() {
                    differences(p, q, &format!("{at}/{i}"), out);
                }
            }
            _ if a != b => out.push(at.to_string()),
            _ => {}
        }
    }

    #[test]
    fn the_patch_changes_the_named_rules_weights_and_nothing_else_at_the_pointers_it_gives() {
        let before = route();
        let patch = weights_patch(
            &before,
            "shop",
            "42",
            "api",
            &weights(&[("api-a", 0), ("api-b", 1)]),
        )
        .expect("the rule fits")
        .expect("weights change");
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        let mut after = before.clone();
        after["rules"] = patch["spec"]["rules"].clone();
        let mut changed = Vec::new();
        differences(&before, &after, "/spec", &mut changed);
        assert_eq!(
            changed,
            [
                "/spec/rules/1/backendRefs/0/weight",
                "/spec/rules/1/backendRefs/1/weight"
            ]
        );
        assert_eq!(weight_pointers(&before, "api"), Some(changed));
    }

    #[test]
    fn a_rule_already_weighted_so_needs_no_patch() {
        let same = weights(&[("api-a", 1), ("api-b", 0)]);
        assert_eq!(weights_patch(&route(), "shop", "1", "api", &same), Ok(None));
    }

    #[test]
    fn a_missing_rule_or_other_backends_are_named() {
        let ours = weights(&[("api-a", 1), ("api-c", 0)]);
        assert_eq!(
            check(&route(), "shop", "admin", &ours),
            Err(Mismatch::NoRule)
        );
        assert_eq!(
            check(&route(), "shop", "api", &ours),
            Err(Mismatch::Backends {
                missing: vec!["api-c".into()],
                extra: vec!["api-b".into()]
            })
        );
    }

    #[test]
    fn a_backend_of_another_namespace_kind_or_group_is_not_the_policys_namesake() {
        let ours = weights(&[("api-a", 1), ("api-b", 0)]);
        assert_eq!(check(&route(), "shop", "api", &ours), Ok(()));
        let foreign = |field: &str, value: &str| {
            let mut spec = route();
            spec["rules"][1]["backendRefs"][1][field] = json!(value);
            check(&spec, "shop", "api", &ours)
        };
        let not_ours = |extra: &str| {
            Err(Mismatch::Backends {
                missing: vec!["api-b".into()],
                extra: vec![extra.into()],
            })
        };
        assert_eq!(
            foreign("namespace", "payments"),
            not_ours("api-b of namespace payments")
        );
        assert_eq!(foreign("namespace", "shop"), Ok(()));
        assert_eq!(
            foreign("kind", "Backend"),
            not_ours("api-b of kind Backend")
        );
        assert_eq!(
            foreign("group", "multicluster.x-k8s.io"),
            not_ours("api-b of kind Service.multicluster.x-k8s.io")
        );
        let mut spec = route();
        spec["rules"][1]["backendRefs"][1]["namespace"] = json!("payments");
        assert_eq!(
            weights_patch(&spec, "shop", "1", "api", &ours).map(|_| ()),
            not_ours("api-b of namespace payments")
        );
    }
}
