//! A Kubernetes controller that fails traffic over between backend Services.
//!
//! Users declare a [`api::FailoverPolicy`]; the controller watches the readiness of its backends
//! through EndpointSlices and owns a generated SMI [`trafficsplit::TrafficSplit`] whose weights
//! send the traffic to the primary while it is ready and to the secondaries otherwise.

pub mod api;
pub mod crd;
pub mod trafficsplit;
