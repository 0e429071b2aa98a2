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
    api::{FailoverPolicy, FailoverPolicyStatus, Output, Phase, SpecProblem},
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
/// How often every policy is reconciled even without a trigger, as a safety net (it writes
/// nothing when all is in place). One timer for all policies, not one per policy.
pub const RESYNC: Duration = Duration::from_secs(600);

/// Errors of one reconcile; each is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The readiness caches have not been filled yet.
    #[error("EndpointSlice and Service caches are not synced yet")]
    CachesNotSynced,
    /// Writing the generated route (TrafficSplit or HTTPRoute) failed.
    #[error("writing {kind} {name}: {source}")]
    RouteWrite {
        /// Kind of the route.
        kind: &'static str,
        /// Name of the route.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Writing the policy's status failed.
    #[error("writing status: {0}")]
    StatusWrite(#[source] kube::Error),
    /// The route was reported to exist, then could not be read.
    #[error("{0} vanished while being created; retrying")]
    RouteVanished(String),
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
        "route_write",
        "route_vanished",
        "status_write",
        "missing_metadata",
        "not_leader",
    ];

    /// The write was refused because the namespace is being deleted.
    pub fn namespace_terminating(&self) -> bool {
        let api_error = match self {
            Error::RouteWrite { source, .. } | Error::StatusWrite(source) => source,
            _ => return false,
        };
        matches!(api_error, kube::Error::Api(e) if e.code == 403 && e.message.contains("being terminated"))
    }

    /// A short, bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::CachesNotSynced => "caches_not_synced",
            Error::RouteWrite { .. } => "route_write",
            Error::RouteVanished(_) => "route_vanished",
            Error::StatusWrite(_) => "status_write",
            Error::MissingMetadata(_) => "missing_metadata",
            Error::NotLeader => "not_leader",
        }
    }
}

/// The caches a reconcile reads.
pub struct Caches {
    /// Backend readiness, from the EndpointSlice and Service watches.
    pub readiness: Arc<RwLock<ReadinessStore>>,
    /// Tells when the readiness caches have synced.
    pub readiness_synced: watch::Receiver<bool>,
    /// TrafficSplits, from their watch.
    pub traffic_splits: Store<TrafficSplit>,
    /// HTTPRoutes, from their watch, when the Gateway API is installed.
    pub http_routes: Option<Store<DynamicObject>>,
}

/// Everything a reconcile reads from and writes through.
pub struct Context {
    /// API client.
    pub client: Client,
    /// The caches.
    pub caches: Caches,
    /// Event recorder.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Whether this replica may write.
    pub leader: LeaderState,
    /// Consecutive failures per policy, for backoff.
    failures: Mutex<HashMap<ObjectRef<FailoverPolicy>, u32>>,
    /// What this replica wrote last, until the caches show it (see [`Recent`]).
    recent_status: Recent<FailoverPolicyStatus>,
    recent_routes: Recent<serde_json::Value>,
}

/// The last value this replica wrote to an object, with the resourceVersion the write returned.
///
/// A watch event for one kind (a TrafficSplit) can trigger a reconcile before the watch of
/// another kind (the policy, with the status just written) has caught up. Deciding from that
/// stale cache would announce a transition twice. Each entry lives only until the cache reaches
/// the written version. Versions are compared as numbers, as etcd-backed API servers issue them;
/// a version that is not a number simply disables the shortcut.
struct Recent<T> {
    entries: Mutex<HashMap<String, (u64, T)>>,
}

impl<T: Clone> Recent<T> {
    fn new() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn record(&self, key: String, written_version: Option<&str>, value: T) {
        if let (Some(version), Ok(mut entries)) = (
            written_version.and_then(|v| v.parse::<u64>().ok()),
            self.entries.lock(),
        ) {
            entries.insert(key, (version, value));
        }
    }

    /// The value written last when the cache (at `cached_version`) has not caught up with it.
    fn newer_than(&self, key: &str, cached_version: Option<&str>) -> Option<T> {
        let mut entries = self.entries.lock().ok()?;
        let (written, value) = entries.get(key)?;
        match cached_version.and_then(|v| v.parse::<u64>().ok()) {
            Some(cached) if cached < *written => Some(value.clone()),
            _ => {
                entries.remove(key);
                None
            }
        }
    }
}

