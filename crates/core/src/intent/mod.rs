//! The reconcile's pure middle, between what the sources hold and what the controller writes:
//!
//! ```text
//! intend(policy, observed) ─▶ Intent ─▶ action ─▶ (the controller writes; what-if imagines) ─▶ report ─▶ status
//! ```
//!
//! - [`intend`]: the policy as it may attach (the parents the admin allows), what it claims, the
//!   decision, the route to write and the API it needs;
//! - [`Intent::action`]: what the apply step does with it: write the route, withdraw it (another
//!   policy holds a claim), nothing (suspended), or report the missing API;
//! - [`Intent::outcome`] and [`report`]: what carrying it out did, and the status that says so.
//!
//! The controller's reconcile and `kubectl failover what-if` call these same functions: the
//! controller writes the route and the workloads in between, what-if imagines the writes went
//! through ([`Action::imagined`]).

mod desired;

use std::sync::Arc;

use chrono::{DateTime, Utc};

pub use self::desired::DesiredRoute;
use crate::{
    api::{ClaimsStatus, FailoverPolicyStatus},
    apis::NeededApi,
    applied::{Applied, Scaled},
    decide::{Plan, decide, group::Order},
    last_status::LastStatus,
    observation::{BackendObservation, PolicyKey},
    policy::ValidPolicy,
    route::{Claim, RouteParent, RouteTarget, RouteView, owner, referenced::Mismatch},
    status::{self, Decided, Outcome, StatusInput},
    tenancy::Gateways,
};

/// What a reconcile of a valid policy reads, as the sources hold it.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    /// One observation per backend, primary first.
    pub observations: &'a [BackendObservation],
    /// The status as last written.
    pub previous: Option<&'a LastStatus>,
    /// What the policy's failover group asks of it, if it is a member of one.
    pub order: Option<&'a Order>,
    /// Now.
    pub now: DateTime<Utc>,
}

/// What the controller intends for a valid policy.
#[derive(Debug)]
pub struct Intent {
    /// The policy as its route may attach: without the parents the admin does not allow.
    pub policy: Arc<ValidPolicy>,
    /// The parents left out (Gateways of other namespaces not in `--allowed-gateways`).
    pub refused_parents: Vec<RouteParent>,
    /// What the policy routes, as its route may attach.
    pub claims: Vec<Claim>,
    /// The decision.
    pub plan: Plan,
    /// The route to write.
    pub route: DesiredRoute,
    /// The API the route is written through.
    pub api: NeededApi,
}

/// What the controller intends for `policy` (whose object has `uid`), given the Gateways the
/// admin allows and what the sources observed.
pub fn intend(
    policy: Arc<ValidPolicy>,
    uid: &str,
    gateways: &Gateways,
    observed: &Observed,
) -> Intent {
    // What it may attach to, and so what it claims: one function decides both.
    let (policy, refused_parents) = attachable(policy, gateways);
    let claims = gateways.claims(&policy);
    let plan = decide(
        &policy,
        observed.observations,
        observed.previous,
        observed.order,
        observed.now,
    );
    let route = DesiredRoute::of(owner(&policy.name, uid), &policy, &plan.routing.weights);
    let api = NeededApi::of_route(policy.route.kind());
    Intent {
        policy,
        refused_parents,
        claims,
        plan,
        route,
        api,
    }
}

/// The policy with its route's Gateways of other namespaces that the cluster admin does not
/// allow left out, and those Gateways.
fn attachable(
    policy: Arc<ValidPolicy>,
    gateways: &Gateways,
) -> (Arc<ValidPolicy>, Vec<RouteParent>) {
    let (route, refused) = gateways.attachable(&policy.namespace, &policy.route);
    if refused.is_empty() {
        return (policy, refused);
    }
    let mut allowed = (*policy).clone();
    allowed.route = route;
    (Arc::new(allowed), refused)
}

/// What the apply step does with an intent.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Another policy, which claimed it first, holds `claim`: write no route, and delete the one
    /// this policy owns.
    Withdraw {
        /// What the other policy holds.
        claim: Claim,
        /// The other policy.
        holder: PolicyKey,
    },
    /// The route's API is not served: write nothing.
    ApiMissing(NeededApi),
    /// `spec.suspend`: write nothing.
    Suspended,
    /// Make the route say what the intent says.
    Write,
    /// Make this rule of the route the user owns (`spec.routeRef`) carry the intent's weights.
    WriteRule(Box<str>),
}

impl Intent {
    /// What the apply step does, given the first of the intent's claims another policy holds
    /// (`held`, with that policy) and whether the route's API is known to be missing.
    pub fn action(&self, held: Option<(Claim, PolicyKey)>, api_missing: bool) -> Action {
        if let Some((claim, holder)) = held {
            Action::Withdraw { claim, holder }
        } else if api_missing {
            Action::ApiMissing(self.api)
        } else if self.policy.suspend {
            Action::Suspended
        } else if let Some(referenced) = self.policy.route.referenced() {
            Action::WriteRule(referenced.rule.as_str().into())
        } else {
            Action::Write
        }
    }

    /// The outcome of carrying out the intent: what the apply and scale steps did, and the route
    /// as the cluster had it when the decision was made.
    pub fn outcome(self, applied: Applied, scaled: Scaled, route: Option<RouteView>) -> Outcome {
        Outcome::Decided(Box::new(Decided {
            policy: self.policy,
            plan: self.plan,
            applied,
            route,
            refused_parents: self.refused_parents,
            scaled,
        }))
    }
}

impl Action {
    /// What the apply step reports when every write it makes goes through (what `what-if`
    /// shows): a route that exists and that this policy (`uid`, named `policy`) does not own is
    /// left alone, and so is a route it names by reference that does not consent to it.
    pub fn imagined(&self, route: Option<&RouteView>, uid: &str, policy: &str) -> Applied {
        match self {
            Action::Withdraw { claim, holder } => Applied::Yielded {
                claim: claim.clone(),
                holder: holder.clone(),
            },
            Action::ApiMissing(api) => Applied::ApiMissing(*api),
            Action::Suspended => Applied::Suspended,
            Action::Write if route.is_some_and(|r| !r.owned_by(uid)) => Applied::Conflict,
            Action::Write => Applied::Written,
            Action::WriteRule(rule) => match route {
                None => Applied::RouteRefUnfit(Mismatch::NoRoute),
                Some(view) if !view.consents_to(policy) => {
                    Applied::RouteRefUnfit(Mismatch::NotConsented)
                }
                Some(view) if view.rule(rule).is_none() => Applied::RouteRefUnfit(Mismatch::NoRule),
                Some(_) => Applied::Written,
            },
        }
    }
}

/// What a status is reported against, besides the outcome.
#[derive(Clone, Copy, Debug)]
pub struct Record<'a> {
    /// The policy's `metadata.generation`.
    pub generation: Option<i64>,
    /// The route the policy's spec names (an invalid policy's too).
    pub target: &'a RouteTarget,
    /// The status as last written.
    pub previous: Option<&'a LastStatus>,
    /// The status as last written, whole (what an invalid policy's status keeps).
    pub whole: Option<&'a FailoverPolicyStatus>,
    /// What the policy claims, summarized.
    pub claims: Option<&'a ClaimsStatus>,
    /// Now.
    pub now: DateTime<Utc>,
}

/// The status that reports an outcome.
pub fn report(outcome: &Outcome, record: &Record) -> FailoverPolicyStatus {
    status::build(&StatusInput {
        generation: record.generation,
        target: record.target,
        previous: record.previous,
        whole: record.whole,
        outcome,
        now: record.now,
        claims: record.claims,
    })
}
