//! Priority tiers on the control plane: a tier of two weighted backends, then a tier of one;
//! traffic follows the tiers as backends fail, and with capacity, what a full tier cannot serve
//! lands in the next one (route weights and `status.capacity`).

use failover_core::api::{
    CapacitySpec, FailoverPolicySpec, Strategy,
    conditions::{READY, ready},
};

use crate::support::{ControllerProcess, PolicyBuilder, WAIT, condition, test_env, wait_until};

const BACKENDS: [&str; 4] = ["web", "web-b1", "web-b2", "web-c"];

/// `web`: tier 0 `web-b1` (weight 3) and `web-b2` (weight 1), tier 1 `web-c`.
fn tiered() -> PolicyBuilder {
    PolicyBuilder::named("web", "web", &["web-b1", "web-b2", "web-c"]).spec(
        |s: &mut FailoverPolicySpec| {
            s.strategy = Strategy::Weighted;
            s.secondaries[0].weight = Some(3);
            s.secondaries[1].weight = Some(1);
            s.secondaries[2].tier = Some(1);
        },
    )
}

#[tokio::test]
async fn traffic_goes_to_the_first_tier_with_a_ready_backend_by_weight_then_to_the_next() {
    let Some(env) = test_env!() else { return };
    env.ready_backends(&BACKENDS).await;
    let _c = ControllerProcess::start(&env, &[]);
    env.apply(&tiered());
    let weights = |w: [i64; 4]| -> Vec<(&str, i64)> { BACKENDS.iter().copied().zip(w).collect() };
    env.wait_weights("web", &weights([1, 0, 0, 0]), WAIT).await;
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &weights([0, 3, 1, 0]), WAIT).await;
    env.set_endpoints("web-b1", 0, 1).await;
    env.wait_weights("web", &weights([0, 0, 1, 0]), WAIT).await;
    env.set_endpoints("web-b2", 0, 1).await;
    env.wait_weights("web", &weights([0, 0, 0, 1]), WAIT).await;
    let policy = env
        .wait_policy("web", WAIT, "tier 1 named", |p| {
            condition(p, READY).is_some_and(|c| c.2.contains("web-c (tier 1)"))
        })
        .await;
    assert_eq!(
        condition(&policy, READY).map(|c| c.1),
        Some(ready::FAILED_OVER.to_string())
    );
    let events: kube::Api<k8s_openapi::api::events::v1::Event> = env.api();
    let told = wait_until(WAIT, || async {
        events.list(&Default::default()).await.is_ok_and(|l| {
            l.items.iter().any(|e| {
                e.reason.as_deref() == Some(ready::FAILED_OVER)
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("web-c (tier 1)"))
            })
        })
    })
    .await;
    assert!(told, "a FailedOver Event names the tier that serves");
    // Tier 0 back: traffic returns to it, by weight.
    env.set_endpoints("web-b1", 1, 0).await;
    env.set_endpoints("web-b2", 1, 0).await;
    env.wait_weights("web", &weights([0, 3, 1, 0]), WAIT).await;
}

#[tokio::test]
async fn with_capacity_what_a_full_tier_cannot_serve_lands_in_the_next_tier() {
    let Some(env) = test_env!() else { return };
    env.ready_backends(&BACKENDS).await;
    env.set_endpoints("web", 3, 0).await;
    env.set_endpoints("web-c", 2, 0).await;
    let _c = ControllerProcess::start(&env, &[]);
    env.apply(&tiered().spec(|s| {
        s.capacity = Some(CapacitySpec {
            unserved: Default::default(),
            per_endpoint: 20,
            primary_per_endpoint: None,
            scale: None,
        });
    }));
    let weights = |w: [i64; 4]| -> Vec<(&str, i64)> { BACKENDS.iter().copied().zip(w).collect() };
    env.wait_weights("web", &weights([1, 0, 0, 0]), WAIT).await;
    // Demand 60: tier 0 serves 20 + 20, tier 1 takes the other 20.
    env.set_endpoints("web", 0, 3).await;
    env.wait_weights("web", &weights([0, 3333, 3333, 3334]), WAIT)
        .await;
    // Tier 0 down to one backend: tier 1 takes 40.
    env.set_endpoints("web-b2", 0, 1).await;
    env.wait_weights("web", &weights([0, 3333, 0, 6667]), WAIT)
        .await;
    // The status follows the route: wait for what each backend serves, then check the demand.
    let served = |p: &failover_core::api::FailoverPolicy| -> Vec<Option<i64>> {
        p.status
            .iter()
            .flat_map(|s| &s.backends)
            .map(|b| b.capacity)
            .collect()
    };
    let policy = env
        .wait_policy("web", WAIT, "tier 1 serving 40", |p| {
            served(p) == [Some(0), Some(20), Some(0), Some(40)]
        })
        .await;
    let capacity = policy.status.as_ref().and_then(|s| s.capacity.as_ref());
    assert_eq!(
        capacity.map(|c| (c.demand, c.unserved.as_str())),
        Some((60, "0%"))
    );
}
