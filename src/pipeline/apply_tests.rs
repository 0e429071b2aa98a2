//! The apply step against a mocked API server (kube's `tower-test` pair): each scenario says
//! which requests the step must make, answers them, and checks the outcome, so create, conflict,
//! write failure and the recent-write memory are proven without a control plane.

use std::sync::Arc;

use http::{Method, Request, Response, StatusCode};
use kube::{Client, Resource, client::Body};
use serde_json::{Value, json};
use tower_test::mock::{self, Handle};

use super::*;
use crate::runtime::{leader::Leadership, metrics::Metrics};
use failover_core::{
    api::{FailoverPolicy, FailoverPolicySpec, SecondaryBackend},
    intent::{Observed, intend},
    observation::BackendObservation,
    route::RouteKind,
    tenancy::Gateways,
    validate::validate,
};

const SPLITS: &str = "/apis/split.smi-spec.io/v1alpha2/namespaces/ns/trafficsplits";
const UID: &str = "policy-uid";

type Api = Handle<Request<Body>, Response<Body>>;

fn policy() -> FailoverPolicy {
    let spec = FailoverPolicySpec {
        service: "web".into(),
        primary: "web".into(),
        secondaries: vec![SecondaryBackend::new("web-east")],
        ..Default::default()
    };
    let mut p = FailoverPolicy::new("web", spec);
    p.metadata.namespace = Some("ns".into());
    p.metadata.uid = Some(UID.into());
    p
}

fn desired(weights: &[i32]) -> DesiredRoute {
    let policy = policy();
    let valid = validate(&policy).expect("valid");
    let mut owner = policy.controller_owner_ref(&()).expect("a uid");
    owner.block_owner_deletion = Some(true);
    DesiredRoute::of(owner, &valid, weights)
}

/// A writer on a mocked API server, leading as `leadership` says, counting in `metrics`.
fn writer_as(leadership: Leadership, metrics: Arc<Metrics>) -> (Writer, Api) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "ns");
    let writer = Writer::new(client, leadership, metrics, None, Default::default());
    (writer, handle)
}

/// A leading writer on a mocked API server.
fn writer() -> (Writer, Api) {
    writer_as(Leadership::always(), Arc::new(Metrics::new()))
}

/// A TrafficSplit as the API server returns it.
fn split(owner_uid: &str, version: &str, weights: &[i64]) -> Value {
    json!({
        "apiVersion": "split.smi-spec.io/v1alpha2", "kind": "TrafficSplit",
        "metadata": {
            "name": "web", "namespace": "ns", "resourceVersion": version,
            "labels": {"failover.dev/policy": "web"},
            "ownerReferences": [{"apiVersion": "failover.dev/v1alpha1", "kind": "FailoverPolicy",
                "name": "web", "uid": owner_uid, "controller": true}],
        },
        "spec": {"service": "web", "backends": [
            {"service": "web", "weight": weights[0]}, {"service": "web-east", "weight": weights[1]}]},
    })
}

fn view(owner_uid: &str, version: &str, weights: &[i64]) -> RouteView {
    let object: DynamicObject =
        serde_json::from_value(split(owner_uid, version, weights)).expect("object");
    RouteKind::TrafficSplit.view(&object.into())
}

/// Answers the next request, after checking its method and path.
async fn answer(api: &mut Api, method: Method, path: &str, status: StatusCode, body: Value) {
    let (request, send) = api.next_request().await.expect("a request");
    assert_eq!(request.method(), method);
    assert_eq!(request.uri().path(), path);
    send.send_response(
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(&body).expect("json")))
            .expect("response"),
    );
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "code": code, "reason": reason, "message": message})
}

