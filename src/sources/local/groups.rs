//! The failover groups, as their watch delivers them: each group's sites and members, which
//! group each policy follows (the first by name of those listing it, in its own namespace), and
//! each group's last choice of site.
//!
//! A group names its members by name in its own namespace, so a group reaches no policy of
//! another namespace by construction.

use std::{collections::HashMap, sync::Arc};

use compact_str::CompactString;
use kube::runtime::watcher;
use smallvec::SmallVec;

use crate::sources::{
    namespaces::Namespaces,
    store::{EntryChange, Keep, Store},
};
use failover_core::{
    api::{
        FailoverGroup,
        rules::{MAX_GROUP_MEMBERS, MAX_GROUP_SITES},
    },
    decide::group::PreviousChoice,
    last_status::{Compact, LastGroupStatus},
    observation::PolicyKey,
};

/// A group as the table keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupEntry {
    /// Its namespace and name.
    pub key: PolicyKey,
    /// Its uid (Events name it).
    pub uid: String,
    /// Its `metadata.generation`.
    pub generation: Option<i64>,
    /// Its sites, in order of preference.
    pub sites: Arc<[String]>,
    /// Its members, by name in its namespace (each inline when 24 bytes or shorter).
    pub members: Arc<[CompactString]>,
    /// Its status as the watch last delivered it.
    pub status: Option<LastGroupStatus>,
}

impl GroupEntry {
    /// The keys of its members.
    pub fn member_keys(&self) -> impl Iterator<Item = PolicyKey> + '_ {
        self.members
            .iter()
            .map(|m| PolicyKey::in_namespace(self.key.namespace.clone(), m))
    }

    /// Its choice as its status records it (the site by index, and since when).
    fn recorded_choice(&self) -> Option<PreviousChoice> {
        let status = self.status.as_ref()?;
        let site = self
            .sites
            .iter()
            .position(|s| Some(s.as_str()) == status.site.as_deref())?;
        Some(PreviousChoice {
            site,
            since: status.since?.0,
        })
    }
}

/// How the table keeps a group: by its key, its namespace's name shared with every cache's.
struct Keeping<'a>(&'a Namespaces);

impl Keep<FailoverGroup> for Keeping<'_> {
    type Key = PolicyKey;
    type Entry = GroupEntry;

    fn key(&self, group: &FailoverGroup) -> Option<PolicyKey> {
        self.0.key_of(&group.metadata)
    }

    fn version(&self, group: &FailoverGroup) -> Option<u64> {
        group.metadata.resource_version.as_deref()?.parse().ok()
    }

    fn unchanged(&self, held: &GroupEntry, group: &FailoverGroup) -> bool {
        held.generation == group.metadata.generation
            && held.uid == group.metadata.uid.as_deref().unwrap_or_default()
            && match (&held.status, &group.status) {
                (Some(held), Some(delivered)) => held.is(delivered),
                (held, delivered) => held.is_none() && delivered.is_none(),
            }
    }

    fn entry(&mut self, group: FailoverGroup) -> GroupEntry {
        GroupEntry {
            key: self.key(&group).unwrap_or_else(|| PolicyKey::new("", "")),
            uid: group.metadata.uid.clone().unwrap_or_default(),
            generation: group.metadata.generation,
            sites: group.spec.sites.into(),
            members: group
                .spec
                .members
                .iter()
                .map(|m| m.as_str().into())
                .collect(),
            status: group.status.as_ref().map(LastGroupStatus::of),
        }
    }
}

/// Every group of the watched scope, and who follows which.
#[derive(Debug, Default)]
pub struct GroupTable {
    /// The names its keys share (the caches').
    namespaces: Namespaces,
    store: Store<PolicyKey, GroupEntry>,
    /// Each policy listed by a group: the names of the groups listing it (in its namespace, as a
    /// group lists only policies of its own), in order (it follows the first). Nearly always one,
    /// held inline: a set's node for one group cost more than the policy's whole entry.
    listed_by: HashMap<PolicyKey, SmallVec<[CompactString; 1]>>,
    /// Each group's last choice, as this replica made it (the status's until it does).
    choices: HashMap<PolicyKey, PreviousChoice>,
}

/// What recording a choice did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// Another choice was recorded since the one it was made from: choose again.
    Stale,
    /// The same site as recorded.
    Same,
    /// A site other than the one recorded (or the first).
    Moved,
}

/// A policy's group, as its reconcile reads it.
#[derive(Clone, Debug)]
pub struct Membership {
    /// The group it follows.
    pub group: GroupEntry,
    /// The group's last choice.
    pub choice: Option<PreviousChoice>,
    /// The group's status as the watch delivered it.
    pub status: Option<LastGroupStatus>,
}

