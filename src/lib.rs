//! A Kubernetes controller that fails traffic over between backend Services.
//!
//! Users declare a [`api::FailoverPolicy`]; the controller watches the readiness of its backends
//! through EndpointSlices and owns a generated SMI [`trafficsplit::TrafficSplit`] whose weights
//! send the traffic to the primary while it is ready and to the secondaries otherwise.
//!
//! Modules, one concern each: [`api`] (the CRD types), [`readiness`] (EndpointSlice counts),
//! [`index`] (Service → policies), [`decision`] (the pure failover rule), [`reconcile`] (reads
//! caches, writes results), [`controller`] (wiring), [`metrics`], [`leader`], [`telemetry`].

pub mod admin;
pub mod api;
pub mod controller;
pub mod crd;
pub mod decision;
pub mod index;
pub mod leader;
pub mod metrics;
pub mod readiness;
pub mod reconcile;
pub mod telemetry;
pub mod trafficsplit;
