//! The group step of a member's reconcile: when the policy is a member of a failover group, the
//! group's site is chosen again from every member's readiness (each read from the caches as its
//! own reconcile reads it), before the policy decides.
//!
//! Any member's input wakes that member's reconcile, so any member's change chooses the group's
//! site again; no reconcile scans every policy, only the group's members. A choice that moves
//! the group wakes every other member (each then writes its route once), records an Event on the
//! group, and queues the group's status for the status writer (`pipeline::write::statuses`),
//! which writes it as it writes policies' statuses. Two members choosing at once choose the
//! same: the choice is a pure function of the same caches, and the table records a move once.

use chrono::{DateTime, Utc};
use kube::{
    Resource as _,
    runtime::events::{Event, EventType},
};

use crate::{
    pipeline::gather,
    runtime::writer::Writer,
    runtime::written::StatusKey,
    sources::{
        Caches,
        local::{
            groups::{GroupEntry, Membership, Recorded},
            policies::Spec,
        },
        wake::Wake,
    },
};
use failover_core::{
    api::{FailoverGroup, conditions::group as reasons},
    decide::{
        group::{self, CannotFollow, GroupChoice, GroupRule, Member, Order, PreviousChoice},
        readiness,
    },
    last_status::LastGroupStatus,
    observation::PolicyKey,
    status::group::{GroupReport, build},
};

/// What a member's group asks of it.
#[derive(Clone, Debug, Default)]
pub struct Following {
    /// The site to route to; `None` when the policy follows no group's site now.
    pub order: Option<Order>,
}

/// How often a member chooses its group's site again when another member recorded a choice
/// meanwhile.
const ATTEMPTS: usize = 3;

/// Chooses the site of the group `policy` is a member of, and says what it asks of the policy.
/// Reads the members' readiness from `caches` and records the choice there; queues the group's
/// status and Event through `writer`; a move wakes the other members through `wake`.
pub fn follow(
    policy: &PolicyKey,
    caches: &Caches,
    writer: &Writer,
    wake: &Wake,
    now: DateTime<Utc>,
) -> Following {
    for _ in 0..ATTEMPTS {
        let Some(membership) = caches.groups.read().membership(policy) else {
            return Following::default();
        };
        if let Some(following) = choose(policy, (caches, writer, wake), membership, now) {
            return following;
        }
    }
    // Every attempt met a newer choice: the member decides alone this once; the member that
    // recorded the choice woke the others, so this one runs again.
    Following::default()
}

/// One choice of the group's site from what `membership` says; `None` when another member
/// recorded a choice meanwhile (this one was made from an older one).
fn choose(
    policy: &PolicyKey,
    (caches, writer, wake): (&Caches, &Writer, &Wake),
    membership: Membership,
    now: DateTime<Utc>,
) -> Option<Following> {
    let Membership {
        group,
        choice,
        status,
    } = membership;
    let members: Vec<Member> = group
        .member_keys()
        .map(|key| member(caches, writer, &group, &key, now))
        .collect();
    let chosen = group::choose(&group.sites, &members, choice.as_ref(), now);
    let recorded = PreviousChoice {
        site: chosen.site,
        since: chosen.since,
    };
    match caches
        .groups
        .write()
        .record(&group.key, choice.as_ref(), recorded)
    {
        Recorded::Stale => return None,
        Recorded::Moved if chosen.moved() => {
            let others = group.member_keys().filter(|k| k != policy);
            wake.policies(others);
            announce(writer, &group, &members, &chosen);
        }
        Recorded::Moved | Recorded::Same => {}
    }
    let previous = previous_status(writer, &group, status);
    queue_status(writer, &group, previous.as_ref(), &members, &chosen, now);
    let me = group
        .members
        .iter()
        .position(|m| m.as_str() == policy.name.as_str());
    let follows = me.is_some_and(|i| !chosen.held.iter().any(|(h, _)| *h == i));
    let routes = follows && !matches!(chosen.rule, GroupRule::NoSiteReady { .. });
    let order = group
        .sites
        .get(chosen.site)
        .filter(|_| routes)
        .map(|site| Order {
            group: group.key.name.clone(),
            site: site.as_str().into(),
            due: chosen.due(),
        });
    Some(Following { order })
}

