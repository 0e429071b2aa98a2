//! What the apply step did to a policy's route and to the workloads it scales, as the status
//! step reads it.

use crate::{
    api::ScaledWorkload,
    apis::NeededApi,
    observation::PolicyKey,
    route::{Claim, referenced::Mismatch},
};

/// What the apply step did.
#[derive(Clone, Debug, PartialEq)]
pub enum Applied {
    /// The route already said what the plan says.
    Unchanged,
    /// The route was created or updated.
    Written,
    /// `spec.suspend` is set: nothing was written.
    Suspended,
    /// A route of this name exists and is not controlled by this policy; it was left untouched.
    Conflict,
    /// Writing failed (the error, in one line); the route is as it was.
    Failed(String),
    /// The rule `spec.routeRef` names cannot be failed over as the policy says: nothing was
    /// written.
    RouteRefUnfit(Mismatch),
    /// The CRD of the route's kind is not installed: nothing was written.
    ApiMissing(NeededApi),
    /// Another policy, which claimed it first, holds what this one would route (`claim`): no
    /// route is written, and the route this policy owned, if any, is deleted.
    Yielded {
        /// What the other policy holds.
        claim: Claim,
        /// The other policy (only named to a reader of its namespace).
        holder: PolicyKey,
    },
}

/// What the scale step did (`spec.capacity.scale`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scaled {
    /// The workloads raised and not yet restored, with what each had.
    pub workloads: Vec<ScaledWorkload>,
    /// Why some workload could not be scaled (not allowed, not found, refused), in one line.
    pub problem: Option<String>,
    /// What was changed this time (an Event each).
    pub changes: Vec<ScaleChange>,
}

/// One change the scale step made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleChange {
    /// Raised for a failover (else restored after a failback).
    pub raised: bool,
    /// What was changed, in a sentence.
    pub note: String,
}
