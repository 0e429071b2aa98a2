//! The failover controller's core: what a policy means, with no API client and no clock of its
//! own. Every function here is a function of its inputs, so the controller, the `kubectl
//! failover` plugin and the tests run the same rules.
//!
//! | floor | modules | what they are |
//! |---|---|---|
//! | vocabulary | [`message`], [`digest`], [`consent`], [`backend`], [`observation`], [`endpoints`], [`health_query`], [`last_status`], [`labels`] | one-line messages, digests of values only compared, the consent of an object the controller changes without owning it, what is known of a backend and how EndpointSlices are counted, a health query parsed once within its cost limits, the status a policy has in the form the next reconcile reads, label selectors as Kubernetes reads them |
//! | routes | [`route`], [`claims`] | the route kinds (one module each, one table) and what a policy routes; who holds each claim |
//! | policy | [`policy`], [`listeners`], [`tenancy`], [`apis`], [`applied`], [`crd`] | a policy in validated form, what Gateways' listeners admit, what a policy's author may reach, the APIs the controller needs, what writing a route did, the CRD's YAML |
//! | validate | [`validate`] | a [`policy::ValidPolicy`], every value parsed, or the problems |
//! | decide | [`decide`] | weights, holds, transition, conditions |
//! | status | [`status`] | the one place a status is built |
//! | intent | [`intent`] | the reconcile's pure middle, which the controller and `kubectl failover what-if` both call: [`intent::intend`], the apply step's [`intent::Action`] (the status of its outcome is [`status::build`]'s) |
//! | reconcile | [`reconcile`] | the one driver of a policy's reconcile, over the [`reconcile::World`] port the controller and `kubectl failover what-if` implement: the stages in order, the status, what happens next, and the effects for the caller's caches |
//!
//! A module imports only from its own floor or the floors below ([`LAYERS`] states the order
//! once, and the architecture test holds the code to it), and no two modules import each other.
//!
//! The CRD's types are the crate below ([`api`]); the controller's I/O (watches, writes, the
//! work queue) is the crate above. Cargo holds both borders: nothing here can name the
//! controller, and the API types cannot name anything here.

pub use failover_api as api;

/// The version this build reports (the controller's `--version` and `failover_build_info`, the
/// plugin's `version`): `FAILOVER_VERSION` at build time (a release build), else the crate's.
pub const VERSION: &str = match option_env!("FAILOVER_VERSION") {
    Some(v) => v,
    None => env!("CARGO_PKG_VERSION"),
};

/// One floor of a crate: its name and the module paths (below `crate::`) on it.
pub struct Layer {
    /// The floor's name, as in the crate's table of floors.
    pub name: &'static str,
    /// The modules on it, by path (`pipeline::write` covers every module below it).
    pub modules: &'static [&'static str],
}

/// This crate's floors from the ground up: a module may import only from its own floor or a
/// lower one (the API crate is below them all).
pub const LAYERS: &[Layer] = &[
    Layer {
        name: "vocabulary",
        modules: &[
            "message",
            "digest",
            "consent",
            "backend",
            "observation",
            "endpoints",
            "health_query",
            "last_status",
            "labels",
        ],
    },
    Layer {
        name: "routes",
        modules: &["route", "claims"],
    },
    Layer {
        name: "policy",
        modules: &["policy", "listeners", "tenancy", "apis", "applied", "crd"],
    },
    Layer {
        name: "validate",
        modules: &["validate"],
    },
    Layer {
        name: "decide",
        modules: &["decide"],
    },
    Layer {
        name: "status",
        modules: &["status"],
    },
    Layer {
        name: "intent",
        modules: &["intent"],
    },
    Layer {
        name: "reconcile",
        modules: &["reconcile"],
    },
];

pub mod apis;
pub mod applied;
pub mod backend;
pub mod claims;
pub mod consent;
pub mod crd;
pub mod decide;
pub mod digest;
pub mod endpoints;
pub mod health_query;
pub mod intent;
pub mod labels;
pub mod last_status;
pub mod listeners;
pub mod message;
pub mod observation;
pub mod policy;
pub mod reconcile;
pub mod route;
pub mod status;
pub mod tenancy;
pub mod validate;
