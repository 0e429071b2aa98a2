//! What feeds the decision, each source keeping small facts and waking the policies a change
//! concerns: the list-and-watch helper every watch goes through ([`watch`]), the one store every
//! watched kind is kept in ([`store`]), the local caches and the index fed by this cluster's
//! watches ([`local`]), readiness read from other clusters
//! ([`remote`]), Prometheus health queries ([`health`]), and the wake-ups ([`wake`]). The
//! [`Caches`] hold what the watches found, the [`Scope`] what the cluster admin set, and the
//! [`Context`] holds them, the writer and the work queue's door, once.

pub mod caches;
pub mod context;
pub mod health;
pub mod local;
pub mod namespaces;
pub mod remote;
pub mod scope;
pub mod store;
pub mod wake;
pub mod watch;

pub use caches::Caches;
pub use context::Context;
pub use scope::Scope;
