//! The one way to write to the API server: a [`Writer`]. Its client is its own, reachable from
//! no other module; each write checks leadership right before its request (a lost lease stops
//! writes at once), is made under the controller's field manager (or the one a step names for
//! its own fields), and is counted in the write metrics once the API server accepts it. The
//! writer also keeps the memory of recent writes ([`Recent`]) that keeps a stale cache from
//! causing a second write, and the statuses waiting to be written ([`Statuses`]).

use std::{fmt::Debug, sync::Arc};

use crate::runtime::{
    events::Events,
    leader::{Leadership, Role},
    metrics::Metrics,
    notify::{Notifier, NotifySettings},
    written::{Recent, StatusKey, Statuses, WrittenStatus},
};
use failover_core::{
    api::{FailoverGroupStatus, FailoverPolicyStatus},
    last_status::LastGroupStatus,
    route::{FIELD_MANAGER, RouteKey, RulesDigest},
};
use k8s_openapi::{
    NamespaceResourceScope,
    api::{autoscaling::v1::Scale, core::v1::ObjectReference},
};
use kube::{
    Api, Client, Resource,
    api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
    runtime::events::Event,
};
use serde::{Deserialize, Serialize, de::DeserializeOwned};

/// A write refused because this replica does not lead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not the leader; writes stopped")]
pub struct NotLeader;

/// What a write came to: refused before any request (`Err`, this replica does not lead), or the
/// API server's answer (`Ok`).
pub type Sent<T> = Result<kube::Result<T>, NotLeader>;

/// What the controller reads of a write's answer: the object's new `resourceVersion`. The
/// answer is the whole object, its managedFields too, and larger than the write; the rest of it
/// is skipped unread rather than parsed into a tree that is dropped at once.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Written {
    #[serde(default)]
    metadata: WrittenMeta,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WrittenMeta {
    #[serde(default)]
    resource_version: Option<String>,
}

impl Written {
    /// The object's `resourceVersion` after the write.
    pub fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
}

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
    pub recent_status: Recent<StatusKey, WrittenStatus>,
    /// Statuses queued, until they are written.
    pub statuses: Statuses<FailoverPolicyStatus>,
    /// Failover groups' statuses written (compact), until the group watch delivers them.
    pub recent_group_status: Recent<StatusKey, LastGroupStatus>,
    /// Failover groups' statuses queued, until they are written.
    pub group_statuses: Statuses<FailoverGroupStatus>,
    /// Who is told of transitions (Alertmanager, policies' webhook sinks), as the leader only.
    pub notifier: Arc<Notifier>,
}

impl Writer {
    /// A writer through this client; `instance` names this replica in Events. The statuses it
    /// holds are written by the status writer ([`crate::pipeline::write::statuses::run`]).
    pub fn new(
        client: Client,
        leadership: Leadership,
        metrics: Arc<Metrics>,
        instance: Option<String>,
        notify: NotifySettings,
    ) -> Self {
        let events = Events::new(
            client.clone(),
            FIELD_MANAGER,
            instance,
            leadership.clone(),
            metrics.clone(),
        );
        let notifier = Notifier::new(notify, client.clone(), leadership.clone(), metrics.clone());
        Self {
            client,
            leadership,
            metrics,
            events,
            recent_routes: Recent::default(),
            recent_status: Recent::default(),
            statuses: Statuses::new(),
            recent_group_status: Recent::default(),
            group_statuses: Statuses::new(),
            notifier,
        }
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
    /// effort, bounded per namespace ([`crate::runtime::events`]), never hold up the next
    /// reconcile, and a lost Event never blocks routing.
    pub fn publish(&self, event: Event, reference: ObjectReference) {
        self.events.send(event, reference);
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

/// A request as built, or why it could not be.
fn built(
    request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
) -> kube::Result<http::Request<Vec<u8>>> {
    request.map_err(kube::Error::BuildRequest)
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
    pub async fn create(&self, object: &K) -> Sent<Written>
    where
        K: Serialize,
    {
        let params = PostParams {
            field_manager: Some(self.manager.to_string()),
            ..Default::default()
        };
        let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError);
        self.write(body.and_then(|body| built(self.request().create(&params, body))))
            .await
    }

    /// One server-side apply of `object` to `name`, forced: the fields it sets are the
    /// manager's.
    pub async fn apply(&self, name: &str, object: &(impl Serialize + Debug)) -> Sent<Written> {
        let params = PatchParams::apply(self.manager).force();
        self.write(built(self.request().patch(
            name,
            &params,
            &Patch::Apply(object),
        )))
        .await
    }

    /// One server-side apply of `body` to the status of `name`, forced.
    pub async fn apply_status(&self, name: &str, body: &(impl Serialize + Debug)) -> Sent<Written> {
        let params = PatchParams::apply(self.manager).force();
        let request =
            self.request()
                .patch_subresource("status", name, &params, &Patch::Apply(body));
        self.write(built(request)).await
    }

    /// One merge patch of `name`.
    pub async fn merge(&self, name: &str, patch: &(impl Serialize + Debug)) -> Sent<Written> {
        let request = self
            .request()
            .patch(name, &self.merge_params(), &Patch::Merge(patch));
        self.write(built(request)).await
    }

    /// One merge patch of the scale subresource of `name`.
    pub async fn merge_scale(&self, name: &str, patch: &(impl Serialize + Debug)) -> Sent<Written> {
        let request = self.request().patch_subresource(
            "scale",
            name,
            &self.merge_params(),
            &Patch::Merge(patch),
        );
        self.write(built(request)).await
    }

    /// Deletes `name`, on `params`' preconditions.
    pub async fn delete(&self, name: &str, params: &DeleteParams) -> Sent<()> {
        let deleted = self
            .write(built(self.request().delete(name, params)))
            .await?;
        Ok(deleted.map(|_| ()))
    }

    /// The requests to the objects' URL.
    fn request(&self) -> kube::core::Request {
        kube::core::Request::new(self.api.resource_url())
    }

    /// Sends a write (nothing is sent unless this replica leads right now), counts it once the
    /// API server accepts it, and reads of its answer only the new `resourceVersion`.
    async fn write(&self, request: kube::Result<http::Request<Vec<u8>>>) -> Sent<Written> {
        self.writer.ensure_leader()?;
        let answer = match request {
            Ok(request) => self.writer.client.request::<Written>(request).await,
            Err(e) => Err(e),
        };
        if answer.is_ok() {
            self.writer.metrics.write(self.counted);
        }
        Ok(answer)
    }

    fn merge_params(&self) -> PatchParams {
        PatchParams {
            field_manager: Some(self.manager.into()),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn of_a_writes_answer_only_the_resource_version_is_read() {
        let answer = serde_json::json!({
            "apiVersion": "failover.dev/v1alpha1",
            "kind": "FailoverPolicy",
            "metadata": {
                "name": "web",
                "resourceVersion": "4711",
                "managedFields": [{"manager": "failover-controller", "fieldsV1": {"f:status": {}}}],
            },
            "spec": {"service": "web"},
            "status": {"phase": "Primary"},
        });
        let written: Written = serde_json::from_value(answer).expect("an answer");
        assert_eq!(written.resource_version(), Some("4711"));
        let bare: Written = serde_json::from_str("{}").expect("an answer");
        assert_eq!(bare.resource_version(), None);
    }
}
