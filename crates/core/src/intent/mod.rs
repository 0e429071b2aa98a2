//! The reconcile's pure middle, between what the sources hold and what the controller writes:
//!
//! ```text
//! intend(policy, observed) ─▶ Intent ─▶ action ─▶ (the controller writes; what-if imagines) ─▶ report ─▶ status
//! ```
//!
//! - [`intend`]: the policy as it may attach (the parents the admin allows), what it claims, the
//!   decision, the route to write and the API it needs;
//! - [`Intent::action`]: what the apply step does with it: write the route (without the
//!   hostnames other policies hold), withdraw it (another policy holds its apex, its rule or
//!   every hostname), nothing (suspended), or report the missing API;
//! - [`Intent::outcome`]: what carrying it out did (the status that says so is
//!   [`crate::status::build`]'s).
//!
//! The controller's reconcile and `kubectl failover what-if` call these same functions: the
//! controller writes the route and the workloads in between, what-if imagines the writes went
//! through ([`Action::imagined`]).

mod desired;

use std::sync::Arc;

use chrono::{DateTime, Utc};

pub use self::desired::DesiredRoute;
use crate::{
    apis::{ApiState, NeededApi},
    applied::{Applied, Scaled},
    decide::{Plan, decide, group::Order},
    last_status::LastStatus,
    observation::{BackendObservation, PolicyKey},
    policy::ValidPolicy,
    route::{Claim, RouteView, owner, referenced::Mismatch},
    status::{Decided, Outcome},
    tenancy::{Gateways, RefusedParent},
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
    /// The parents left out (Gateways of other namespaces not in `--allowed-gateways`, or
    /// whose listeners do not admit the route), with why.
    pub refused_parents: Vec<RefusedParent>,
    /// What the policy routes, as its route may attach.
    pub claims: Vec<Claim>,
    /// The decision.
    pub plan: Plan,
    /// The route to write.
    pub route: DesiredRoute,
    /// The API the route is written through.
    pub api: NeededApi,
    /// The hostnames other policies hold (each claim, with its holder): left out of the route.
    pub held_hostnames: Vec<(Claim, PolicyKey)>,
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
        held_hostnames: Vec::new(),
    }
}

