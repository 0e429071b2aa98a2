//! Who routes what, as the controller's table holds it (and `kubectl failover what-if` builds it
//! the same way from the policies it lists). A policy claims its apex Service (the root of its TrafficSplit, or the
//! Service its HTTPRoute attaches to) and, for an HTTPRoute on Gateways, each hostname and path
//! on each Gateway listener it may attach to: its parents are those
//! [`crate::tenancy::Gateways::attachable`] keeps, the function that decides the route's
//! parents, so a Gateway the admin or its listeners do not allow the policy is no claim of it. Two policies
//! claiming one thing would write two routes for it, and what a mesh or a Gateway does then is
//! undefined: the policy that claimed it first holds it. The other leaves a hostname it does not
//! hold out of its route and serves the rest (`Attached=False`, reason `HostnameHeldElsewhere`);
//! an apex or a rule it does not hold, or no hostname left, and it writes no route and says why
//! (`Ready=False`, reason `ApexConflict`) ([`crate::intent::Intent::action`]). A claim ranks by when it was made, not by the
//! policy's age: an old policy that names something later does not take it from the policy
//! routing it.
//!
//! When a claim was made is when the controller first saw the policy make it, kept in the
//! policy's status (`status.claims`, which only the controller writes), so it survives a restart
//! and a change of leader. The status is read when this process first sees a policy; from then
//! on the table's own times stand (a status read back late may still record a claim the policy
//! has dropped since, and a claim dropped and made again is a new claim). A claim the status does
//! not record counts from when this process first saw it, and all those of the first list from
//! the list's start: they tie, and a tie goes to the older policy (creationTimestamp, then
//! namespace and name), so claims a release without `status.claims` left keep their holders.
//!
//! The controller's policy watch keeps this table current and wakes every claimant of a claim whose holder
//! changed, so deleting the holder hands the claim over at once; a change of a Gateway's
//! listeners or of a namespace's labels re-makes the claims of the policies on it. A listener
//! claim names the listener it resolves to (by `sectionName`, by port, or every listener that
//! admits the route), so one listener named two ways is one claim; on a Gateway not seen, the
//! listener as the reference names it.

use std::{
    cmp::Ordering,
    collections::{BTreeMap, HashMap},
};

use indexmap::IndexMap;

use chrono::DateTime;
use smallvec::SmallVec;

use crate::{
    api::{ClaimsMade, ClaimsStatus, FailoverPolicyStatus, Timestamp},
    digest::digest,
    observation::PolicyKey,
    route::{Claim, claim::ClaimId},
};

/// The most times a status lists claims under ([`ClaimsStatus::made`]): claims made at more
/// times count from the later of the two oldest, which can only make a claim younger (never
/// take one from another policy).
pub const MAX_CLAIM_TIMES: usize = 8;

/// A policy as the claims read it.
#[derive(Clone, Debug)]
pub struct Claimant<'a> {
    /// Its namespace and name.
    pub key: &'a PolicyKey,
    /// Its uid: a new object of the same name makes its claims anew.
    pub uid: &'a str,
    /// Its creationTimestamp, in seconds (none: `i64::MAX`): breaks ties.
    pub created: i64,
    /// What it claims now: what its route may attach to
    /// ([`crate::tenancy::Gateways::claims`]), by digest.
    pub claims: Vec<ClaimId>,
    /// The claims its status records, each with when it was made (milliseconds).
    pub recorded: Vec<(ClaimId, i64)>,
}

/// The digests of `claims`.
pub fn ids(claims: &[Claim]) -> Vec<ClaimId> {
    claims.iter().map(Claim::id).collect()
}

