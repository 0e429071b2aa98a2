//! Traffic besides HTTP/1 that really moves: on the real node, the real proxy (Traefik, the
//! Gateway `default/edge`) carries gRPC calls (a GRPCRoute on the `http` listener, h2c), TLS
//! connections by their SNI name (a TLSRoute on the `tls` listener, passthrough: the backends
//! terminate TLS) and TCP connections (a TCPRoute on the `tcp` listener) to real Pods, by the
//! weights of the route the controller owns. Each scenario fails the primary's Pods' readiness
//! probe under a steady load of real clients and asserts, as the HTTP scenario does, where the
//! calls or new connections went and how many were lost; on TLS and TCP, a connection opened
//! before the failover and kept open stays with the primary or ends.

use std::{sync::Arc, time::Instant};

use tokio::io::{AsyncRead, AsyncWrite, BufReader};

use failover_core::{
    api::{GatewayParent, GatewayRouteSpec, Output, conditions::ATTACHED},
    route::RouteKind,
};

use crate::support::{
    self, Answer, Exchange, Load, ON_EAST, ON_WEB, PolicyBuilder, Running, TestEnv, condition,
    exchanges::{Grpc, Tcp, Tls, ask_held},
    failovers::{
        LOST_IN_A_FAILOVER, RATE, answered_by, failed, settled_on, stage, within_failover_bound,
    },
};

/// How long the node's routes may take.
const WAIT: std::time::Duration = std::time::Duration::from_secs(90);
/// The longest any load runs.
const LOAD_LIMIT: std::time::Duration = std::time::Duration::from_secs(240);

/// The hostname (HTTP authority or SNI name) a test's route serves: the routes of every test
/// share the Gateway's listeners, so each answers its own hostname only.
fn host(test: &str) -> String {
    format!("{test}.failover.test")
}

/// The usual policy (`web`, then `web-east`, `web-west`), its output `output` attached to the
/// Gateway `default/edge`'s listener `listener` for `hostnames`, to the backends' `port`.
fn on_listener(output: Output, listener: &str, hostnames: Vec<String>, port: i32) -> PolicyBuilder {
    let route = GatewayRouteSpec {
        gateways: vec![GatewayParent {
            name: "edge".into(),
            namespace: Some("default".into()),
            section_name: Some(listener.into()),
            port: None,
        }],
        hostnames,
        ..GatewayRouteSpec::on_port(port)
    };
    PolicyBuilder::web().spec(move |s| {
        s.output = output;
        s.http_route = None;
        *match output {
            Output::GrpcRoute => &mut s.grpc_route,
            Output::TlsRoute => &mut s.tls_route,
            _ => &mut s.tcp_route,
        } = Some(route);
    })
}

/// A port of the proxy's from the node's env file (`PROXY_PORT`, `PROXY_TLS_PORT`, …).
fn proxy_port(env: &TestEnv, key: &str) -> u16 {
    env.cp
        .env(key)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the node's control plane runs the proxy (start --proxy): {key}"))
}

/// The backends on the node, the chart installed, `policy` applied, its route (of `kind`)
/// attached to the Gateway and routing to the primary.
async fn scene(test: &str, kind: RouteKind, policy: PolicyBuilder) -> Option<TestEnv> {
    let env = stage(test).await?;
    env.install_controller(&[]);
    env.apply(&policy);
    env.wait_route_weights(kind, "web", &ON_WEB, WAIT).await;
    env.wait_policy("web", WAIT, "the Gateway accepted the route", |p| {
        condition(p, ATTACHED).is_some_and(|(status, ..)| status == "True")
    })
    .await;
    Some(env)
}

/// An unplanned failover under a steady load of `exchange`s: what each sent from the failure on
/// became, and when it began.
struct Failover {
    answers: Vec<Answer>,
    broken: Instant,
}

/// A steady load of `exchange`s, once all of it is answered by `web`.
async fn flowing(exchange: Arc<dyn Exchange>) -> Running {
    let load = Load::new("", RATE, LOAD_LIMIT)
        .start_with(exchange)
        .expect("load");
    settled_on(&load, "web").await;
    load
}

/// Every `web` Pod failing its probe under `load`: the route moves to `web-east` and the load
/// settles there.
async fn fail_over(env: &TestEnv, kind: RouteKind, load: Running) -> Failover {
    let broken = Instant::now();
    env.set_backend_ready("web", false).await;
    env.wait_route_weights(kind, "web", &ON_EAST, WAIT).await;
    settled_on(&load, "web-east").await;
    Failover {
        answers: load.stop().await,
        broken,
    }
}

