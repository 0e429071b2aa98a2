//! Who routes what when namespaces share a Gateway, end to end: a policy claims only what it may
//! attach to, a claim goes to the policy that made it first (however old the other policy is),
//! that order survives a restart of the controller, a hostname held elsewhere is left out of a
//! route that goes on serving the others, and a conflict names no policy of another namespace.
//! Each namespace's author is a tenant bound to the chart's edit role there.

use std::time::Duration;

use failover::{
    api::{
        FailoverPolicy,
        conditions::{ATTACHED, READY, attached, ready},
    },
    route::claim::ClaimId,
};
use kube::{Api, api::DynamicObject};

use crate::support::{
    self, ControllerProcess, PolicyBuilder, TestEnv, WAIT, WEB_BACKENDS, condition, wait_until,
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
        &failover::route::RouteKind::HttpRoute.resource(),
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
        &failover::route::RouteKind::HttpRoute.resource(),
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
    let Some(shop) = TestEnv::dedicated("shop").await else {
        return;
    };
    let other = TestEnv::on(shop.cp, "other")
        .await
        .expect("a second namespace");
    shop.cp.install_gateway_api();
    for env in [&shop, &other] {
        env.ready_backends(&WEB_BACKENDS).await;
    }
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
    let Some(shop) = TestEnv::dedicated("shop").await else {
        return;
    };
    let other = TestEnv::on(shop.cp, "other")
        .await
        .expect("a second namespace");
    shop.cp.install_gateway_api();
    for env in [&shop, &other] {
        env.ready_backends(&WEB_BACKENDS).await;
    }
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
    Predicted::of(&report, 0, "web", failover::route::RouteKind::HttpRoute)
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
