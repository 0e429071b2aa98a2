//! The reconcile loop around [`decide`]: it reads caches, calls the decision, and writes the
//! results (TrafficSplit, status, Event) only when they differ from what is already there.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex, RwLock},
    time::{Duration, Instant},
};

use chrono::Utc;
use kube::{
    Client, Resource, ResourceExt,
    api::{Api, DynamicObject, Patch, PatchParams, PostParams},
    core::{ApiResource, GroupVersionKind},
    runtime::{
        controller::Action,
        events::{Event, EventType, Recorder},
        reflector::{ObjectRef, Store},
    },
};
use serde_json::json;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::{
    api::{FailoverPolicy, FailoverPolicyStatus, Phase, SpecProblem},
    decision::{self, CONDITION_READY, Decision, Transition, decide},
    leader::LeaderState,
    metrics::{Metrics, PolicyLabels},
    readiness::ReadinessStore,
    trafficsplit::{TrafficSplit, TrafficSplitBackend},
};

/// The one field manager every write of this controller uses.
pub const FIELD_MANAGER: &str = "failover-controller";
/// Label put on every generated TrafficSplit, naming its policy.
pub const POLICY_LABEL: &str = "failover.dev/policy";
/// How long a reconcile waits for the readiness caches before it gives up and retries.
const SYNC_WAIT: Duration = Duration::from_secs(10);
/// A safety-net resync for policies with nothing pending (writes nothing when all is in place).
const RESYNC: Duration = Duration::from_secs(600);

/// Errors of one reconcile; each is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The readiness caches have not been filled yet.
    #[error("EndpointSlice and Service caches are not synced yet")]
    CachesNotSynced,
    /// Writing the TrafficSplit failed.
    #[error("writing TrafficSplit {name}: {source}")]
    TrafficSplitWrite {
        /// Name of the TrafficSplit.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Writing the policy's status failed.
    #[error("writing status: {0}")]
    StatusWrite(#[source] kube::Error),
    /// The TrafficSplit was reported to exist, then could not be read.
    #[error("TrafficSplit {0} vanished while being created; retrying")]
    TrafficSplitVanished(String),
    /// This replica lost leadership before writing.
    #[error("not the leader; writes stopped")]
    NotLeader,
    /// The policy lacks a namespace or uid (never true of objects from the API server).
    #[error("policy object is missing {0}")]
    MissingMetadata(&'static str),
}

impl Error {
    /// Every value [`Error::kind`] can return.
    pub const KINDS: [&'static str; 6] = [
        "caches_not_synced",
        "trafficsplit_write",
        "trafficsplit_vanished",
        "status_write",
        "missing_metadata",
        "not_leader",
    ];

    /// A short, bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::CachesNotSynced => "caches_not_synced",
            Error::TrafficSplitWrite { .. } => "trafficsplit_write",
            Error::TrafficSplitVanished(_) => "trafficsplit_vanished",
            Error::StatusWrite(_) => "status_write",
            Error::MissingMetadata(_) => "missing_metadata",
            Error::NotLeader => "not_leader",
        }
    }
}

/// Everything a reconcile reads from and writes through.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Backend readiness, from the EndpointSlice and Service watches.
    pub readiness: Arc<RwLock<ReadinessStore>>,
    /// Tells when the readiness caches have synced.
    pub readiness_synced: watch::Receiver<bool>,
    /// TrafficSplits, from their watch.
    pub traffic_splits: Store<TrafficSplit>,
    /// Event recorder.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Whether this replica may write.
    pub leader: LeaderState,
    /// Consecutive failures per policy, for backoff.
    failures: Mutex<HashMap<ObjectRef<FailoverPolicy>, u32>>,
}

