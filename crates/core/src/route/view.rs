//! What the controller keeps of a route in the cluster.

use kube::core::ObjectMeta;

use super::{POLICY_LABEL, RouteRules, RulesDigest, gateway};
use crate::{consent, digest::digest};

/// What the controller keeps of a route in the cluster: digests where a comparison is all it
/// is used for (a fixed-size value where a string would be one allocation each).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteView {
    /// A digest of the uid of its controlling owner, if any.
    pub controller: Option<u64>,
    /// A digest of the value of its [`POLICY_LABEL`].
    pub policy_label: Option<u64>,
    /// Its resourceVersion, when a number (as etcd-backed API servers issue them).
    pub resource_version: Option<u64>,
    /// A digest of what it says, when it has the form this controller writes.
    pub rules: Option<RulesDigest>,
    /// What its parents' controllers said of it (an HTTPRoute's `status.parents`).
    pub answers: Vec<gateway::ParentAnswer>,
    /// Each named rule of a route the user owns (a digest of its name), with a digest of its
    /// backends and weights as a policy's `spec.routeRef` compares them; empty for the routes
    /// this controller writes, whose rules have no name.
    pub named_rules: Box<[(u64, RulesDigest)]>,
    /// The digests of the policies its owner consents to ([`crate::consent`]); empty for most.
    pub consents: Box<[u64]>,
}

impl RouteView {
    /// The view of an object's metadata and (normalized) rules.
    pub fn new(meta: &ObjectMeta, rules: Option<&RouteRules>) -> Self {
        Self {
            controller: meta
                .owner_references
                .as_deref()
                .unwrap_or_default()
                .iter()
                .find(|o| o.controller == Some(true))
                .map(|o| digest(o.uid.as_str())),
            policy_label: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(POLICY_LABEL))
                .map(|policy| digest(policy.as_str())),
            resource_version: meta
                .resource_version
                .as_deref()
                .and_then(|v| v.parse().ok()),
            rules: rules.map(RulesDigest::of),
            answers: Vec::new(),
            named_rules: Box::default(),
            consents: consent::digests(meta.annotations.as_ref()),
        }
    }

    /// Whether it is `before` with only its rules (and its version) changed: all a write of
    /// the rules changes.
    pub fn only_rules_differ(&self, before: &RouteView) -> bool {
        self.controller == before.controller
            && self.policy_label == before.policy_label
            && self.answers == before.answers
            && self.named_rules == before.named_rules
            && self.consents == before.consents
    }

    /// What it says of the route `target`: its rules, or for a route the user owns, the named
    /// rule's.
    pub fn rules_of(&self, target: &super::RouteTarget) -> Option<&RulesDigest> {
        match target.referenced() {
            Some(referenced) => self.rule(&referenced.rule),
            None => self.rules.as_ref(),
        }
    }

    /// What its rule of this name says (its backends by name, and their weights).
    pub fn rule(&self, name: &str) -> Option<&RulesDigest> {
        let name = digest(name);
        self.named_rules
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, rules)| rules)
    }

    /// Whether the object is controlled by the owner with this uid.
    pub fn owned_by(&self, uid: &str) -> bool {
        self.controller == Some(digest(uid))
    }

    /// Whether its owner consents to changes by the policy `policy` ([`crate::consent`]).
    pub fn consents_to(&self, policy: &str) -> bool {
        consent::granted_by_digests(&self.consents, policy)
    }

    /// Whether its [`POLICY_LABEL`] names this policy.
    pub fn labelled_for(&self, policy: &str) -> bool {
        self.policy_label == Some(digest(policy))
    }
}
