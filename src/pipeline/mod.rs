//! One reconcile of one policy, step by step, each step a module:
//!
//! ```text
//! validate → gather → decide (pure) → apply → status (pure) → write
//! ```
//!
//! [`reconcile`] sequences them. A step imports only from the steps before it and from the floors
//! below (`crate::LAYERS`).

pub mod apply;
pub mod decide;
pub mod gather;
pub mod reconcile;
pub mod status;
pub mod validate;
pub mod write;