impl Context {
    /// A context around the given parts.
    pub fn new(
        client: Client,
        readiness: Arc<RwLock<ReadinessStore>>,
        readiness_synced: watch::Receiver<bool>,
        traffic_splits: Store<TrafficSplit>,
        recorder: Recorder,
        metrics: Arc<Metrics>,
        leader: LeaderState,
    ) -> Self {
        Self {
            client,
            readiness,
            readiness_synced,
            traffic_splits,
            recorder,
            metrics,
            leader,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Fails unless this replica may write right now: a lost lease stops writes at once.
    fn ensure_leader(&self) -> Result<(), Error> {
        if self.leader.is_leader() {
            Ok(())
        } else {
            Err(Error::NotLeader)
        }
    }

    async fn wait_synced(&self) -> Result<(), Error> {
        let mut synced = self.readiness_synced.clone();
        match tokio::time::timeout(SYNC_WAIT, synced.wait_for(|s| *s)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(Error::CachesNotSynced),
        }
    }

    fn record_success(&self, policy: &ObjectRef<FailoverPolicy>) {
        if let Ok(mut failures) = self.failures.lock() {
            failures.remove(policy);
        }
    }

    /// The backoff before retrying a policy whose reconcile failed `n` times in a row:
    /// 200 ms doubling up to 10 s.
    fn next_backoff(&self, policy: &ObjectRef<FailoverPolicy>) -> Duration {
        let n = self
            .failures
            .lock()
            .map(|mut failures| {
                let n = failures.entry(policy.clone()).or_insert(0);
                *n = n.saturating_add(1);
                *n
            })
            .unwrap_or(1);
        backoff(n)
    }
}

/// 200 ms doubling per consecutive failure, capped at 10 s.
pub fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(6);
    Duration::from_millis(200u64 << exp).min(Duration::from_secs(10))
}

/// Reconciles one policy.
#[tracing::instrument(skip_all, fields(namespace = policy.namespace().unwrap_or_default(), policy = policy.name_any()))]
pub async fn reconcile(policy: Arc<FailoverPolicy>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !ctx.leader.is_leader() {
        // Standbys keep their caches warm and write nothing; leadership triggers a full pass.
        return Ok(Action::await_change());
    }
    if policy.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let started = Instant::now();
    debug!("reconcile started");
    let result = reconcile_inner(&policy, &ctx).await;
    ctx.metrics.observe_reconcile(started.elapsed());
    if result.is_ok() {
        ctx.record_success(&ObjectRef::from_obj(policy.as_ref()));
    }
    result
}

/// Requeues a failed policy with per-policy exponential backoff.
pub fn error_policy(policy: Arc<FailoverPolicy>, error: &Error, ctx: Arc<Context>) -> Action {
    if matches!(error, Error::NotLeader) {
        // The new leader takes over; a regained leadership queues every policy anyway.
        return Action::await_change();
    }
    ctx.metrics.error(error.kind());
    let delay = ctx.next_backoff(&ObjectRef::from_obj(policy.as_ref()));
    warn!(
        namespace = policy.namespace().unwrap_or_default(),
        policy = policy.name_any(),
        error = %error,
        retry_in_ms = delay.as_millis() as u64,
        "reconcile failed"
    );
    Action::requeue(delay)
}

async fn reconcile_inner(policy: &FailoverPolicy, ctx: &Context) -> Result<Action, Error> {
    let namespace = policy
        .namespace()
        .ok_or(Error::MissingMetadata("metadata.namespace"))?;
    let uid = policy.uid().ok_or(Error::MissingMetadata("metadata.uid"))?;
    let name = policy.name_any();
    let labels = PolicyLabels {
        namespace: namespace.clone(),
        policy: name.clone(),
    };
    let split_name = policy.traffic_split_name();
    let previous = policy.status.as_ref();

    if let Err(problems) = policy.spec.validate_spec() {
        let status = invalid_spec_status(policy, previous, &problems);
        write_status_if_changed(policy, status, ctx).await?;
        return Ok(Action::await_change());
    }

    ctx.wait_synced().await?;
    let observations: Vec<_> = {
        let readiness = ctx.readiness.read().map_err(|_| Error::CachesNotSynced)?;
        policy
            .spec
            .backend_services()
            .map(|svc| readiness.observe(&namespace, svc))
            .collect()
    };
    let now = Utc::now();
    let decision = decide(&policy.spec, &observations, previous, now);
    let mut status = decision.status.clone();
    status.traffic_split = Some(split_name.clone());

    // The TrafficSplit first: the status then says what is in place.
    match ensure_traffic_split(policy, &namespace, &uid, &split_name, &decision, ctx).await {
        Ok(SplitOutcome::InPlace) => {}
        Ok(SplitOutcome::Conflict) => {
            let mut status = previous.cloned().unwrap_or_default();
            status.backends = decision.status.backends.clone();
            status.ready_summary = decision.status.ready_summary.clone();
            status.traffic_split = Some(split_name.clone());
            set_ready(
                &mut status,
                "False",
                "TrafficSplitConflict",
                format!(
                    "TrafficSplit {split_name} exists and is not owned by this policy; it is left untouched. Delete it, or set spec.trafficSplit.name on a new policy"
                ),
            );
            if write_status_if_changed(policy, status, ctx).await? {
                publish(
                    ctx,
                    policy,
                    EventType::Warning,
                    "TrafficSplitConflict",
                    format!("TrafficSplit {split_name} is not owned by this policy"),
                )
                .await;
            }
            return Ok(Action::requeue(RESYNC));
        }
        Err(error) => {
            // Keep the previous status (what is really in place) and say why nothing moved.
            let mut status = previous.cloned().unwrap_or_default();
            status.traffic_split = Some(split_name.clone());
            set_ready(
                &mut status,
                "False",
                "TrafficSplitWriteFailed",
                error.to_string(),
            );
            if let Err(status_error) = write_status_if_changed(policy, status, ctx).await {
                debug!(error = %status_error, "could not record the write failure in status either");
            }
            return Err(error);
        }
    }

    let wrote_status = write_status_if_changed(policy, status.clone(), ctx).await?;
    if let (Some(transition), true) = (decision.transition, wrote_status) {
        record_transition(
            ctx,
            policy,
            &labels,
            transition,
            decision.transition_message.clone(),
        )
        .await;
    }
    let ready = status.backends.iter().filter(|b| b.ready).count();
    ctx.metrics
        .set_policy_state(&labels, ready, status.phase.unwrap_or(Phase::Primary));
    if let Some(last) = status.last_failover_time.max(status.last_failback_time) {
        ctx.metrics
            .set_last_transition(&labels, last.0.timestamp_millis() as f64 / 1000.0);
    }
    Ok(Action::requeue(decision.requeue_after.unwrap_or(RESYNC)))
}

enum SplitOutcome {
    InPlace,
    Conflict,
}

fn owned_by(meta: &kube::api::ObjectMeta, uid: &str) -> bool {
    meta.owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// The TrafficSplit this policy wants, as the object to apply.
fn desired_traffic_split(
    policy: &FailoverPolicy,
    namespace: &str,
    split_name: &str,
    weights: &[i32],
) -> Result<DynamicObject, Error> {
    let mut owner = policy
        .controller_owner_ref(&())
        .ok_or(Error::MissingMetadata("metadata.uid"))?;
    owner.block_owner_deletion = Some(true);
    let backends: Vec<TrafficSplitBackend> = policy
        .spec
        .backend_services()
        .zip(weights)
        .map(|(service, weight)| TrafficSplitBackend {
            service: service.to_string(),
            weight: i64::from(*weight),
        })
        .collect();
    let api_version = policy.spec.traffic_split.api_version.as_str();
    let mut obj =
        DynamicObject::new(split_name, &traffic_split_resource(api_version)).within(namespace);
    obj.metadata.labels = Some(BTreeMap::from([
        (POLICY_LABEL.to_string(), policy.name_any()),
        (
            "app.kubernetes.io/managed-by".to_string(),
            FIELD_MANAGER.to_string(),
        ),
    ]));
    obj.metadata.owner_references = Some(vec![owner]);
    obj.data = json!({ "spec": { "service": policy.spec.service, "backends": backends } });
    Ok(obj)
}

/// The API resource of TrafficSplits in one API version.
pub fn traffic_split_resource(api_version: &str) -> ApiResource {
    let version = api_version.rsplit('/').next().unwrap_or("v1alpha2");
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("split.smi-spec.io", version, "TrafficSplit"),
        "trafficsplits",
    )
}

fn in_place(
    current: &TrafficSplit,
    desired: &DynamicObject,
    policy: &FailoverPolicy,
    uid: &str,
) -> bool {
    let labelled = current
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(POLICY_LABEL))
        .is_some_and(|v| *v == policy.name_any());
    let spec = serde_json::to_value(&current.spec).ok();
    labelled && owned_by(&current.metadata, uid) && spec.as_ref() == desired.data.get("spec")
}