#[tokio::test]
async fn a_missing_route_is_created_and_remembered() {
    let (writer, mut api) = writer();
    let want = desired(&[1, 0]);
    let server = tokio::spawn(async move {
        answer(
            &mut api,
            Method::POST,
            SPLITS,
            StatusCode::CREATED,
            split(UID, "5", &[1, 0]),
        )
        .await;
    });
    let applied = write(&writer, &want, None).await;
    server.await.expect("server");
    assert!(matches!(applied, Ok(Applied::Written)), "{applied:?}");
    // The cache catches up with an older copy first: the write just made wins, nothing is
    // written again.
    let stale = view(UID, "4", &[0, 1]);
    let again = write(&writer, &want, Some(stale)).await;
    assert!(matches!(again, Ok(Applied::Unchanged)), "{again:?}");
}

#[tokio::test]
async fn a_route_owned_by_someone_else_is_a_conflict_and_untouched() {
    let (writer, api) = writer();
    let foreign = view("someone-else", "3", &[1, 0]);
    let applied = write(&writer, &desired(&[1, 0]), Some(foreign)).await;
    assert!(matches!(applied, Ok(Applied::Conflict)), "{applied:?}");
    assert_no_request(api).await;
}

#[tokio::test]
async fn a_create_that_finds_a_foreign_route_is_a_conflict() {
    let (writer, mut api) = writer();
    let server = tokio::spawn(async move {
        let exists = status(
            409,
            "AlreadyExists",
            "trafficsplits.split.smi-spec.io \"web\" already exists",
        );
        answer(&mut api, Method::POST, SPLITS, StatusCode::CONFLICT, exists).await;
        let path = format!("{SPLITS}/web");
        answer(
            &mut api,
            Method::GET,
            &path,
            StatusCode::OK,
            split("someone-else", "3", &[1, 0]),
        )
        .await;
    });
    let applied = write(&writer, &desired(&[1, 0]), None).await;
    server.await.expect("server");
    assert!(matches!(applied, Ok(Applied::Conflict)), "{applied:?}");
}

#[tokio::test]
async fn a_failed_write_is_an_outcome_with_the_api_servers_words() {
    let (writer, mut api) = writer();
    let server = tokio::spawn(async move {
        let denied = status(
            403,
            "Forbidden",
            "trafficsplits.split.smi-spec.io \"web\" is forbidden: no patch",
        );
        answer(
            &mut api,
            Method::PATCH,
            &format!("{SPLITS}/web"),
            StatusCode::FORBIDDEN,
            denied,
        )
        .await;
    });
    let current = view(UID, "3", &[1, 0]);
    let applied = write(&writer, &desired(&[0, 1]), Some(current)).await;
    server.await.expect("server");
    let Err(error) = applied else {
        panic!("expected a failure, got {applied:?}");
    };
    assert_eq!(
        error.to_string(),
        "writing TrafficSplit web failed: trafficsplits.split.smi-spec.io \"web\" is forbidden: no patch (Forbidden)"
    );
}

#[tokio::test]
async fn a_route_that_differs_is_applied_once_then_left_alone() {
    let metrics = Arc::new(Metrics::new());
    let (writer, mut api) = writer_as(Leadership::always(), metrics.clone());
    let server = tokio::spawn(async move {
        answer(
            &mut api,
            Method::PATCH,
            &format!("{SPLITS}/web"),
            StatusCode::OK,
            split(UID, "8", &[0, 1]),
        )
        .await;
    });
    let want = desired(&[0, 1]);
    let applied = write(&writer, &want, Some(view(UID, "7", &[1, 0]))).await;
    server.await.expect("server");
    assert!(matches!(applied, Ok(Applied::Written)), "{applied:?}");
    // The route cache has not caught up (still version 7): the write just made wins.
    let again = write(&writer, &want, Some(view(UID, "7", &[1, 0]))).await;
    assert!(matches!(again, Ok(Applied::Unchanged)), "{again:?}");
    assert_eq!(
        metrics
            .encode()
            .lines()
            .find(|l| l.starts_with("failover_api_writes_total{kind=\"trafficsplit\"}")),
        Some("failover_api_writes_total{kind=\"trafficsplit\"} 1")
    );
}

