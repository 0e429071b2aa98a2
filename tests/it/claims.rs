//! Who routes what when namespaces share a Gateway, end to end: a policy claims only what it may
//! attach to, a claim goes to the policy that made it first (however old the other policy is),
//! that order survives a restart of the controller, a hostname held elsewhere is left out of a
//! route that goes on serving the others, and a conflict names no policy of another namespace.
//! Each namespace's author is a tenant bound to the chart's edit role there.

use std::time::Duration;

use failover_core::{
    api::{
        FailoverPolicy,
        conditions::{ATTACHED, READY, attached, ready},
    },
    route::claim::ClaimId,
};
use kube::{Api, api::DynamicObject};

use crate::support::{
    self, ControllerProcess, PolicyBuilder, TestEnv, WAIT, condition, shared_gateway,
    two_namespaces_on_gateway_api, wait_until,
    what_if::{Predicted, what_if},
};

/// The usual policy, its HTTPRoute on the Gateway `gw` of `namespace` for `shop.example.com`.
fn shop_on_gateway_of(namespace: &str) -> PolicyBuilder {
    serving_on_gateway_of(namespace, &["shop.example.com"])
}

/// The usual policy, its HTTPRoute on the Gateway `gw` of `namespace` for these hostnames.
fn serving_on_gateway_of(namespace: &str, hostnames: &[&str]) -> PolicyBuilder {
    let hostnames: Vec<String> = hostnames.iter().map(|h| h.to_string()).collect();
    PolicyBuilder::web().on_gateway(namespace, "gw").spec(|s| {
        if let Some(route) = s.http_route.as_mut() {
            route.hostnames = hostnames;
        }
    })
}

/// The hostnames of the namespace's route `web` (`None`: no route).
async fn route_hostnames(env: &TestEnv) -> Option<Vec<String>> {
    let routes: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.ns,
        &failover_core::route::RouteKind::HttpRoute.resource(),
    );
    let route = routes.get_opt("web").await.ok().flatten()?;
    let hostnames = route.data["spec"]["hostnames"].as_array().cloned();
    Some(
        hostnames
            .unwrap_or_default()
            .iter()
            .filter_map(|h| h.as_str().map(String::from))
            .collect(),
    )
}

fn ready_reason(p: &FailoverPolicy) -> Option<String> {
    condition(p, READY).map(|c| c.1)
}

/// Whether the namespace's route `web` exists, attached to its own Gateway `gw`, and its
/// policy routes.
async fn routes_its_own_gateway(env: &TestEnv) -> bool {
    let routes: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.ns,
        &failover_core::route::RouteKind::HttpRoute.resource(),
    );
    let attached = routes
        .get_opt("web")
        .await
        .ok()
        .flatten()
        .is_some_and(|r| support::route_parents(&r) == [format!("{}/gw", env.ns)]);
    let policy = env.policy("web").await;
    attached && policy.as_ref().and_then(ready_reason).as_deref() != Some(ready::APEX_CONFLICT)
}

