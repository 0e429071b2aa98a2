//! Who routes what. A policy claims its apex Service (the root of its TrafficSplit, or the
//! Service its HTTPRoute attaches to) and, for an HTTPRoute on Gateways, each hostname and path
//! on each Gateway listener it names. Two policies claiming one thing would write two routes for
//! it, and what a mesh or a Gateway does then is undefined: the older policy holds the claim
//! (creationTimestamp, then namespace and name: the Gateway API's rule for conflicting routes),
//! and the younger writes no route and says why (`Ready=False`, reason `ApexConflict`).
//!
//! The policy watch keeps this table current and wakes every claimant of a claim whose holder
//! changed, so deleting the holder hands the claim over at once. Claims compare exactly: a
//! route naming a Gateway's listener and one naming the whole Gateway are different claims.

use std::collections::HashMap;

use smallvec::SmallVec;

pub use crate::route::Claim;
use crate::{
    observation::PolicyKey,
    sources::local::policies::{Held, Spec},
};

/// A policy as the claims read it: its key, its age, and its spec.
#[derive(Clone, Copy, Debug)]
pub struct Claimant<'a> {
    /// Its namespace and name.
    pub key: &'a PolicyKey,
    /// Its creationTimestamp, in seconds (none: `i64::MAX`).
    pub created: i64,
    /// Its spec.
    pub spec: &'a Spec,
}

impl<'a> Claimant<'a> {
    /// A policy as the table holds it.
    pub fn of(held: &'a Held) -> Self {
        Self {
            key: &held.key,
            created: held.identity.created,
            spec: &held.spec,
        }
    }

    fn claims(&self) -> Vec<Claim> {
        self.spec.claims(&self.key.namespace)
    }

    fn rank(&self) -> Rank {
        Rank {
            created: self.created,
            key: self.key.clone(),
        }
    }
}

/// A policy claiming something, in the order that decides who holds it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    /// Its creationTimestamp, in seconds (none sorts last).
    created: i64,
    key: PolicyKey,
}

/// Every claim, with its claimants oldest first (nearly always one).
#[derive(Debug, Default)]
pub struct Claims {
    by_claim: HashMap<Claim, SmallVec<[Rank; 1]>>,
}

impl Claims {
    /// Records a policy's change: `before` as recorded before (none: new), `after` now (none:
    /// deleted); returns the other policies to wake: every claimant of a claim whose holder
    /// changed.
    pub fn update(
        &mut self,
        before: Option<&Claimant>,
        after: Option<&Claimant>,
    ) -> Vec<PolicyKey> {
        let old = before.map(Claimant::claims).unwrap_or_default();
        let new = after.map(Claimant::claims).unwrap_or_default();
        let (old_rank, new_rank) = (before.map(Claimant::rank), after.map(Claimant::rank));
        if old == new && old_rank == new_rank {
            return Vec::new();
        }
        let mut woken = Vec::new();
        if let Some(rank) = &old_rank {
            for claim in &old {
                self.change(claim, &mut woken, |c| c.retain(|c| c.key != rank.key));
            }
        }
        if let Some(rank) = &new_rank {
            for claim in &new {
                self.change(claim, &mut woken, |c| {
                    if let Err(at) = c.binary_search(rank) {
                        c.insert(at, rank.clone());
                    }
                });
            }
        }
        let me = after.or(before).map(|c| c.key);
        woken.retain(|k| Some(k) != me);
        woken
    }

    /// The first of `claims` that a policy other than `policy` holds, and that holder.
    pub fn held_by_other(
        &self,
        policy: &PolicyKey,
        claims: &[Claim],
    ) -> Option<(Claim, PolicyKey)> {
        claims.iter().find_map(|claim| {
            let holder = &self.by_claim.get(claim)?.first()?.key;
            (holder != policy).then(|| (claim.clone(), holder.clone()))
        })
    }

