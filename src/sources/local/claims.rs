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
use crate::{api::FailoverPolicy, observation::PolicyKey, sources::local::policies::key_of};

/// A policy claiming something, in the order that decides who holds it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Claimant {
    /// Its creationTimestamp, in seconds (none sorts last).
    created: i64,
    key: PolicyKey,
}

impl Claimant {
    fn of(policy: &FailoverPolicy) -> Option<Self> {
        let created = policy
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(i64::MAX, |t| t.0.as_second());
        Some(Self {
            created,
            key: key_of(policy)?,
        })
    }
}

/// Every claim, with its claimants oldest first (nearly always one).
#[derive(Debug, Default)]
pub struct Claims {
    by_claim: HashMap<Claim, SmallVec<[Claimant; 1]>>,
}

impl Claims {
    /// Records a new or changed policy (`previous`: as recorded before); returns the other
    /// policies to wake: every claimant of a claim whose holder changed.
    pub fn upsert(
        &mut self,
        previous: Option<&FailoverPolicy>,
        policy: &FailoverPolicy,
    ) -> Vec<PolicyKey> {
        let Some(claimant) = Claimant::of(policy) else {
            return Vec::new();
        };
        let old = previous.map(Claim::of).unwrap_or_default();
        let new = Claim::of(policy);
        if old == new && previous.and_then(Claimant::of).as_ref() == Some(&claimant) {
            return Vec::new();
        }
        let mut woken = Vec::new();
        for claim in &old {
            self.change(claim, &mut woken, |c| c.retain(|c| c.key != claimant.key));
        }
        for claim in new {
            self.change(&claim.clone(), &mut woken, |c| {
                if let Err(at) = c.binary_search(&claimant) {
                    c.insert(at, claimant.clone());
                }
            });
        }
        woken.retain(|k| *k != claimant.key);
        woken
    }

    /// Forgets a deleted policy (as recorded); returns the policies to wake.
    pub fn remove(&mut self, policy: &FailoverPolicy) -> Vec<PolicyKey> {
        let Some(key) = key_of(policy) else {
            return Vec::new();
        };
        let mut woken = Vec::new();
        for claim in Claim::of(policy) {
            self.change(&claim, &mut woken, |c| c.retain(|c| c.key != key));
        }
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
        edit: impl FnOnce(&mut SmallVec<[Claimant; 1]>),
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
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::{FailoverPolicySpec, GatewayParent, HttpRouteSpec, Output, SecondaryBackend};

    fn policy(name: &str, created: i64, primary: &str) -> FailoverPolicy {
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
        p.metadata.creation_timestamp = k8s_openapi::jiff::Timestamp::from_second(created)
            .ok()
            .map(Time);
        p
    }

    fn key(name: &str) -> PolicyKey {
        PolicyKey::new("ns", name)
    }

    #[test]
    fn the_older_policy_holds_an_apex_and_deleting_it_hands_the_apex_over() {
        let mut claims = Claims::default();
        let (older, younger) = (policy("b-old", 100, "api-a"), policy("a-new", 200, "api-c"));
        assert!(claims.upsert(None, &younger).is_empty());
        assert_eq!(
            claims.upsert(None, &older),
            vec![key("a-new")],
            "the holder changed"
        );
        let mine = Claim::of(&younger);
        let (claim, holder) = claims.held_by_other(&key("a-new"), &mine).expect("held");
        assert_eq!(
            (claim.to_string(), holder),
            ("apex Service api".into(), key("b-old"))
        );
        assert_eq!(
            claims.held_by_other(&key("b-old"), &Claim::of(&older)),
            None
        );
        assert_eq!(claims.remove(&older), vec![key("a-new")]);
        assert_eq!(claims.held_by_other(&key("a-new"), &mine), None);
    }

    #[test]
    fn same_second_policies_are_ordered_by_name_and_a_moved_apex_is_released() {
        let mut claims = Claims::default();
        let (a, b) = (policy("a", 100, "x"), policy("b", 100, "y"));
        claims.upsert(None, &b);
        claims.upsert(None, &a);
        assert_eq!(
            claims.held_by_other(&key("b"), &Claim::of(&b)).map(|h| h.1),
            Some(key("a"))
        );
        let mut moved = a.clone();
        moved.spec.service = "other".into();
        assert_eq!(claims.upsert(Some(&a), &moved), vec![key("b")]);
        assert_eq!(claims.held_by_other(&key("b"), &Claim::of(&b)), None);
    }

    #[test]
    fn gateway_routes_claim_each_hostname_and_path_on_each_listener() {
        let mut p = policy("edge", 100, "api-a");
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
        let claims: Vec<String> = Claim::of(&p).iter().map(ToString::to_string).collect();
        assert_eq!(
            claims,
            [
                "hostname a.example.com path /api on Gateway infra/public listener https",
                "hostname b.example.com path /api on Gateway infra/public listener https",
            ]
        );
    }
}