#[tokio::test]
async fn an_older_policy_of_another_namespace_cannot_take_a_route_by_naming_its_gateway() {
    // Named short: the conflict message names the Gateway, namespace and all, within its bound.
    let Some((shop, other)) = two_namespaces_on_gateway_api("shop", "other").await else {
        return;
    };
    let (shop_author, other_author) = (shop.tenant(), other.tenant());
    let controller = ControllerProcess::start_cluster_wide(&shop, &[]);

    // 1. The other namespace holds the older policy, on a Gateway of its own.
    other_author.apply(&shop_on_gateway_of(&other.ns).yaml());
    assert!(
        wait_until(WAIT, || routes_its_own_gateway(&other)).await,
        "the other namespace's route"
    );
    // creationTimestamp counts seconds: the shop's policy is younger by at least one.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // 2. The shop routes shop.example.com on its own Gateway; the claim is recorded.
    shop_author.apply(&shop_on_gateway_of(&shop.ns).yaml());
    let listener = format!("hostname shop.example.com path / on Gateway {}/gw", shop.ns);
    let digest = ClaimId::of_text(&shop.ns, &listener).hex();
    let recorded = shop
        .wait_policy("web", WAIT, "the listener claim recorded", |p| {
            p.status
                .as_ref()
                .and_then(|s| s.claimed.as_ref())
                .is_some_and(|c| c.made.iter().any(|m| m.claims.contains(&digest)))
        })
        .await;
    assert!(routes_its_own_gateway(&shop).await);
    support::figure(format!(
        "the shop's status.claimed: {:?}",
        recorded.status.and_then(|s| s.claimed)
    ));

    // 3. The older policy names the shop's Gateway and hostname: refused that Gateway, it
    // claims nothing there, and the shop keeps its route.
    other_author.apply(&shop_on_gateway_of(&shop.ns).yaml());
    other
        .wait_policy("web", WAIT, attached::GATEWAY_NOT_ALLOWED, |p| {
            condition(p, ATTACHED).is_some_and(|c| c.1 == attached::GATEWAY_NOT_ALLOWED)
        })
        .await;
    let taken = wait_until(Duration::from_secs(3), || async {
        !routes_its_own_gateway(&shop).await
    })
    .await;
    assert!(
        !taken,
        "the shop lost its route: {:?}",
        shop.policy("web").await.and_then(|p| condition(&p, READY))
    );

    // The admin allows the shop's Gateway to the other namespace, on a restart: its claim is
    // made now, after the shop's (recorded in status across the restart), so the shop keeps
    // the route and the other policy yields.
    drop(controller);
    let allowed = format!("{}/gw", shop.ns);
    let _c = ControllerProcess::start_cluster_wide(&shop, &["--allowed-gateways", &allowed]);
    let p = other
        .wait_policy("web", WAIT, ready::APEX_CONFLICT, |p| {
            ready_reason(p).as_deref() == Some(ready::APEX_CONFLICT)
        })
        .await;
    let (_, _, message) = condition(&p, READY).expect("Ready");
    assert!(
        message.contains(&format!(
            "{listener} is routed by a policy in another namespace, which claimed it first"
        )) && !message.contains(&format!("{}/web", shop.ns)),
        "{message}"
    );
    assert!(routes_its_own_gateway(&shop).await, "the shop's route");
    let seen = other_author.kubectl(&[
        "get",
        "failoverpolicy",
        "web",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].message}",
    ]);
    support::figure(format!(
        "the other namespace's author sees: ApexConflict: {}",
        support::ok(&seen, "kubectl get as the tenant")
    ));
}

#[tokio::test]
async fn a_hostname_held_elsewhere_leaves_the_policys_other_hostnames_served() {
    let Some((shop, other)) = two_namespaces_on_gateway_api("shop", "other").await else {
        return;
    };
    let (shop_author, other_author) = (shop.tenant(), other.tenant());
    let gateway = format!("{}/gw", shop.ns);
    let _controller =
        ControllerProcess::start_cluster_wide(&shop, &["--allowed-gateways", &gateway]);

    // 1. The other namespace, allowed on the shop's Gateway, claims b.example.com there first.
    other_author.apply(&serving_on_gateway_of(&shop.ns, &["b.example.com"]).yaml());
    let served = |want: Vec<&'static str>, env| async move {
        route_hostnames(env).await == Some(want.iter().map(|h| h.to_string()).collect())
    };
    assert!(
        wait_until(WAIT, || served(vec!["b.example.com"], &other)).await,
        "the other namespace's route"
    );

    // 2. The shop adds b.example.com beside its own a.example.com: its route serves
    // a.example.com, and its Attached condition names the hostname it does not hold.
    shop_author.apply(&serving_on_gateway_of(&shop.ns, &["a.example.com", "b.example.com"]).yaml());
    let p = shop
        .wait_policy("web", WAIT, attached::HOSTNAME_HELD_ELSEWHERE, |p| {
            condition(p, ATTACHED).is_some_and(|c| c.1 == attached::HOSTNAME_HELD_ELSEWHERE)
        })
        .await;
    assert_eq!(
        route_hostnames(&shop).await,
        Some(vec!["a.example.com".to_string()])
    );
    let (_, _, message) = condition(&p, ATTACHED).expect("Attached");
    assert!(
        message.starts_with(&format!(
            "hostname b.example.com path / on Gateway {gateway} is routed by a policy in another namespace, which claimed it first"
        )) && !message.contains(&other.ns),
        "{message}"
    );
    assert_ne!(ready_reason(&p).as_deref(), Some(ready::APEX_CONFLICT));
    // what-if says the same, by the controller's functions.
    let report = what_if(&shop, "web", &[]);
    Predicted::of(
        &shop,
        &report,
        0,
        "web",
        failover_core::route::RouteKind::HttpRoute,
    )
    .await
    .written_as_printed(&shop, "a hostname held elsewhere")
    .await;

    // 3. The other policy goes: the shop's route serves both.
    other_author.delete("failoverpolicy", "web");
    assert!(
        wait_until(WAIT, || served(
            vec!["a.example.com", "b.example.com"],
            &shop
        ))
        .await,
        "the hostname handed over: {:?}",
        route_hostnames(&shop).await
    );
    support::figure(format!(
        "a hostname held elsewhere: the shop's route served a.example.com only, then both once the holder went; Attached said: {message}"
    ));
}

