//! What-if's implementation of the reconcile driver's port: live reads with the scenario's
//! changes, and writes imagined to go through.

use std::{convert::Infallible, sync::Mutex};

use chrono::{DateTime, Utc};
use failover_core::{
    api::{ClaimsStatus, FailoverPolicyStatus, ScaledWorkload},
    apis::{ApiState, NeededApi},
    applied::{Applied, Scaled},
    decide::{group::Order, plan::ScaleWant},
    intent::{Action, Intent},
    last_status::LastStatus,
    observation::{BackendObservation, PolicyKey},
    policy::ValidPolicy,
    reconcile::{Effects, Fault, Inputs, Restored, World},
    route::{Claim, RouteView},
    status::history::Notices,
    tenancy::Gateways,
};

use super::Imagined;

/// The world of one imagined reconcile: the live reads with the scenario's changes, the status
/// of the step before, and every write imagined to go through (the route it would write is
/// kept for the report).
pub(super) struct Rehearsal<'a> {
    pub(super) imagined: &'a Imagined<'a>,
    pub(super) key: PolicyKey,
    pub(super) uid: String,
    pub(super) observations: &'a [BackendObservation],
    pub(super) previous: Option<LastStatus>,
    pub(super) written: Mutex<Option<serde_json::Value>>,
}

impl World for Rehearsal<'_> {
    type Error = Infallible;

    fn previous(&self) -> Option<LastStatus> {
        self.previous.clone()
    }

    fn kept(&self) -> Option<Box<FailoverPolicyStatus>> {
        None
    }

    fn group_order(&self, _now: DateTime<Utc>) -> Option<Order> {
        self.imagined.order.clone()
    }

    fn observe(&self, _policy: &ValidPolicy) -> Inputs {
        Inputs {
            observations: self.observations.to_vec(),
            route: self.imagined.route.cloned(),
        }
    }

    fn gateways(&self) -> Gateways {
        self.imagined.gateways.clone()
    }

    fn held_by_others(&self, claims: &[Claim]) -> Vec<(Claim, PolicyKey)> {
        self.imagined.claims.held_by_others(&self.key, claims)
    }

    fn claims_summary(&self) -> Option<ClaimsStatus> {
        self.imagined.claims.summary(&self.key)
    }

    /// A rehearsal contacts no sink: what was delivered stays as recorded.
    fn notices(&self, _policy: &ValidPolicy) -> Notices {
        Notices {
            delivered: self.previous.as_ref().and_then(|p| p.notified_through),
            refused: Vec::new(),
        }
    }

    fn api(&self, _api: NeededApi) -> ApiState {
        self.imagined.api
    }

    /// What-if has no caches to teach: its world is read once.
    fn learn(&self, _effects: Effects) {}

    async fn apply_route(
        &self,
        intent: &Intent,
        action: Action,
        current: Option<RouteView>,
    ) -> Result<Applied, Fault<Infallible>> {
        let applied = action.imagined(current.as_ref(), &self.uid, &intent.policy.name);
        if matches!(applied, Applied::Written) {
            let route = serde_json::to_value(&intent.route.object).unwrap_or_default();
            *self.written.lock().unwrap_or_else(|e| e.into_inner()) = Some(route);
        }
        Ok(applied)
    }

    async fn scale(
        &self,
        _policy: &ValidPolicy,
        _wants: &[ScaleWant],
        raised: &[ScaledWorkload],
    ) -> Scaled {
        Scaled {
            workloads: raised.to_vec(),
            ..Scaled::default()
        }
    }

    // What-if never imagines a deleted policy: its cleanup restores nothing and keeps every
    // record.
    async fn restore(&self, raised: &[ScaledWorkload]) -> Restored {
        Restored::Forbidden(Scaled {
            workloads: raised.to_vec(),
            ..Scaled::default()
        })
    }

    async fn deletion_overdue(&self) -> bool {
        false
    }

    async fn release(&self) -> Result<(), String> {
        Ok(())
    }
}
