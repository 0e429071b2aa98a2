//! What the apply step did to a policy's route, as the status step reads it.

use crate::{apis::NeededApi, observation::PolicyKey, route::Claim};

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
    /// The CRD of the route's kind is not installed: nothing was written.
    ApiMissing(NeededApi),
    /// An older policy holds what this one would route (`claim`): no route is written, and the
    /// route this policy owned, if any, is deleted.
    Yielded {
        /// What the older policy holds.
        claim: Claim,
        /// The older policy.
        holder: PolicyKey,
    },
}
