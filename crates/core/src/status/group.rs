//! The status of a failover group: where its members route, why, and who does not follow.

use chrono::{DateTime, Utc};

use crate::{
    api::{
        Condition, FailoverGroupStatus, GroupMemberStatus, Timestamp,
        conditions::{DEGRADED, READY, group},
    },
    decide::{
        group::{GroupChoice, GroupRule, Member},
        verdict::Verdict,
    },
    last_status::LastGroupStatus,
};

/// What a group's status reports.
#[derive(Clone, Copy, Debug)]
pub struct GroupReport<'a> {
    /// The group's sites, in order.
    pub sites: &'a [String],
    /// Its members, as its choice read them.
    pub members: &'a [Member],
    /// Its choice.
    pub choice: &'a GroupChoice,
    /// Its `metadata.generation`.
    pub generation: Option<i64>,
    /// Its status as last written.
    pub previous: Option<&'a LastGroupStatus>,
    /// Now.
    pub now: DateTime<Utc>,
}

/// The status of a group after its members chose its site.
pub fn build(report: &GroupReport) -> FailoverGroupStatus {
    let GroupReport {
        sites,
        members,
        choice,
        previous,
        now,
        ..
    } = *report;
    let last_trigger = match choice.rule {
        GroupRule::FailedOver { trigger, .. } => Some(name(members, trigger).to_string()),
        _ => previous.and_then(|p| p.last_trigger.as_deref().map(str::to_string)),
    };
    let verdicts = [
        Some(ready(report, last_trigger.as_deref())),
        degraded(report),
    ];
    FailoverGroupStatus {
        observed_generation: report.generation,
        site: Some(site(sites, choice.site).to_string()),
        last_transition_time: Some(Timestamp(choice.since)),
        last_trigger,
        members: members
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let held = choice.held.iter().find(|(h, _)| *h == i);
                GroupMemberStatus {
                    name: m.name.clone(),
                    following: held.is_none(),
                    reason: held.map(|(_, why)| why.to_string()),
                }
            })
            .collect(),
        conditions: verdicts
            .iter()
            .flatten()
            .map(|v| condition(previous, v, now))
            .collect(),
    }
}

fn site(sites: &[String], i: usize) -> &str {
    sites.get(i).map_or("", String::as_str)
}

fn name(members: &[Member], i: usize) -> &str {
    members.get(i).map_or("", |m| m.name.as_str())
}

/// `Ready`: why the group is where it is. Like a policy's `FailedOver`, `GroupFailedOver` holds
/// while the group is away from its first site; back there, it is `SiteReady`.
fn ready(report: &GroupReport, last_trigger: Option<&str>) -> Verdict {
    let site = |i: usize| site(report.sites, i);
    let name = |i: usize| name(report.members, i);
    let here = site(report.choice.site);
    let (ready, reason, message) = match &report.choice.rule {
        // The move itself says what the group says after it (its Event says why it moved), so
        // that the reconciles after a move build the same status and write none.
        GroupRule::Initial
        | GroupRule::Steady
        | GroupRule::FailedOver { .. }
        | GroupRule::FailedBack { .. } => {
            return settled(here, report.choice.site == 0, last_trigger);
        }
        GroupRule::FailoverPending { trigger, due } => (
            true,
            group::FAILOVER_PENDING,
            format!(
                "member {} is not ready in site {here}; the group moves at {} unless it recovers",
                name(*trigger),
                Timestamp(*due)
            ),
        ),
        GroupRule::FailbackPending { to, due } => (
            true,
            group::FAILBACK_PENDING,
            format!(
                "every member is ready in site {}; the group moves back at {}",
                site(*to),
                Timestamp(*due)
            ),
        ),
        GroupRule::NoSiteReady { trigger } => (
            false,
            group::NO_SITE_READY,
            format!(
                "member {} is not ready in site {here} and no site has every member ready; each member routes by its own rules",
                name(*trigger)
            ),
        ),
    };
    Verdict::new(READY, ready, reason, message)
}

/// `Ready` where the group stays: `SiteReady` at its first site, else `GroupFailedOver`.
fn settled(here: &str, first: bool, last_trigger: Option<&str>) -> Verdict {
    let (reason, message) = match last_trigger.filter(|_| !first) {
        _ if first => (
            group::SITE_READY,
            format!("every member routes to site {here}, the first"),
        ),
        Some(member) => (
            group::FAILED_OVER,
            format!("every member routes to site {here}; member {member} moved the group last"),
        ),
        None => (
            group::FAILED_OVER,
            format!("every member routes to site {here}"),
        ),
    };
    Verdict::new(READY, true, reason, message)
}

/// `Degraded`: the members that do not follow, and why; `None` when every one does.
fn degraded(report: &GroupReport) -> Option<Verdict> {
    let held: Vec<String> = report
        .choice
        .held
        .iter()
        .map(|(i, why)| {
            let name = report.members.get(*i).map_or("", |m| m.name.as_str());
            format!("{name}: {why}")
        })
        .collect();
    Some(if held.is_empty() {
        Verdict::new(
            DEGRADED,
            false,
            group::ALL_FOLLOWING,
            "every member follows the group".to_string(),
        )
    } else {
        Verdict::new(
            DEGRADED,
            true,
            group::MEMBERS_NOT_FOLLOWING,
            format!("not following: {}", held.join("; ")),
        )
    })
}

/// A condition from a verdict, keeping the previous `lastTransitionTime` while it holds.
fn condition(
    previous: Option<&LastGroupStatus>,
    verdict: &Verdict,
    now: DateTime<Utc>,
) -> Condition {
    let held = previous
        .and_then(|p| p.condition(verdict.type_))
        .filter(|c| c.status == verdict.status)
        .map(|c| c.last_transition_time.clone());
    super::condition_since(held, verdict, now)
}
