//! `kubectl failover what-if` held to the controller: what the plugin prints for a step (the
//! route and the conditions) against what the controller writes once the same change is made
//! for real. A route is compared as the controller compares routes (normalized); a condition by
//! type, status, reason and message, its timestamps left out, since the real change happens a
//! little later than the imagined one.

use failover_core::{
    api::FailoverPolicy,
    route::{RouteKind, RouteObject, RouteView},
};
use serde_json::Value;

use super::{
    ControllerProcess, Exporter, PolicyBuilder, PrometheusServer, TestEnv, WAIT, figure,
    kubectl_failover, ok, wait_until,
};

/// The plugin's report of `what-if POLICY ARGS`, as JSON.
pub fn what_if(env: &TestEnv, policy: &str, args: &[&str]) -> Value {
    let mut all = vec!["what-if", policy, "-o", "json"];
    all.extend_from_slice(args);
    let out = ok(&kubectl_failover(env, &all), "kubectl failover what-if");
    serde_json::from_str(&out).expect("what-if prints JSON")
}

/// A condition as compared: type, status, reason, and the message without its timestamps.
type Seen = (String, String, String, String);

fn without_times(message: &str) -> String {
    let times = regex::Regex::new(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z").expect("regex");
    times.replace_all(message, "<time>").into_owned()
}

/// The conditions step `i` of a report says the controller would write.
fn printed_conditions(report: &Value, i: usize) -> Vec<Seen> {
    let step = &report["steps"][i];
    let conditions = step["conditions"].as_array().cloned().unwrap_or_default();
    conditions
        .iter()
        .map(|c| {
            let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (
                text("type"),
                text("status"),
                text("reason"),
                without_times(&text("message")),
            )
        })
        .collect()
}

fn written_conditions(policy: &FailoverPolicy) -> Vec<Seen> {
    let conditions = policy.status.as_ref().map(|s| s.conditions.as_slice());
    conditions
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let (t, s, r) = (c.type_.clone(), c.status.clone(), c.reason.clone());
            (t, s, r, without_times(&c.message))
        })
        .collect()
}

/// A route as the controller compares routes: its owner, its policy label and its normalized
/// rules (the API server's defaults and the resourceVersion left out).
fn compared(kind: RouteKind, route: &RouteObject) -> RouteView {
    RouteView {
        resource_version: None,
        answers: Vec::new(),
        ..kind.view(route)
    }
}

/// The route step `i` of a report says the controller would write (`None`: none written).
fn printed_route(report: &Value, i: usize) -> Option<RouteObject> {
    let route = report["steps"][i]["route"].clone();
    (!route.is_null()).then(|| serde_json::from_value(route).expect("a route object"))
}

/// The route of `policy` as the cluster has it now.
async fn written_route(env: &TestEnv, kind: RouteKind, name: &str) -> Option<RouteObject> {
    let resource = kind.spec().resource();
    let routes: kube::Api<RouteObject> =
        kube::Api::namespaced_with(env.client.clone(), &env.ns, &resource);
    routes.get_opt(name).await.ok().flatten()
}

/// What step `i` of `report` predicts, for the policy `name` whose route is `kind`.
pub struct Predicted {
    name: String,
    kind: RouteKind,
    /// The route printed, compared as the controller compares them (`None`: none written).
    route: Option<RouteView>,
    /// The route's resourceVersion when the prediction was made, before the real change: with no
    /// route printed, the route must keep it (nothing written).
    version_before: Option<String>,
    conditions: Vec<Seen>,
}

impl Predicted {
    /// Made before the real change, so that a route written by it shows.
    pub async fn of(env: &TestEnv, report: &Value, i: usize, name: &str, kind: RouteKind) -> Self {
        let before = written_route(env, kind, name).await;
        Self {
            name: name.to_string(),
            kind,
            route: printed_route(report, i).map(|r| compared(kind, &r)),
            version_before: before.and_then(|r| r.metadata.resource_version),
            conditions: printed_conditions(report, i),
        }
    }

    /// What the cluster has now: the route (when one was printed; else a route written since
    /// the prediction) and the conditions.
    async fn written(&self, env: &TestEnv) -> (Option<RouteView>, Vec<Seen>) {
        let now = written_route(env, self.kind, &self.name).await;
        let route = match &self.route {
            Some(_) => now.map(|r| compared(self.kind, &r)),
            // None printed: the route must be as it was (there, with its version, or absent).
            None => match now {
                Some(r) if r.metadata.resource_version == self.version_before => None,
                None if self.version_before.is_none() => None,
                Some(r) => Some(compared(self.kind, &r)),
                // Deleted since: a change, shown as an empty view.
                None => Some(RouteView::default()),
            },
        };
        let policy = env.policy(&self.name).await;
        (
            route,
            policy.as_ref().map(written_conditions).unwrap_or_default(),
        )
    }

    /// Fails unless the controller writes the printed route and conditions within the wait.
    pub async fn written_as_printed(&self, env: &TestEnv, scenario: &str) {
        let want = (self.route.clone(), self.conditions.clone());
        let reached = wait_until(WAIT, || async { self.written(env).await == want }).await;
        let have = self.written(env).await;
        assert!(
            reached,
            "{scenario}: the controller wrote other than what-if printed:\nprinted: {want:#?}\nwritten: {have:#?}"
        );
        let route = if self.route.is_some() {
            "the route as printed"
        } else {
            "no route written, as printed"
        };
        figure(format!(
            "what-if {scenario}: {} conditions and {route}",
            self.conditions.len()
        ));
    }
}

/// Each step's rule (the `Ready` reason it would write).
pub fn rules(report: &Value) -> Vec<String> {
    let steps = report["steps"].as_array().cloned().unwrap_or_default();
    steps
        .iter()
        .map(|s| s["rule"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A controller that may read a real Prometheus scraping `exporter`, and the usual policy with a
/// health query of each backend's error ratio (`change`d as the test needs) applied; waits until
/// every backend has its first reading. What it returns must live as long as the test.
pub async fn reading_health(
    env: &TestEnv,
    exporter: &Exporter,
    change: impl FnOnce(PolicyBuilder) -> PolicyBuilder,
) -> (PrometheusServer, ControllerProcess) {
    let prometheus = PrometheusServer::start(env.cp, exporter, &env.ns).await;
    let url = prometheus.url.clone();
    let controller = env
        .with_controller(&["--prometheus-allowed-addresses", &url])
        .await;
    env.apply(&change(PolicyBuilder::web_with_health(
        Some(url),
        "last_over_time(backend_error_ratio{service=\"{{service}}\"}[5s])",
    )));
    env.wait_policy("web", WAIT, "every backend's first reading", |p| {
        p.status
            .as_ref()
            .is_some_and(|s| s.backends.len() == 3 && s.backends.iter().all(|b| b.health.is_some()))
    })
    .await;
    (prometheus, controller)
}
