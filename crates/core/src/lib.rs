//! The failover controller's core: what a policy means, with no API client and no clock of its
//! own. Every function here is a function of its inputs, so the controller, the `kubectl
//! failover` plugin and the tests run the same rules.
//!
//! | floor | modules | what they are |
//! |---|---|---|
//! | ground | [`message`], [`digest`], [`health_query`], [`route`], [`backend`], [`observation`], [`policy`], [`tenancy`], [`apis`], [`applied`], [`crd`] | shared vocabulary: one-line messages, digests of values only compared, a health query parsed once within its cost limits, the route kinds and what a policy routes, the backend kinds, what is known of a backend, a policy in validated form, what a policy's author may reach, the APIs the controller needs, what writing a route did, the CRD's YAML |
//! | validate | [`validate`] | a [`policy::ValidPolicy`], every value parsed, or the problems |
//! | decide | [`decide`] | weights, holds, transition, conditions |
//! | status | [`status`] | the one place a status is built |
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

pub mod apis;
pub mod applied;
pub mod backend;
pub mod claims;
pub mod crd;
pub mod decide;
pub mod digest;
pub mod endpoints;
pub mod health_query;
pub mod intent;
pub mod last_status;
pub mod message;
pub mod observation;
pub mod policy;
pub mod route;
pub mod status;
pub mod tenancy;
pub mod validate;
