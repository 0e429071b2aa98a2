//! The Gateway API outputs besides HTTPRoute (GRPCRoute, TLSRoute, TCPRoute) on the control
//! plane, with the Gateway API's standard CRDs (v1): each route is written through its own kind,
//! named in the status, moved by a failover (as `kubectl failover what-if` printed it) and back,
//! and collected with its policy. Three
//! policies on the same backends and Gateway do not collide: each takes other traffic there.

use failover_core::{
    api::{FailoverPolicy, FailoverPolicySpec, GatewayParent, GatewayRouteSpec, Output},
    route::RouteKind,
};
use kube::{
    Api,
    api::{DeleteParams, DynamicObject},
};

use crate::support::{
    ControllerProcess, PolicyBuilder, WAIT, WEB_BACKENDS, test_env, wait_until,
    what_if::{Predicted, what_if},
};

/// A policy named after its output's kind, on the `web` backends, whose route attaches to the
/// Gateway `edge` (listener `listener`) with these hostnames.
fn policy(output: Output, listener: &str, hostnames: &[&str], port: i32) -> PolicyBuilder {
    let name = output.kind().to_lowercase();
    let route = GatewayRouteSpec {
        gateways: vec![GatewayParent {
            name: "edge".into(),
            namespace: None,
            section_name: Some(listener.into()),
            port: None,
        }],
        hostnames: hostnames.iter().map(|h| h.to_string()).collect(),
        ..GatewayRouteSpec::on_port(port)
    };
    PolicyBuilder::named(&name, "web", &["web-east", "web-west"]).spec(
        move |s: &mut FailoverPolicySpec| {
            s.service = "web".into();
            s.output = output;
            let field = match output {
                Output::GrpcRoute => &mut s.grpc_route,
                Output::TlsRoute => &mut s.tls_route,
                _ => &mut s.tcp_route,
            };
            *field = Some(route);
        },
    )
}

#[tokio::test]
async fn grpc_tls_and_tcp_routes_are_written_moved_and_collected_with_their_policies() {
    let Some(env) = test_env!() else { return };
    env.cp.install_gateway_api();
    env.ready_backends(&WEB_BACKENDS).await;
    let _c = ControllerProcess::start(&env, &[]);
    let kinds = [
        (
            RouteKind::GrpcRoute,
            policy(Output::GrpcRoute, "http", &["grpc.example.com"], 9090),
        ),
        (
            RouteKind::TlsRoute,
            policy(Output::TlsRoute, "tls", &["db.example.com"], 8443),
        ),
        (
            RouteKind::TcpRoute,
            policy(Output::TcpRoute, "tcp", &[], 9000),
        ),
    ];
    for (_, policy) in &kinds {
        env.apply(policy);
    }
    let primary = [("web", 1), ("web-east", 0), ("web-west", 0)];
    for (kind, policy) in &kinds {
        let name = policy.name();
        env.wait_route_weights(*kind, &name, &primary, WAIT).await;
        let routes: Api<DynamicObject> =
            Api::namespaced_with(env.client.clone(), &env.ns, &kind.resource());
        let route = routes.get(&name).await.expect("route");
        let types = route.types.clone().expect("types");
        assert_eq!(
            (types.api_version.as_str(), types.kind.as_str()),
            ("gateway.networking.k8s.io/v1", kind.as_str())
        );
        let policy = env
            .wait_policy(&name, WAIT, "the route named in the status", |p| {
                p.status.as_ref().and_then(|s| s.route()) == Some((kind.as_str(), name.as_str()))
            })
            .await;
        let owner = route.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(
            owner.first().map(|o| &o.uid),
            policy.metadata.uid.as_ref(),
            "{name} is owned by its policy"
        );
    }

    let reports: Vec<_> = kinds
        .iter()
        .map(|(_, policy)| what_if(&env, &policy.name(), &["--down", "web"]))
        .collect();
    env.set_endpoints("web", 0, 1).await;
    for ((kind, policy), report) in kinds.iter().zip(&reports) {
        Predicted::of(&env, report, 0, &policy.name(), *kind)
            .await
            .written_as_printed(&env, &format!("{} failover", kind.as_str()))
            .await;
    }
    let failed_over = [("web", 0), ("web-east", 1), ("web-west", 0)];
    for (kind, policy) in &kinds {
        env.wait_route_weights(*kind, &policy.name(), &failed_over, WAIT)
            .await;
    }
    env.set_endpoints("web", 1, 0).await;
    for (kind, policy) in &kinds {
        env.wait_route_weights(*kind, &policy.name(), &primary, WAIT)
            .await;
    }

    for (kind, policy) in &kinds {
        let name = policy.name();
        env.api::<FailoverPolicy>()
            .delete(&name, &DeleteParams::default())
            .await
            .expect("delete");
        let routes: Api<DynamicObject> =
            Api::namespaced_with(env.client.clone(), &env.ns, &kind.resource());
        let collected = wait_until(WAIT, || async {
            routes.get_opt(&name).await.ok().flatten().is_none()
        })
        .await;
        assert!(collected, "{} {name} outlived its policy", kind.as_str());
    }
}
