//! Route kinds: each described once, in its own module, and listed once, in [`super::KINDS`].
//!
//! A kind's module gives two things:
//!
//! - a [`KindSpec`], what holds for every route of the kind: its name and metric label, its API
//!   (the CRD, how to install it, the resource its watch lists), how an object of it is read back
//!   into a [`RouteView`], the route a policy generates of it, the spec rules of its fields, its
//!   `Ready` reasons, and the policy fields that name the route;
//! - a [`Form`], one policy's route of the kind (the payload of its [`Shape`] variant): the
//!   resource it is written through, what it says, the object written, its parents.
//!
//! Everything generic iterates [`super::KINDS`] or looks a kind up in it: the controller's route
//! watches and route store, the APIs it needs and the watches it runs ([`crate::apis`]),
//! validation, the status, the metrics' known series and the test that the chart's RBAC grants
//! every kind.

use kube::core::{ApiResource, DynamicObject, ObjectMeta};

use super::{RouteBackend, RouteObject, RouteParent, RouteRules, RouteTarget, RouteView, Shape};
use crate::api::{
    FailoverPolicy, FailoverPolicySpec, FailoverPolicyStatus, Output, rules::CrossFieldRule,
};

/// The verbs the controller uses on the routes of every kind: it lists and watches them, creates
/// a route then applies it server-side, gets one after a create conflict, and deletes one whose
/// apex another policy claimed first. The chart's ClusterRole grants them on each kind.
pub const VERBS: [&str; 6] = ["get", "list", "watch", "create", "patch", "delete"];

/// The kinds of route, without their form: the key of [`super::KINDS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RouteKind {
    /// SMI TrafficSplit ([`super::trafficsplit`]).
    TrafficSplit,
    /// Gateway API HTTPRoute ([`super::gateway`]).
    HttpRoute,
    /// Gateway API GRPCRoute ([`super::gateway`]).
    GrpcRoute,
    /// Gateway API TLSRoute ([`super::gateway`]).
    TlsRoute,
    /// Gateway API TCPRoute ([`super::gateway`]).
    TcpRoute,
}

/// What holds for every route of one kind.
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
    /// The API resource its watch lists and watches (group, version, plural).
    pub resource: fn() -> ApiResource,
    /// What the controller keeps of an object of the kind; its rules are `None` when the object
    /// is not of the form this controller writes.
    pub view: fn(&RouteObject) -> RouteView,
    /// The route of this kind a policy generates.
    pub target: fn(&FailoverPolicy) -> RouteTarget,
    /// The rules of the spec fields of this kind, each with whether it holds.
    pub checks: fn(&FailoverPolicySpec) -> Vec<(bool, &'static CrossFieldRule)>,
    /// Its `Ready` reasons.
    pub reasons: Reasons,
    /// The spec field that names the route.
    pub name_field: &'static str,
    /// The status field that names the route.
    pub status_name: fn(&mut FailoverPolicyStatus) -> &mut Option<String>,
    /// Whether a spec sets this kind's own fields (what `routeRef` must leave unset).
    pub fields_set: fn(&FailoverPolicySpec) -> bool,
}

/// The `Ready` reasons that name one kind (constants of [`crate::api::conditions::ready`]).
#[derive(Clone, Copy)]
pub struct Reasons {
    /// A route of the route's name exists and is not the policy's.
    pub conflict: &'static str,
    /// Writing the route failed.
    pub write_failed: &'static str,
    /// The kind's CRD is not installed.
    pub crd_missing: &'static str,
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

impl From<Output> for RouteKind {
    fn from(output: Output) -> Self {
        match output {
            Output::TrafficSplit => RouteKind::TrafficSplit,
            Output::HttpRoute => RouteKind::HttpRoute,
            Output::GrpcRoute => RouteKind::GrpcRoute,
            Output::TlsRoute => RouteKind::TlsRoute,
            Output::TcpRoute => RouteKind::TcpRoute,
        }
    }
}

/// The name a policy's route gets when its spec names none: the policy's.
pub fn policy_name(policy: &FailoverPolicy) -> String {
    policy.metadata.name.clone().unwrap_or_default()
}
