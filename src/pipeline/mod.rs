//! One reconcile of one policy, step by step, each step a module:
//!
//! ```text
//! validate → gather → decide (pure) → apply (route, scale) → status (pure) → write
//! ```
//!
//! The pure steps (validate, decide, status) are the core crate's ([`failover_core::validate`],
//! [`failover_core::decide`], [`failover_core::status`]); the steps here read the sources or write to the API
//! server. [`group`] chooses the site of the policy's failover group before it decides.
//! [`reconcile`] sequences them all. A step imports only from the steps before it and
//! from the floors below (`crate::LAYERS`).

pub mod apply;
pub mod deletion;
pub mod finalize;
pub mod gather;
pub mod group;
pub mod reconcile;
pub mod scale;
pub mod write;
