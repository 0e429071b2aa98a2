//! Leadership: whether this replica may write. Only the leader writes; standbys keep their caches
//! warm so a takeover acts at once. The outcome is one watched value ([`Leadership`]).
//!
//! Election runs on a `coordination.k8s.io/v1` Lease, as client-go's leader election does:
//! - the holder renews every `retry_period`; if it cannot renew for `renew_deadline`, it stops
//!   writing at once, before the lease can expire for others;
//! - a candidate takes the lease when its holder is empty (released) or when the lease record has
//!   not changed for `lease_duration`, measured on the candidate's own clock (no trust in other
//!   replicas' clocks);
//! - every write uses the Lease's `resourceVersion`, so two candidates never both win;
//! - on shutdown the holder stops writing, then releases the lease so a standby takes over
//!   within one `retry_period` instead of waiting for expiry.
//!
//! Why not the `kube-lease-manager` crate (0.13, the release built on our kube 5), as tried on
//! a local control plane:
//! - a standby sleeps until the expiry it last saw and does not notice a release, so a released
//!   lease is taken only once it would have expired. Here a standby takes a released lease
//!   within one `retry_period`;
//! - with the API server stopped, the holder kept reporting itself leader past its lease's
//!   expiry: on an API error its watch keeps the last value, and it has no renew deadline. Here
//!   the holder stops writing `renew_deadline` after its last renewal.
//!
//! The second is a correctness matter (two writers after a partition), so the election stays
//! the project's own, small and tested end to end.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::runtime::{api_client::describe, metrics::Metrics};

/// What this replica is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Not known until the first election round.
    Pending,
    /// It holds the lease and writes.
    Leader,
    /// Another replica leads; this one keeps its caches warm and writes nothing.
    Standby,
}

/// This replica's role, one watched value: the election writes it, everything else reads it.
#[derive(Clone, Debug)]
pub struct Leadership {
    role: Arc<watch::Sender<Role>>,
}

impl Leadership {
    /// A replica whose role the election will tell.
    pub fn pending() -> Self {
        Self {
            role: Arc::new(watch::Sender::new(Role::Pending)),
        }
    }

    /// A replica that always leads (leader election disabled).
    pub fn always() -> Self {
        let leadership = Self::pending();
        leadership.set(Role::Leader);
        leadership
    }

    /// The role now.
    pub fn role(&self) -> Role {
        *self.role.borrow()
    }

    /// Whether this replica may write now.
    pub fn is_leader(&self) -> bool {
        self.role() == Role::Leader
    }

    /// Records the outcome of an election round.
    pub fn set(&self, role: Role) {
        self.role
            .send_if_modified(|r| std::mem::replace(r, role) != role);
    }

    /// A receiver that sees every change of role.
    pub fn subscribe(&self) -> watch::Receiver<Role> {
        self.role.subscribe()
    }
}

/// Leader election settings.
#[derive(Clone, Debug)]
pub struct LeaseSettings {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity.
    pub identity: String,
    /// How long a lease lasts without renewal before a standby may take it.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it stops writing.
    pub renew_deadline: Duration,
    /// How often to renew, or to try to acquire.
    pub retry_period: Duration,
}