/// The policy with its route's Gateways that the cluster admin or the Gateway's listeners do
/// not allow left out, and those Gateways with why.
fn attachable(
    policy: Arc<ValidPolicy>,
    gateways: &Gateways,
) -> (Arc<ValidPolicy>, Vec<RefusedParent>) {
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
    /// Another policy, which claimed it first, holds `claim` (an apex, a rule, or the last
    /// hostname the route would serve): write no route, and delete the one this policy owns.
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
    /// What the apply step does, given the intent's claims other policies hold (`held`, each
    /// with that policy) and whether the route's API is served. Conflicts are
    /// settled per hostname, as the Gateway API settles them: a hostname held elsewhere is left
    /// out of the route ([`Intent::held_hostnames`]) and the others are served; the route is
    /// withdrawn only when it would route nothing of its own.
    pub fn action(&mut self, held: Vec<(Claim, PolicyKey)>, api: ApiState) -> Action {
        if let Some((claim, holder)) = self.yield_held(held) {
            Action::Withdraw { claim, holder }
        } else if api == ApiState::Missing {
            Action::ApiMissing(self.api)
        } else if self.policy.suspend {
            Action::Suspended
        } else if let Some(referenced) = self.policy.route.referenced() {
            Action::WriteRule(referenced.rule.as_str().into())
        } else {
            Action::Write
        }
    }

    /// Leaves the hostnames other policies hold out of the route; returns what makes it
    /// withdraw whole instead: a held apex or rule, a held claim of every hostname of a listener
    /// (a route naming none, a TCPRoute), or every hostname held.
    fn yield_held(&mut self, held: Vec<(Claim, PolicyKey)>) -> Option<(Claim, PolicyKey)> {
        let hostname = |claim: &Claim| match claim {
            Claim::Listener { hostname, .. } if &**hostname != "*" => Some(hostname.clone()),
            _ => None,
        };
        if let Some(whole) = held.iter().find(|(claim, _)| hostname(claim).is_none()) {
            return Some(whole.clone());
        }
        let lost: Vec<Box<str>> = held.iter().filter_map(|(c, _)| hostname(c)).collect();
        let lost: Vec<&str> = lost.iter().map(|h| &**h).collect();
        let route = self.route.without_hostnames(&lost);
        if route.rules.hostnames.is_empty() {
            return held.into_iter().next();
        }
        if !held.is_empty() {
            self.route = route;
            self.held_hostnames = held;
        }
        None
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
            held_hostnames: self.held_hostnames,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        api::{
            FailoverPolicy, FailoverPolicySpec, GatewayParent, GatewayRouteSpec, Output,
            SecondaryBackend,
            conditions::{ATTACHED, attached},
        },
        observation::BackendObservation,
    };

    /// A policy of `shop` whose HTTPRoute on its Gateway `gw` serves `hostnames`.
    fn on_gateway(hostnames: &[&str]) -> Arc<ValidPolicy> {
        let mut p = FailoverPolicy::new(
            "web",
            FailoverPolicySpec {
                service: "web".into(),
                primary: "web-a".into(),
                secondaries: vec![SecondaryBackend::new("web-b")],
                output: Output::HttpRoute,
                http_route: Some(GatewayRouteSpec {
                    gateways: vec![GatewayParent {
                        name: "gw".into(),
                        namespace: None,
                        section_name: None,
                        port: None,
                    }],
                    hostnames: hostnames.iter().map(|h| h.to_string()).collect(),
                    ..GatewayRouteSpec::on_port(8080)
                }),
                ..Default::default()
            },
        );
        p.metadata.namespace = Some("shop".into());
        Arc::new(crate::validate::validate(&p).expect("valid"))
    }

    fn intent_of(policy: Arc<ValidPolicy>) -> Intent {
        let observations = [
            BackendObservation::counted(1, 1),
            BackendObservation::counted(1, 1),
        ];
        let observed = Observed {
            observations: &observations,
            previous: None,
            order: None,
            now: Utc::now(),
        };
        intend(policy, "uid", &Gateways::default(), &observed)
    }

    /// The claims of `intent` on these hostnames, held by a policy of another namespace.
    fn held(intent: &Intent, hostnames: &[&str]) -> Vec<(Claim, PolicyKey)> {
        let other = PolicyKey::new("other", "old");
        intent
            .claims
            .iter()
            .filter(|c| matches!(c, Claim::Listener { hostname, .. } if hostnames.contains(&&**hostname)))
            .map(|c| (c.clone(), other.clone()))
            .collect()
    }

    #[test]
    fn a_hostname_held_elsewhere_is_left_out_and_the_others_are_served() {
        let mut intent = intent_of(on_gateway(&["a.example.com", "b.example.com"]));
        let taken = held(&intent, &["b.example.com"]);
        assert_eq!(taken.len(), 1);
        assert_eq!(intent.action(taken, ApiState::Served), Action::Write);
        assert_eq!(intent.route.rules.hostnames, ["a.example.com"]);
        assert_eq!(
            intent.route.object.data["spec"]["hostnames"],
            serde_json::json!(["a.example.com"])
        );
        let written = intent.route.target.clone();
        let outcome = intent.outcome(Applied::Written, Scaled::default(), None);
        let status = crate::status::build(&crate::status::StatusInput {
            notices: &Default::default(),
            generation: Some(1),
            target: &written,
            previous: None,
            outcome: &outcome,
            claims: None,
            now: Utc::now(),
        });
        let attached_condition = status
            .conditions
            .iter()
            .find(|c| c.type_ == ATTACHED)
            .expect("Attached");
        assert_eq!(
            (
                attached_condition.status.as_str(),
                attached_condition.reason.as_str()
            ),
            ("False", attached::HOSTNAME_HELD_ELSEWHERE)
        );
        assert_eq!(
            attached_condition.message,
            "hostname b.example.com path / on Gateway shop/gw is routed by a policy in another namespace, which claimed it first: the route is written without that hostname and serves the policy's others"
        );
    }

    #[test]
    fn a_route_is_withdrawn_only_when_it_would_route_nothing_of_its_own() {
        let mut every = intent_of(on_gateway(&["a.example.com", "b.example.com"]));
        let taken = held(&every, &["a.example.com", "b.example.com"]);
        assert!(matches!(
            every.action(taken, ApiState::Served),
            Action::Withdraw { .. }
        ));
        let mut any_hostname = intent_of(on_gateway(&[]));
        let taken = held(&any_hostname, &["*"]);
        assert_eq!(taken.len(), 1, "a route naming no hostname claims them all");
        assert!(matches!(
            any_hostname.action(taken, ApiState::Served),
            Action::Withdraw { .. }
        ));
        let mut free = intent_of(on_gateway(&["a.example.com"]));
        assert_eq!(free.action(Vec::new(), ApiState::Served), Action::Write);
        assert!(free.held_hostnames.is_empty());
        assert_eq!(free.route.rules.hostnames, ["a.example.com"]);
    }
}
