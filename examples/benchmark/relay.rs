//! The floor that makes the controller's writes: what any client doing the controller's job on
//! this control plane must do at least, so that the controller's latency is judged against it.
//!
//! - It is triggered by the controller's own EndpointSlice watch (the same helper, scope and
//!   selector), so it receives the same churn.
//! - Per change it applies the route the controller writes, built by the controller's own
//!   function ([`DesiredRoute::of`]) for a policy of its own (the same backends, labels,
//!   ownerReference and field manager); then, in the background, the policy's status (one the
//!   controller wrote for the same transition) and the Event the controller publishes for it,
//!   through the controller's own publisher.
//! - For a failover group it does the same for every member at once.
//!
//! The relay's policies live in a namespace of their own, which the controller does not watch,
//! with their routes (a route's owner must be in its namespace); an independent watch of that
//! namespace times its changes as the controller's are timed.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use failover::{
    runtime::{events::Events, leader::Leadership, metrics::Metrics},
    sources::watch::{events, scoped},
};
use failover_core::{
    api::{FailoverGroup, FailoverPolicy},
    apis::WatchKind,
    backend::BackendKind,
    intent::DesiredRoute,
    policy::ValidPolicy,
    route::{FIELD_MANAGER, owner},
    validate::validate,
};
use futures::StreamExt;
use k8s_openapi::api::{
    core::v1::{Event as CoreEvent, ObjectReference},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
    core::DynamicObject,
    runtime::{
        events::{Event, EventType},
        watcher,
    },
};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::{
    objects::set_ready,
    support::TestEnv,
    watches::{SplitWatch, Unreported},
};

/// The weights the controller writes for a policy of three backends: on its primary, and
/// failed over to its first secondary.
pub const ON_PRIMARY: [i32; 3] = [1, 0, 0];
pub const FAILED_OVER: [i32; 3] = [0, 1, 0];

/// What the controller wrote for one object (a policy, or a group) besides routes when a move
/// went away from the primary and when it came back, indexed by whether the primary is ready:
/// the status, and the Event's type, reason and note when it published one.
#[derive(Clone, Debug, Default)]
pub struct Writes {
    pub status: [Value; 2],
    pub event: [Option<(String, String, String)>; 2],
}

/// What a move made the controller write besides routes: each member policy's, in order, and
/// the group's for a group move.
#[derive(Clone, Debug, Default)]
pub struct Written {
    pub members: Vec<Writes>,
    pub group: Option<Writes>,
}

/// One of the relay's policies: validated as the controller validates it, with its uid.
#[derive(Clone)]
pub struct Member {
    pub valid: Arc<ValidPolicy>,
    pub uid: String,
}

impl Member {
    /// Creates policy `name` (primary `<name>`, secondaries `<name>-a` and `<name>-b`) in the
    /// relay's namespace.
    pub async fn create(own: &TestEnv, name: &str) -> Self {
        let api: Api<FailoverPolicy> = own.api();
        let created = api
            .create(&PostParams::default(), &crate::objects::policy_named(name))
            .await
            .expect("the relay's policy");
        Self::of(&created)
    }

    pub fn of(policy: &FailoverPolicy) -> Self {
        Self {
            valid: Arc::new(validate(policy).expect("the relay's policy is valid")),
            uid: policy.uid().unwrap_or_default(),
        }
    }

    /// The route the controller writes for this policy, the primary ready or not.
    pub fn route(&self, ready: bool) -> DynamicObject {
        let weights = if ready { ON_PRIMARY } else { FAILED_OVER };
        DesiredRoute::of(owner(&self.valid.name, &self.uid), &self.valid, &weights).object
    }

    fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(FailoverPolicy::api_version(&()).into()),
            kind: Some(FailoverPolicy::kind(&()).into()),
            namespace: Some(self.valid.namespace.to_string()),
            name: Some(self.valid.name.to_string()),
            uid: Some(self.uid.clone()),
            ..ObjectReference::default()
        }
    }
}