async fn ensure_traffic_split(
    policy: &FailoverPolicy,
    namespace: &str,
    uid: &str,
    split_name: &str,
    decision: &Decision,
    ctx: &Context,
) -> Result<SplitOutcome, Error> {
    let desired = desired_traffic_split(policy, namespace, split_name, &decision.weights)?;
    let write_error = |source| Error::TrafficSplitWrite {
        name: split_name.to_string(),
        source,
    };
    let api: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        namespace,
        &traffic_split_resource(policy.spec.traffic_split.api_version.as_str()),
    );
    let cached = ctx
        .traffic_splits
        .get(&ObjectRef::new(split_name).within(namespace));
    let current: Option<TrafficSplit> = match cached {
        Some(ts) => Some((*ts).clone()),
        None => {
            // Create, never apply, when the cache shows nothing: a create fails on an existing
            // object, so a foreign TrafficSplit that the cache has not seen yet is never adopted.
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..Default::default()
            };
            ctx.ensure_leader()?;
            match api.create(&params, &desired).await {
                Ok(_) => {
                    ctx.metrics.write("trafficsplit");
                    info!(traffic_split = split_name, "created TrafficSplit");
                    return Ok(SplitOutcome::InPlace);
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    let typed: Api<TrafficSplit> = Api::namespaced(ctx.client.clone(), namespace);
                    typed.get_opt(split_name).await.map_err(write_error)?
                }
                Err(e) => return Err(write_error(e)),
            }
        }
    };
    let Some(current) = current else {
        // Deleted between the create attempt and the read: try again shortly.
        return Err(Error::TrafficSplitVanished(split_name.to_string()));
    };
    if !owned_by(&current.metadata, uid) {
        return Ok(SplitOutcome::Conflict);
    }
    if in_place(&current, &desired, policy, uid) {
        return Ok(SplitOutcome::InPlace);
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    ctx.ensure_leader()?;
    debug!(traffic_split = split_name, "applying TrafficSplit");
    api.patch(split_name, &params, &Patch::Apply(&desired))
        .await
        .map_err(write_error)?;
    ctx.metrics.write("trafficsplit");
    info!(traffic_split = split_name, weights = ?decision.weights, "applied TrafficSplit");
    Ok(SplitOutcome::InPlace)
}

