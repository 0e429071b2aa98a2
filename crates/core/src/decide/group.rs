//! A failover group's site choice: every member of a group routes to one site at a time, the
//! first site in the group's order where every member has a ready backend.
//!
//! The choice is fed by each member's own readiness ([`member_sites`] reads it from the member's
//! [`BackendState`]s, the same the member's decision reads) and by the group's previous choice;
//! it reads no clock and no other group, so one group's change cannot move another group's
//! members.
//!
//! - When a member stops being ready in the current site, the group waits that member's
//!   `failoverAfter`, then moves every member to the first site where all of them are ready.
//! - When every member is ready in a better site, the group waits the longest `failbackAfter` of
//!   the members from the moment the last of them became ready there, then moves back.
//! - When no site has every member ready, the group stays where it is.
//! - A member that cannot follow (it lacks one of the group's sites, is pinned, suspended or in a
//!   drill, or another group claims it) neither moves nor moves the others.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{
    before::Before,
    none_ready,
    plan::{Announcement, Routing, Rule},
    readiness::BackendState,
    strategy,
};
use crate::{
    api::{Phase, Strategy},
    policy::ValidPolicy,
};

/// Why a member does not follow its group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CannotFollow {
    /// None of its backends runs in this site (the site's name).
    LacksSite(String),
    /// `spec.pin` holds it on one backend.
    Pinned,
    /// `spec.suspend` holds its weights.
    Suspended,
    /// A drill holds it on one backend.
    Drill,
    /// `Proportional` shares by health across every backend, in every site.
    Proportional,
    /// An earlier group (by name) claims it.
    ClaimedBy(String),
    /// No policy of this name exists in the group's namespace.
    NotFound,
    /// The policy's spec is invalid: it decides nothing.
    InvalidSpec,
}

impl std::fmt::Display for CannotFollow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CannotFollow::LacksSite(site) => write!(f, "no backend runs in site {site}"),
            CannotFollow::Pinned => f.write_str("spec.pin holds it on one backend"),
            CannotFollow::Suspended => f.write_str("spec.suspend holds its weights"),
            CannotFollow::Drill => f.write_str("a drill holds it on one backend"),
            CannotFollow::Proportional => {
                f.write_str("strategy Proportional shares traffic by health across every site")
            }
            CannotFollow::ClaimedBy(group) => write!(f, "group {group} claims it first"),
            CannotFollow::NotFound => f.write_str("no such FailoverPolicy in the namespace"),
            CannotFollow::InvalidSpec => f.write_str("its spec is invalid"),
        }
    }
}

/// Where one member stands in one site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteReadiness {
    /// Whether one of the member's backends in the site is ready.
    pub ready: bool,
    /// Ready: since when the earliest of its ready backends there has been ready. Not ready:
    /// since when the last of them has not been.
    pub since: DateTime<Utc>,
}

/// One member of a group, as the group reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    /// The member policy's name.
    pub name: String,
    /// Its readiness in each site of the group, in the group's order (`None`: no backend there).
    pub sites: Vec<Option<SiteReadiness>>,
    /// The member's `failoverAfter`.
    pub failover_after: Duration,
    /// The member's `failbackAfter`.
    pub failback_after: Duration,
    /// Why it does not follow, set by the caller for what the sites do not show (a pin, a
    /// suspend, a drill, another group's claim).
    pub held: Option<CannotFollow>,
}

impl Member {
    /// A member that cannot follow whatever its sites say (`why`), with none of them.
    pub fn held(name: &str, why: CannotFollow) -> Self {
        Member {
            name: name.to_string(),
            sites: Vec::new(),
            failover_after: Duration::ZERO,
            failback_after: Duration::ZERO,
            held: Some(why),
        }
    }

    /// Why this member does not follow a group of `sites`, if it does not.
    pub fn cannot_follow(&self, sites: &[String]) -> Option<CannotFollow> {
        self.held.clone().or_else(|| {
            sites
                .iter()
                .zip(self.sites.iter().chain(std::iter::repeat(&None)))
                .find(|(_, here)| here.is_none())
                .map(|(site, _)| CannotFollow::LacksSite(site.clone()))
        })
    }

    fn at(&self, site: usize) -> Option<SiteReadiness> {
        self.sites.get(site).copied().flatten()
    }

    fn ready_at(&self, site: usize) -> bool {
        self.at(site).is_some_and(|s| s.ready)
    }
}