/// One member as the group reads it: its readiness in each site from the caches, as its own
/// reconcile would read it.
fn member(
    caches: &Caches,
    writer: &Writer,
    group: &GroupEntry,
    key: &PolicyKey,
    now: DateTime<Utc>,
) -> Member {
    let Some(entry) = caches.table.read().get(key) else {
        return Member::held(&key.name, CannotFollow::NotFound);
    };
    let Spec::Valid(valid) = &entry.spec else {
        return Member::held(&key.name, CannotFollow::InvalidSpec);
    };
    let inputs = gather::inputs(valid, caches, writer);
    let previous = gather::previous_status(&entry, writer);
    let states = readiness::assess(valid, &inputs.observations, previous.as_ref(), now);
    let claimed_by = caches.groups.read().claimed_by(key, &group.key);
    group::member(valid, &states, &group.sites, claimed_by.as_deref(), now)
}

/// An Event on the group for a move.
fn announce(writer: &Writer, group: &GroupEntry, members: &[Member], chosen: &GroupChoice) {
    let site = |i: usize| group.sites.get(i).map_or("", String::as_str);
    let (reason, note) = match chosen.rule {
        GroupRule::FailedOver { trigger, from } => (
            reasons::FAILED_OVER,
            format!(
                "member {} is not ready in site {}: every member moves to site {}",
                members.get(trigger).map_or("", |m| m.name.as_str()),
                site(from),
                site(chosen.site)
            ),
        ),
        GroupRule::FailedBack { from } => (
            reasons::FAILED_BACK,
            format!(
                "every member is ready in site {}: the group moves back from site {}",
                site(chosen.site),
                site(from)
            ),
        ),
        _ => return,
    };
    let event = Event {
        type_: EventType::Normal,
        reason: reason.to_string(),
        note: Some(failover_core::message::line(&note)),
        action: "Route".to_string(),
        secondary: None,
    };
    writer.publish(event, reference(group));
}

fn reference(group: &GroupEntry) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(FailoverGroup::api_version(&()).to_string()),
        kind: Some(FailoverGroup::kind(&()).to_string()),
        namespace: Some(group.key.namespace.to_string()),
        name: Some(group.key.name.to_string()),
        uid: Some(group.uid.clone()),
        ..Default::default()
    }
}

/// The status the group has: the one this replica queued and has not written yet, else the one
/// it wrote last until the watch delivers it, else the one the watch delivered.
fn previous_status(
    writer: &Writer,
    group: &GroupEntry,
    delivered: Option<LastGroupStatus>,
) -> Option<LastGroupStatus> {
    let key = StatusKey::new(&group.key, &group.uid);
    writer
        .group_statuses
        .pending(&key)
        .map(|pending| LastGroupStatus::of(&pending))
        .or_else(|| writer.recent_group_status.unseen(&key))
        .or(delivered)
}

/// Queues the group's status after this choice for the status writer, when it differs from the
/// one it has (`previous`): of the members choosing at once, the first queues it and the others
/// read it as the group's status; the writer writes the newest last.
fn queue_status(
    writer: &Writer,
    group: &GroupEntry,
    previous: Option<&LastGroupStatus>,
    members: &[Member],
    chosen: &GroupChoice,
    now: DateTime<Utc>,
) {
    let status = build(&GroupReport {
        sites: &group.sites,
        members,
        choice: chosen,
        generation: group.generation,
        previous,
        now,
    });
    if writer.is_leader() {
        let key = StatusKey::new(&group.key, &group.uid);
        writer.group_statuses.queue(key, status, previous);
    }
}