/// Writes the status when it differs from the one on the object; returns whether it wrote.
async fn write_status_if_changed(
    policy: &FailoverPolicy,
    mut status: FailoverPolicyStatus,
    ctx: &Context,
) -> Result<bool, Error> {
    let generation = policy.meta().generation;
    status.observed_generation = generation;
    for c in &mut status.conditions {
        c.observed_generation = generation;
    }
    if policy.status.as_ref() == Some(&status) {
        return Ok(false);
    }
    let namespace = policy
        .namespace()
        .ok_or(Error::MissingMetadata("metadata.namespace"))?;
    let api: Api<FailoverPolicy> = Api::namespaced(ctx.client.clone(), &namespace);
    ctx.ensure_leader()?;
    let body = json!({
        "apiVersion": FailoverPolicy::api_version(&()),
        "kind": FailoverPolicy::kind(&()),
        "status": status,
    });
    api.patch_status(
        &policy.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(Error::StatusWrite)?;
    ctx.metrics.write("status");
    Ok(true)
}

fn set_ready(status: &mut FailoverPolicyStatus, value: &str, reason: &str, message: String) {
    let now = Utc::now();
    let ready = decision::condition(
        &status.conditions,
        CONDITION_READY,
        value,
        reason,
        message,
        now,
    );
    status.conditions.retain(|c| c.type_ != CONDITION_READY);
    status.conditions.insert(0, ready);
}

fn invalid_spec_status(
    policy: &FailoverPolicy,
    previous: Option<&FailoverPolicyStatus>,
    problems: &[SpecProblem],
) -> FailoverPolicyStatus {
    let mut status = previous.cloned().unwrap_or_default();
    status.traffic_split = Some(policy.traffic_split_name());
    let message = problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    set_ready(
        &mut status,
        "False",
        "InvalidSpec",
        format!("the spec is invalid and is not acted on: {message}"),
    );
    status
}

async fn record_transition(
    ctx: &Context,
    policy: &FailoverPolicy,
    labels: &PolicyLabels,
    transition: Transition,
    message: Option<String>,
) {
    match transition {
        Transition::FailedOver => ctx.metrics.failovers.get_or_create(labels).inc(),
        Transition::FailedBack => ctx.metrics.failbacks.get_or_create(labels).inc(),
        Transition::NoReadyBackend | Transition::Recovered => 0,
    };
    let event_type = match transition {
        Transition::NoReadyBackend => EventType::Warning,
        _ => EventType::Normal,
    };
    let note = message.unwrap_or_else(|| transition.reason().to_string());
    info!(transition = transition.reason(), %note, "traffic moved");
    publish(ctx, policy, event_type, transition.reason(), note).await;
}

async fn publish(
    ctx: &Context,
    policy: &FailoverPolicy,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(note),
        action: "Route".to_string(),
        secondary: None,
    };
    match ctx.recorder.publish(&event, &policy.object_ref(&())).await {
        Ok(()) => ctx.metrics.write("event"),
        // Events are best effort: a lost Event never blocks routing.
        Err(e) => warn!(error = %e, reason, "could not record Event"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_200ms_and_caps_at_10s() {
        assert_eq!(backoff(1), Duration::from_millis(200));
        assert_eq!(backoff(2), Duration::from_millis(400));
        assert_eq!(backoff(6), Duration::from_millis(6400));
        assert_eq!(backoff(7), Duration::from_secs(10));
        assert_eq!(backoff(100), Duration::from_secs(10));
    }

    #[test]
    fn traffic_split_resource_follows_the_api_version() {
        let r = traffic_split_resource("split.smi-spec.io/v1alpha1");
        assert_eq!(r.api_version, "split.smi-spec.io/v1alpha1");
        assert_eq!(r.plural, "trafficsplits");
    }
}
