//! A failover group's site choice: the example of docs/decision-rules.md ("Failover groups"),
//! row by row, and properties over drawn groups and histories.

use std::{cell::Cell, time::Duration};

use chrono::{DateTime, Utc};
use proptest::{
    collection::vec,
    prelude::any,
    prop_assert, prop_assert_eq,
    test_runner::{Config, TestRunner},
};

use super::{
    group::{CannotFollow, GroupChoice, GroupRule, Member, PreviousChoice, SiteReadiness, choose},
    tests::t,
};
use crate::api::conditions::{READY, group as reason};

/// A group's members and their readiness over time: each readiness change starts a new `since`.
struct History {
    sites: Vec<String>,
    members: Vec<Member>,
    previous: Option<PreviousChoice>,
}

impl History {
    fn new(sites: &[&str], holds: &[(u64, u64)]) -> Self {
        let members = holds
            .iter()
            .enumerate()
            .map(|(i, (failover, failback))| Member {
                name: format!("m{i}"),
                sites: vec![None; sites.len()],
                failover_after: Duration::from_secs(*failover),
                failback_after: Duration::from_secs(*failback),
                held: None,
            })
            .collect();
        History {
            sites: sites.iter().map(|s| s.to_string()).collect(),
            members,
            previous: None,
        }
    }

    /// Sets what each member's readiness is in each site at `now` (`readiness[member][site]`).
    fn observe(&mut self, readiness: &[Vec<bool>], now: DateTime<Utc>) {
        for (member, ready) in self.members.iter_mut().zip(readiness) {
            for (here, ready) in member.sites.iter_mut().zip(ready) {
                if here.is_none_or(|h| h.ready != *ready) {
                    *here = Some(SiteReadiness {
                        ready: *ready,
                        since: now,
                    });
                }
            }
        }
    }

    fn choose(&mut self, now: DateTime<Utc>) -> GroupChoice {
        let choice = choose(&self.sites, &self.members, self.previous.as_ref(), now);
        self.previous = Some(PreviousChoice {
            site: choice.site,
            since: choice.since,
        });
        choice
    }
}

#[test]
fn the_documented_group_example_holds_row_by_row() {
    // `listings` (failoverAfter 10s, failbackAfter 60s) and `bookings` (0s, 120s), sites east,
    // west.
    let mut group = History::new(&["east", "west"], &[(10, 60), (0, 120)]);
    let rows: [(i64, [[bool; 2]; 2], &str, GroupRule); 7] = [
        (0, [[true, true], [true, true]], "east", GroupRule::Initial),
        (
            5,
            [[true, true], [false, true]],
            "west",
            GroupRule::FailedOver {
                trigger: 1,
                from: 0,
            },
        ),
        (
            30,
            [[true, true], [true, true]],
            "west",
            GroupRule::FailbackPending { to: 0, due: t(150) },
        ),
        (
            150,
            [[true, true], [true, true]],
            "east",
            GroupRule::FailedBack { from: 1 },
        ),
        (
            160,
            [[false, true], [true, true]],
            "east",
            GroupRule::FailoverPending {
                trigger: 0,
                due: t(170),
            },
        ),
        (
            170,
            [[false, true], [true, false]],
            "east",
            GroupRule::NoSiteReady { trigger: 0 },
        ),
        (
            180,
            [[false, true], [true, true]],
            "west",
            GroupRule::FailedOver {
                trigger: 0,
                from: 0,
            },
        ),
    ];
    let reasons = [
        reason::SITE_READY,
        reason::FAILED_OVER,
        reason::FAILBACK_PENDING,
        reason::SITE_READY,
        reason::FAILOVER_PENDING,
        reason::NO_SITE_READY,
        reason::FAILED_OVER,
    ];
    let mut previous_status = None;
    for (row, (second, readiness, site, rule)) in rows.into_iter().enumerate() {
        let status = previous_status.take();
        let readiness: Vec<Vec<bool>> = readiness.iter().map(|r| r.to_vec()).collect();
        group.observe(&readiness, t(second));
        let choice = group.choose(t(second));
        assert_eq!(group.sites[choice.site], site, "at {second}s");
        assert_eq!(choice.rule, rule, "at {second}s");
        // The group's `Ready` reason, as the table gives it.
        let status = crate::status::group::build(&crate::status::group::GroupReport {
            sites: &group.sites,
            members: &group.members,
            choice: &choice,
            generation: Some(1),
            previous: status.as_ref(),
            now: t(second),
        });
        let status = crate::last_status::LastGroupStatus::of(&status);
        assert!(
            status
                .condition(READY)
                .is_some_and(|c| c.reason == crate::digest::digest(reasons[row])),
            "at {second}s: Ready is not {}",
            reasons[row]
        );
        previous_status = Some(status);
    }
}

/// The group's status after a move (its members' reconciles after it build it again).
fn status_of(
    group: &History,
    choice: &GroupChoice,
    previous: Option<&crate::api::FailoverGroupStatus>,
    now: DateTime<Utc>,
) -> crate::api::FailoverGroupStatus {
    let previous = previous.map(crate::last_status::LastGroupStatus::of);
    crate::status::group::build(&crate::status::group::GroupReport {
        sites: &group.sites,
        members: &group.members,
        choice,
        generation: Some(1),
        previous: previous.as_ref(),
        now,
    })
}