/// Fails when the step sent any request at all.
async fn assert_no_request(mut api: Api) {
    let waited =
        tokio::time::timeout(std::time::Duration::from_millis(200), api.next_request()).await;
    if let Ok(Some((request, _))) = waited {
        panic!("the step sent {} {}", request.method(), request.uri());
    }
}

#[tokio::test]
async fn a_suspended_policy_writes_nothing() {
    let (writer, api) = writer();
    let mut suspended = policy();
    suspended.spec.suspend = true;
    let valid = Arc::new(validate(&suspended).expect("valid"));
    let observations = [
        BackendObservation::counted(0, 1),
        BackendObservation::counted(1, 1),
    ];
    let observed = Observed {
        observations: &observations,
        previous: None,
        order: None,
        now: chrono::Utc::now(),
    };
    let mut intent = intend(valid, UID, &Gateways::default(), &observed);
    let action = intent.action(Vec::new(), failover_core::apis::ApiState::Served);
    assert_eq!(action, Action::Suspended);
    let applied = carry_out(&writer, &intent, action, Some(view(UID, "7", &[1, 0]))).await;
    assert!(matches!(applied, Ok(Applied::Suspended)), "{applied:?}");
    assert_no_request(api).await;
}

#[tokio::test]
async fn a_standby_writes_nothing() {
    let (writer, api) = writer_as(Leadership::pending(), Arc::new(Metrics::new()));
    let applied = write(&writer, &desired(&[0, 1]), None).await;
    assert!(
        matches!(applied, Err(ApplyError::NotLeader(_))),
        "{applied:?}"
    );
    assert_no_request(api).await;
}

const HTTP_ROUTES: &str = "/apis/gateway.networking.k8s.io/v1/namespaces/ns/httproutes";

/// The route the user owns, as the API server returns it: rule `api` to `web` and `web-east`,
/// consenting to the policy `web`'s changes.
fn users_route(version: &str, weights: &[i64]) -> Value {
    let mut route = users_route_without_consent(version, weights);
    route["metadata"]["annotations"] = json!({failover_core::consent::POLICIES_ANNOTATION: "web"});
    route
}

/// The route the user owns, as [`users_route`], without consent.
fn users_route_without_consent(version: &str, weights: &[i64]) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "shop", "namespace": "ns", "resourceVersion": version},
        "spec": {"rules": [{"name": "api", "backendRefs": [
            {"name": "web", "port": 80, "weight": weights[0]},
            {"name": "web-east", "port": 80, "weight": weights[1]}]}]},
    })
}

/// The policy with `routeRef` to rule `api` of HTTPRoute `shop`, with these weights.
fn desired_rule(weights: &[i32]) -> DesiredRoute {
    let mut policy = policy();
    policy.spec.route_ref = Some(failover_core::api::RouteRefSpec {
        kind: failover_core::api::RouteRefKind::HttpRoute,
        name: "shop".into(),
        rule: "api".into(),
    });
    let valid = validate(&policy).expect("valid");
    let owner = policy.controller_owner_ref(&()).expect("a uid");
    DesiredRoute::of(owner, &valid, weights)
}

/// Reads the PATCH the step sends, checks the resourceVersion it is guarded by, answers.
async fn answer_patch(api: &mut Api, guard: &str, status: StatusCode, body: Value) {
    let (request, send) = api.next_request().await.expect("a request");
    assert_eq!(request.method(), Method::PATCH);
    assert_eq!(request.uri().path(), format!("{HTTP_ROUTES}/shop"));
    let bytes = http_body_util::BodyExt::collect(request.into_body())
        .await
        .expect("body")
        .to_bytes();
    let patch: Value = serde_json::from_slice(&bytes).expect("a JSON patch body");
    assert_eq!(patch["metadata"]["resourceVersion"], guard);
    assert_eq!(
        patch["spec"]["rules"][0]["backendRefs"][1]["weight"], 1,
        "{patch}"
    );
    send.send_response(
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(&body).expect("json")))
            .expect("response"),
    );
}