/// The claims the status of a policy of `namespace` records, each with when it was made
/// (milliseconds): the bounded form, and the list of a release before it.
pub fn recorded(namespace: &str, status: Option<&FailoverPolicyStatus>) -> Vec<(ClaimId, i64)> {
    let Some(status) = status else {
        return Vec::new();
    };
    let made = status.claimed.iter().flat_map(|c| &c.made);
    let bounded = made.flat_map(|m| {
        let since = m.since.0.timestamp_millis();
        m.claims
            .split_whitespace()
            .filter_map(ClaimId::parse_hex)
            .map(move |id| (id, since))
    });
    let listed = status.claims.iter().map(|r| {
        let id = ClaimId::of_text(namespace, &r.claim);
        (id, r.since.0.timestamp_millis())
    });
    bounded.chain(listed).collect()
}

/// The dense id of a policy in the table: what each claim's holder is held as, instead of its
/// key.
type PolicyId = u32;

/// A policy claiming something, in the order that decides who holds it: when it made the claim
/// (milliseconds), then its creationTimestamp (seconds; none sorts last), then its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rank {
    since: i64,
    created: i64,
    policy: PolicyId,
}

/// What one policy claims, each with when it made it (in milliseconds). Held for every policy:
/// the uid as a digest (it is only compared), the claims as digests in a slice of their exact
/// length.
#[derive(Clone, Debug, PartialEq)]
struct Made {
    id: PolicyId,
    uid: u64,
    created: i64,
    claims: Box<[(ClaimId, i64)]>,
}

impl Made {
    fn since(&self, claim: ClaimId) -> Option<i64> {
        self.claims.iter().find(|(c, _)| *c == claim).map(|c| c.1)
    }
}

/// Every claim by its digest with its holder, and what each policy claims. Nearly every claim
/// has one claimant: it costs its digest and its holder's id here (and its digest and time in
/// its policy's [`Made`]), whatever its text; only a claim that several policies make keeps its
/// claimants in order (`rivals`).
#[derive(Debug, Default)]
pub struct Claims {
    /// Each claim's holder.
    holders: HashMap<ClaimId, PolicyId>,
    /// The claimants, first made first, of each claim several policies make.
    rivals: HashMap<ClaimId, SmallVec<[Rank; 2]>>,
    by_policy: IndexMap<PolicyKey, Made>,
    /// Each policy's key by its id; ids of policies gone are reused.
    keys: Vec<Option<PolicyKey>>,
    free: Vec<PolicyId>,
    /// When the first list began, until it is complete: what its new claims count from.
    first_list: Option<i64>,
    listed: bool,
}

impl Claims {
    /// Records a policy as it is now (`None`: deleted), seen at `at` (milliseconds); returns
    /// the other policies to wake: every claimant of a claim whose holder changed.
    pub fn update(
        &mut self,
        key: &PolicyKey,
        policy: Option<&Claimant>,
        at: i64,
    ) -> Vec<PolicyKey> {
        let at = self.seen_at(at);
        let old = self.by_policy.swap_remove(key);
        let id = old.as_ref().map_or_else(|| self.new_id(key), |m| m.id);
        let made = policy.map(|c| self.made(c, old.as_ref(), id, at));
        let mut woken = Vec::new();
        if old != made {
            for (claim, _) in old.iter().flat_map(|m| &m.claims) {
                self.withdraw(*claim, id, &mut woken);
            }
            if let Some(made) = &made {
                for (claim, since) in &made.claims {
                    let rank = Rank {
                        since: *since,
                        created: made.created,
                        policy: id,
                    };
                    self.claim(*claim, rank, &mut woken);
                }
            }
        }
        match made {
            Some(made) => {
                self.by_policy.insert(key.clone(), made);
            }
            None => self.free_id(id),
        }
        if self.holders.is_empty() {
            self.holders.shrink_to(64);
        }
        woken.sort();
        woken.dedup();
        woken.retain(|k| k != key);
        woken
    }

    /// The first list is complete: a claim seen from now on counts from when it is seen.
    pub fn listed(&mut self) {
        self.listed = true;
        self.first_list = None;
    }

