//! The `FailoverGroup` custom resource: policies of one namespace that fail over together, to
//! one site at a time.

use garde::Validate;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    Timestamp,
    rules::{
        DISTINCT_GROUP_MEMBERS, DISTINCT_GROUP_SITES, DNS1035_LABEL, DNS1123_SUBDOMAIN,
        MAX_GROUP_MEMBERS, MAX_GROUP_SITES, MAX_LABEL, MAX_POLICY_NAME, dns1035_label,
        dns1123_subdomain,
    },
};

/// Moves a set of policies as one: every member routes to one site at a time, the first site
/// in order where every member has a ready backend.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Validate)]
#[kube(
    group = "failover.dev",
    version = "v1alpha1",
    kind = "FailoverGroup",
    plural = "failovergroups",
    singular = "failovergroup",
    shortname = "fg",
    category = "failover",
    namespaced,
    status = "FailoverGroupStatus",
    derive = "PartialEq",
    doc = "FailoverGroup moves its member FailoverPolicies together: all of them route to one site at a time, the first site in order where every member has a ready backend.",
    printcolumn(
        name = "Site",
        type_ = "string",
        json_path = ".status.site",
        description = "The site every member routes to"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        description = "Why the group is where it is"
    ),
    printcolumn(
        name = "Last-Trigger",
        type_ = "string",
        json_path = ".status.lastTrigger",
        description = "The member whose readiness moved the group last"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct FailoverGroupSpec {
    /// The sites the members run in, in order of preference (1 to 8 distinct names). A member's
    /// backend runs in the site its `site` names (`primarySite` for the primary), else in the
    /// cluster its `readinessFrom` names.
    #[schemars(length(min = 1, max = MAX_GROUP_SITES), inner(length(min = 1, max = MAX_LABEL), pattern(DNS1035_LABEL)))]
    #[x_kube(validation = DISTINCT_GROUP_SITES.element_rule())]
    #[garde(length(min = 1, max = MAX_GROUP_SITES), inner(length(min = 1, max = MAX_LABEL), custom(dns1035_label)))]
    pub sites: Vec<String>,

    /// The member FailoverPolicies, by name, in the group's namespace (1 to 32 distinct names).
    /// A policy listed by two groups follows the first by name; the other reports it.
    #[schemars(length(min = 1, max = MAX_GROUP_MEMBERS), inner(length(min = 1, max = MAX_POLICY_NAME), pattern(DNS1123_SUBDOMAIN)))]
    #[x_kube(validation = DISTINCT_GROUP_MEMBERS.element_rule())]
    #[garde(length(min = 1, max = MAX_GROUP_MEMBERS), inner(length(min = 1, max = MAX_POLICY_NAME), custom(dns1123_subdomain)))]
    pub members: Vec<String>,
}

/// The observed state of a group, written by the controller.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FailoverGroupStatus {
    /// The `metadata.generation` this status reports on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The site every member that follows routes to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    /// When the group last moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Timestamp>,
    /// The member whose readiness moved the group last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_trigger: Option<String>,
    /// Each member: whether it follows the group, and why not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<GroupMemberStatus>,
    /// `Ready`: why the group is where it is; `Degraded`: a member cannot follow.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One member, as the group sees it.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GroupMemberStatus {
    /// The member policy.
    pub name: String,
    /// Whether it follows the group's site.
    pub following: bool,
    /// Why it does not, when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
