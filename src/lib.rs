//! A Kubernetes controller that fails traffic over between backend Services.
//!
//! Users declare a [`failover_core::api::FailoverPolicy`]; the controller watches the readiness
//! of its backends through EndpointSlices (local or in other clusters) and owns a generated route
//! (an SMI TrafficSplit, or a Gateway API HTTPRoute, GRPCRoute, TLSRoute or TCPRoute), or sets
//! the weights of one rule of a route its users own, so that the traffic goes to the primary
//! while it is ready and to the secondaries otherwise.
//!
//! Data flows one way, through four crates, each a floor Cargo holds (a crate cannot name the
//! ones above it):
//!
//! - `failover-api`: the CRD's types, its validation rules, status types, condition types and
//!   reasons;
//! - `failover-core`: pure, no API client and no global state: the shared vocabulary, then
//!   validate, decide, status and the reconcile's pure middle (`intent`); this crate names it as
//!   `failover_core::…` wherever it uses it;
//! - `failover-controller` (this crate): the I/O around them, from the ground up:
//!
//! | floor | modules | what they are |
//! |---|---|---|
//! | runtime | [`runtime`] | what every step runs against: the API client, metrics, leadership, the writer (the only way to write, each write checked for leadership), the memory of writes, the retries |
//! | watch, observe | [`sources`] | what feeds the decision: the list-and-watch helper, the local caches and index, remote clusters, health queries, and which policies a change wakes |
//! | gather | [`pipeline::gather`] | read what a decision needs from the sources |
//! | apply | [`pipeline::apply`], [`pipeline::scale`], [`pipeline::finalize`], [`pipeline::group`] | write the route, raise or restore the workloads a failover needs, hold the policy's finalizer while one is raised; what each did, or why it could not; choose the site of the policy's failover group and write the group's status |
//! | write | [`pipeline::write`] | queue the status (written in the background), Events, metrics |
//! | reconcile | [`pipeline::reconcile`] | the steps as named calls, what happens next, and a deleted policy's last restores ([`pipeline::deletion`]) |
//! | controller | [`controller`] | the running controller: wiring, the work queue, the policy watch, the admin server |
//!
//! - `failover-plugin`: the `kubectl failover` plugin, which reads the cluster and runs the
//!   core's rules (what-if, explain) without the controller.
//!
//! Within this crate, a module imports only from its own floor or the floors below
//! ([`LAYERS`] states the order once; `tests/it/architecture.rs` holds the code to it).

pub mod controller;
pub mod pipeline;
pub mod runtime;
pub mod sources;

use failover_core::Layer;

/// This crate's floors from the ground up: a module may import only from its own floor or a
/// lower one (the crates below are below them all).
pub const LAYERS: &[Layer] = &[
    Layer {
        name: "runtime",
        modules: &["runtime"],
    },
    Layer {
        name: "watch, observe",
        modules: &["sources"],
    },
    Layer {
        name: "gather",
        modules: &["pipeline::gather"],
    },
    Layer {
        name: "apply",
        modules: &[
            "pipeline::apply",
            "pipeline::scale",
            "pipeline::finalize",
            "pipeline::group",
        ],
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