fn attached_reason(p: &FailoverPolicy) -> Option<String> {
    condition(p, ATTACHED).map(|c| c.1)
}

/// What-if, run now for `env`'s policy `web`, prints what the controller then has.
async fn what_if_agrees(env: &TestEnv, kind: failover_core::route::RouteKind, scenario: &str) {
    let report = what_if(env, "web", &[]);
    Predicted::of(env, &report, 0, "web", kind)
        .await
        .written_as_printed(env, scenario)
        .await;
}

#[tokio::test]
async fn a_namespace_the_gateways_listener_does_not_admit_cannot_take_or_hold_a_hostname_on_it() {
    let Some((shop, other)) = two_namespaces_on_gateway_api("shop", "other").await else {
        return;
    };
    let (shop_author, other_author) = (shop.tenant(), other.tenant());
    // The admin allows the shop's Gateway to every namespace: only its owner's listeners decide.
    shared_gateway(&shop, "All");
    let allowed = format!("{}/gw", shop.ns);
    let controller =
        ControllerProcess::start_cluster_wide(&shop, &["--allowed-gateways", &allowed]);

    // 1. The listener admits every namespace: the other namespace claims the hostname first.
    other_author.apply(&shop_on_gateway_of(&shop.ns).yaml());
    assert!(
        wait_until(WAIT, || async { route_hostnames(&other).await.is_some() }).await,
        "the other namespace's route"
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    shop_author.apply(&shop_on_gateway_of(&shop.ns).yaml());
    shop.wait_policy("web", WAIT, ready::APEX_CONFLICT, |p| {
        ready_reason(p).as_deref() == Some(ready::APEX_CONFLICT)
    })
    .await;

    // 2. The Gateway's owner admits only its own namespace: the other namespace holds nothing
    // there any more, and the shop routes the hostname.
    shared_gateway(&shop, "Same");
    let p = other
        .wait_policy("web", WAIT, attached::NOT_ALLOWED_BY_LISTENERS, |p| {
            attached_reason(p).as_deref() == Some(attached::NOT_ALLOWED_BY_LISTENERS)
        })
        .await;
    let (_, _, message) = condition(&p, ATTACHED).expect("Attached");
    assert_eq!(
        message,
        format!(
            "Gateway {}/gw is not attached: its listener web admits routes of the Gateway's own namespace only (allowedRoutes.namespaces.from: Same)",
            shop.ns
        )
    );
    assert!(
        wait_until(WAIT, || routes_its_own_gateway(&shop)).await,
        "the shop's route: {:?}",
        shop.policy("web").await.and_then(|p| condition(&p, READY))
    );
    for env in [&shop, &other] {
        what_if_agrees(
            env,
            failover_core::route::RouteKind::HttpRoute,
            "a listener admitting only its own namespace",
        )
        .await;
    }

    // 3. After a restart, the other namespace's claim, recorded first, still takes nothing:
    // once the new process has reconciled both policies, the shop routes and the other is
    // still refused the listener.
    drop(controller);
    let restarted = ControllerProcess::start_cluster_wide(&shop, &["--allowed-gateways", &allowed]);
    let reconciled = wait_until(WAIT, || async {
        let (_, text) = restarted.admin_get("/metrics").await;
        support::metric(&text, "failover_reconciles_total").is_some_and(|n| n >= 2.0)
    })
    .await;
    assert!(
        reconciled,
        "the restarted controller reconciled both policies"
    );
    assert!(
        routes_its_own_gateway(&shop).await,
        "the shop lost its route after a restart"
    );
    let p = other.policy("web").await.expect("the other policy");
    assert_eq!(
        attached_reason(&p).as_deref(),
        Some(attached::NOT_ALLOWED_BY_LISTENERS)
    );
    support::figure(format!(
        "a listener admitting only its own namespace: the other namespace's claim, made first, was dropped and the shop routed the hostname; Attached said: {message}"
    ));
}

/// The usual policy with a TCPRoute on the Gateway `gw` of `namespace`, naming its listener by
/// `section_name` or by `port`.
fn tcp_on_gateway_of(
    namespace: &str,
    section_name: Option<&str>,
    port: Option<i32>,
) -> PolicyBuilder {
    let parent = failover_core::api::GatewayParent {
        name: "gw".into(),
        namespace: Some(namespace.into()),
        section_name: section_name.map(String::from),
        port,
    };
    PolicyBuilder::web().spec(move |s| {
        s.output = failover_core::api::Output::TcpRoute;
        s.tcp_route = Some(failover_core::api::GatewayRouteSpec {
            gateways: vec![parent],
            ..failover_core::api::GatewayRouteSpec::on_port(80)
        });
    })
}

#[tokio::test]
async fn the_same_tcp_listener_named_by_port_and_by_section_name_gives_one_route() {
    let Some((db, other)) = two_namespaces_on_gateway_api("db", "other").await else {
        return;
    };
    shared_gateway(&db, "Same");
    let allowed = format!("{}/gw", db.ns);
    let _controller = ControllerProcess::start_cluster_wide(&db, &["--allowed-gateways", &allowed]);
    let tcp = failover_core::route::RouteKind::TcpRoute;
    let routes = |env: &TestEnv| -> Api<DynamicObject> {
        Api::namespaced_with(env.client.clone(), &env.ns, &tcp.resource())
    };

    // The Gateway's namespace names the listener db; the other names port 5432, the same one.
    db.tenant()
        .apply(&tcp_on_gateway_of(&db.ns, Some("db"), None).yaml());
    let own = routes(&db);
    assert!(
        wait_until(WAIT, || async {
            own.get_opt("web").await.ok().flatten().is_some()
        })
        .await,
        "the db namespace's TCPRoute"
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    other
        .tenant()
        .apply(&tcp_on_gateway_of(&db.ns, None, Some(5432)).yaml());
    let p = other
        .wait_policy("web", WAIT, ready::APEX_CONFLICT, |p| {
            ready_reason(p).as_deref() == Some(ready::APEX_CONFLICT)
        })
        .await;
    let (_, _, message) = condition(&p, READY).expect("Ready");
    assert!(
        message.starts_with(&format!(
            "TCP connections on Gateway {}/gw listener db is routed by a policy in another namespace, which claimed it first"
        , db.ns)),
        "{message}"
    );
    assert!(
        routes(&other).get_opt("web").await.expect("read").is_none(),
        "a second TCPRoute on the listener"
    );
    what_if_agrees(&other, tcp, "one TCP listener named by port").await;
    support::figure(format!(
        "one TCP listener named by sectionName and by port: one TCPRoute; the second policy said: {message}"
    ));
}
