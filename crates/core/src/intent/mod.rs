//! The reconcile's pure middle: from a validated policy and what the sources observed, what the
//! controller intends to write ([`intend`]), and from what writing it did, the status
//! ([`report`]). The controller and `kubectl failover what-if` call these same functions.

mod desired;

pub use self::desired::DesiredRoute;
