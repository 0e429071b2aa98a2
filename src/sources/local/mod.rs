//! The observe stage of the pipeline: what the watches saw, kept as small facts. Nothing is decided
//! here.
//!
//! - [`readiness`]: ready and total endpoints per Service, from EndpointSlices, and whether each
//!   Service exists;
//! - [`routes`]: what each generated route in the cluster says ([`failover_core::route::RouteView`]);
//! - [`policies`]: every FailoverPolicy, held once, relists applied in place;
//! - [`index`]: which policies reference a Service or a route, so an event wakes only those;
//! - [`groups`]: every FailoverGroup, which group each policy follows, each group's last choice;
//! - [`claims`]: which policy routes each apex Service and Gateway listener (the first to
//!   claim it);
//! - [`listeners`]: what each Gateway's listeners admit, and the claims re-ranked when it
//!   changes;
//! - [`synced`]: which watches have delivered their first complete list;
//! - [`apis`]: which CRDs the controller needs are not installed;
//! - [`feeds`]: the watches of this cluster that fill the readiness counts and route views.

pub mod apis;
pub mod claims;
pub mod feeds;
pub mod groups;
pub mod index;
pub mod listeners;
pub mod policies;
pub mod readiness;
pub mod routes;
pub mod shard;
pub mod synced;