#[test]
fn the_reconciles_after_a_move_build_the_status_of_the_move_and_write_none() {
    let mut group = History::new(&["east", "west"], &[(0, 0), (0, 0)]);
    group.observe(&[vec![true, true], vec![true, true]], t(0));
    let first = group.choose(t(0));
    let at_rest = status_of(&group, &first, None, t(0));
    group.observe(&[vec![true, true], vec![false, true]], t(1));
    let moved = group.choose(t(1));
    assert_eq!(
        moved.rule,
        GroupRule::FailedOver {
            trigger: 1,
            from: 0
        }
    );
    let written = status_of(&group, &moved, Some(&at_rest), t(1));
    let after = group.choose(t(2));
    assert_eq!(after.rule, GroupRule::Steady);
    assert_eq!(status_of(&group, &after, Some(&written), t(2)), written);
    assert_eq!(written.last_trigger.as_deref(), Some("m1"));
}

#[test]
fn a_member_that_cannot_follow_is_named_and_moves_nothing() {
    let mut group = History::new(&["east", "west"], &[(0, 0), (0, 0)]);
    group.observe(&[vec![true, true], vec![true, true]], t(0));
    assert_eq!(group.choose(t(0)).site, 0);
    group.members[1].held = Some(CannotFollow::Pinned);
    group.observe(&[vec![true, true], vec![false, true]], t(1));
    let choice = group.choose(t(1));
    assert_eq!((choice.site, choice.rule), (0, GroupRule::Steady));
    assert_eq!(choice.held, vec![(1, CannotFollow::Pinned)]);
    group.members[1].held = None;
    group.members[1].sites[1] = None;
    let choice = group.choose(t(2));
    assert_eq!(
        choice.held,
        vec![(1, CannotFollow::LacksSite("west".into()))]
    );
    assert_eq!(choice.site, 0);
}

/// Drawn groups: 1 to 4 sites, 1 to 5 members, holds of 0 to 3 steps, one member perhaps held,
/// and 12 steps of readiness.
#[test]
fn every_member_is_in_one_ready_site_whenever_one_exists_and_holds_are_kept() {
    let draw = (
        1usize..=4,
        vec((0u64..=3, 0u64..=3), 1..=5),
        any::<Option<usize>>(),
        vec(vec(vec(any::<bool>(), 4), 5), 12),
    );
    let mut runner = TestRunner::new(Config {
        cases: 800,
        ..Config::default()
    });
    let (moves, ready_somewhere) = (Cell::new(0u32), Cell::new(0u32));
    runner
        .run(&draw, |(sites, holds, held, steps)| {
            let names: Vec<&str> = ["a", "b", "c", "d"][..sites].to_vec();
            let holds: Vec<(u64, u64)> = holds.iter().map(|(f, b)| (f * 10, b * 10)).collect();
            let mut group = History::new(&names, &holds);
            let held = held.map(|h| h % holds.len());
            if let Some(h) = held {
                group.members[h].held = Some(CannotFollow::Suspended);
            }
            let no_holds = holds.iter().all(|(f, b)| *f == 0 && *b == 0);
            for (step, readiness) in steps.iter().enumerate() {
                let now = t(10 * step as i64);
                let readiness: Vec<Vec<bool>> =
                    readiness.iter().map(|m| m[..sites].to_vec()).collect();
                group.observe(&readiness[..holds.len()], now);
                let before = group.previous.clone();
                let choice = group.choose(now);
                let followers = |site: usize| {
                    (0..holds.len())
                        .filter(|m| Some(*m) != held)
                        .all(|m| readiness[m][site])
                };
                let first_ready = (0..sites).find(|s| followers(*s));
                // The choice is one of the group's sites, and a held member moves nothing.
                prop_assert!(choice.site < sites);
                if let Some(h) = held {
                    let mut others = group.members.clone();
                    others[h].sites.iter_mut().for_each(|s| *s = None);
                    let without = choose(&group.sites, &others, before.as_ref(), now);
                    prop_assert_eq!((without.site, &without.rule), (choice.site, &choice.rule));
                }
                // Without holds, every member is in the first site where all are ready.
                if let (true, Some(first)) = (no_holds, first_ready) {
                    ready_somewhere.set(ready_somewhere.get() + 1);
                    prop_assert_eq!(choice.site, first);
                }
                // A move keeps the holds: the trigger was not ready for its failoverAfter, or
                // every member was ready in the new site for the longest failbackAfter.
                match choice.rule {
                    GroupRule::FailedOver { trigger, from } => {
                        moves.set(moves.get() + 1);
                        let left = group.members[trigger].sites[from].expect("a site");
                        let hold = chrono::Duration::seconds(holds[trigger].0 as i64);
                        prop_assert!(!left.ready && left.since + hold <= now);
                        prop_assert!(followers(choice.site));
                    }
                    GroupRule::FailedBack { .. } => {
                        moves.set(moves.get() + 1);
                        let hold = (0..holds.len())
                            .filter(|m| Some(*m) != held)
                            .map(|m| holds[m].1)
                            .max()
                            .unwrap_or(0);
                        for m in (0..holds.len()).filter(|m| Some(*m) != held) {
                            let there = group.members[m].sites[choice.site].expect("a site");
                            let hold = chrono::Duration::seconds(hold as i64);
                            prop_assert!(there.ready && there.since + hold <= now);
                        }
                    }
                    _ => {}
                }
                // Choosing again on the same inputs moves nothing: one move, one write per
                // member route.
                let again = group.choose(now);
                prop_assert!(!again.moved());
                prop_assert_eq!(again.site, choice.site);
            }
            Ok(())
        })
        .expect("the property holds");
    assert!(moves.get() > 0, "no drawn history moved a group");
    assert!(
        ready_somewhere.get() > 0,
        "no drawn history had a ready site"
    );
}