    /// What a new claim seen at `at` counts from.
    fn seen_at(&mut self, at: i64) -> i64 {
        if self.listed {
            at
        } else {
            *self.first_list.get_or_insert(at)
        }
    }

    fn new_id(&mut self, key: &PolicyKey) -> PolicyId {
        match self.free.pop() {
            Some(id) => {
                self.keys[id as usize] = Some(key.clone());
                id
            }
            None => {
                self.keys.push(Some(key.clone()));
                PolicyId::try_from(self.keys.len() - 1).unwrap_or(PolicyId::MAX)
            }
        }
    }

    fn free_id(&mut self, id: PolicyId) {
        if let Some(slot) = self.keys.get_mut(id as usize) {
            *slot = None;
            self.free.push(id);
        }
    }

    fn key(&self, id: PolicyId) -> Option<&PolicyKey> {
        self.keys.get(id as usize)?.as_ref()
    }

    /// A policy makes `claim`: it holds it alone, or joins its rivals in rank.
    fn claim(&mut self, claim: ClaimId, rank: Rank, woken: &mut Vec<PolicyKey>) {
        let Some(&holder) = self.holders.get(&claim) else {
            self.holders.insert(claim, rank.policy);
            return;
        };
        let mut rivals = match self.rivals.remove(&claim) {
            Some(rivals) => rivals,
            None => {
                // The one claimant so far, in rank.
                let made = self.key(holder).and_then(|k| self.by_policy.get(k));
                let Some(made) = made else {
                    self.holders.insert(claim, rank.policy);
                    return;
                };
                let first = Rank {
                    since: made.since(claim).unwrap_or(i64::MAX),
                    created: made.created,
                    policy: holder,
                };
                SmallVec::from_iter([first])
            }
        };
        let keys = &self.keys;
        if let Err(at) = rivals.binary_search_by(|r| order(r, &rank, keys)) {
            rivals.insert(at, rank);
        }
        self.settle(claim, holder, rivals, woken);
    }

    /// A policy no longer makes `claim`.
    fn withdraw(&mut self, claim: ClaimId, policy: PolicyId, woken: &mut Vec<PolicyKey>) {
        let Some(&holder) = self.holders.get(&claim) else {
            return;
        };
        match self.rivals.remove(&claim) {
            Some(mut rivals) => {
                rivals.retain(|r| r.policy != policy);
                self.settle(claim, holder, rivals, woken);
            }
            None if holder == policy => {
                self.holders.remove(&claim);
            }
            None => {}
        }
    }

    /// Keeps a claim's ranked claimants: its holder the first (woken all when it changed from
    /// `before`), the ranks kept only while several remain.
    fn settle(
        &mut self,
        claim: ClaimId,
        before: PolicyId,
        rivals: SmallVec<[Rank; 2]>,
        woken: &mut Vec<PolicyKey>,
    ) {
        let Some(first) = rivals.first() else {
            self.holders.remove(&claim);
            return;
        };
        if first.policy != before {
            let keys = &self.keys;
            woken.extend(
                rivals
                    .iter()
                    .filter_map(|r| keys.get(r.policy as usize)?.clone()),
            );
            woken.extend(self.key(before).cloned());
        }
        self.holders.insert(claim, first.policy);
        if rivals.len() > 1 {
            self.rivals.insert(claim, rivals);
        }
    }

    /// What a policy claims now, each with when it made it: as this table had it (`before`, of
    /// the same uid), else (the first time this process sees the policy) as its status records
    /// it, else `at`.
    fn made(&self, claimant: &Claimant, before: Option<&Made>, id: PolicyId, at: i64) -> Made {
        let uid = digest(claimant.uid);
        let before = before.filter(|m| m.uid == uid);
        let mut claims: Vec<(ClaimId, i64)> = Vec::with_capacity(claimant.claims.len());
        for claim in claimant.claims.iter().copied() {
            if claims.iter().any(|(c, _)| *c == claim) {
                continue;
            }
            let since = match before {
                Some(before) => before.since(claim),
                None => claimant
                    .recorded
                    .iter()
                    .find(|(c, _)| *c == claim)
                    .map(|r| r.1),
            };
            claims.push((claim, since.map_or(at, |s| s.min(at))));
        }
        Made {
            id,
            uid,
            created: claimant.created,
            claims: claims.into_boxed_slice(),
        }
    }