impl Context {
    /// A context around the given parts.
    pub fn new(
        client: Client,
        caches: Caches,
        recorder: Recorder,
        metrics: Arc<Metrics>,
        leader: LeaderState,
    ) -> Self {
        Self {
            client,
            caches,
            recorder,
            metrics,
            leader,
            failures: Mutex::new(HashMap::new()),
            recent_status: Recent::new(),
            recent_routes: Recent::new(),
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
        let mut synced = self.caches.readiness_synced.clone();
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
    if error.namespace_terminating() {
        // The namespace is going away with the policy in it: retrying cannot succeed.
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
    let route_name = policy.route_name();
    let kind = policy.spec.output.kind();
    let recent = ctx.recent_status.newer_than(
        &status_key(policy),
        policy.meta().resource_version.as_deref(),
    );
    let previous = recent.as_ref().or(policy.status.as_ref());

    if let Err(problems) = policy.spec.validate_spec() {
        let status = invalid_spec_status(policy, previous, &problems);
        write_status_if_changed(policy, status, ctx).await?;
        return Ok(Action::await_change());
    }

    ctx.wait_synced().await?;
    let observations: Vec<_> = {
        let readiness = ctx
            .caches
            .readiness
            .read()
            .map_err(|_| Error::CachesNotSynced)?;
        policy
            .spec
            .backend_services()
            .map(|svc| readiness.observe(&namespace, svc))
            .collect()
    };
    let now = Utc::now();
    let decision = decide(&policy.spec, &observations, previous, now);
    let mut status = decision.status.clone();
    name_route(&mut status, policy, &route_name);

    // The route first: the status then says what is in place. A suspended policy leaves it as
    // it is and only reports what it would do.
    let outcome = if policy.spec.suspend {
        Ok(RouteOutcome::InPlace)
    } else {
        ensure_route(policy, &namespace, &uid, &route_name, &decision, ctx).await
    };
    match outcome {
        Ok(RouteOutcome::InPlace) => {}
        Ok(RouteOutcome::Conflict) => {
            let mut status = previous.cloned().unwrap_or_default();
            status.backends = decision.status.backends.clone();
            status.ready_summary = decision.status.ready_summary.clone();
            name_route(&mut status, policy, &route_name);
            let field = match policy.spec.output {
                Output::TrafficSplit => "spec.trafficSplit.name",
                Output::HttpRoute => "spec.httpRoute.name",
            };
            let reason = format!("{kind}Conflict");
            set_ready(
                &mut status,
                "False",
                &reason,
                format!(
                    "{kind} {route_name} exists and is not owned by this policy; it is left untouched. Delete it, or set {field} on a new policy"
                ),
            );
            if write_status_if_changed(policy, status, ctx).await? {
                publish(
                    ctx,
                    policy,
                    EventType::Warning,
                    &reason,
                    format!("{kind} {route_name} is not owned by this policy"),
                );
            }
            return Ok(Action::await_change());
        }
        Err(error) => {
            // Keep the previous status (what is really in place) and say why nothing moved.
            let mut status = previous.cloned().unwrap_or_default();
            name_route(&mut status, policy, &route_name);
            set_ready(
                &mut status,
                "False",
                &format!("{kind}WriteFailed"),
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
        );
    }
    let ready = status.backends.iter().filter(|b| b.ready).count();
    ctx.metrics
        .set_policy_state(&labels, ready, status.phase.unwrap_or(Phase::Primary));
    if let Some(last) = status.last_failover_time.max(status.last_failback_time) {
        ctx.metrics
            .set_last_transition(&labels, last.0.timestamp_millis() as f64 / 1000.0);
    }
    Ok(decision
        .requeue_after
        .map_or_else(Action::await_change, Action::requeue))
}

enum RouteOutcome {
    InPlace,
    Conflict,
}

/// Records the generated route's name in the status field of its kind.
fn name_route(status: &mut FailoverPolicyStatus, policy: &FailoverPolicy, name: &str) {
    match policy.spec.output {
        Output::TrafficSplit => status.traffic_split = Some(name.to_string()),
        Output::HttpRoute => status.http_route = Some(name.to_string()),
    }
}

fn owned_by(meta: &kube::api::ObjectMeta, uid: &str) -> bool {
    meta.owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// The API resource of TrafficSplits in one API version.
pub fn traffic_split_resource(api_version: &str) -> ApiResource {
    let version = api_version.rsplit('/').next().unwrap_or("v1alpha2");
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("split.smi-spec.io", version, "TrafficSplit"),
        "trafficsplits",
    )
}

/// The API resource of Gateway API HTTPRoutes.
pub fn http_route_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "HTTPRoute"),
        "httproutes",
    )
}

fn route_resource(policy: &FailoverPolicy) -> ApiResource {
    match policy.spec.output {
        Output::TrafficSplit => {
            traffic_split_resource(policy.spec.traffic_split.api_version.as_str())
        }
        Output::HttpRoute => http_route_resource(),
    }
}

/// The route this policy wants, as the object to create or apply.
fn desired_route(
    policy: &FailoverPolicy,
    namespace: &str,
    name: &str,
    weights: &[i32],
) -> Result<DynamicObject, Error> {
    let mut owner = policy
        .controller_owner_ref(&())
        .ok_or(Error::MissingMetadata("metadata.uid"))?;
    owner.block_owner_deletion = Some(true);
    let mut obj = DynamicObject::new(name, &route_resource(policy)).within(namespace);
    obj.metadata.labels = Some(BTreeMap::from([
        (POLICY_LABEL.to_string(), policy.name_any()),
        (
            "app.kubernetes.io/managed-by".to_string(),
            FIELD_MANAGER.to_string(),
        ),
    ]));
    obj.metadata.owner_references = Some(vec![owner]);
    let backends = policy.spec.backend_services().zip(weights);
    obj.data = match (policy.spec.output, &policy.spec.http_route) {
        (Output::HttpRoute, Some(route)) => {
            let mut parent =
                json!({ "group": "core", "kind": "Service", "name": policy.spec.service });
            if let Some(port) = route.parent_port {
                parent["port"] = json!(port);
            }
            let backend_refs: Vec<_> = backends
                .map(|(service, weight)| json!({ "group": "", "kind": "Service", "name": service, "port": route.port, "weight": weight }))
                .collect();
            json!({ "spec": { "parentRefs": [parent], "rules": [{ "backendRefs": backend_refs }] } })
        }
        _ => {
            let backends: Vec<TrafficSplitBackend> = backends
                .map(|(service, weight)| TrafficSplitBackend {
                    service: service.to_string(),
                    weight: i64::from(*weight),
                })
                .collect();
            json!({ "spec": { "service": policy.spec.service, "backends": backends } })
        }
    };
    Ok(obj)
}

/// The parts of a route's spec this controller sets, in a form that ignores server defaults.
fn routed(output: Output, spec: Option<&serde_json::Value>) -> serde_json::Value {
    let Some(spec) = spec else {
        return serde_json::Value::Null;
    };
    let field =
        |v: &serde_json::Value, k: &str| v.get(k).cloned().unwrap_or(serde_json::Value::Null);
    match output {
        Output::TrafficSplit => {
            let backends: Vec<_> = spec
                .get("backends")
                .and_then(|b| b.as_array())
                .map(|b| {
                    b.iter()
                        .map(|b| json!([field(b, "service"), field(b, "weight")]))
                        .collect()
                })
                .unwrap_or_default();
            json!([field(spec, "service"), backends])
        }
        Output::HttpRoute => {
            let parents: Vec<_> = spec
                .get("parentRefs")
                .and_then(|p| p.as_array())
                .map(|p| {
                    p.iter()
                        .map(|p| {
                            json!([
                                field(p, "group"),
                                field(p, "kind"),
                                field(p, "name"),
                                field(p, "port")
                            ])
                        })
                        .collect()
                })
                .unwrap_or_default();
            let rules: Vec<_> = spec
                .get("rules")
                .and_then(|r| r.as_array())
                .map(|rules| {
                    rules
                        .iter()
                        .map(|r| {
                            let refs: Vec<_> = r
                                .get("backendRefs")
                                .and_then(|b| b.as_array())
                                .map(|b| {
                                    b.iter()
                                        .map(|b| {
                                            json!([
                                                field(b, "name"),
                                                field(b, "port"),
                                                field(b, "weight")
                                            ])
                                        })
                                        .collect()
                                })
                                .unwrap_or_default();
                            json!(refs)
                        })
                        .collect()
                })
                .unwrap_or_default();
            json!([parents, rules])
        }
    }
}

/// The current route, from the cache, as (metadata, spec).
fn cached_route(
    policy: &FailoverPolicy,
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Option<(kube::api::ObjectMeta, Option<serde_json::Value>)> {
    match policy.spec.output {
        Output::TrafficSplit => ctx
            .caches
            .traffic_splits
            .get(&ObjectRef::new(name).within(namespace))
            .map(|ts| (ts.metadata.clone(), serde_json::to_value(&ts.spec).ok())),
        Output::HttpRoute => ctx
            .caches
            .http_routes
            .as_ref()?
            .get(&ObjectRef::new_with(name, http_route_resource()).within(namespace))
            .map(|r| (r.metadata.clone(), r.data.get("spec").cloned())),
    }
}

async fn ensure_route(
    policy: &FailoverPolicy,
    namespace: &str,
    uid: &str,
    name: &str,
    decision: &Decision,
    ctx: &Context,
) -> Result<RouteOutcome, Error> {
    let output = policy.spec.output;
    let kind = output.kind();
    let desired = desired_route(policy, namespace, name, &decision.weights)?;
    let write_error = |source| Error::RouteWrite {
        kind,
        name: name.to_string(),
        source,
    };
    let metric = kind.to_ascii_lowercase();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), namespace, &route_resource(policy));
    let current = match cached_route(policy, ctx, namespace, name) {
        Some(current) => Some(current),
        None => {
            // Create, never apply, when the cache shows nothing: a create fails on an existing
            // object, so a foreign route that the cache has not seen yet is never adopted.
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..Default::default()
            };
            ctx.ensure_leader()?;
            match api.create(&params, &desired).await {
                Ok(created) => {
                    ctx.metrics.write(&metric);
                    ctx.recent_routes.record(
                        format!("{kind}/{namespace}/{name}"),
                        created.metadata.resource_version.as_deref(),
                        desired.data["spec"].clone(),
                    );
                    info!(kind, route = name, "created route");
                    return Ok(RouteOutcome::InPlace);
                }
                Err(kube::Error::Api(e)) if e.code == 409 => api
                    .get_opt(name)
                    .await
                    .map_err(write_error)?
                    .map(|o| (o.metadata, o.data.get("spec").cloned())),
                Err(e) => return Err(write_error(e)),
            }
        }
    };
    let Some((meta, cached_spec)) = current else {
        // Deleted between the create attempt and the read: try again shortly.
        return Err(Error::RouteVanished(format!("{kind} {name}")));
    };
    let route_key = format!("{kind}/{namespace}/{name}");
    let spec = ctx
        .recent_routes
        .newer_than(&route_key, meta.resource_version.as_deref())
        .or(cached_spec);
    if !owned_by(&meta, uid) {
        return Ok(RouteOutcome::Conflict);
    }
    let labelled = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(POLICY_LABEL))
        .is_some_and(|v| *v == policy.name_any());
    if labelled && routed(output, spec.as_ref()) == routed(output, desired.data.get("spec")) {
        return Ok(RouteOutcome::InPlace);
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    ctx.ensure_leader()?;
    debug!(kind, route = name, "applying route");
    let applied = api
        .patch(name, &params, &Patch::Apply(&desired))
        .await
        .map_err(write_error)?;
    ctx.metrics.write(&metric);
    ctx.recent_routes.record(
        route_key,
        applied.metadata.resource_version.as_deref(),
        desired.data["spec"].clone(),
    );
    info!(kind, route = name, weights = ?decision.weights, "applied route");
    Ok(RouteOutcome::InPlace)
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
    let key = status_key(policy);
    let current = ctx
        .recent_status
        .newer_than(&key, policy.meta().resource_version.as_deref());
    if current.as_ref().or(policy.status.as_ref()) == Some(&status) {
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
    let written = api
        .patch_status(
            &policy.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(Error::StatusWrite)?;
    ctx.metrics.write("status");
    ctx.recent_status
        .record(key, written.meta().resource_version.as_deref(), status);
    Ok(true)
}

fn status_key(policy: &FailoverPolicy) -> String {
    format!(
        "{}/{}/{}",
        policy.namespace().unwrap_or_default(),
        policy.name_any(),
        policy.uid().unwrap_or_default()
    )
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
    name_route(&mut status, policy, &policy.route_name());
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

fn record_transition(
    ctx: &Context,
    policy: &FailoverPolicy,
    labels: &PolicyLabels,
    transition: Transition,
    message: Option<String>,
) {
    match transition {
        Transition::FailedOver => ctx.metrics.failovers.get_or_create(labels).inc(),
        Transition::FailedBack => ctx.metrics.failbacks.get_or_create(labels).inc(),
        Transition::NoReadyBackend | Transition::Recovered | Transition::PinnedBackendNotReady => 0,
    };
    let event_type = if transition.is_warning() {
        EventType::Warning
    } else {
        EventType::Normal
    };
    let note = message.unwrap_or_else(|| transition.reason().to_string());
    info!(transition = transition.reason(), %note, "traffic moved");
    publish(ctx, policy, event_type, transition.reason(), note);
}

fn publish(ctx: &Context, policy: &FailoverPolicy, type_: EventType, reason: &str, note: String) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(note),
        action: "Route".to_string(),
        secondary: None,
    };
    // Events are best effort and sent in the background: they never hold up the next reconcile
    // of this policy, and a lost Event never blocks routing.
    let (recorder, metrics, reference) = (
        ctx.recorder.clone(),
        ctx.metrics.clone(),
        policy.object_ref(&()),
    );
    let reason = reason.to_string();
    tokio::spawn(async move {
        match recorder.publish(&event, &reference).await {
            Ok(()) => metrics.write("event"),
            Err(e) => warn!(error = %e, reason, "could not record Event"),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_writes_win_until_the_cache_catches_up() {
        let recent: Recent<&str> = Recent::new();
        recent.record("a".into(), Some("10"), "written");
        assert_eq!(recent.newer_than("a", Some("9")), Some("written"));
        assert_eq!(
            recent.newer_than("a", Some("10")),
            None,
            "caught up: the cache wins"
        );
        assert_eq!(
            recent.newer_than("a", Some("9")),
            None,
            "and the entry is gone"
        );
        recent.record("b".into(), Some("not-a-number"), "written");
        assert_eq!(recent.newer_than("b", Some("1")), None);
    }

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