impl GroupTable {
    /// An empty table whose keys share the caches' names.
    pub fn new(namespaces: Namespaces) -> Self {
        Self {
            namespaces,
            ..Self::default()
        }
    }

    /// The group `policy` follows, if one lists it. A group outside the CRD's bounds (no site,
    /// or more sites or members than it allows: a CRD older than the controller's let it in)
    /// moves nobody, so no member's reconcile costs more than the bounds allow.
    pub fn membership(&self, policy: &PolicyKey) -> Option<Membership> {
        let key = &self.followed(policy)?;
        let group = self.store.get(key)?.clone();
        if group.sites.is_empty()
            || group.sites.len() > MAX_GROUP_SITES
            || group.members.len() > MAX_GROUP_MEMBERS
        {
            return None;
        }
        let choice = self.choice(key);
        let status = group.status.clone();
        Some(Membership {
            group,
            choice,
            status,
        })
    }

    /// The group `policy` follows when it is not `group` (which lists it too).
    pub fn claimed_by(&self, policy: &PolicyKey, group: &PolicyKey) -> Option<String> {
        let first = self.listed_by.get(policy)?.first()?;
        (*first != group.name).then(|| first.to_string())
    }

    /// The group `policy` follows: the first by name of those listing it.
    fn followed(&self, policy: &PolicyKey) -> Option<PolicyKey> {
        let name = self.listed_by.get(policy)?.first()?;
        Some(PolicyKey {
            namespace: policy.namespace.clone(),
            name: name.clone(),
        })
    }

    /// Records a group's choice made from `based_on` (the choice [`Self::membership`] gave):
    /// stale when another member's reconcile recorded one meanwhile; else whether the site
    /// changed (the first record of a site stands, with its time).
    pub fn record(
        &mut self,
        group: &PolicyKey,
        based_on: Option<&PreviousChoice>,
        choice: PreviousChoice,
    ) -> Recorded {
        let held = self.choice(group);
        if held.as_ref() != based_on {
            return Recorded::Stale;
        }
        if held.is_some_and(|h| h.site == choice.site) {
            return Recorded::Same;
        }
        self.choices.insert(group.clone(), choice);
        Recorded::Moved
    }

    /// A group's last choice: this replica's, else its status's.
    fn choice(&self, group: &PolicyKey) -> Option<PreviousChoice> {
        self.choices
            .get(group)
            .cloned()
            .or_else(|| self.store.get(group)?.recorded_choice())
    }

    /// Applies one watch event; returns the policies to wake (the members of every group whose
    /// spec changed, or that came or went, before and after) and the version through which the
    /// table has every event of its watch, when this event moved it.
    pub fn apply(&mut self, event: watcher::Event<FailoverGroup>) -> (Vec<PolicyKey>, Option<u64>) {
        let applied = self.store.apply(event, &mut Keeping(&self.namespaces));
        let mut wake = Vec::new();
        for change in applied.changes {
            let (key, before) = match change {
                EntryChange::Upserted { key, previous } => (key, previous),
                EntryChange::Deleted { key, entry } => (key, Some(entry)),
            };
            // A status the controller wrote (the only change a watch event may bring besides the
            // spec) wakes nobody: the members chose it.
            let spec_unchanged = before
                .as_ref()
                .zip(self.store.get(&key))
                .is_some_and(|(b, n)| {
                    b.uid == n.uid && b.sites == n.sites && b.members == n.members
                });
            if spec_unchanged {
                continue;
            }
            if let Some(before) = before {
                let moved_sites = self
                    .store
                    .get(&key)
                    .is_none_or(|now| now.sites != before.sites);
                if moved_sites {
                    // A choice is an index into the sites it was made of.
                    self.choices.remove(&key);
                }
                self.unlist(&before);
                wake.extend(before.member_keys());
            }
            if let Some(now) = self.store.get(&key).cloned() {
                for member in now.member_keys() {
                    let groups = self.listed_by.entry(member.clone()).or_default();
                    if let Err(at) = groups.binary_search(&key.name) {
                        groups.insert(at, key.name.clone());
                    }
                    wake.push(member);
                }
            }
        }
        wake.sort();
        wake.dedup();
        (wake, applied.complete_through)
    }

