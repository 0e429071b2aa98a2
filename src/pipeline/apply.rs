//! The apply stage of the pipeline, for the route: makes the generated route say what the plan says, and tells what it
//! did ([`Applied`]) or why it could not ([`ApplyError`]).
//!
//! - no route in the cache: create it (a create, never an apply, so a route of that name that
//!   the cache has not seen yet is never adopted); if one exists, read it and go on as below;
//! - a route not controlled by this policy: [`Applied::Conflict`], untouched;
//! - a route that says what the plan says (and carries the policy label): nothing is written;
//! - otherwise: one server-side apply with the controller's field manager;
//! - another policy claimed the apex first: the route this policy owns is deleted ([`withdraw`]);
//! - a route the user owns (`spec.routeRef`): one merge patch of the named rule's weights,
//!   guarded by the resourceVersion read, read again and retried on a conflict ([`write_rule`]).
//!
//! A route this replica wrote wins over an older cached copy until the cache catches up, so a
//! stale cache never causes a second write.

use std::collections::BTreeMap;

use kube::api::{DeleteParams, DynamicObject, Preconditions};
use tracing::{debug, info};

use crate::runtime::{
    api_client::{describe, namespace_terminating},
    writer::{NotLeader, Objects, Writer, Written},
};
pub use failover_core::applied::Applied;
pub use failover_core::intent::DesiredRoute;
use failover_core::intent::{Action, Intent};
use failover_core::route::Claim;
use failover_core::{
    observation::PolicyKey,
    route::{
        RouteView, RulesDigest,
        referenced::{self, Mismatch},
    },
};

/// Why writing the route failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// This replica lost leadership before writing.
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
    /// The API server refused or did not answer.
    #[error("writing {kind} {name} failed: {message}")]
    Api {
        /// Kind of the route.
        kind: &'static str,
        /// Name of the route.
        name: String,
        /// The API server's message.
        message: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
    /// The route the user owns changed at every attempt to write its weights.
    #[error(
        "{kind} {name} changed at each of {CONFLICT_RETRIES} attempts to write its weights; retrying"
    )]
    Contended {
        /// Kind of the route.
        kind: &'static str,
        /// Name of the route.
        name: String,
    },
    /// The route existed, then could not be read.
    #[error("{kind} {name} vanished while being created; retrying")]
    Vanished {
        /// Kind of the route.
        kind: &'static str,
        /// Name of the route.
        name: String,
    },
}

impl ApplyError {
    fn api(desired: &DesiredRoute, source: kube::Error) -> Self {
        ApplyError::Api {
            kind: desired.target.kind().as_str(),
            name: desired.target.name.to_string(),
            message: describe(&source),
            source,
        }
    }

    /// The API server does not serve the route's kind.
    pub fn not_found(&self) -> bool {
        matches!(self, ApplyError::Api { source: kube::Error::Api(e), .. } if e.code == 404)
    }

    /// The write was refused because the namespace is being deleted.
    pub fn namespace_terminating(&self) -> bool {
        matches!(self, ApplyError::Api { source, .. } if namespace_terminating(source))
    }
}

/// Deletes the route this policy owns, once it yields its claim to a policy that made it first
/// (so one route, not two, says where the apex's traffic goes); `current` is the cached view of
/// it. The delete is conditioned on the version seen; a route changed meanwhile (this replica's
/// own write of it, whose echo wakes nobody, among others) is read again and the delete tried
/// on what it says, at most [`CONFLICT_RETRIES`] times, then left to a retry with backoff.
async fn withdraw(
    writer: &Writer,
    desired: &DesiredRoute,
    current: Option<RouteView>,
    claim: Claim,
    holder: PolicyKey,
) -> Result<Applied, ApplyError> {
    let routes = routes(writer, desired);
    let name = desired.target.name.as_str();
    let mut current = current;
    for _ in 0..CONFLICT_RETRIES {
        let Some(view) = current.filter(|v| v.owned_by(&desired.owner_uid)) else {
            return Ok(Applied::Yielded { claim, holder });
        };
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: view.resource_version.map(|v| v.to_string()),
                uid: None,
            }),
            ..Default::default()
        };
        match routes.delete(name, &params).await? {
            Ok(()) => {
                info!(kind = desired.target.kind().as_str(), route = %name, %claim, holder = %holder, "deleted route: another policy claimed its apex first");
                return Ok(Applied::Yielded { claim, holder });
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {
                return Ok(Applied::Yielded { claim, holder });
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                debug!(kind = desired.target.kind().as_str(), route = %name, "route changed before its delete; reading it again");
                current = routes
                    .get_opt(name)
                    .await
                    .map_err(|e| ApplyError::api(desired, e))?
                    .map(|route| desired.target.kind().view(&route.into()));
            }
            Err(e) => return Err(ApplyError::api(desired, e)),
        }
    }
    Err(ApplyError::Contended {
        kind: desired.target.kind().as_str(),
        name: name.to_string(),
    })
}

/// Carries out what the apply step does with an intent ([`Intent::action`]); `current` is the
/// cached view of the route.
pub async fn carry_out(
    writer: &Writer,
    intent: &Intent,
    action: Action,
    current: Option<RouteView>,
) -> Result<Applied, ApplyError> {
    match action {
        Action::Withdraw { claim, holder } => {
            withdraw(writer, &intent.route, current, claim, holder).await
        }
        Action::ApiMissing(api) => Ok(Applied::ApiMissing(api)),
        Action::Suspended => Ok(Applied::Suspended),
        Action::Write => write(writer, &intent.route, current).await,
        Action::WriteRule(rule) => write_rule(writer, &intent.route, &rule, current).await,
    }
}

/// How many times a route the user owns is read again after a conflict before the write is
/// left to the next reconcile (with backoff).
const CONFLICT_RETRIES: usize = 3;

