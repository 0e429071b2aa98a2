//! The one way to write to the API server: a [`Writer`]. Its client is its own, reachable from
//! no other module; each write checks leadership right before its request (a lost lease stops
//! writes at once), is made under the controller's field manager (or the one a step names for
//! its own fields), and is counted in the write metrics once the API server accepts it. The
//! writer also keeps the memory of recent writes ([`Recent`]) that keeps a stale cache from
//! causing a second write, and the statuses waiting to be written ([`Statuses`]).

use std::{fmt::Debug, future::Future, sync::Arc};

use k8s_openapi::{
    NamespaceResourceScope,
    api::{autoscaling::v1::Scale, core::v1::ObjectReference},
};
use kube::{
    Api, Client, Resource,
    api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
    runtime::events::Event,
};
use serde::{Serialize, de::DeserializeOwned};
use tracing::{debug, warn};

use crate::{
    api::FailoverPolicyStatus,
    route::{FIELD_MANAGER, RouteKey, RulesDigest},
    runtime::{
        api_client::describe,
        events::Events,
        leader::{Leadership, Role},
        metrics::Metrics,
        written::{Queue, Recent, StatusKey, Statuses},
    },
};

/// A write refused because this replica does not lead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not the leader; writes stopped")]
pub struct NotLeader;

/// What a write came to: refused before any request (`Err`, this replica does not lead), or the
/// API server's answer (`Ok`).
pub type Sent<T> = Result<kube::Result<T>, NotLeader>;

/// What the apply and write steps write through: the only holder of the client writes go
/// through.
pub struct Writer {
    client: Client,
    leadership: Leadership,
    metrics: Arc<Metrics>,
    events: Events,
    /// Routes written, until the route cache shows them.
    pub recent_routes: Recent<RouteKey, RulesDigest>,
    /// Statuses written, until the policy cache shows them.
    pub recent_status: Recent<StatusKey, FailoverPolicyStatus>,
    /// Statuses queued, until they are written.
    pub statuses: Statuses,
}

impl Writer {
    /// A writer through this client; `instance` names this replica in Events. The queue is the
    /// status writer's work ([`crate::pipeline::write::statuses::run`]).
    pub fn new(
        client: Client,
        leadership: Leadership,
        metrics: Arc<Metrics>,
        instance: Option<String>,
    ) -> (Self, Queue) {
        let events = Events::new(client.clone(), FIELD_MANAGER, instance);
        let (statuses, queue) = Statuses::new();
        let writer = Self {
            client,
            leadership,
            metrics,
            events,
            recent_routes: Recent::default(),
            recent_status: Recent::default(),
            statuses,
        };
        (writer, queue)
    }

    /// Whether this replica may write now.
    pub fn is_leader(&self) -> bool {
        self.leadership.is_leader()
    }

    /// This replica's role, as the admin server reports it.
    pub fn role(&self) -> Role {
        self.leadership.role()
    }

    /// Fails unless this replica may write right now.
    fn ensure_leader(&self) -> Result<(), NotLeader> {
        if self.leadership.is_leader() {
            Ok(())
        } else {
            Err(NotLeader)
        }
    }

    /// The objects of kind `K` in `namespace`; writes through them are counted as `counted`.
    pub fn namespaced<K>(&self, namespace: &str, counted: &'static str) -> Objects<'_, K>
    where
        K: Resource<Scope = NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Objects::new(
            self,
            Api::namespaced(self.client.clone(), namespace),
            counted,
        )
    }

    /// The objects of the API `resource` in `namespace`; writes through them are counted as
    /// `counted`.
    pub fn dynamic(
        &self,
        namespace: &str,
        resource: &ApiResource,
        counted: &'static str,
    ) -> Objects<'_, DynamicObject> {
        let api = Api::namespaced_with(self.client.clone(), namespace, resource);
        Objects::new(self, api, counted)
    }

    /// Sends an Event about `reference` in the background, as the leader only: Events are best
    /// effort, never hold up the next reconcile, and a lost Event never blocks routing.
    pub fn publish(&self, event: Event, reference: ObjectReference) {
        let (events, leadership, metrics) = (
            self.events.clone(),
            self.leadership.clone(),
            self.metrics.clone(),
        );
        tokio::spawn(async move {
            let reason = &event.reason;
            if !leadership.is_leader() {
                debug!(reason, "Event not recorded: not the leader");
                return;
            }
            match events.publish(&event, &reference).await {
                Ok(()) => metrics.write("event"),
                Err(e) => warn!(error = %describe(&e), reason, "could not record Event"),
            }
        });
    }
}