#[tokio::test]
async fn a_users_route_changed_meanwhile_is_read_again_and_patched_at_its_new_version() {
    let (writer, mut api) = writer();
    let server = tokio::spawn(async move {
        let get = format!("{HTTP_ROUTES}/shop");
        answer(
            &mut api,
            Method::GET,
            &get,
            StatusCode::OK,
            users_route("7", &[1, 0]),
        )
        .await;
        let conflict = status(409, "Conflict", "the object has been modified");
        answer_patch(&mut api, "7", StatusCode::CONFLICT, conflict).await;
        answer(
            &mut api,
            Method::GET,
            &get,
            StatusCode::OK,
            users_route("9", &[1, 0]),
        )
        .await;
        answer_patch(&mut api, "9", StatusCode::OK, users_route("10", &[0, 1])).await;
    });
    let want = desired_rule(&[0, 1]);
    let applied = write_rule(&writer, &want, "api", None).await;
    server.await.expect("server");
    assert!(matches!(applied, Ok(Applied::Written)), "{applied:?}");
}

#[tokio::test]
async fn a_users_route_that_does_not_consent_is_read_and_left_as_it_is() {
    let (writer, mut api) = writer();
    let server = tokio::spawn(async move {
        let get = format!("{HTTP_ROUTES}/shop");
        let route = users_route_without_consent("7", &[1, 0]);
        answer(&mut api, Method::GET, &get, StatusCode::OK, route).await;
        assert_no_request(api).await;
    });
    let applied = write_rule(&writer, &desired_rule(&[0, 1]), "api", None).await;
    server.await.expect("server");
    assert_eq!(
        applied.ok(),
        Some(Applied::RouteRefUnfit(Mismatch::NotConsented))
    );
}

#[tokio::test]
async fn a_users_route_that_keeps_changing_is_left_to_the_next_reconcile() {
    let (writer, mut api) = writer();
    let server = tokio::spawn(async move {
        let get = format!("{HTTP_ROUTES}/shop");
        for version in ["7", "8", "9"] {
            answer(
                &mut api,
                Method::GET,
                &get,
                StatusCode::OK,
                users_route(version, &[1, 0]),
            )
            .await;
            let conflict = status(409, "Conflict", "the object has been modified");
            answer_patch(&mut api, version, StatusCode::CONFLICT, conflict).await;
        }
    });
    let applied = write_rule(&writer, &desired_rule(&[0, 1]), "api", None).await;
    server.await.expect("server");
    assert!(
        matches!(applied, Err(ApplyError::Contended { .. })),
        "{applied:?}"
    );
}

#[tokio::test]
async fn a_route_withdrawn_after_it_changed_is_read_again_and_deleted_at_its_new_version() {
    let (writer, mut api) = writer();
    let server = tokio::spawn(async move {
        let route = format!("{SPLITS}/web");
        let conflict = status(409, "Conflict", "the object has been modified");
        answer(
            &mut api,
            Method::DELETE,
            &route,
            StatusCode::CONFLICT,
            conflict,
        )
        .await;
        answer(
            &mut api,
            Method::GET,
            &route,
            StatusCode::OK,
            split(UID, "9", &[0, 1]),
        )
        .await;
        let gone = json!({"kind": "Status", "apiVersion": "v1", "status": "Success"});
        answer(&mut api, Method::DELETE, &route, StatusCode::OK, gone).await;
    });
    let claim = Claim::Apex {
        namespace: "ns".into(),
        service: "web".into(),
    };
    let holder = PolicyKey::new("ns", "first");
    let stale = view(UID, "7", &[1, 0]);
    let withdrawn = withdraw(&writer, &desired(&[1, 0]), Some(stale), claim, holder).await;
    server.await.expect("server");
    assert!(
        matches!(withdrawn, Ok(Applied::Yielded { .. })),
        "{withdrawn:?}"
    );
}