    /// The holder of a claim.
    fn holder(&self, claim: ClaimId) -> Option<&PolicyKey> {
        self.key(*self.holders.get(&claim)?)
    }

    /// Each of `claims` that a policy other than `policy` holds, with that holder.
    pub fn held_by_others(&self, policy: &PolicyKey, claims: &[Claim]) -> Vec<(Claim, PolicyKey)> {
        claims
            .iter()
            .filter_map(|claim| {
                let holder = self.holder(claim.id())?;
                (holder != policy).then(|| (claim.clone(), holder.clone()))
            })
            .collect()
    }

    /// The holder of the first of `claims` (digests) that a policy other than `policy` holds.
    pub fn held_by_other_id(&self, policy: &PolicyKey, claims: &[ClaimId]) -> Option<&PolicyKey> {
        claims
            .iter()
            .find_map(|claim| self.holder(*claim).filter(|h| *h != policy))
    }

    /// What a policy claims, as its status records it: how many it holds and has lost, and
    /// when each was made (at most [`MAX_CLAIM_TIMES`] times).
    pub fn summary(&self, policy: &PolicyKey) -> Option<ClaimsStatus> {
        let made = self.by_policy.get(policy)?;
        let count = made.claims.len();
        if count == 0 {
            return None;
        }
        let lost = made
            .claims
            .iter()
            .filter(|(claim, _)| self.holders.get(claim) != Some(&made.id))
            .count();
        let mut times: BTreeMap<i64, Vec<ClaimId>> = BTreeMap::new();
        for (claim, since) in &made.claims {
            times.entry(*since).or_default().push(*claim);
        }
        while times.len() > MAX_CLAIM_TIMES {
            let Some((_, oldest)) = times.pop_first() else {
                break;
            };
            if let Some(mut next) = times.first_entry() {
                next.get_mut().extend(oldest);
            }
        }
        let made = times
            .into_iter()
            .filter_map(|(since, mut claims)| {
                claims.sort();
                let claims: Vec<String> = claims.into_iter().map(ClaimId::hex).collect();
                Some(ClaimsMade {
                    since: Timestamp(DateTime::from_timestamp_millis(since)?),
                    claims: claims.join(" "),
                })
            })
            .collect();
        Some(ClaimsStatus {
            held: u32::try_from(count - lost).unwrap_or(u32::MAX),
            lost: u32::try_from(lost).unwrap_or(u32::MAX),
            made,
        })
    }
}

