//! The generated HTTPRoute's parents in the status, and the `Attached` condition: where the
//! route attaches, and whether each parent's controller (a Gateway's, a mesh's) accepted it, as
//! the route's `status.parents` says. A route written but not attached shows here.

use crate::{
    api::{
        RouteParentState,
        conditions::{ATTACHED, attached},
    },
    decide::verdict::Verdict,
    message,
    observation::PolicyKey,
    policy::ValidPolicy,
    route::{Claim, RouteParent, RouteTarget, RouteView, claim::holder_seen_from},
    tenancy::RefusedParent,
};

/// Each parent the policy asks for, with its controller's answer from the route in the cluster
/// (`route`), then those the cluster admin does not allow (`refused`); empty for a kind without
/// parents (a TrafficSplit).
pub fn states(
    policy: &ValidPolicy,
    route: Option<&RouteView>,
    refused_parents: &[RefusedParent],
) -> Vec<RouteParentState> {
    let (target, namespace) = (&policy.route, &*policy.namespace);
    let mut states = answered(target, namespace, route);
    states.extend(refused(refused_parents, namespace));
    states
}

/// Each parent the route asks for, with its controller's answer from the route in the cluster.
fn answered(
    target: &RouteTarget,
    namespace: &str,
    route: Option<&RouteView>,
) -> Vec<RouteParentState> {
    let resolved = |p: &RouteParent| RouteParent {
        namespace: Some(p.namespace.clone().unwrap_or_else(|| namespace.to_string())),
        ..p.clone()
    };
    target
        .parents()
        .iter()
        .map(|parent| {
            let answer = route
                .into_iter()
                .flat_map(|r| &r.answers)
                .filter(|a| resolved(&a.parent) == resolved(parent))
                .filter_map(|a| a.accepted.as_ref())
                .next_back();
            RouteParentState {
                kind: parent.kind.as_str().to_string(),
                namespace: parent
                    .namespace
                    .clone()
                    .unwrap_or_else(|| namespace.to_string()),
                name: parent.name.clone(),
                section_name: parent.section_name.clone(),
                port: parent.port,
                accepted: answer.map(|c| c.status.clone()),
                reason: answer.map(|c| c.reason.clone()).filter(|r| !r.is_empty()),
                message: answer
                    .map(|c| message::line(&c.message))
                    .filter(|m| !m.is_empty()),
            }
        })
        .collect()
}

/// The parents the cluster admin or the Gateway's listeners do not allow, as states: not
/// attached, and why.
fn refused(parents: &[RefusedParent], namespace: &str) -> Vec<RouteParentState> {
    parents
        .iter()
        .map(
            |RefusedParent {
                 parent: p,
                 reason,
                 message,
             }| RouteParentState {
                kind: p.kind.as_str().to_string(),
                namespace: p.namespace.clone().unwrap_or_else(|| namespace.to_string()),
                name: p.name.clone(),
                section_name: p.section_name.clone(),
                port: p.port,
                accepted: Some("False".to_string()),
                reason: Some(reason.to_string()),
                message: Some(message.clone()),
            },
        )
        .collect()
}

/// The reasons of a parent the controller itself leaves out of the route (not a parent's
/// controller's answer).
const LEFT_OUT: [&str; 4] = [
    attached::GATEWAY_NOT_ALLOWED,
    attached::NOT_ALLOWED_BY_LISTENERS,
    attached::NO_MATCHING_PARENT,
    attached::LISTENER_OF_ANOTHER_SHARD,
];

/// Whether a parent's state is one the controller left out of the route.
fn left_out(state: &RouteParentState) -> bool {
    state
        .reason
        .as_deref()
        .is_some_and(|r| LEFT_OUT.contains(&r))
}

/// The `Attached` condition of a route's parents, and of the hostnames other policies hold
/// (`held`, left out of the route) for a policy of `namespace`; `None` for a TrafficSplit. A
/// parent refused says so first, then a hostname held elsewhere.
pub fn verdict(
    states: &[RouteParentState],
    held: &[(Claim, PolicyKey)],
    namespace: &str,
) -> Option<Verdict> {
    if states.is_empty() {
        return None;
    }
    let refused = states.iter().find(|s| left_out(s)).or_else(|| {
        states
            .iter()
            .find(|s| s.accepted.as_deref() == Some("False"))
    });
    if let Some(refused) = refused {
        return Some(refusal(refused));
    }
    if let Some((claim, holder)) = held.first() {
        let more = match held.len() {
            1 => String::new(),
            n => format!(" (and {} more held elsewhere)", n - 1),
        };
        return Some(Verdict::new(
            ATTACHED,
            false,
            attached::HOSTNAME_HELD_ELSEWHERE,
            format!(
                "{claim} is routed by {}, which claimed it first{more}: the route is written without that hostname and serves the policy's others",
                holder_seen_from(holder, namespace)
            ),
        ));
    }
    let waiting: Vec<String> = states
        .iter()
        .filter(|s| s.accepted.as_deref() != Some("True"))
        .map(described)
        .collect();
    if !waiting.is_empty() {
        return Some(Verdict::new(
            ATTACHED,
            false,
            attached::NO_ANSWER,
            format!(
                "no controller has answered for {} yet: the route is written, its attachment unknown",
                waiting.join(", ")
            ),
        ));
    }
    Some(Verdict::new(
        ATTACHED,
        true,
        attached::ACCEPTED,
        format!(
            "accepted by {}",
            states.iter().map(described).collect::<Vec<_>>().join(", ")
        ),
    ))
}

/// `Gateway infra/edge`, for messages.
fn described(s: &RouteParentState) -> String {
    format!("{} {}/{}", s.kind, s.namespace, s.name)
}

/// Why a parent is not attached: the cluster admin does not allow it, or its controller refused.
fn refusal(refused: &RouteParentState) -> Verdict {
    if let Some(reason) = LEFT_OUT
        .into_iter()
        .find(|r| refused.reason.as_deref() == Some(r))
    {
        return Verdict::new(
            ATTACHED,
            false,
            reason,
            format!(
                "{} is not attached: {}",
                described(refused),
                refused.message.as_deref().unwrap_or_default()
            ),
        );
    }
    Verdict::new(
        ATTACHED,
        false,
        attached::NOT_ACCEPTED,
        format!(
            "{} did not accept the route: {}: {}",
            described(refused),
            refused.reason.as_deref().unwrap_or("no reason given"),
            refused.message.as_deref().unwrap_or_default()
        ),
    )
}
