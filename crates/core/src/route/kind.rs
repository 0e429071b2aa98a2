//! What a route kind is: its [`KindSpec`] (the names its row in the table of kinds derives, and
//! what its module does) and its [`Form`], one policy's route of the kind.
//!
//! Every kind is a row of the API crate's `route_kinds!` table; [`super::table`] expands the
//! rows into [`RouteKind`], [`super::KINDS`] and the Gateway kinds. A kind's module gives:
//!
//! - a [`Module`]: the resource its watch lists, how an object of it is read back into a
//!   [`RouteView`], the route a policy generates of it, the spec rules of its fields;
//! - a [`Form`], one policy's route of the kind (the payload of its [`Shape`] variant): the
//!   resource it is written through, what it says, the object written, its parents.
//!
//! Everything generic iterates [`super::KINDS`] or looks a kind up in it: the controller's route
//! watches and route store, the APIs it needs and the watches it runs ([`crate::apis`]),
//! validation, the status, the metrics' known series and the test that the chart's RBAC grants
//! every kind.

use kube::core::{ApiResource, DynamicObject, ObjectMeta};

pub use super::table::RouteKind;
use super::{RouteBackend, RouteObject, RouteParent, RouteRules, RouteTarget, RouteView, Shape};
pub use crate::api::Reasons;
use crate::api::{FailoverPolicy, FailoverPolicySpec, FailoverPolicyStatus, rules::CrossFieldRule};

/// The verbs the controller uses on the routes of every kind: it lists and watches them, creates
/// a route then applies it server-side, gets one after a create conflict, and deletes one whose
/// apex another policy claimed first. The chart's ClusterRole grants them on each kind.
pub const VERBS: [&str; 6] = ["get", "list", "watch", "create", "patch", "delete"];

/// What holds for every route of one kind: the names its row in the table of kinds derives
/// (through its `Output`) and what its module does.
pub struct KindSpec {
    /// Its key.
    pub kind: RouteKind,
    /// The kind as the API names it.
    pub name: &'static str,
    /// The kind in lower case, as metric labels and logs name its watch and its writes.
    pub metric_label: &'static str,
    /// The name of the CRD that serves it.
    pub crd: &'static str,
    /// How to install that CRD.
    pub install: &'static str,
    /// Its `Ready` reasons.
    pub reasons: Reasons,
    /// The spec field that names the route.
    pub name_field: &'static str,
    /// What its module does for a route of the kind.
    pub module: Module,
}

/// What a kind's module does, each given the kind (one module serves several kinds).
pub struct Module {
    /// The API resource its watch lists and watches (group, version, plural).
    pub resource: fn(RouteKind) -> ApiResource,
    /// What the controller keeps of an object of the kind; its rules are `None` when the object
    /// is not of the form this controller writes.
    pub view: fn(&RouteObject) -> RouteView,
    /// The route of this kind a policy generates.
    pub target: fn(RouteKind, &FailoverPolicy) -> RouteTarget,
    /// The rules of the spec fields of this kind, each with whether it holds.
    pub checks: fn(RouteKind, &FailoverPolicySpec) -> Vec<(bool, &'static CrossFieldRule)>,
    /// Whether a spec sets this kind's own fields (what `routeRef` must leave unset).
    pub fields_set: fn(RouteKind, &FailoverPolicySpec) -> bool,
}

impl KindSpec {
    /// The spec of `kind`, served by `module`: its names are those its row derives.
    pub const fn new(kind: RouteKind, install: &'static str, module: Module) -> Self {
        let output = kind.output();
        Self {
            kind,
            name: output.kind(),
            metric_label: output.label(),
            crd: output.crd(),
            install,
            reasons: output.reasons(),
            name_field: output.name_field(),
            module,
        }
    }

    /// The API resource its watch lists and watches.
    pub fn resource(&self) -> ApiResource {
        (self.module.resource)(self.kind)
    }

    /// What the controller keeps of an object of the kind.
    pub fn view(&self, object: &RouteObject) -> RouteView {
        (self.module.view)(object)
    }

    /// The route of this kind a policy generates.
    pub fn target(&self, policy: &FailoverPolicy) -> RouteTarget {
        (self.module.target)(self.kind, policy)
    }

    /// The rules of the spec fields of this kind, each with whether it holds.
    pub fn checks(&self, spec: &FailoverPolicySpec) -> Vec<(bool, &'static CrossFieldRule)> {
        (self.module.checks)(self.kind, spec)
    }

    /// Whether a spec sets this kind's own fields.
    pub fn fields_set(&self, spec: &FailoverPolicySpec) -> bool {
        (self.module.fields_set)(self.kind, spec)
    }

    /// The status field that names the route of this kind.
    pub fn status_name<'s>(&self, status: &'s mut FailoverPolicyStatus) -> &'s mut Option<String> {
        self.kind.output().status_name(status)
    }
}

/// One policy's route of a kind: the payload of the kind's [`Shape`] variant.
pub trait Form {
    /// What holds for every route of its kind.
    fn spec(&self) -> &'static KindSpec;
    /// The API resource the route is written through.
    fn resource(&self) -> ApiResource;
    /// What the route says, given its apex and its weighted backends (primary first, no port).
    fn rules(&self, apex: &str, backends: Vec<RouteBackend>) -> RouteRules;
    /// The whole object to create or apply.
    fn object(&self, meta: ObjectMeta, rules: &RouteRules) -> DynamicObject;
    /// What the route attaches to (nothing, for a kind without parents).
    fn parents(&self) -> &[RouteParent] {
        &[]
    }
    /// The same route, attached to these parents only (a subset of [`Self::parents`]).
    fn with_parents(&self, parents: Vec<RouteParent>) -> Shape;
}

/// The name a policy's route gets when its spec names none: the policy's.
pub fn policy_name(policy: &FailoverPolicy) -> String {
    policy.metadata.name.clone().unwrap_or_default()
}