    /// Changes a claim's claimants; when its holder changed, every claimant is woken.
    fn change(
        &mut self,
        claim: &Claim,
        woken: &mut Vec<PolicyKey>,
        edit: impl FnOnce(&mut SmallVec<[Rank; 1]>),
    ) {
        let claimants = self.by_claim.entry(claim.clone()).or_default();
        let before = claimants.first().map(|c| c.key.clone());
        edit(claimants);
        if claimants.first().map(|c| &c.key) != before.as_ref() {
            woken.extend(claimants.iter().map(|c| c.key.clone()));
        }
        if claimants.is_empty() {
            self.by_claim.remove(claim);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        FailoverPolicy, FailoverPolicySpec, GatewayParent, HttpRouteSpec, Output, SecondaryBackend,
    };

    fn valid(p: &FailoverPolicy) -> Spec {
        Spec::Valid(std::sync::Arc::new(
            crate::validate::validate(p).expect("valid"),
        ))
    }

    fn policy(name: &str, primary: &str) -> FailoverPolicy {
        let mut p = FailoverPolicy::new(
            name,
            FailoverPolicySpec {
                service: "api".into(),
                primary: primary.into(),
                secondaries: vec![SecondaryBackend::new("api-b")],
                ..Default::default()
            },
        );
        p.metadata.namespace = Some("ns".into());
        p
    }

    fn key(name: &str) -> PolicyKey {
        PolicyKey::new("ns", name)
    }

    fn claimant<'a>(key: &'a PolicyKey, created: i64, spec: &'a Spec) -> Claimant<'a> {
        Claimant { key, created, spec }
    }

    #[test]
    fn the_older_policy_holds_an_apex_and_deleting_it_hands_the_apex_over() {
        let mut claims = Claims::default();
        let (older, younger) = (
            valid(&policy("b-old", "api-a")),
            valid(&policy("a-new", "api-c")),
        );
        let (old_key, new_key) = (key("b-old"), key("a-new"));
        let (older, younger) = (
            claimant(&old_key, 100, &older),
            claimant(&new_key, 200, &younger),
        );
        assert!(claims.update(None, Some(&younger)).is_empty());
        assert_eq!(
            claims.update(None, Some(&older)),
            vec![key("a-new")],
            "the holder changed"
        );
        let mine = younger.claims();
        let (claim, holder) = claims.held_by_other(&key("a-new"), &mine).expect("held");
        assert_eq!(
            (claim.to_string(), holder),
            ("apex Service api".into(), key("b-old"))
        );
        assert_eq!(claims.held_by_other(&key("b-old"), &older.claims()), None);
        assert_eq!(claims.update(Some(&older), None), vec![key("a-new")]);
        assert_eq!(claims.held_by_other(&key("a-new"), &mine), None);
    }

    #[test]
    fn same_second_policies_are_ordered_by_name_and_a_moved_apex_is_released() {
        let mut claims = Claims::default();
        let (a_key, b_key) = (key("a"), key("b"));
        let (a_valid, b_valid) = (valid(&policy("a", "x")), valid(&policy("b", "y")));
        let (a, b) = (
            claimant(&a_key, 100, &a_valid),
            claimant(&b_key, 100, &b_valid),
        );
        claims.update(None, Some(&b));
        claims.update(None, Some(&a));
        assert_eq!(
            claims.held_by_other(&key("b"), &b.claims()).map(|h| h.1),
            Some(key("a"))
        );
        let mut moved = policy("a", "x");
        moved.spec.service = "other".into();
        let moved = valid(&moved);
        assert_eq!(
            claims.update(Some(&a), Some(&claimant(&a_key, 100, &moved))),
            vec![key("b")]
        );
        assert_eq!(claims.held_by_other(&key("b"), &b.claims()), None);
    }

    #[test]
    fn an_invalid_policy_still_claims_what_its_route_in_place_routes() {
        let mut claims = Claims::default();
        let (a_key, b_key) = (key("a"), key("b"));
        let mut broken = policy("a", "");
        broken.metadata.namespace = Some("ns".into());
        let invalid = Spec::Invalid(std::sync::Arc::new(
            crate::sources::local::policies::Invalid {
                problems: std::sync::Arc::from([]),
                target: crate::route::RouteTarget::of(&broken),
                service: "api".into(),
                status: None,
            },
        ));
        let b_spec = valid(&policy("b", "y"));
        claims.update(None, Some(&claimant(&a_key, 100, &invalid)));
        claims.update(None, Some(&claimant(&b_key, 200, &b_spec)));
        assert_eq!(
            claims
                .held_by_other(&b_key, &b_spec.claims("ns"))
                .map(|h| h.1),
            Some(a_key)
        );
    }

    #[test]
    fn gateway_routes_claim_each_hostname_and_path_on_each_listener() {
        let mut p = policy("edge", "api-a");
        p.spec.output = Output::HttpRoute;
        p.spec.http_route = Some(HttpRouteSpec {
            gateways: vec![GatewayParent {
                name: "public".into(),
                namespace: Some("infra".into()),
                section_name: Some("https".into()),
                port: None,
            }],
            hostnames: vec!["a.example.com".into(), "b.example.com".into()],
            path_prefix: Some("/api".into()),
            ..HttpRouteSpec::on_port(8080)
        });
        let claims: Vec<String> = valid(&p)
            .claims("ns")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            claims,
            [
                "hostname a.example.com path /api on Gateway infra/public listener https",
                "hostname b.example.com path /api on Gateway infra/public listener https",
            ]
        );
    }
}
