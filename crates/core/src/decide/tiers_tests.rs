//! Priority tiers (`secondaries[].tier`): the first tier with a ready secondary serves, shared by
//! weight inside it; with capacity, what a tier cannot serve spills into the next. The examples
//! of docs/decision-rules.md ("Tiers"), row by row.

use super::tests::{Decision, decide, down, endpoints, spec, t, up};
use crate::api::{
    CapacitySpec, FailoverPolicySpec, FailoverPolicyStatus, Strategy,
    conditions::{READY, ready},
};

/// `basket-main`: tier 0 `basket-b1` (weight 3) and `basket-b2` (weight 1), tier 1
/// `basket-c`.
fn tiered() -> FailoverPolicySpec {
    let mut s = spec(
        Strategy::Weighted,
        &[
            ("basket-b1", Some(3)),
            ("basket-b2", Some(1)),
            ("basket-c", None),
        ],
    );
    s.primary = "basket-main".into();
    s.secondaries[2].tier = Some(1);
    s
}

fn ready_message(status: &FailoverPolicyStatus) -> String {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == READY)
        .map_or_else(String::new, |c| c.message.clone())
}

fn shares(d: &Decision) -> Vec<String> {
    d.status
        .backends
        .iter()
        .map(|b| b.share.clone().unwrap_or_default())
        .collect()
}

#[test]
fn the_documented_tiers_example_holds_row_by_row() {
    let s = tiered();
    // (readiness of the primary, b1, b2, c; weights; shares)
    let rows: [([bool; 4], [i32; 4], [&str; 4]); 4] = [
        (
            [true, true, true, true],
            [1, 0, 0, 0],
            ["100%", "0%", "0%", "0%"],
        ),
        (
            [false, true, true, true],
            [0, 3, 1, 0],
            ["0%", "75%", "25%", "0%"],
        ),
        (
            [false, false, true, true],
            [0, 0, 1, 0],
            ["0%", "0%", "100%", "0%"],
        ),
        (
            [false, false, false, true],
            [0, 0, 0, 1],
            ["0%", "0%", "0%", "100%"],
        ),
    ];
    for (i, (readiness, weights, expected)) in rows.iter().enumerate() {
        let obs: Vec<_> = readiness
            .iter()
            .map(|r| if *r { up(2) } else { down() })
            .collect();
        let d = decide(&s, &obs, None, t(0));
        assert_eq!(d.weights, weights, "row {}", i + 1);
        assert_eq!(shares(&d), expected, "row {}", i + 1);
    }
}

#[test]
fn the_ready_message_and_the_event_say_which_tier_serves() {
    let s = tiered();
    let serving = decide(&s, &[up(2), up(2), up(2), up(2)], None, t(0));
    let tier_1 = decide(
        &s,
        &[down(), down(), down(), up(2)],
        Some(&serving.status),
        t(1),
    );
    assert_eq!(
        ready_message(&tier_1.status),
        "primary basket-main is not ready; traffic goes to basket-c (tier 1) (strategy Weighted)"
    );
    assert_eq!(
        tier_1.transition_message.as_deref(),
        Some("primary basket-main is not ready; traffic moved to basket-c (tier 1)")
    );
    let tier_0 = decide(&s, &[down(), up(2), up(2), up(2)], None, t(0));
    assert!(ready_message(&tier_0.status).contains("basket-b1, basket-b2 (tier 0)"));
}

#[test]
fn without_tiers_of_their_own_the_strategies_keep_their_messages() {
    let s = spec(Strategy::Weighted, &[("a", Some(3)), ("b", Some(1))]);
    let d = decide(&s, &[down(), up(2), up(2)], None, t(0));
    assert_eq!(
        ready_message(&d.status),
        "primary web-primary is not ready; traffic goes to a, b (strategy Weighted)"
    );
}

/// The capacity example: `perEndpoint: 20`, `basket-main` with 3 endpoints (demand 60), tier 0
/// `b1` and `b2` with 1 endpoint each, tier 1 `c` with 2.
#[test]
fn with_capacity_what_a_tier_cannot_serve_spills_into_the_next() {
    let mut s = tiered();
    s.capacity = Some(CapacitySpec {
        unserved: Default::default(),
        per_endpoint: 20,
        primary_per_endpoint: None,
        scale: None,
    });
    let rows: [([i32; 4], [i32; 4], &str, &str); 3] = [
        // Tier 0 serves 40 of the 60; the 20 left go to tier 1.
        (
            [0, 1, 1, 2],
            [0, 3333, 3333, 3334],
            ready::FAILED_OVER,
            "0%",
        ),
        // Tier 0 serves 20; tier 1 the other 40.
        ([0, 1, 0, 2], [0, 3333, 0, 6667], ready::FAILED_OVER, "0%"),
        // Tier 0 and tier 1 serve 20 each: a third stays unserved on the primary.
        (
            [0, 0, 1, 1],
            [3334, 0, 3333, 3333],
            ready::FAILED_OVER,
            "33.33%",
        ),
    ];
    let full = decide(&s, &[endpoints(3, 3), up(1), up(1), up(2)], None, t(0));
    for (i, (ready_endpoints, weights, reason, unserved)) in rows.iter().enumerate() {
        let totals = [3, 1, 1, 2];
        let obs: Vec<_> = ready_endpoints
            .iter()
            .zip(totals)
            .map(|(r, total)| endpoints(*r, total))
            .collect();
        let d = decide(&s, &obs, Some(&full.status), t(1));
        assert_eq!(d.weights, weights, "row {}", i + 1);
        assert_eq!(d.decided_reason, *reason, "row {}", i + 1);
        let capacity = d.status.capacity.as_ref().expect("capacity status");
        assert_eq!(capacity.unserved, *unserved, "row {}", i + 1);
    }
}
