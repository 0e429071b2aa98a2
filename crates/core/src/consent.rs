//! The consent of whoever owns an object the controller changes on a policy's behalf without
//! owning it: the route rule `spec.routeRef` names (its weights) and the workloads a
//! `scaleTarget` names (their replicas).
//!
//! The object consents by naming the policies that may change it in its annotation
//! [`POLICIES_ANNOTATION`] (policy names of its own namespace, separated by commas). Whoever may
//! edit the object may set it, so the object's own RBAC decides who consents, and the right to
//! write FailoverPolicies gives no right on anything else. The annotation travels with the
//! object (a GitOps tool applies it with the rest), and it is read on the very reading the write
//! uses, so consent withdrawn is seen before the next write. A separate grant object (as the
//! Gateway API's ReferenceGrant) would need its own watch, RBAC and cleanup; a label holds one
//! value of at most 63 characters.
//!
//! Without consent nothing of the object is written: a route's weights stay as they are, a
//! workload is neither raised nor restored (a value raised before consent was withdrawn is the
//! owner's to keep).

use std::collections::BTreeMap;

use crate::digest::digest;

/// The annotation by which an object names the policies (of its namespace) that may change it.
pub const POLICIES_ANNOTATION: &str = "failover.dev/policies";

/// The policy names an object's annotations consent to, in the order written.
fn names(annotations: Option<&BTreeMap<String, String>>) -> impl Iterator<Item = &str> {
    annotations
        .and_then(|a| a.get(POLICIES_ANNOTATION))
        .into_iter()
        .flat_map(|list| list.split(','))
        .map(str::trim)
        .filter(|name| !name.is_empty())
}

/// Whether an object with these annotations consents to changes by the policy `policy` (of its
/// namespace).
pub fn granted(annotations: Option<&BTreeMap<String, String>>, policy: &str) -> bool {
    names(annotations).any(|name| name == policy)
}

/// The digests of the policy names an object consents to (what a cached view keeps).
pub fn digests(annotations: Option<&BTreeMap<String, String>>) -> Box<[u64]> {
    names(annotations).map(digest).collect()
}

/// Whether the digests of [`digests`] consent to the policy `policy`.
pub fn granted_by_digests(digests: &[u64], policy: &str) -> bool {
    digests.contains(&digest(policy))
}

/// The one line (in a policy's status) that says an object has not consented to the policy's
/// changes: `object` names it (kind and name), `what` says what is left as it is.
pub fn refused(object: &str, what: &str) -> String {
    format!(
        "{object} does not consent: its annotation {POLICIES_ANNOTATION} does not name this policy; {what} is left as it is until whoever may edit it adds the policy's name there"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotated(value: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(POLICIES_ANNOTATION.to_string(), value.to_string())])
    }

    #[test]
    fn an_object_consents_only_to_the_policies_its_annotation_names() {
        let list = annotated(" web , shop-failover,,");
        assert!(granted(Some(&list), "web"));
        assert!(granted(Some(&list), "shop-failover"));
        assert!(!granted(Some(&list), "shop"));
        assert!(!granted(Some(&list), ""));
        assert!(!granted(Some(&annotated("*")), "web"));
        assert!(!granted(None, "web"));
        assert!(!granted(Some(&BTreeMap::new()), "web"));
    }

    #[test]
    fn the_digests_consent_to_the_same_policies() {
        let list = annotated("web, shop-failover");
        let kept = digests(Some(&list));
        for policy in ["web", "shop-failover", "shop", "*"] {
            assert_eq!(
                granted_by_digests(&kept, policy),
                granted(Some(&list), policy),
                "{policy}"
            );
        }
        assert!(digests(None).is_empty());
    }
}