/// The readiness of one member in each site: `backend_sites` names the site of each backend
/// (primary first, as `backends`).
pub fn member_sites(
    sites: &[String],
    backend_sites: &[&str],
    backends: &[BackendState],
) -> Vec<Option<SiteReadiness>> {
    sites
        .iter()
        .map(|site| {
            let here: Vec<&BackendState> = backends
                .iter()
                .zip(backend_sites)
                .filter(|(_, s)| **s == site.as_str())
                .map(|(b, _)| b)
                .collect();
            let ready: Vec<DateTime<Utc>> =
                here.iter().filter(|b| b.ready).map(|b| b.since).collect();
            match ready.iter().min() {
                Some(since) => Some(SiteReadiness {
                    ready: true,
                    since: *since,
                }),
                None => here
                    .iter()
                    .map(|b| b.since)
                    .max()
                    .map(|since| SiteReadiness {
                        ready: false,
                        since,
                    }),
            }
        })
        .collect()
}

/// What the group chose last time (from its status).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreviousChoice {
    /// The site, by index in the group's order.
    pub site: usize,
    /// When the group last moved to it.
    pub since: DateTime<Utc>,
}

/// Why the group is where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupRule {
    /// The group had no site yet and took the first where every member is ready (or the first).
    Initial,
    /// Every member that follows is ready in the current site, and no better site is due.
    Steady,
    /// A member (index) is not ready in the current site; its `failoverAfter` keeps the group
    /// there until `due`.
    FailoverPending {
        /// The member.
        trigger: usize,
        /// When the hold falls due.
        due: DateTime<Utc>,
    },
    /// A member (index) stopped being ready in the site the group left (`from`).
    FailedOver {
        /// The member.
        trigger: usize,
        /// The site left.
        from: usize,
    },
    /// Every member is ready in the better site `to`; the longest `failbackAfter` keeps the group
    /// where it is until `due`.
    FailbackPending {
        /// The better site.
        to: usize,
        /// When the hold falls due.
        due: DateTime<Utc>,
    },
    /// The group came back from `from` to a better site.
    FailedBack {
        /// The site left.
        from: usize,
    },
    /// A member (index) is not ready in the current site and no site has every member ready: the
    /// group stays.
    NoSiteReady {
        /// The member.
        trigger: usize,
    },
}

/// The group's choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupChoice {
    /// The site every following member routes to, by index in the group's order.
    pub site: usize,
    /// When the group moved to it.
    pub since: DateTime<Utc>,
    /// Why.
    pub rule: GroupRule,
    /// The members that do not follow (index, why).
    pub held: Vec<(usize, CannotFollow)>,
}

impl GroupChoice {
    /// Whether this choice moved the group.
    pub fn moved(&self) -> bool {
        matches!(
            self.rule,
            GroupRule::FailedOver { .. } | GroupRule::FailedBack { .. }
        )
    }

    /// When to choose again though nothing changed: when a hold falls due.
    pub fn due(&self) -> Option<DateTime<Utc>> {
        match self.rule {
            GroupRule::FailoverPending { due, .. } | GroupRule::FailbackPending { due, .. } => {
                Some(due)
            }
            _ => None,
        }
    }
}

/// Chooses the site of a group of `sites` (in order of preference) for its `members`.
pub fn choose(
    sites: &[String],
    members: &[Member],
    previous: Option<&PreviousChoice>,
    now: DateTime<Utc>,
) -> GroupChoice {
    let held: Vec<(usize, CannotFollow)> = members
        .iter()
        .enumerate()
        .filter_map(|(i, m)| m.cannot_follow(sites).map(|why| (i, why)))
        .collect();
    let followers: Vec<(usize, &Member)> = members
        .iter()
        .enumerate()
        .filter(|(i, _)| !held.iter().any(|(h, _)| h == i))
        .collect();
    let all_ready = |site: usize| followers.iter().all(|(_, m)| m.ready_at(site));
    let first_ready = (0..sites.len()).find(|s| all_ready(*s));
    let choice = |site, since, rule| GroupChoice {
        site,
        since,
        rule,
        held: held.clone(),
    };
    let Some(current) = previous.filter(|p| p.site < sites.len()) else {
        return choice(first_ready.unwrap_or(0), now, GroupRule::Initial);
    };
    let stay = |rule| choice(current.site, current.since, rule);
    if all_ready(current.site) {
        return match first_ready.filter(|b| *b < current.site) {
            Some(better) => {
                let due = failback_due(&followers, better);
                if now >= due {
                    choice(better, now, GroupRule::FailedBack { from: current.site })
                } else {
                    stay(GroupRule::FailbackPending { to: better, due })
                }
            }
            None => stay(GroupRule::Steady),
        };
    }
    let (trigger, due) = failover_due(&followers, current.site);
    if now < due {
        return stay(GroupRule::FailoverPending { trigger, due });
    }
    match first_ready {
        Some(to) => choice(
            to,
            now,
            GroupRule::FailedOver {
                trigger,
                from: current.site,
            },
        ),
        None => stay(GroupRule::NoSiteReady { trigger }),
    }
}

