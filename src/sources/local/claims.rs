//! The claims table ([`failover_core::claims`]) as the policy watch feeds it: a policy of the
//! table, valid or not, claims what its route in place may attach to.

use crate::sources::local::policies::PolicyEntry;
pub use failover_core::claims::{Claimant, Claims, ids, recorded};
use failover_core::{api::FailoverPolicyStatus, tenancy::Gateways};

/// A policy of the table as the claims read it, with the claims its status records (`status`,
/// the watch event's object's: read only when the table first sees the policy, so the table
/// keeps none of them).
pub fn claimant<'a>(
    held: &'a PolicyEntry,
    status: Option<&FailoverPolicyStatus>,
    gateways: &Gateways,
) -> Claimant<'a> {
    Claimant {
        key: &held.key,
        uid: &held.identity.uid,
        created: held.identity.created,
        claims: ids(&held.spec.claims(&held.key.namespace, gateways)),
        recorded: recorded(&held.key.namespace, status),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::sources::local::policies::Spec;
    use failover_core::{
        api::{
            FailoverPolicy, FailoverPolicySpec, GatewayParent, GatewayRouteSpec, Output,
            SecondaryBackend,
        },
        observation::PolicyKey,
    };

    fn valid(p: &FailoverPolicy) -> Spec {
        Spec::Valid(Arc::new(
            failover_core::validate::validate(p).expect("valid"),
        ))
    }

    /// A policy of namespace `ns` on the apex `service`.
    fn policy(ns: &str, name: &str, service: &str) -> FailoverPolicy {
        let mut p = FailoverPolicy::new(
            name,
            FailoverPolicySpec {
                service: service.into(),
                primary: format!("{service}-a"),
                secondaries: vec![SecondaryBackend::new(format!("{service}-b"))],
                ..Default::default()
            },
        );
        p.metadata.namespace = Some(ns.into());
        p
    }

    fn key(name: &str) -> PolicyKey {
        PolicyKey::new("ns", name)
    }

    fn claimant<'a>(key: &'a PolicyKey, created: i64, spec: &Spec) -> Claimant<'a> {
        Claimant {
            key,
            uid: &key.name,
            created,
            claims: ids(&spec.claims(&key.namespace, &Gateways::default())),
            recorded: Vec::new(),
        }
    }

    fn listed() -> Claims {
        let mut claims = Claims::default();
        claims.listed();
        claims
    }

    fn holder(claims: &Claims, of: &Claimant) -> Option<PolicyKey> {
        claims.held_by_other_id(of.key, &of.claims).cloned()
    }

    #[test]
    fn an_invalid_policy_still_claims_what_its_route_in_place_routes() {
        let mut claims = listed();
        let (a_key, b_key) = (key("a"), key("b"));
        let broken = policy("ns", "a", "api");
        let invalid = Spec::Invalid(Arc::new(crate::sources::local::policies::Invalid {
            problems: Arc::from([]),
            target: failover_core::route::RouteTarget::of(&broken),
            service: "api".into(),
            status: None,
        }));
        let b_spec = valid(&policy("ns", "b", "api"));
        claims.update(&a_key, Some(&claimant(&a_key, 100, &invalid)), 1_000);
        let b = claimant(&b_key, 50, &b_spec);
        claims.update(&b_key, Some(&b), 2_000);
        assert_eq!(holder(&claims, &b), Some(a_key));
    }

    #[test]
    fn gateway_routes_claim_each_hostname_and_path_on_each_listener() {
        let mut p = policy("ns", "edge", "api");
        p.spec.output = Output::HttpRoute;
        p.spec.http_route = Some(GatewayRouteSpec {
            gateways: vec![GatewayParent {
                name: "public".into(),
                namespace: Some("infra".into()),
                section_name: Some("https".into()),
                port: None,
            }],
            hostnames: vec!["a.example.com".into(), "b.example.com".into()],
            path_prefix: Some("/api".into()),
            ..GatewayRouteSpec::on_port(8080)
        });
        let allowed = Gateways::parse(&["infra/*".into()]).expect("allowed");
        let claims: Vec<String> = valid(&p)
            .claims("ns", &allowed)
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