    fn unlist(&mut self, group: &GroupEntry) {
        for member in group.member_keys() {
            if let Some(groups) = self.listed_by.get_mut(&member) {
                groups.retain(|g| *g != group.key.name);
                if groups.is_empty() {
                    self.listed_by.remove(&member);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use failover_core::api::{FailoverGroupSpec, FailoverGroupStatus};

    fn group(ns: &str, name: &str, members: &[&str]) -> FailoverGroup {
        let mut g = FailoverGroup::new(
            name,
            FailoverGroupSpec {
                sites: vec!["east".into(), "west".into()],
                members: members.iter().map(|m| m.to_string()).collect(),
            },
        );
        g.metadata.namespace = Some(ns.into());
        g.metadata.resource_version = Some("1".into());
        g.metadata.generation = Some(1);
        g
    }

    fn key(ns: &str, name: &str) -> PolicyKey {
        PolicyKey::new(ns, name)
    }

    #[test]
    fn a_group_reaches_only_the_policies_of_its_own_namespace() {
        let mut table = GroupTable::default();
        let (woken, _) = table.apply(watcher::Event::Apply(group("team-a", "g", &["web"])));
        assert_eq!(woken, vec![key("team-a", "web")]);
        assert!(table.membership(&key("team-a", "web")).is_some());
        assert!(table.membership(&key("team-b", "web")).is_none());
    }

    #[test]
    fn a_policy_listed_by_two_groups_follows_the_first_by_name_and_the_other_names_it() {
        let mut table = GroupTable::default();
        table.apply(watcher::Event::Apply(group(
            "ns",
            "b-group",
            &["web", "api"],
        )));
        table.apply(watcher::Event::Apply(group("ns", "a-group", &["web"])));
        let web = key("ns", "web");
        let followed = table.membership(&web).expect("a group");
        assert_eq!(followed.group.key, key("ns", "a-group"));
        assert_eq!(
            table.claimed_by(&web, &key("ns", "b-group")).as_deref(),
            Some("a-group")
        );
        assert_eq!(table.claimed_by(&web, &key("ns", "a-group")), None);
        // The first group gone, the second has it.
        let (woken, _) = table.apply(watcher::Event::Delete(group("ns", "a-group", &["web"])));
        assert_eq!(woken, vec![web.clone()]);
        assert_eq!(
            table.membership(&web).expect("a group").group.key,
            key("ns", "b-group")
        );
    }

    #[test]
    fn a_status_written_to_a_group_wakes_nobody() {
        let mut table = GroupTable::default();
        table.apply(watcher::Event::Apply(group("ns", "g", &["web"])));
        let mut written = group("ns", "g", &["web"]);
        written.metadata.resource_version = Some("2".into());
        written.status = Some(FailoverGroupStatus {
            site: Some("east".into()),
            ..Default::default()
        });
        assert_eq!(
            table.apply(watcher::Event::Apply(written)).0,
            Vec::<PolicyKey>::new()
        );
        let mut changed = group("ns", "g", &["web", "api"]);
        changed.metadata.resource_version = Some("3".into());
        changed.metadata.generation = Some(2);
        assert_eq!(
            table.apply(watcher::Event::Apply(changed)).0,
            vec![key("ns", "api"), key("ns", "web")]
        );
    }

    fn at_site(site: &str) -> FailoverGroupStatus {
        FailoverGroupStatus {
            site: Some(site.into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_status_delivered_by_the_watch_is_the_one_written_to_the_millisecond() {
        let mut table = GroupTable::default();
        table.apply(watcher::Event::Apply(group("ns", "g", &["web"])));
        let since = chrono::DateTime::from_timestamp(1_700_000_000, 123_456_789).expect("time");
        let status = FailoverGroupStatus {
            last_transition_time: Some(since.into()),
            ..at_site("west")
        };
        // The API server returns the time as the JSON written kept it.
        let mut delivered = group("ns", "g", &["web"]);
        delivered.metadata.resource_version = Some("2".into());
        delivered.status = serde_json::from_value(serde_json::json!(status)).ok();
        assert_ne!(delivered.status.as_ref(), Some(&status));
        let (woken, seen) = table.apply(watcher::Event::Apply(delivered));
        assert_eq!((woken, seen), (vec![], Some(2)));
        let held = table.membership(&key("ns", "web")).expect("a member");
        assert!(held.status.is_some_and(|s| s.is(&status)));
    }

    #[test]
    fn a_choice_made_from_an_older_one_is_stale_and_a_site_is_recorded_once() {
        let mut table = GroupTable::default();
        table.apply(watcher::Event::Apply(group("ns", "g", &["web"])));
        let g = key("ns", "g");
        let at = |s: i64| PreviousChoice {
            site: 0,
            since: chrono::DateTime::from_timestamp(s, 0).expect("time"),
        };
        assert_eq!(table.record(&g, None, at(1)), Recorded::Moved);
        // Another member, from the same start, chose the same site a moment later: stale.
        assert_eq!(table.record(&g, None, at(2)), Recorded::Stale);
        assert_eq!(table.record(&g, Some(&at(1)), at(2)), Recorded::Same);
        let west = PreviousChoice { site: 1, ..at(3) };
        assert_eq!(
            table.record(&g, Some(&at(1)), west.clone()),
            Recorded::Moved
        );
        assert_eq!(
            table.membership(&key("ns", "web")).and_then(|m| m.choice),
            Some(west)
        );
    }
}
