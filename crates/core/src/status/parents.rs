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
    route::{RouteParent, RouteTarget, RouteView},
};

/// Each parent the policy asks for, with its controller's answer from the route in the cluster
/// (`route`); empty for a kind without parents (a TrafficSplit).
pub fn states(
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

/// The parents the cluster admin does not allow, as states: not attached, and why.
pub fn refused(parents: &[RouteParent], namespace: &str) -> Vec<RouteParentState> {
    parents
        .iter()
        .map(|p| RouteParentState {
            kind: p.kind.as_str().to_string(),
            namespace: p.namespace.clone().unwrap_or_else(|| namespace.to_string()),
            name: p.name.clone(),
            section_name: p.section_name.clone(),
            port: p.port,
            accepted: Some("False".to_string()),
            reason: Some(attached::GATEWAY_NOT_ALLOWED.to_string()),
            message: Some(format!(
                "the cluster admin does not allow routes of namespace {namespace} on it (--allowed-gateways)"
            )),
        })
        .collect()
}

/// The `Attached` condition of an HTTPRoute's parents; `None` for a TrafficSplit.
pub fn verdict(states: &[RouteParentState]) -> Option<Verdict> {
    if states.is_empty() {
        return None;
    }
    let not_allowed =
        |s: &&RouteParentState| s.reason.as_deref() == Some(attached::GATEWAY_NOT_ALLOWED);
    let refused = states.iter().find(not_allowed).or_else(|| {
        states
            .iter()
            .find(|s| s.accepted.as_deref() == Some("False"))
    });
    if let Some(refused) = refused {
        return Some(refusal(refused));
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
    if refused.reason.as_deref() == Some(attached::GATEWAY_NOT_ALLOWED) {
        return Verdict::new(
            ATTACHED,
            false,
            attached::GATEWAY_NOT_ALLOWED,
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