/// The member whose `failoverAfter` falls due first among those not ready in `site`, and when.
fn failover_due(followers: &[(usize, &Member)], site: usize) -> (usize, DateTime<Utc>) {
    followers
        .iter()
        .filter(|(_, m)| !m.ready_at(site))
        .map(|(i, m)| {
            let since = m.at(site).map_or(DateTime::<Utc>::MIN_UTC, |s| s.since);
            (*i, since + to_chrono(m.failover_after))
        })
        .min_by_key(|(i, due)| (*due, *i))
        .unwrap_or((0, DateTime::<Utc>::MIN_UTC))
}

/// When the group may come back to `site`: the longest `failbackAfter` of the members after the
/// last of them became ready there.
fn failback_due(followers: &[(usize, &Member)], site: usize) -> DateTime<Utc> {
    let ready_since = followers
        .iter()
        .filter_map(|(_, m)| m.at(site).map(|s| s.since))
        .max()
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    let hold = followers
        .iter()
        .map(|(_, m)| m.failback_after)
        .max()
        .unwrap_or_default();
    ready_since + to_chrono(hold)
}

fn to_chrono(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

pub use super::plan::Order;

/// Why `policy` cannot follow a group now, whatever its sites: a pin, a suspend, a running
/// drill, or `Proportional` (which shares by health across every backend, in every site).
pub fn held(policy: &ValidPolicy, now: DateTime<Utc>) -> Option<CannotFollow> {
    if policy.pin.is_some() {
        Some(CannotFollow::Pinned)
    } else if policy.suspend {
        Some(CannotFollow::Suspended)
    } else if policy.drill.as_ref().is_some_and(|d| now < d.until) {
        Some(CannotFollow::Drill)
    } else if policy.strategy == Strategy::Proportional {
        Some(CannotFollow::Proportional)
    } else {
        None
    }
}

/// A member as its group reads it: its readiness in each site (from the same backend states its
/// own decision reads), its holds, and why it cannot follow (`claimed_by`: an earlier group
/// that lists it).
pub fn member(
    policy: &ValidPolicy,
    backends: &[BackendState],
    sites: &[String],
    claimed_by: Option<&str>,
    now: DateTime<Utc>,
) -> Member {
    let backend_sites: Vec<&str> = policy
        .backends
        .iter()
        .map(|b| b.site.as_deref().unwrap_or(""))
        .collect();
    Member {
        name: policy.name.to_string(),
        sites: member_sites(sites, &backend_sites, backends),
        failover_after: policy.failover_after.after,
        failback_after: policy.failback_after.after,
        held: claimed_by
            .map(|g| CannotFollow::ClaimedBy(g.to_string()))
            .or_else(|| held(policy, now)),
    }
}

/// The routing of a member that follows its group to `order.site`: the primary alone when it
/// runs there and is ready, else the ready secondaries there, shared as the member's strategy
/// shares them. While none of its backends there is ready (the group has not moved yet), the
/// weights stay as they were; `None` when there were none (the member's own rules decide).
pub fn follow(
    policy: &ValidPolicy,
    backends: &[BackendState],
    order: &Order,
    previous: &Before,
) -> Option<Routing> {
    let ready: Vec<bool> = policy
        .backends
        .iter()
        .zip(backends)
        .map(|(b, state)| state.ready && b.site.as_deref() == Some(order.site.as_str()))
        .collect();
    let weights = if ready.first().copied().unwrap_or(false) {
        none_ready::primary_only(ready.len())
    } else {
        match strategy::secondary_weights(policy, &ready) {
            Some(weights) => weights,
            None => {
                let kept = previous
                    .weights
                    .clone()
                    .filter(|w| w.iter().any(|&x| x > 0))?;
                return Some(Routing {
                    phase: previous.phase.unwrap_or(Phase::FailedOver),
                    weights: kept,
                    rule: Rule::Following,
                });
            }
        }
    };
    let phase = if weights.first().is_some_and(|w| *w > 0) {
        Phase::Primary
    } else {
        Phase::FailedOver
    };
    Some(Routing {
        phase,
        weights,
        rule: Rule::Following,
    })
}

/// The note of a member's transition when its group moved it: the group and the site, not its
/// own primary's readiness.
pub fn announced(
    announcement: Announcement,
    order: Option<&Order>,
    routing: &Routing,
    policy: &ValidPolicy,
) -> Announcement {
    let Some(order) = order else {
        return announcement;
    };
    Announcement {
        message: format!(
            "group {} routes to site {}: traffic moved to {}",
            order.group,
            order.site,
            super::plan::active(policy, &routing.weights).join(", ")
        ),
        ..announcement
    }
}
