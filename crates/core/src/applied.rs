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
    /// Why some workload could not be scaled (not allowed, not consented, not found, refused).
    pub problem: Option<ScaleProblem>,
    /// What was changed this time (an Event each).
    pub changes: Vec<ScaleChange>,
}

/// Why a workload could not be scaled: the `ScaledUp` reason, and the message in one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleProblem {
    /// The `ScaledUp` condition's reason ([`crate::api::conditions::scaling`]).
    pub reason: &'static str,
    /// What went wrong, in one line.
    pub message: String,
}

impl ScaleProblem {
    /// A workload that could not be read or written, or that the admin does not let scale.
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            reason: crate::api::conditions::scaling::SCALING_FAILED,
            message: message.into(),
        }
    }

    /// A workload whose owner does not consent to the policy's changes ([`crate::consent`]).
    pub fn not_consented(workload: &str) -> Self {
        Self {
            reason: crate::api::conditions::scaling::SCALE_TARGET_NOT_CONSENTED,
            message: crate::consent::refused(workload, "its value"),
        }
    }
}

impl std::fmt::Display for ScaleProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// One change the scale step made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleChange {
    /// Raised for a failover (else restored after a failback).
    pub raised: bool,
    /// What was changed, in a sentence.
    pub note: String,
}
