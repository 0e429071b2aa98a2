//! A Kubernetes controller that fails traffic over between backend Services.
//!
//! Users declare a [`api::FailoverPolicy`]; the controller watches the readiness of its backends
//! through EndpointSlices and owns a generated route (an SMI TrafficSplit or a Gateway API
//! HTTPRoute) whose weights send the traffic to the primary while it is ready and to the
//! secondaries otherwise.
//!
//! Data flows one way. The folders are the floors of the building, from the ground up; a module
//! imports only from its own floor or the floors below, and no two modules import each other
//! ([`LAYERS`] states the order once; `tests/it/architecture.rs` holds the code to it):
//!
//! | floor | modules | what they are |
//! |---|---|---|
//! | api | [`api`] | the CRD's types, its validation rules, status types, condition types and reasons |
//! | ground | [`message`], [`digest`], [`health_query`], [`route`], [`observation`], [`policy`], [`tenancy`], [`crd`] | shared vocabulary: one-line messages, digests of values only compared, a health query parsed once within its cost limits, the route kinds, what is known of a backend, a policy in validated form, what a policy's author may reach, the CRD's YAML |
//! | runtime | [`runtime`] | what every step runs against: metrics, leadership, the leader-gated door for writes, the memory of writes |
//! | watch, observe | [`sources`] | what feeds the decision: the list-and-watch helper, the local caches and index, remote clusters, health queries, and which policies a change wakes |
//! | validate | [`pipeline::validate`] | a [`policy::ValidPolicy`], every value parsed, or the problems |
//! | gather | [`pipeline::gather`] | read what a decision needs from the sources |
//! | decide | [`pipeline::decide`] | pure: weights, holds, transition, conditions |
//! | apply | [`pipeline::apply`] | write the route; an outcome |
//! | status | [`pipeline::status`] | pure: the one place a status is built |
//! | write | [`pipeline::write`] | queue the status (written in the background), Events, metrics |
//! | reconcile | [`pipeline::reconcile`] | the steps above as named calls, and what happens next |
//! | controller | [`controller`] | the running controller: wiring, the work queue, the policy watch, the admin server |

pub mod api;
pub mod controller;
pub mod crd;
pub mod digest;
pub mod health_query;
pub mod message;
pub mod observation;
pub mod pipeline;
pub mod policy;
pub mod route;
pub mod runtime;
pub mod sources;
pub mod tenancy;

/// One floor of the building: its name and the module paths (below `crate::`) on it.
pub struct Layer {
    /// The floor's name, as in the table above.
    pub name: &'static str,
    /// The modules on it, by path (`pipeline::decide` covers every module below it).
    pub modules: &'static [&'static str],
}

/// The floors from the ground up: a module may import only from its own floor or a lower one.
pub const LAYERS: &[Layer] = &[
    Layer {
        name: "api",
        modules: &["api"],
    },
    Layer {
        name: "ground",
        modules: &[
            "message",
            "digest",
            "health_query",
            "route",
            "observation",
            "policy",
            "tenancy",
            "crd",
        ],
    },
    Layer {
        name: "runtime",
        modules: &["runtime"],
    },
    Layer {
        name: "watch, observe",
        modules: &["sources"],
    },
    Layer {
        name: "validate",
        modules: &["pipeline::validate"],
    },
    Layer {
        name: "gather",
        modules: &["pipeline::gather"],
    },
    Layer {
        name: "decide",
        modules: &["pipeline::decide"],
    },
    Layer {
        name: "apply",
        modules: &["pipeline::apply"],
    },
    Layer {
        name: "status",
        modules: &["pipeline::status"],
    },
    Layer {
        name: "write",
        modules: &["pipeline::write"],
    },
    Layer {
        name: "reconcile",
        modules: &["pipeline::reconcile", "pipeline"],
    },
    Layer {
        name: "controller",
        modules: &["controller"],
    },
];