/// The objects of one kind in one namespace, as a [`Writer`] reaches them: reads as they are,
/// each write checked for leadership right before its request and counted once accepted.
pub struct Objects<'a, K> {
    writer: &'a Writer,
    api: Api<K>,
    /// The field manager writes are made under.
    manager: &'static str,
    /// The write metrics' label.
    counted: &'static str,
}

impl<'a, K> Objects<'a, K> {
    fn new(writer: &'a Writer, api: Api<K>, counted: &'static str) -> Self {
        Self {
            writer,
            api,
            manager: FIELD_MANAGER,
            counted,
        }
    }

    /// The same objects, written under the field manager `manager` instead of the controller's.
    pub fn managed_by(self, manager: &'static str) -> Self {
        Self { manager, ..self }
    }
}

impl<K> Objects<'_, K>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    /// Reads the object `name`.
    pub async fn get(&self, name: &str) -> kube::Result<K> {
        self.api.get(name).await
    }

    /// Reads the object `name`; `None` when there is none.
    pub async fn get_opt(&self, name: &str) -> kube::Result<Option<K>> {
        self.api.get_opt(name).await
    }

    /// Reads the scale subresource of the object `name`.
    pub async fn get_scale(&self, name: &str) -> kube::Result<Scale> {
        self.api.get_scale(name).await
    }

    /// Creates `object` (never adopting an existing one of its name: that is a conflict).
    pub async fn create(&self, object: &K) -> Sent<K>
    where
        K: Serialize,
    {
        let params = PostParams {
            field_manager: Some(self.manager.to_string()),
            ..Default::default()
        };
        self.send(self.api.create(&params, object)).await
    }

    /// One server-side apply of `object` to `name`, forced: the fields it sets are the
    /// manager's.
    pub async fn apply(&self, name: &str, object: &(impl Serialize + Debug)) -> Sent<K> {
        let params = PatchParams::apply(self.manager).force();
        self.send(self.api.patch(name, &params, &Patch::Apply(object)))
            .await
    }

    /// One server-side apply of `body` to the status of `name`, forced.
    pub async fn apply_status(&self, name: &str, body: &(impl Serialize + Debug)) -> Sent<K> {
        let params = PatchParams::apply(self.manager).force();
        self.send(self.api.patch_status(name, &params, &Patch::Apply(body)))
            .await
    }

    /// One merge patch of `name`.
    pub async fn merge(&self, name: &str, patch: &(impl Serialize + Debug)) -> Sent<K> {
        self.send(
            self.api
                .patch(name, &self.merge_params(), &Patch::Merge(patch)),
        )
        .await
    }

    /// One merge patch of the scale subresource of `name`.
    pub async fn merge_scale(&self, name: &str, patch: &(impl Serialize + Debug)) -> Sent<Scale> {
        let params = self.merge_params();
        self.send(self.api.patch_scale(name, &params, &Patch::Merge(patch)))
            .await
    }

    /// Deletes `name`, on `params`' preconditions.
    pub async fn delete(&self, name: &str, params: &DeleteParams) -> Sent<()> {
        let deleted = self.send(self.api.delete(name, params)).await?;
        Ok(deleted.map(|_| ()))
    }

    fn merge_params(&self) -> PatchParams {
        PatchParams {
            field_manager: Some(self.manager.into()),
            ..Default::default()
        }
    }

    /// Sends `request` (nothing is sent before it is awaited) if this replica leads right now,
    /// and counts it once the API server accepts it.
    async fn send<T>(&self, request: impl Future<Output = kube::Result<T>>) -> Sent<T> {
        self.writer.ensure_leader()?;
        let answer = request.await;
        if answer.is_ok() {
            self.writer.metrics.write(self.counted);
        }
        Ok(answer)
    }
}
