//! The watch stage of the pipeline: one helper for every watch of the controller: list then watch, with
//! kube-runtime's backoff on errors, and what happens reported to a [`WatchReport`]: for the local
//! cluster (the [`crate::sources::Context`]), first lists, missing CRDs and errors in the log and
//! metrics; for a
//! remote cluster, its liveness.
//! Each watch then feeds its own consumer (a readiness count, a route view, the policy store).

use std::{fmt::Debug, sync::Arc, time::Duration};

use futures::{Stream, StreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::{
    Api, Resource,
    api::{WatchEvent, WatchParams},
    runtime::{
        WatchStreamExt,
        watcher::{self, ExponentialBackoff},
    },
};
use serde::{Deserialize, de::DeserializeOwned};
use tracing::debug;

use failover_core::{
    api::{FailoverPolicy, FailoverPolicySpec, FailoverPolicyStatus},
    apis::WatchKind,
};

/// First retry delay of a failed watch.
const RETRY_FIRST: Duration = Duration::from_millis(250);
/// Longest retry delay of a failed watch: an API server that comes back is seen within seconds
/// (client-go's default waits up to 30 s).
const RETRY_MAX: Duration = Duration::from_secs(3);

/// How long the streamed-list probe waits for its answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Objects per page of an initial list (when the API server does not stream lists). Larger
/// pages save round trips at start, for a little more memory while listing: one page of JSON
/// and its decoded objects are held at a time, never the whole list.
pub const LIST_PAGE_SIZE: u32 = 500;

/// Where a watch reports what happens to it.
pub trait WatchReport: Send + Sync {
    /// The watch is about to start.
    fn starting(&self, _kind: WatchKind) {}
    /// An event arrived (the API server answers).
    fn event(&self, _kind: WatchKind) {}
    /// A complete list arrived.
    fn listed(&self, kind: WatchKind);
    /// The watch failed; it retries with backoff.
    fn failed(&self, kind: WatchKind, error: &watcher::Error);
}

/// The events of one watch, errors reported and retried: the stream never ends on its own.
///
/// The initial list is streamed when the API server can (see [`streams_lists`]), else it comes
/// in pages of [`LIST_PAGE_SIZE`] objects.
pub fn events<K>(
    api: Api<K>,
    kind: WatchKind,
    config: watcher::Config,
    report: Arc<dyn WatchReport>,
) -> impl Stream<Item = watcher::Event<K>> + Send + 'static + use<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    report.starting(kind);
    let probe = api.clone();
    let raw = stream::once(async move { initial_list(&probe, config).await })
        .flat_map(move |config| watcher::watcher(api.clone(), config));
    reported(raw, kind, report)
}

/// A raw watch with backoff, its errors and first lists reported.
fn reported<K>(
    raw: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    kind: WatchKind,
    report: Arc<dyn WatchReport>,
) -> impl Stream<Item = watcher::Event<K>> + Send + 'static
where
    K: Send + 'static,
{
    raw.backoff(backoff()).filter_map(move |event| {
        let report = report.clone();
        async move {
            match event {
                Ok(event) => {
                    // `Init` comes before the list is even asked for: it is no answer.
                    if !matches!(event, watcher::Event::Init) {
                        report.event(kind);
                    }
                    if matches!(event, watcher::Event::InitDone) {
                        report.listed(kind);
                    }
                    Some(event)
                }
                Err(e) => {
                    report.failed(kind, &e);
                    None
                }
            }
        }
    })
}

/// `config` with the initial list streamed when the API server can, else paged.
async fn initial_list<K>(api: &Api<K>, config: watcher::Config) -> watcher::Config
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    if streams_lists(api).await {
        config.streaming_lists()
    } else {
        config.page_size(LIST_PAGE_SIZE)
    }
}

/// Whether the API server streams initial lists (WatchList: on by default from Kubernetes 1.34,
/// refused with 422 by 1.33 where it is off, ignored before 1.27), asked once per watch with a
/// streamed watch that matches nothing: only a server that streams answers with the bookmark
/// that ends the initial events. Any other answer, or none within two seconds, means pages.
///
/// A streamed list is served from the API server's watch cache in one response, without the
/// round trip per page.
pub async fn streams_lists<K>(api: &Api<K>) -> bool
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let params = WatchParams::streaming_lists()
        .fields("metadata.name=-")
        .timeout(PROBE_TIMEOUT.as_secs() as u32);
    let answer = async {
        let mut events = std::pin::pin!(api.watch(&params, "0").await.ok()?);
        while let Some(event) = events.next().await {
            match event.ok()? {
                WatchEvent::Bookmark(_) => return Some(true),
                WatchEvent::Error(_) => return Some(false),
                _ => {}
            }
        }
        Some(false)
    };
    let streams = tokio::time::timeout(PROBE_TIMEOUT, answer)
        .await
        .ok()
        .flatten()
        .unwrap_or(false);
    debug!(url = api.resource_url(), streams, "initial list mode");
    streams
}

/// kube-runtime's exponential backoff (with jitter), tuned to reconnect fast.
fn backoff() -> ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(RETRY_FIRST)
        .with_max_delay(RETRY_MAX)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into()
}

/// The API server does not serve the watched resource (its CRD is not installed).
pub fn not_found(error: &watcher::Error) -> bool {
    matches!(error, watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s)) if s.code == 404)
}

/// Whether a watch failed because the API server refused its list or watch (403): not granted.
pub fn forbidden(error: &watcher::Error) -> bool {
    matches!(error, watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s)) if s.code == 403)
}