/// The order of two claimants of one claim: first made first, then the older policy, then by
/// namespace and name.
fn order(a: &Rank, b: &Rank, keys: &[Option<PolicyKey>]) -> Ordering {
    let key = |r: &Rank| keys.get(r.policy as usize).and_then(Option::as_ref);
    (a.since, a.created)
        .cmp(&(b.since, b.created))
        .then_with(|| key(a).cmp(&key(b)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        api::{
            ClaimRecord, FailoverPolicy, FailoverPolicySpec, GatewayParent, GatewayRouteSpec,
            Output, SecondaryBackend,
        },
        policy::ValidPolicy,
        tenancy::Gateways,
    };

    fn valid(p: &FailoverPolicy) -> ValidPolicy {
        crate::validate::validate(p).expect("valid")
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

    /// A policy of `ns` whose HTTPRoute attaches to the Gateway `gw` for `shop.example.com`.
    fn on_gateway(ns: &str, name: &str, gateway: (&str, &str)) -> ValidPolicy {
        of_kind(Output::HttpRoute, ns, name, gateway)
    }

    /// A policy of `ns` whose route of this output attaches to the Gateway `gw` for
    /// `shop.example.com` (every connection, for a TCPRoute).
    fn of_kind(output: Output, ns: &str, name: &str, gateway: (&str, &str)) -> ValidPolicy {
        let mut p = policy(ns, name, "web");
        p.spec.output = output;
        let field = match output {
            Output::GrpcRoute => &mut p.spec.grpc_route,
            Output::TlsRoute => &mut p.spec.tls_route,
            Output::TcpRoute => &mut p.spec.tcp_route,
            _ => &mut p.spec.http_route,
        };
        let hostnames = match output {
            Output::TcpRoute => Vec::new(),
            _ => vec!["shop.example.com".into()],
        };
        *field = Some(GatewayRouteSpec {
            gateways: vec![GatewayParent {
                name: gateway.1.into(),
                namespace: Some(gateway.0.into()),
                section_name: None,
                port: None,
            }],
            hostnames,
            ..GatewayRouteSpec::on_port(8080)
        });
        valid(&p)
    }

    #[test]
    fn routes_of_one_hostname_collide_only_where_they_take_the_same_traffic() {
        let edge = ("infra", "edge");
        let claims = |output| Gateways::default().claims(&of_kind(output, "infra", "p", edge));
        let http = claims(Output::HttpRoute);
        assert_eq!(
            claims(Output::GrpcRoute),
            http,
            "gRPC is HTTP on the listener"
        );
        assert_ne!(claims(Output::TlsRoute), http, "TLS passthrough by SNI");
        assert_ne!(claims(Output::TcpRoute), claims(Output::TlsRoute));
        assert_eq!(
            claims(Output::TcpRoute)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["TCP connections on Gateway infra/edge"]
        );
        assert_eq!(
            claims(Output::TlsRoute)[0].to_string(),
            "TLS connections to shop.example.com on Gateway infra/edge"
        );
    }

    fn key(name: &str) -> PolicyKey {
        PolicyKey::new("ns", name)
    }

    fn claimant<'a>(key: &'a PolicyKey, created: i64, policy: &ValidPolicy) -> Claimant<'a> {
        allowed(key, created, policy, &Gateways::default())
    }

    fn allowed<'a>(
        key: &'a PolicyKey,
        created: i64,
        policy: &ValidPolicy,
        gateways: &Gateways,
    ) -> Claimant<'a> {
        Claimant {
            key,
            uid: &key.name,
            created,
            claims: ids(&gateways.claims(policy)),
            recorded: Vec::new(),
        }
    }

    /// The claims table after its first list.
    fn listed() -> Claims {
        let mut claims = Claims::default();
        claims.listed();
        claims
    }

    fn holder(claims: &Claims, of: &Claimant) -> Option<PolicyKey> {
        claims.held_by_other_id(of.key, &of.claims).cloned()
    }

    #[test]
    fn the_first_to_claim_holds_a_claim_however_old_the_other_policy_and_deleting_it_hands_it_over()
    {
        let mut claims = listed();
        let (old_key, young_key) = (key("old"), key("young"));
        let (elsewhere, api) = (
            valid(&policy("ns", "old", "other")),
            valid(&policy("ns", "young", "api")),
        );
        let young = claimant(&young_key, 200, &api);
        assert!(claims.update(&young_key, Some(&young), 1_000).is_empty());
        // The older policy, created before, names the same apex later.
        claims.update(&old_key, Some(&claimant(&old_key, 100, &elsewhere)), 1_500);
        let moved = valid(&policy("ns", "old", "api"));
        let old = claimant(&old_key, 100, &moved);
        assert!(
            claims.update(&old_key, Some(&old), 2_000).is_empty(),
            "the holder did not change"
        );
        assert_eq!(holder(&claims, &old), Some(young_key.clone()));
        assert_eq!(holder(&claims, &young), None);
        // Seen again later (a status write, a resync): the claim keeps its time.
        claims.update(&young_key, Some(&young), 9_000);
        assert_eq!(holder(&claims, &old), Some(young_key.clone()));
        assert_eq!(
            claims.update(&young_key, None, 9_500),
            vec![old_key.clone()]
        );
        assert_eq!(holder(&claims, &old), None);
        // Made again, the claim is a new one: the other holds it now.
        claims.update(&young_key, Some(&young), 10_000);
        assert_eq!(holder(&claims, &young), Some(old_key));
    }

    #[test]
    fn claims_made_at_once_go_to_the_older_policy_then_by_name() {
        let mut claims = listed();
        let (a_key, b_key, c_key) = (key("a"), key("b"), key("c"));
        let api = [
            valid(&policy("ns", "a", "api")),
            valid(&policy("ns", "b", "api")),
            valid(&policy("ns", "c", "api")),
        ];
        let (a, b, c) = (
            claimant(&a_key, 100, &api[0]),
            claimant(&b_key, 100, &api[1]),
            claimant(&c_key, 50, &api[2]),
        );
        claims.update(&b_key, Some(&b), 1_000);
        claims.update(&a_key, Some(&a), 1_000);
        assert_eq!(holder(&claims, &b), Some(a_key.clone()), "by name");
        claims.update(&c_key, Some(&c), 1_000);
        assert_eq!(holder(&claims, &a), Some(c_key), "the older");
    }

    #[test]
    fn every_claim_of_the_first_list_counts_from_its_start_unless_the_status_records_it() {
        let mut claims = Claims::default();
        let (old_key, young_key, recorded_key) = (key("old"), key("young"), key("recorded"));
        let api = [
            valid(&policy("ns", "old", "api")),
            valid(&policy("ns", "young", "api")),
            valid(&policy("ns", "recorded", "api")),
        ];
        let (old, young) = (
            claimant(&old_key, 100, &api[0]),
            claimant(&young_key, 200, &api[1]),
        );
        // Listed across a second: unrecorded claims tie, and the older policy holds them.
        claims.update(&young_key, Some(&young), 1_000);
        claims.update(&old_key, Some(&old), 2_300);
        assert_eq!(holder(&claims, &young), Some(old_key.clone()));
        // The status records when the youngest made its claim: before the list.
        let apex = ClaimId::of_text("ns", "apex Service api");
        let recorded = Claimant {
            recorded: vec![(apex, 500)],
            ..claimant(&recorded_key, 300, &api[2])
        };
        claims.update(&recorded_key, Some(&recorded), 2_400);
        claims.listed();
        assert_eq!(holder(&claims, &old), Some(recorded_key.clone()));
        let summary = claims.summary(&recorded_key).expect("claims");
        assert_eq!((summary.held, summary.lost), (1, 0));
        assert_eq!(
            summary.made,
            [ClaimsMade {
                since: Timestamp(DateTime::from_timestamp_millis(500).expect("time")),
                claims: apex.hex(),
            }]
        );
        let old = claims.summary(&old_key).expect("claims");
        assert_eq!((old.held, old.lost), (0, 1));
        assert_eq!(
            old.made[0].since,
            Timestamp(DateTime::from_timestamp_millis(1_000).expect("time"))
        );
    }

    #[test]
    fn a_status_is_read_only_when_the_policy_is_first_seen() {
        let mut claims = listed();
        let (a_key, b_key) = (key("a"), key("b"));
        let (api, other) = (
            valid(&policy("ns", "a", "api")),
            valid(&policy("ns", "a", "other")),
        );
        let b_api = valid(&policy("ns", "b", "api"));
        let stale = vec![(ClaimId::of_text("ns", "apex Service api"), 100)];
        let a = |spec| Claimant {
            recorded: stale.clone(),
            ..claimant(&a_key, 100, spec)
        };
        claims.update(&a_key, Some(&a(&api)), 1_000);
        claims.update(&b_key, Some(&claimant(&b_key, 200, &b_api)), 2_000);
        // A drops the apex, and makes it again before its status stops recording it.
        claims.update(&a_key, Some(&a(&other)), 3_000);
        claims.update(&a_key, Some(&a(&api)), 4_000);
        assert_eq!(holder(&claims, &a(&api)), Some(b_key));
    }

    #[test]
    fn a_gateway_the_admin_does_not_allow_is_no_claim() {
        let mut claims = listed();
        let (a_key, b_key) = (PolicyKey::new("a", "shop"), PolicyKey::new("b", "old"));
        let own = on_gateway("a", "shop", ("a", "gw"));
        let borrowed = on_gateway("b", "old", ("a", "gw"));
        let (a, b) = (
            claimant(&a_key, 200, &own),
            claimant(&b_key, 100, &borrowed),
        );
        assert!(b.claims.is_empty(), "{:?}", b.claims);
        claims.update(&b_key, Some(&b), 1_000);
        claims.update(&a_key, Some(&a), 2_000);
        assert_eq!(holder(&claims, &a), None);
        // Allowed, B claims it, but after A did.
        let allowed = Gateways::parse(&["a/gw".into()]).expect("allowed");
        let b = self::allowed(&b_key, 100, &borrowed, &allowed);
        assert_eq!(b.claims.len(), 1);
        claims.update(&b_key, Some(&b), 3_000);
        assert_eq!(holder(&claims, &a), None);
        assert_eq!(holder(&claims, &b), Some(a_key));
    }

    #[test]
    fn a_policy_at_every_limit_is_held_in_a_few_words_per_claim_and_its_status_stays_small() {
        let mut claims = listed();
        let key = PolicyKey::new("tenant", "huge");
        let many: Vec<ClaimId> = (0..256)
            .map(|i| {
                ClaimId::of_text(
                    "tenant",
                    &format!("hostname h{i}.example.com path / on Gateway a/b"),
                )
            })
            .collect();
        // Made at 20 times: the status lists 8.
        let recorded = many
            .iter()
            .enumerate()
            .map(|(i, id)| (*id, 1_000 + (i as i64 % 20)))
            .collect();
        let huge = Claimant {
            key: &key,
            uid: "u",
            created: 1,
            claims: many.clone(),
            recorded,
        };
        claims.update(&key, Some(&huge), 5_000);
        let summary = claims.summary(&key).expect("claims");
        assert_eq!((summary.held, summary.lost), (256, 0));
        assert_eq!(summary.made.len(), MAX_CLAIM_TIMES);
        let text = serde_json::to_string(&summary).expect("json");
        assert!(text.len() < 5 * 1024, "{} bytes", text.len());
        // Merged into the later time: never earlier than made.
        let read = recorded_of(&summary);
        for (id, since) in read {
            let made = 1_000 + (many.iter().position(|m| *m == id).expect("one") as i64 % 20);
            assert!(since >= made, "{since} < {made}");
        }
    }

    fn recorded_of(summary: &ClaimsStatus) -> Vec<(ClaimId, i64)> {
        recorded(
            "tenant",
            Some(&FailoverPolicyStatus {
                claimed: Some(summary.clone()),
                ..Default::default()
            }),
        )
    }

    #[test]
    fn claims_a_release_before_listed_whole_are_read_once_by_their_digest() {
        let status = FailoverPolicyStatus {
            claims: vec![ClaimRecord {
                claim: "apex Service api".into(),
                since: Timestamp(DateTime::from_timestamp_millis(700).expect("time")),
            }],
            ..Default::default()
        };
        let apex = Claim::Apex {
            namespace: crate::observation::Namespace::new("shop"),
            service: "api".into(),
        };
        assert_eq!(recorded("shop", Some(&status)), [(apex.id(), 700)]);
        let written = serde_json::to_value(&status).expect("json");
        assert!(written.get("claims").is_none(), "never written: {written}");
    }
}
