//! Two controllers on one control plane, each with `--shard` on namespaces' labels: each holds
//! only its namespaces' policies (its heap grows with them, not with the other shard's), the
//! failovers of both land, a namespace relabelled moves to the other shard, and a Gateway
//! listener that admits namespaces of both is routed by the shard of the Gateway's namespace
//! alone, never claimed twice.

use failover_core::api::conditions::{ATTACHED, attached};

use crate::support::{
    self, ControllerProcess, ON_EAST, ON_WEB, PolicyBuilder, TestEnv, WAIT, condition, figure,
    shared_gateway, two_namespaces_on_gateway_api, wait_until,
};

/// The label the shards select on, and each shard's selector.
const SHARD_LABEL: &str = "failover.dev/shard";

fn label(env: &TestEnv, shard: &str) {
    let label = format!("{SHARD_LABEL}={shard}");
    support::ok(
        &env.kubectl(&["label", "namespace", &env.ns, &label, "--overwrite"]),
        "label the namespace",
    );
}

/// The controller of shard `shard`, allowed on the Gateway `gateway`.
fn shard(env: &TestEnv, shard: &str, gateway: &str) -> ControllerProcess {
    let selector = format!("{SHARD_LABEL}={shard}");
    ControllerProcess::start_cluster_wide(
        env,
        &["--shard", &selector, "--allowed-gateways", gateway],
    )
}

/// Whether the controller exports the per-policy series of the policy `web` of `env`.
async fn holds_web(controller: &ControllerProcess, env: &TestEnv) -> bool {
    let text = controller.admin_get("/metrics").await.1;
    let series = format!("namespace=\"{}\",policy=\"web\"", env.ns);
    text.lines()
        .any(|l| l.starts_with("failover_") && l.contains(&series))
}

/// `count` policies named `bulk-<i>`, each on its own apex, in one YAML stream.
fn bulk(count: usize) -> String {
    (0..count)
        .map(|i| PolicyBuilder::named(&format!("bulk-{i}"), "web", &["east"]).yaml())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

#[tokio::test]
async fn two_shards_hold_their_own_policies_fail_over_both_and_never_claim_a_listener_twice() {
    let Some((a, b)) = two_namespaces_on_gateway_api("shard-a", "shard-b").await else {
        return;
    };
    shared_gateway(&a, "All");
    let gw = format!("{}/gw", a.ns);
    let (shard_a, shard_b) = (shard(&a, "a", &gw), shard(&b, "b", &gw));

    // 1. Policies in namespaces not labelled yet belong to no shard; labelled, each shard takes
    // its own (a namespace joining a shard lists its watches again).
    // Each namespace's policies are written by its tenant (the chart's edit role there); the
    // labels that pick shards are the admin's.
    let (a_author, b_author) = (a.tenant(), b.tenant());
    a_author.apply(&PolicyBuilder::web().yaml());
    b_author.apply(&PolicyBuilder::web().yaml());
    label(&a, "a");
    label(&b, "b");
    for env in [&a, &b] {
        env.wait_weights("web", &ON_WEB, WAIT).await;
    }
    assert!(wait_until(WAIT, || holds_web(&shard_a, &a)).await);
    assert!(wait_until(WAIT, || holds_web(&shard_b, &b)).await);
    assert!(!holds_web(&shard_a, &b).await && !holds_web(&shard_b, &a).await);

    // 2. Failovers land in both.
    for env in [&a, &b] {
        env.set_endpoints("web", 0, 1).await;
    }
    for env in [&a, &b] {
        env.wait_weights("web", &ON_EAST, WAIT).await;
    }

    // 3. Memory: 200 policies of b's namespace grow b's heap, not a's.
    let before = (shard_a.heap_bytes().await, shard_b.heap_bytes().await);
    b_author.apply(&bulk(200));
    let ready_series = format!(
        "failover_ready_backends{{namespace=\"{}\",policy=\"bulk-",
        b.ns
    );
    let held = || async {
        let text = shard_b.admin_get("/metrics").await.1;
        text.matches(&ready_series).count() >= 200
    };
    assert!(
        wait_until(WAIT * 2, held).await,
        "shard b holds the 200 policies"
    );
    let after = (shard_a.heap_bytes().await, shard_b.heap_bytes().await);
    let grew = ((after.0 - before.0) / 1024.0, (after.1 - before.1) / 1024.0);
    figure(format!(
        "200 policies of shard b's namespace: shard a's heap grew {:.0} KiB, shard b's {:.0} KiB",
        grew.0, grew.1
    ));
    assert!(
        grew.0 < grew.1 / 4.0,
        "shard a holds b's policies: a grew {:.0} KiB, b {:.0} KiB",
        grew.0,
        grew.1
    );

    // 4. The listener admits both shards' namespaces and the Gateway is in shard a's: a policy
    // of b naming it leaves it out and claims nothing there; a's routes the hostname.
    for author in [&a_author, &b_author] {
        author.apply(
            &PolicyBuilder::named("shop", "web", &["east"])
                .on_gateway(&a.ns, "gw")
                .yaml(),
        );
    }
    let p = b
        .wait_policy("shop", WAIT, attached::LISTENER_OF_ANOTHER_SHARD, |p| {
            condition(p, ATTACHED).map(|c| c.1).as_deref()
                == Some(attached::LISTENER_OF_ANOTHER_SHARD)
        })
        .await;
    let (_, _, message) = condition(&p, ATTACHED).expect("Attached");
    assert!(
        message.ends_with(
            "its listener web admits namespaces of other shards, and the shard of the Gateway's namespace routes it (--shard)"
        ),
        "{message}"
    );
    let p = a
        .wait_policy("shop", WAIT, "attached to its Gateway", |p| {
            condition(p, ATTACHED).is_some_and(|c| c.1 != attached::LISTENER_OF_ANOTHER_SHARD)
        })
        .await;
    let (_, reason, _) = condition(&p, ATTACHED).expect("Attached");
    figure(format!(
        "a listener of two shards: shard b's policy said Attached=False {}: {message}; shard a's route was written (Attached reason {reason})",
        attached::LISTENER_OF_ANOTHER_SHARD,
    ));

    // 5. b's namespace moves to shard a: a takes its policies up, b forgets them (nothing is
    // deleted: the route stays and a failback lands through shard a).
    label(&b, "a");
    assert!(
        wait_until(WAIT, || holds_web(&shard_a, &b)).await,
        "shard a takes b's namespace"
    );
    assert!(wait_until(WAIT, || async { !holds_web(&shard_b, &b).await }).await);
    b.set_endpoints("web", 1, 0).await;
    b.wait_weights("web", &ON_WEB, WAIT).await;
}