/// A watch error as a short sentence.
pub fn describe(error: &watcher::Error) -> String {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => crate::runtime::api_client::describe(e),
        watcher::Error::WatchError(status) => format!("{} ({})", status.message, status.reason),
        other => other.to_string(),
    }
}

/// The same event, its object turned into something else.
pub fn map_event<K, T>(event: watcher::Event<K>, f: impl FnOnce(K) -> T) -> watcher::Event<T> {
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(f(o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(f(o)),
        watcher::Event::InitApply(o) => watcher::Event::InitApply(f(o)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// A FailoverPolicy as the policy watch decodes it: its spec and status, and of its metadata
/// only what the controller reads (its name, namespace, uid, generation, resource version,
/// creation and deletion times, finalizers). Labels, annotations and managed fields are skipped
/// unread, never allocated: a tenant may pad them to nearly the largest object the API server
/// stores, and the controller never reads them.
#[derive(Clone, Debug)]
pub struct WatchedPolicy(pub FailoverPolicy);

/// The metadata the controller reads of a policy.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ReadMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    generation: Option<i64>,
    resource_version: Option<String>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
}

impl<'de> Deserialize<'de> for WatchedPolicy {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Read {
            #[serde(default)]
            metadata: ReadMeta,
            spec: FailoverPolicySpec,
            #[serde(default)]
            status: Option<FailoverPolicyStatus>,
        }
        let read = Read::deserialize(deserializer)?;
        let m = read.metadata;
        let metadata = ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            generation: m.generation,
            resource_version: m.resource_version,
            creation_timestamp: m.creation_timestamp,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            ..ObjectMeta::default()
        };
        Ok(Self(FailoverPolicy {
            metadata,
            spec: read.spec,
            status: read.status,
        }))
    }
}

impl Resource for WatchedPolicy {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
        FailoverPolicy::kind(dt)
    }
    fn group(dt: &()) -> std::borrow::Cow<'_, str> {
        FailoverPolicy::group(dt)
    }
    fn version(dt: &()) -> std::borrow::Cow<'_, str> {
        FailoverPolicy::version(dt)
    }
    fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
        FailoverPolicy::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

/// An API for a namespaced kind: in one namespace, or in all when `None`.
pub fn scoped<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_policy_is_read_without_its_labels_annotations_and_managed_fields() {
        let labels: serde_json::Map<String, serde_json::Value> = (0..1000)
            .map(|i| (format!("pad.example.com/l{i}"), "v".repeat(63).into()))
            .collect();
        let text = serde_json::json!({
            "apiVersion": "failover.dev/v1alpha1", "kind": "FailoverPolicy",
            "metadata": {
                "name": "web", "namespace": "shop", "uid": "u1", "generation": 2,
                "resourceVersion": "42", "creationTimestamp": "2026-11-29T10:00:00Z",
                "finalizers": ["failover.dev/restore-scaled"],
                "labels": labels, "annotations": {"a": "b"},
                "managedFields": [{"manager": "kubectl"}],
            },
            "spec": {"service": "web", "primary": "web-a", "secondaries": [{"service": "web-b"}]},
            "status": {"phase": "Primary"},
        })
        .to_string();
        let read: WatchedPolicy = serde_json::from_str(&text).expect("a policy");
        let meta = &read.0.metadata;
        assert_eq!(
            (
                meta.name.as_deref(),
                meta.namespace.as_deref(),
                meta.uid.as_deref()
            ),
            (Some("web"), Some("shop"), Some("u1"))
        );
        assert_eq!(
            (meta.generation, meta.resource_version.as_deref()),
            (Some(2), Some("42"))
        );
        assert!(meta.creation_timestamp.is_some() && meta.finalizers.is_some());
        assert!(
            meta.labels.is_none() && meta.annotations.is_none() && meta.managed_fields.is_none()
        );
        assert_eq!(read.0.spec.primary, "web-a");
        assert!(read.0.status.is_some());
    }

    use http::{Request, Response};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::{Client, client::Body};
    use tower_test::mock;

    use super::*;

    /// The probe's answer when the API server answers its watch with `status` and `body`.
    async fn probe_answered(status: u16, body: &str) -> bool {
        let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let api: Api<EndpointSlice> = Api::namespaced(Client::new(service, "ns"), "ns");
        let body = body.to_string();
        let server = tokio::spawn(async move {
            let (request, send) = handle.next_request().await.expect("the probe's request");
            let query = request.uri().query().unwrap_or_default().to_string();
            let response = Response::builder().status(status);
            send.send_response(
                response
                    .body(Body::from(body.into_bytes()))
                    .expect("response"),
            );
            query
        });
        let streams = streams_lists(&api).await;
        let query = server.await.expect("mock server");
        assert!(query.contains("sendInitialEvents=true"), "{query}");
        assert!(query.contains("fieldSelector=metadata.name%3D-"), "{query}");
        streams
    }

    #[tokio::test]
    async fn a_server_that_ends_the_initial_events_with_a_bookmark_streams_lists() {
        let bookmark = r#"{"type":"BOOKMARK","object":{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","addressType":"IPv4","endpoints":[],"metadata":{"resourceVersion":"7","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
        assert!(probe_answered(200, &format!("{bookmark}\n")).await);
    }

    #[tokio::test]
    async fn a_server_that_refuses_streamed_lists_gets_pages() {
        let refused = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled","reason":"Invalid","code":422}"#;
        assert!(!probe_answered(422, refused).await);
    }

    #[tokio::test]
    async fn a_server_that_ignores_the_request_for_initial_events_gets_pages() {
        assert!(!probe_answered(200, "").await);
    }
}