/// Moves the policies `members` of `env` (one, or a group's) away from their primaries and
/// back, by the readiness of `trigger`'s primary, and reads what the controller wrote each time
/// besides the routes: the statuses and Events of the policies, and of `group` if it is one.
pub async fn controller_writes(
    env: &TestEnv,
    watch: &SplitWatch,
    trigger: &str,
    members: &[String],
    group: Option<&str>,
) -> Written {
    let slices: Api<EndpointSlice> = env.api();
    let mut written = Written {
        members: vec![Writes::default(); members.len()],
        group: group.map(|_| Writes::default()),
    };
    for (ready, weights) in [(false, FAILED_OVER), (true, ON_PRIMARY)] {
        let objects: Vec<&str> = members.iter().map(String::as_str).chain(group).collect();
        let mut before = Vec::new();
        for object in &objects {
            before.push(events_of(env, object).await.len());
        }
        set_ready(&slices, trigger, ready).await;
        let expected: Vec<i64> = weights.iter().map(|w| i64::from(*w)).collect();
        for member in members {
            let _ = watch.wait_for(member, &expected, SEEN_WITHIN).await;
        }
        // The statuses and Events follow the routes: a moment for them to land.
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        let at = usize::from(ready);
        for (i, member) in members.iter().enumerate() {
            let event = newer_event(env, member, before[i]).await;
            let status = env.api::<FailoverPolicy>().get_status(member).await;
            written.members[i].status[at] = json!(status.expect("policy").status);
            written.members[i].event[at] = event;
        }
        if let (Some(name), Some(writes)) = (group, written.group.as_mut()) {
            let event = newer_event(env, name, before[members.len()]).await;
            let status = env.api::<FailoverGroup>().get_status(name).await;
            writes.status[at] = json!(status.expect("group").status);
            writes.event[at] = event;
        }
    }
    written
}

/// How long a move may take before the relay's setup goes on without it.
const SEEN_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// The newest Event about `object`, if there are more than `before`: its type, reason, note.
async fn newer_event(
    env: &TestEnv,
    object: &str,
    before: usize,
) -> Option<(String, String, String)> {
    let published = events_of(env, object).await;
    if published.len() <= before {
        return None;
    }
    let event = published.last()?.clone();
    Some((
        event.type_.unwrap_or_default(),
        event.reason.unwrap_or_default(),
        event.message.unwrap_or_default(),
    ))
}

/// The relay running: its task, and how many of its background writes are under way.
pub struct Running {
    task: JoinHandle<()>,
    pending: Arc<AtomicUsize>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Running {
    /// Waits until the background writes of the changes so far have landed.
    pub async fn idle(&self) {
        while self.pending.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

/// The Events about `object`, oldest first.
async fn events_of(env: &TestEnv, object: &str) -> Vec<CoreEvent> {
    let api: Api<CoreEvent> = env.api();
    let params = ListParams::default().fields(&format!("involvedObject.name={object}"));
    let mut listed = api.list(&params).await.map(|l| l.items).unwrap_or_default();
    listed.sort_by_key(|e| e.event_time.clone().map(|t| t.0));
    listed
}

/// What the relay writes for: its policies (a group's members, or one), and its group's name
/// (in the policies' namespace) for a group move.
#[derive(Clone)]
pub struct Target {
    pub members: Vec<Member>,
    pub group: Option<String>,
    pub written: Written,
}

/// Starts the relay: on each change of the readiness of `trigger`'s EndpointSlice in `ns`, the
/// routes of `target`'s members at once, then their statuses and Events, and the group's, in
/// the background.
pub fn start(client: Client, ns: &str, trigger: &str, target: Target) -> Running {
    let slice_label = BackendKind::Service.spec().slice_label;
    let stream = events(
        scoped::<EndpointSlice>(&client, Some(ns)),
        WatchKind::EndpointSlice,
        watcher::Config::default().labels(slice_label),
        Arc::new(Unreported),
    );
    let trigger = trigger.to_string();
    let pending = Arc::new(AtomicUsize::new(0));
    let under_way = pending.clone();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut last = None;
        while let Some(event) = stream.next().await {
            let (watcher::Event::Apply(slice) | watcher::Event::InitApply(slice)) = event else {
                continue;
            };
            if slice.labels().get(slice_label) != Some(&trigger) {
                continue;
            }
            let ready = slice
                .endpoints
                .iter()
                .any(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true));
            if last.replace(ready) == Some(ready) {
                continue;
            }
            relay(&client, &target, ready, &under_way).await;
        }
    });
    Running { task, pending }
}