/// Runs leader election until `stop` turns true; then, if leading, stops writing and releases
/// the lease. Send `stop` only after in-flight writes have finished.
pub async fn run_election(
    client: Client,
    settings: LeaseSettings,
    state: Leadership,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, &settings.namespace);
    let mut elector = Elector {
        api,
        settings,
        observed: None,
        last_renew: None,
    };
    loop {
        let leading = elector.try_acquire_or_renew(&metrics).await;
        // The leader stops writing as soon as it has not renewed within the renew deadline.
        let still_valid = elector
            .last_renew
            .is_some_and(|t| t.elapsed() < elector.settings.renew_deadline);
        let leader_now = leading || (state.is_leader() && still_valid);
        if leader_now != state.is_leader() {
            if leader_now {
                info!(identity = %elector.settings.identity, "became leader");
            } else if state.role() == Role::Leader {
                warn!(identity = %elector.settings.identity, "lost leadership; writes stopped");
            }
        }
        state.set(if leader_now {
            Role::Leader
        } else {
            Role::Standby
        });
        metrics.leader.set(i64::from(leader_now));
        tokio::select! {
            _ = tokio::time::sleep(elector.settings.retry_period) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    if state.is_leader() {
        state.set(Role::Standby);
        metrics.leader.set(0);
        elector.release(&metrics).await;
    }
}

struct Elector {
    api: Api<Lease>,
    settings: LeaseSettings,
    /// The last lease record seen and when (on this replica's clock) it was first seen.
    observed: Option<(LeaseRecord, Instant)>,
    /// When this replica last renewed successfully.
    last_renew: Option<Instant>,
}

#[derive(Clone, Debug, PartialEq)]
struct LeaseRecord {
    holder: String,
    renew_time: Option<Timestamp>,
    transitions: i32,
}

impl LeaseRecord {
    fn of(lease: &Lease) -> Self {
        let spec = lease.spec.clone().unwrap_or_default();
        Self {
            holder: spec.holder_identity.unwrap_or_default(),
            renew_time: spec.renew_time.map(|t| t.0),
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }
}

impl Elector {
    fn spec(&self, transitions: i32, acquire: Option<MicroTime>) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.settings.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.settings.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(acquire.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// One election round; returns whether this replica holds the lease afterwards.
    async fn try_acquire_or_renew(&mut self, metrics: &Metrics) -> bool {
        match self.api.get_opt(&self.settings.name).await {
            Ok(Some(lease)) => self.take_or_renew(lease, metrics).await,
            Ok(None) => self.create(metrics).await,
            Err(e) => {
                warn!(error = %describe(&e), "reading the leader Lease failed");
                false
            }
        }
    }

    /// Creates the Lease, held by this replica.
    async fn create(&mut self, metrics: &Metrics) -> bool {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.settings.name.clone()),
                namespace: Some(self.settings.namespace.clone()),
                ..Default::default()
            },
            spec: Some(self.spec(0, None)),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(created) => {
                metrics.write("lease");
                self.renewed(&created);
                true
            }
            Err(e) => {
                warn!(error = %describe(&e), "creating the leader Lease failed");
                false
            }
        }
    }

    /// Renews a Lease this replica holds, or takes one that is released or expired.
    async fn take_or_renew(&mut self, mut lease: Lease, metrics: &Metrics) -> bool {
        let record = LeaseRecord::of(&lease);
        let first_seen = match &self.observed {
            Some((seen, at)) if *seen == record => *at,
            _ => Instant::now(),
        };
        self.observed = Some((record.clone(), first_seen));
        let mine = record.holder == self.settings.identity;
        let expired =
            record.holder.is_empty() || first_seen.elapsed() >= self.settings.lease_duration;
        if !mine && !expired {
            return false;
        }
        lease.spec = Some(if mine {
            let acquire = lease.spec.as_ref().and_then(|s| s.acquire_time.clone());
            self.spec(record.transitions, acquire)
        } else {
            self.spec(record.transitions.saturating_add(1), None)
        });
        // The resourceVersion read above makes this a compare-and-swap.
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(updated) => {
                metrics.write("lease");
                self.renewed(&updated);
                true
            }
            Err(e) => {
                if mine {
                    warn!(error = %describe(&e), "renewing the leader Lease failed");
                }
                false
            }
        }
    }

    fn renewed(&mut self, lease: &Lease) {
        self.last_renew = Some(Instant::now());
        self.observed = Some((LeaseRecord::of(lease), Instant::now()));
    }

    /// Gives the lease up so a standby takes it at its next try.
    async fn release(&mut self, metrics: &Metrics) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.settings.name).await else {
            return;
        };
        if LeaseRecord::of(&lease).holder != self.settings.identity {
            return;
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(Timestamp::now()));
        }
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                metrics.write("lease");
                info!("released the leader Lease");
            }
            Err(e) => {
                warn!(error = %describe(&e), "releasing the leader Lease failed; a standby takes over when it expires")
            }
        }
    }
}
