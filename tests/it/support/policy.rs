//! Policies as tests write them: a typed builder whose YAML real kubectl applies, and readers
//! of what the controller made of them (status, conditions, route weights, Events). Every
//! status read here checks that no condition message is longer than the controller's bound.

use std::time::{Duration, Instant};

use failover_core::{
    api::{FailoverPolicy, FailoverPolicySpec, Phase, SecondaryBackend, Strategy},
    message::MAX_MESSAGE,
    route::{RouteKind, trafficsplit::TrafficSplit},
};
use kube::Api;

use super::{TestEnv, wait_until};

/// A FailoverPolicy for a test, typed. [`PolicyBuilder::web`] is the policy most tests use:
/// `web`, apex and primary `web`, secondaries `web-east` and `web-west`.
#[derive(Clone, Debug)]
pub struct PolicyBuilder {
    policy: FailoverPolicy,
}

impl PolicyBuilder {
    /// The usual test policy.
    pub fn web() -> Self {
        Self::named("web", "web", &["web-east", "web-west"])
    }

    /// The usual test policy whose backends must also pass a Prometheus query: at most 0.5,
    /// asked every second, no data counting as healthy (`address`: `None` for the controller's
    /// own Prometheus).
    pub fn web_with_health(address: Option<String>, query: &str) -> Self {
        Self::web().with_health(address, query)
    }

    /// With a Prometheus query every backend must also pass, as in [`Self::web_with_health`].
    pub fn with_health(self, address: Option<String>, query: &str) -> Self {
        let query = query.to_string();
        self.spec(move |s| {
            s.health = Some(failover_core::api::HealthSpec {
                prometheus: Some(failover_core::api::PrometheusHealth {
                    address,
                    query,
                    max: Some(0.5),
                    min: None,
                    interval: "1s".into(),
                    no_data: failover_core::api::NoData::Healthy,
                }),
            })
        })
    }

    /// A policy with this name, primary and secondaries, its apex Service named as the policy.
    pub fn named(name: &str, primary: &str, secondaries: &[&str]) -> Self {
        let spec = FailoverPolicySpec {
            // Each policy routes its own apex (the one the policy is named for): two on one
            // apex are a conflict.
            service: name.into(),
            primary: primary.into(),
            secondaries: secondaries
                .iter()
                .map(|s| SecondaryBackend::new(*s))
                .collect(),
            ..Default::default()
        };
        Self {
            policy: FailoverPolicy::new(name, spec),
        }
    }

    /// With this strategy.
    pub fn strategy(self, strategy: Strategy) -> Self {
        self.spec(|s| s.strategy = strategy)
    }

    /// With `failoverAfter` and `failbackAfter`.
    pub fn holds(self, failover_after: &str, failback_after: &str) -> Self {
        self.spec(|s| {
            s.failover_after = failover_after.into();
            s.failback_after = failback_after.into();
        })
    }

    /// With output HTTPRoute attached to the Gateway `namespace/name` only (backends' port 80).
    pub fn on_gateway(self, namespace: &str, name: &str) -> Self {
        let gateway = failover_core::api::GatewayParent {
            name: name.into(),
            namespace: Some(namespace.into()),
            section_name: None,
            port: None,
        };
        self.spec(|s| {
            s.output = failover_core::api::Output::HttpRoute;
            s.http_route = Some(failover_core::api::GatewayRouteSpec {
                gateways: vec![gateway],
                ..failover_core::api::GatewayRouteSpec::on_port(80)
            });
        })
    }

    /// A policy at every size limit, as a careless or hostile tenant may write it: the longest
    /// apex, primary and secondaries' names, as many secondaries as a route rule holds, an
    /// HTTPRoute on 16 Gateways of its own namespace (which need no one's consent, and need not
    /// exist) named at the longest and each on a listener named at the longest, 16 of the
    /// longest hostnames (its own: they start with its name), the longest path, and a health
    /// query at every cost limit (`address`: its Prometheus, `None` for the controller's own).
    /// 256 listener claims.
    pub fn at_every_limit(name: &str, address: Option<String>) -> Self {
        use failover_core::api::{GatewayParent, GatewayRouteSpec, Output, rules};
        let label = |prefix: &str| format!("{prefix}{}", "x".repeat(63 - prefix.len()));
        let secondaries: Vec<String> = (0..rules::MAX_ROUTE_BACKENDS - 1)
            .map(|i| label(&format!("s{i:02}-")))
            .collect();
        let secondaries: Vec<&str> = secondaries.iter().map(String::as_str).collect();
        let gateways = (0..rules::MAX_GATEWAYS)
            .map(|i| GatewayParent {
                name: long_name(&format!("g{i:02}"), rules::MAX_SUBDOMAIN),
                namespace: None,
                section_name: Some(long_name("listener", rules::MAX_SUBDOMAIN)),
                port: None,
            })
            .collect();
        let hostnames = (0..rules::MAX_HOSTNAMES)
            .map(|i| long_name(&format!("{name}-h{i:02}"), rules::MAX_SUBDOMAIN))
            .collect();
        Self::named(name, &label("primary-"), &secondaries)
            .spec(|s| {
                s.service = label(&format!("{name}-"));
                s.output = Output::HttpRoute;
                s.http_route = Some(GatewayRouteSpec {
                    gateways,
                    hostnames,
                    path_prefix: Some(format!("/{}", "p".repeat(rules::MAX_PATH - 1))),
                    ..GatewayRouteSpec::on_port(8080)
                });
            })
            .with_health(address, &failover_core::health_query::at_every_limit())
    }