/// Makes the rule `rule` of the route the user owns carry `desired`'s weights, and changes
/// nothing else of it; `current` is the cached view of the route. Nothing is written when the
/// rule has the weights already; the route is read fresh before each patch, whose
/// resourceVersion makes the API server refuse it if the route changed since.
async fn write_rule(
    writer: &Writer,
    desired: &DesiredRoute,
    rule: &str,
    current: Option<RouteView>,
) -> Result<Applied, ApplyError> {
    if let Some(known) = current.and_then(|view| cached_rule(writer, desired, rule, &view)) {
        return Ok(known);
    }
    let weights: BTreeMap<_, i64> = desired
        .rules
        .backends
        .iter()
        .map(|b| (b.backend.clone(), b.weight))
        .collect();
    let routes = routes(writer, desired);
    let name = desired.target.name.as_str();
    for _ in 0..CONFLICT_RETRIES {
        let Some(route) = routes
            .get_opt(name)
            .await
            .map_err(|e| ApplyError::api(desired, e))?
        else {
            return Ok(Applied::RouteRefUnfit(Mismatch::NoRoute));
        };
        let (meta, spec) = (&route.metadata, &route.data["spec"]);
        let patch = match referenced::patch_for(meta, spec, &desired.policy, rule, &weights) {
            Err(mismatch) => return Ok(Applied::RouteRefUnfit(mismatch)),
            Ok(None) => return Ok(Applied::Unchanged),
            Ok(Some(patch)) => patch,
        };
        match routes.merge(name, &patch).await? {
            Ok(answer) => {
                written(
                    writer,
                    desired,
                    &answer,
                    "wrote the weights of a route rule",
                );
                return Ok(Applied::Written);
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                debug!(kind = desired.target.kind().as_str(), route = %name, "route changed while its weights were written; reading it again");
            }
            Err(e) => return Err(ApplyError::api(desired, e)),
        }
    }
    Err(ApplyError::Contended {
        kind: desired.target.kind().as_str(),
        name: name.to_string(),
    })
}

/// What the cached view of a route the user owns settles without reading it: no consent, or the
/// rule has `desired`'s weights already (as the view, or a newer write of this replica, says).
fn cached_rule(
    writer: &Writer,
    desired: &DesiredRoute,
    rule: &str,
    view: &RouteView,
) -> Option<Applied> {
    if !view.consents_to(&desired.policy) {
        return Some(Applied::RouteRefUnfit(Mismatch::NotConsented));
    }
    let says = writer
        .recent_routes
        .newer_than(&desired.key(), view.resource_version)
        .or_else(|| view.rule(rule).cloned());
    says.is_some_and(|r| r.says(&desired.rules))
        .then_some(Applied::Unchanged)
}

/// The routes of `desired`'s kind in its namespace, each write counted under its kind.
fn routes<'a>(writer: &'a Writer, desired: &DesiredRoute) -> Objects<'a, DynamicObject> {
    let kind = desired.target.kind();
    writer.dynamic(
        &desired.namespace,
        &desired.target.resource(),
        kind.metric_label(),
    )
}

/// Makes the route say what `desired` says; `current` is the cached view of it.
async fn write(
    writer: &Writer,
    desired: &DesiredRoute,
    current: Option<RouteView>,
) -> Result<Applied, ApplyError> {
    let routes = routes(writer, desired);
    let current = match current {
        Some(view) => view,
        None => match create(writer, &routes, desired).await? {
            Some(view) => view,
            None => return Ok(Applied::Written),
        },
    };
    if !current.owned_by(&desired.owner_uid) {
        return Ok(Applied::Conflict);
    }
    let labelled = current.labelled_for(&desired.policy);
    let rules = writer
        .recent_routes
        .newer_than(&desired.key(), current.resource_version)
        .or(current.rules);
    if labelled && rules.is_some_and(|r| r.says(&desired.rules)) {
        return Ok(Applied::Unchanged);
    }
    debug!(kind = desired.target.kind().as_str(), route = %desired.target.name, "applying route");
    let _sending = writer
        .recent_routes
        .sending(desired.key(), RulesDigest::of(&desired.rules));
    let applied = routes
        .apply(&desired.target.name, &desired.object)
        .await?
        .map_err(|e| ApplyError::api(desired, e))?;
    written(writer, desired, &applied, "applied route");
    Ok(Applied::Written)
}

/// Creates the route; `Ok(None)` when created, `Ok(Some(view))` when one already exists.
async fn create(
    writer: &Writer,
    routes: &Objects<'_, DynamicObject>,
    desired: &DesiredRoute,
) -> Result<Option<RouteView>, ApplyError> {
    match routes.create(&desired.object).await? {
        Ok(created) => {
            written(writer, desired, &created, "created route");
            Ok(None)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let existing = routes
                .get_opt(&desired.target.name)
                .await
                .map_err(|e| ApplyError::api(desired, e))?
                .ok_or_else(|| ApplyError::Vanished {
                    kind: desired.target.kind().as_str(),
                    name: desired.target.name.to_string(),
                })?;
            Ok(Some(desired.target.kind().view(&existing.into())))
        }
        Err(e) => Err(ApplyError::api(desired, e)),
    }
}

/// Remembers the route written (the writer counted the write).
fn written(writer: &Writer, desired: &DesiredRoute, answer: &Written, what: &str) {
    let kind = desired.target.kind();
    writer.recent_routes.record(
        desired.key(),
        answer.resource_version(),
        RulesDigest::of(&desired.rules),
    );
    info!(kind = kind.as_str(), route = %desired.target.name, weights = ?desired.rules.backends.iter().map(|b| b.weight).collect::<Vec<_>>(), "{what}");
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;