/// One change: the routes, then the statuses and Events in the background.
async fn relay(client: &Client, target: &Target, ready: bool, pending: &Arc<AtomicUsize>) {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    futures::future::join_all(target.members.iter().map(|m| {
        let route = m.route(ready);
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            &m.valid.namespace,
            &m.valid.route.resource(),
        );
        let params = params.clone();
        async move {
            if let Err(e) = api
                .patch(&route.name_any(), &params, &Patch::Apply(&route))
                .await
            {
                eprintln!("the relay's route write failed: {e}");
            }
        }
    }))
    .await;
    let at = usize::from(ready);
    let mut writes: Vec<(ObjectReference, Writes)> = target
        .members
        .iter()
        .zip(&target.written.members)
        .map(|(m, w)| (m.reference(), w.clone()))
        .collect();
    if let (Some(group), Some(w), Some(m)) =
        (&target.group, &target.written.group, target.members.first())
    {
        writes.push((group_reference(group, &m.valid.namespace), w.clone()));
    }
    for (object, w) in writes {
        pending.fetch_add(1, Ordering::SeqCst);
        let (client, pending) = (client.clone(), pending.clone());
        tokio::spawn(async move {
            status_and_event(client, &object, &w.status[at], w.event[at].as_ref()).await;
            pending.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// A FailoverGroup as an Event's object (its uid left out: the relay's Events need none).
fn group_reference(name: &str, namespace: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(FailoverGroup::api_version(&()).into()),
        kind: Some(FailoverGroup::kind(&()).into()),
        namespace: Some(namespace.to_string()),
        name: Some(name.to_string()),
        ..ObjectReference::default()
    }
}

/// The status the controller wrote for this move, applied to `object` as it applies one, and
/// its Event, published by the controller's publisher (a new one: the controller's Events of
/// one policy are rarely repeats within their series window, since the changes go to other
/// policies).
async fn status_and_event(
    client: Client,
    object: &ObjectReference,
    status: &Value,
    event: Option<&(String, String, String)>,
) {
    let (namespace, name) = (
        object.namespace.as_deref().unwrap_or_default(),
        object.name.as_deref().unwrap_or_default(),
    );
    let (api_version, kind) = (
        object.api_version.as_deref().unwrap_or_default(),
        object.kind.as_deref().unwrap_or_default(),
    );
    let body = json!({"apiVersion": api_version, "kind": kind, "status": status});
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let written = if kind == FailoverGroup::kind(&()) {
        Api::<FailoverGroup>::namespaced(client.clone(), namespace)
            .patch_status(name, &params, &Patch::Apply(&body))
            .await
            .map(drop)
    } else {
        Api::<FailoverPolicy>::namespaced(client.clone(), namespace)
            .patch_status(name, &params, &Patch::Apply(&body))
            .await
            .map(drop)
    };
    if let Err(e) = written {
        eprintln!("the relay's status write failed: {e}");
    }
    let Some((type_, reason, note)) = event else {
        return;
    };
    let publisher = Events::new(
        client,
        FIELD_MANAGER,
        None,
        Leadership::always(),
        Arc::new(Metrics::new()),
    );
    let event = Event {
        type_: if type_ == "Warning" {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.clone(),
        note: Some(note.clone()),
        action: "Route".to_string(),
        secondary: None,
    };
    if let Err(e) = publisher.publish(&event, object).await {
        eprintln!("the relay's Event failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str) -> Member {
        let mut policy = crate::objects::policy_named(name);
        policy.metadata.namespace = Some("bench-relay".into());
        policy.metadata.uid = Some("0c1d".into());
        Member::of(&policy)
    }

    /// The controller's route for `p0` with its primary not ready and its secondaries ready,
    /// as its reconcile intends it.
    fn controllers_route() -> DynamicObject {
        use failover_core::{
            intent::{Observed, intend},
            observation::BackendObservation,
            tenancy::Gateways,
        };
        let mut policy = crate::objects::policy(0);
        policy.metadata.namespace = Some("bench-relay".into());
        let valid = Arc::new(validate(&policy).expect("valid"));
        let observations = [
            BackendObservation::counted(0, 1),
            BackendObservation::counted(1, 1),
            BackendObservation::counted(1, 1),
        ];
        let observed = Observed {
            observations: &observations,
            previous: None,
            order: None,
            now: chrono::Utc::now(),
        };
        intend(valid, "0c1d", &Gateways::default(), &observed)
            .route
            .object
    }

    #[test]
    fn the_relays_route_is_the_controllers_for_the_same_policy() {
        let route = serde_json::to_value(member("p0").route(false)).expect("json");
        assert_eq!(
            route,
            serde_json::to_value(controllers_route()).expect("json")
        );
        assert_eq!(
            route["spec"]["backends"],
            json!([{"service": "p0", "weight": 0}, {"service": "p0-a", "weight": 1}, {"service": "p0-b", "weight": 0}])
        );
        assert_eq!(route["metadata"]["ownerReferences"][0]["uid"], "0c1d");
        assert_eq!(
            route["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            FIELD_MANAGER
        );
    }
}