    /// With any other change to the spec.
    pub fn spec(mut self, change: impl FnOnce(&mut FailoverPolicySpec)) -> Self {
        change(&mut self.policy.spec);
        self
    }

    /// The policy as typed.
    pub fn policy(&self) -> &FailoverPolicy {
        &self.policy
    }

    /// The policy's name.
    pub fn name(&self) -> String {
        self.policy.metadata.name.clone().unwrap_or_default()
    }

    /// The policy as YAML, as a user would write it.
    pub fn yaml(&self) -> String {
        serde_yaml::to_string(&self.policy).expect("policy serializes")
    }
}

/// A DNS subdomain of `length` characters starting with `prefix`: labels of 63 characters
/// joined by dots (253 ends with a label of 61: no trailing dot).
pub fn long_name(prefix: &str, length: usize) -> String {
    let mut name = prefix.to_string();
    while name.len() < length {
        let label = name.rsplit('.').next().map_or(0, str::len);
        name.push(if label >= 63 { '.' } else { 'a' });
    }
    name.trim_end_matches('.').to_string()
}

/// The policy's phase.
pub fn phase(p: &FailoverPolicy) -> Option<Phase> {
    p.status.as_ref()?.phase
}

/// The policy's condition of this type, as (status, reason, message).
pub fn condition(p: &FailoverPolicy, type_: &str) -> Option<(String, String, String)> {
    let c = p
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The reason of the policy's condition of this type.
pub fn condition_reason(p: &FailoverPolicy, type_: &str) -> Option<String> {
    condition(p, type_).map(|(_, reason, _)| reason)
}

/// Every message a policy's status carries: its conditions', its backends', its route parents'.
pub fn status_messages(p: &FailoverPolicy) -> Vec<(String, String)> {
    let Some(status) = &p.status else {
        return Vec::new();
    };
    let conditions = status
        .conditions
        .iter()
        .map(|c| (format!("condition {}", c.type_), c.message.clone()));
    let backends = status
        .backends
        .iter()
        .filter_map(|b| Some((format!("backend {}", b.service), b.message.clone()?)));
    let parents = status
        .route_parents
        .iter()
        .filter_map(|r| Some((format!("route parent {}", r.name), r.message.clone()?)));
    conditions.chain(backends).chain(parents).collect()
}

/// Fails the test when a message of the status is longer than the controller promises, or is
/// more than one line, or holds a control character. Every status any test reads goes through
/// here.
fn check_messages(p: &FailoverPolicy) {
    for (what, message) in status_messages(p) {
        assert!(
            message.chars().count() <= MAX_MESSAGE
                && !message.chars().any(failover_core::message::unprintable),
            "{what} has a message of {} characters, or more than one line, or a control character: {message:?}",
            message.chars().count()
        );
    }
}

impl TestEnv {
    /// Applies a typed policy with real kubectl.
    pub fn apply(&self, policy: &PolicyBuilder) {
        self.apply_policy(&policy.yaml());
    }

    /// Applies a FailoverPolicy from YAML with real kubectl (as users do).
    pub fn apply_policy(&self, yaml: &str) {
        let out = self.kubectl_stdin(&["apply", "-f", "-"], yaml);
        assert!(
            out.status.success(),
            "kubectl apply failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The TrafficSplit's backends as (service, weight), if it exists.
    pub async fn split_weights(&self, name: &str) -> Option<Vec<(String, i64)>> {
        let ts = self.api::<TrafficSplit>().get_opt(name).await.ok()??;
        Some(
            ts.spec
                .backends
                .into_iter()
                .map(|b| (b.service, b.weight))
                .collect(),
        )
    }

    /// The policy, if it exists.
    pub async fn policy(&self, name: &str) -> Option<FailoverPolicy> {
        let policy = self.api::<FailoverPolicy>().get_opt(name).await.ok()??;
        check_messages(&policy);
        Some(policy)
    }

    /// The HTTPRoute's backends as (service, weight), if it exists.
    pub async fn http_route_weights(&self, name: &str) -> Option<Vec<(String, i64)>> {
        self.route_weights(RouteKind::HttpRoute, name).await
    }

    /// A Gateway API route's backends as (service, weight), if it exists.
    pub async fn route_weights(&self, kind: RouteKind, name: &str) -> Option<Vec<(String, i64)>> {
        let api: kube::Api<kube::api::DynamicObject> =
            kube::Api::namespaced_with(self.client.clone(), &self.ns, &kind.resource());
        route_backend_weights(&api.get_opt(name).await.ok()??)
    }

    /// Waits until the HTTPRoute has exactly these weights.
    pub async fn wait_http_route_weights(
        &self,
        name: &str,
        expected: &[(&str, i64)],
        timeout: Duration,
    ) {
        self.wait_route_weights(RouteKind::HttpRoute, name, expected, timeout)
            .await
    }

    /// Waits until a Gateway API route has exactly these weights.
    pub async fn wait_route_weights(
        &self,
        kind: RouteKind,
        name: &str,
        expected: &[(&str, i64)],
        timeout: Duration,
    ) {
        let expected: Vec<(String, i64)> =
            expected.iter().map(|(s, w)| (s.to_string(), *w)).collect();
        let deadline = Instant::now() + timeout;
        let mut last = self.route_weights(kind, name).await;
        while last.as_ref() != Some(&expected) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            last = self.route_weights(kind, name).await;
        }
        assert!(
            last.as_ref() == Some(&expected),
            "{} {name}: wanted {expected:?}, last saw {last:?} (namespace {})",
            kind.as_str(),
            self.ns
        );
    }

    /// Waits until the TrafficSplit has exactly these weights.
    pub async fn wait_weights(&self, name: &str, expected: &[(&str, i64)], timeout: Duration) {
        let expected: Vec<(String, i64)> =
            expected.iter().map(|(s, w)| (s.to_string(), *w)).collect();
        let deadline = Instant::now() + timeout;
        let mut last = self.split_weights(name).await;
        while last.as_ref() != Some(&expected) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            last = self.split_weights(name).await;
        }
        assert!(
            last.as_ref() == Some(&expected),
            "TrafficSplit {name}: wanted {expected:?}, last saw {last:?} (namespace {})",
            self.ns
        );
    }

    /// Waits until the policy satisfies a predicate; returns it.
    pub async fn wait_policy(
        &self,
        name: &str,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&FailoverPolicy) -> bool,
    ) -> FailoverPolicy {
        let deadline = Instant::now() + timeout;
        let mut last = self.policy(name).await;
        while !last.as_ref().is_some_and(&pred) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            last = self.policy(name).await;
        }
        match last {
            Some(p) if pred(&p) => p,
            other => panic!(
                "policy {name}: {what} not reached; last status: {:#?}",
                other.and_then(|p| p.status)
            ),
        }
    }

    /// Waits until an Event with this reason (and type, when given) is recorded on the object
    /// named `regarding`; returns whether it was.
    pub async fn wait_event(
        &self,
        regarding: &str,
        reason: &str,
        type_: Option<&str>,
        timeout: Duration,
    ) -> bool {
        let events: Api<k8s_openapi::api::events::v1::Event> = self.api();
        wait_until(timeout, || async {
            events.list(&Default::default()).await.is_ok_and(|l| {
                l.items.iter().any(|e| {
                    e.reason.as_deref() == Some(reason)
                        && type_.is_none_or(|t| e.type_.as_deref() == Some(t))
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding)
                })
            })
        })
        .await
    }

    /// The replicas (`reportingInstance`) that recorded an Event with this reason on the object
    /// named `regarding`.
    pub async fn event_reporters(&self, regarding: &str, reason: &str) -> Vec<String> {
        let events: Api<k8s_openapi::api::events::v1::Event> = self.api();
        let Ok(list) = events.list(&Default::default()).await else {
            return Vec::new();
        };
        list.items
            .into_iter()
            .filter(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding)
            })
            .filter_map(|e| e.reporting_instance)
            .collect()
    }
}

/// The backends of a route of either kind (a TrafficSplit's `spec.backends`, an HTTPRoute's
/// first rule's `backendRefs`), as (service, weight).
pub fn route_backend_weights(route: &kube::api::DynamicObject) -> Option<Vec<(String, i64)>> {
    let backends = route.data["spec"]["backends"]
        .as_array()
        .or_else(|| route.data["spec"]["rules"][0]["backendRefs"].as_array())?;
    Some(
        backends
            .iter()
            .map(|b| {
                let name = b["service"].as_str().or(b["name"].as_str());
                (
                    name.unwrap_or_default().to_string(),
                    b["weight"].as_i64().unwrap_or(-1),
                )
            })
            .collect(),
    )
}

/// The parents an HTTPRoute attaches to, as `namespace/name`.
pub fn route_parents(route: &kube::api::DynamicObject) -> Vec<String> {
    route.data["spec"]["parentRefs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            format!(
                "{}/{}",
                p["namespace"].as_str().unwrap_or(""),
                p["name"].as_str().unwrap_or("")
            )
        })
        .collect()
}