impl Failover {
    /// Prints what the failover cost (`what`: the unit, e.g. "calls") and asserts the bound of
    /// an unplanned failover.
    fn within_bound(&self, what: &str) {
        let (_, last_web) = answered_by(&self.answers, "web").expect("web answered before");
        let (first_east, _) = answered_by(&self.answers, "web-east").expect("web-east answers");
        let lost = failed(&self.answers, self.broken);
        support::figure(format!(
            "unplanned failover at {RATE} {what}/s: {} of {} {what} failed (bound {LOST_IN_A_FAILOVER}); last answered by web {:.0?} after the probe file was removed, first by web-east after {:.0?}",
            lost.len(),
            self.answers.len(),
            last_web.saturating_duration_since(self.broken),
            first_east.saturating_duration_since(self.broken)
        ));
        if let Err(why) = within_failover_bound(&self.answers, self.broken, first_east) {
            panic!("{what}: {why}");
        }
    }
}

#[tokio::test]
async fn the_primarys_pods_failing_their_probe_move_grpc_calls_to_the_secondary() {
    let test = "traffic-grpc";
    let policy = on_listener(Output::GrpcRoute, "http", vec![host(test)], 9090);
    let Some(env) = scene(test, RouteKind::GrpcRoute, policy).await else {
        return;
    };
    let grpc = Grpc::new(proxy_port(&env, "PROXY_PORT"), &host(test)).expect("gRPC client");
    let load = flowing(Arc::new(grpc)).await;
    fail_over(&env, RouteKind::GrpcRoute, load)
        .await
        .within_bound("calls");
}

#[tokio::test]
async fn the_primarys_pods_failing_their_probe_move_new_tls_connections_to_the_secondary() {
    let test = "traffic-tls";
    let policy = on_listener(Output::TlsRoute, "tls", vec![host(test)], 8443);
    let Some(env) = scene(test, RouteKind::TlsRoute, policy).await else {
        return;
    };
    let tls =
        Arc::new(Tls::new(proxy_port(&env, "PROXY_TLS_PORT"), &host(test)).expect("TLS client"));
    let load = flowing(tls.clone()).await;
    // A connection opened while the proxy routes to the primary, kept open across the failover.
    let mut held = tls
        .connect()
        .await
        .expect("a TLS connection through the proxy");
    opened_to_the_primary(&mut held).await;
    let failover = fail_over(&env, RouteKind::TlsRoute, load).await;
    stays_with_the_primary_or_ends("TLS", &mut held).await;
    failover.within_bound("connections");
}

/// A connection held open answers from the primary before the failover.
async fn opened_to_the_primary<S: AsyncRead + AsyncWrite + Unpin>(held: &mut BufReader<S>) {
    let before = ask_held(held).await;
    assert_eq!(
        before.as_deref(),
        Some("web"),
        "the held connection's backend"
    );
}

/// A connection opened before the failover and kept open stays with the backend it was opened
/// to (the weights apply when a connection is made), or ends: printed, and asserted.
async fn stays_with_the_primary_or_ends<S: AsyncRead + AsyncWrite + Unpin>(
    what: &str,
    held: &mut BufReader<S>,
) {
    let after = ask_held(held).await;
    support::figure(format!(
        "a {what} connection opened before the failover and kept open: {}",
        match &after {
            Some(name) => format!("still open, answered by {name} after the failover"),
            None => "closed by the failover".to_string(),
        }
    ));
    assert!(
        after.as_ref().is_none_or(|name| name == "web"),
        "a connection stays with the backend it was opened to, or ends: {after:?}"
    );
}

#[tokio::test]
async fn the_primarys_pods_failing_their_probe_move_new_tcp_connections_to_the_secondary() {
    let test = "traffic-tcp";
    let policy = on_listener(Output::TcpRoute, "tcp", Vec::new(), 9000);
    let Some(env) = scene(test, RouteKind::TcpRoute, policy).await else {
        return;
    };
    let tcp = Arc::new(Tcp::new(proxy_port(&env, "PROXY_TCP_PORT")));
    let load = flowing(tcp.clone()).await;
    let mut held = tcp
        .connect()
        .await
        .expect("a TCP connection through the proxy");
    opened_to_the_primary(&mut held).await;
    let failover = fail_over(&env, RouteKind::TcpRoute, load).await;
    stays_with_the_primary_or_ends("TCP", &mut held).await;
    failover.within_bound("connections");
}
