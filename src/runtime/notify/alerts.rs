//! Alerts to the cluster admin's Alertmanager (API v2), as Prometheus sends them: every alert
//! that fires is posted whenever one changes and again every resend interval, with an end four
//! intervals ahead, so a restarted controller or a restarted Alertmanager converges (one that
//! is no longer sent ends by itself); an alert that stops firing is posted once more with its
//! end set to when it stopped, so it resolves at once.
//!
//! A policy fires at most one alert: `FailoverPolicyNoReadyBackend` (critical),
//! `FailoverPolicyFailedOver` (warning) or `FailoverPolicyDrill` (info), unless its
//! `spec.notifications.alerts` says otherwise. Its labels are its own namespace, name and
//! group, the `Ready` reason and the severity; its one annotation, `summary`, says where its
//! traffic went and why, in one line. Only the leader posts.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use failover_core::{
    api::{
        FailoverPolicyStatus, Phase, Severity, Timestamp,
        conditions::{DRILL, READY},
    },
    message,
    observation::PolicyKey,
    policy::ValidPolicy,
};

/// A policy's alert while it fires.
#[derive(Clone, Debug, PartialEq)]
pub struct Alert {
    /// `alertname`.
    pub name: &'static str,
    /// `severity`.
    pub severity: &'static str,
    /// `reason`: the `Ready` condition's.
    pub reason: String,
    /// `group`, when the policy follows one.
    pub group: Option<String>,
    /// The `summary` annotation.
    pub summary: String,
    /// When it started firing.
    pub since: DateTime<Utc>,
}

impl Alert {
    /// The alert a policy's status calls for, if any (`now`: when it starts, unless its status
    /// says when traffic left the primary).
    pub fn of(
        policy: &ValidPolicy,
        group: Option<&str>,
        status: &FailoverPolicyStatus,
        now: DateTime<Utc>,
    ) -> Option<Self> {
        let spec = policy
            .notifications
            .as_ref()
            .and_then(|n| n.alerts.as_ref());
        if spec.is_some_and(|a| a.disabled) {
            return None;
        }
        let drill = status
            .conditions
            .iter()
            .any(|c| c.type_ == DRILL && c.status == "True");
        let (name, severity, since) = match status.phase? {
            _ if drill => ("FailoverPolicyDrill", Severity::Info, None),
            Phase::NoReadyBackend => ("FailoverPolicyNoReadyBackend", Severity::Critical, None),
            Phase::FailedOver => (
                "FailoverPolicyFailedOver",
                Severity::Warning,
                status.last_failover_time,
            ),
            Phase::Primary => return None,
        };
        let ready = status.conditions.iter().find(|c| c.type_ == READY);
        let active = status.active_summary.as_deref().unwrap_or("no backend");
        let why = ready.map_or("", |c| c.message.as_str());
        Some(Self {
            name,
            severity: spec.and_then(|a| a.severity).unwrap_or(severity).as_str(),
            reason: ready.map_or_else(String::new, |c| c.reason.clone()),
            group: group.map(str::to_string),
            summary: message::line(&format!(
                "traffic of apex Service {} goes to {active}: {why}",
                policy.service
            )),
            since: since.map_or(now, |t: Timestamp| t.0),
        })
    }

    /// Whether `other` is this alert, said again (its start kept).
    fn same(&self, other: &Alert) -> bool {
        Alert {
            since: self.since,
            ..other.clone()
        } == *self
    }

    /// Whether `other` has this alert's labels: Alertmanager takes it for the same alert.
    fn same_labels(&self, other: &Alert) -> bool {
        (self.name, self.severity, &self.reason, &self.group)
            == (other.name, other.severity, &other.reason, &other.group)
    }

    /// As Alertmanager's API takes it, ending at `ends` (never before it started).
    fn body(&self, key: &PolicyKey, ends: DateTime<Utc>) -> Value {
        let ends = ends.max(self.since);
        let mut labels = json!({
            "alertname": self.name,
            "namespace": &*key.namespace,
            "policy": key.name.as_str(),
            "reason": self.reason,
            "severity": self.severity,
        });
        if let Some(group) = &self.group {
            labels["group"] = json!(group);
        }
        json!({
            "labels": labels,
            "annotations": { "summary": self.summary },
            "startsAt": Timestamp(self.since).to_string(),
            "endsAt": Timestamp(ends).to_string(),
        })
    }
}

/// The alerts firing, and those that stopped and are yet to be posted resolved.
#[derive(Debug, Default)]
pub struct Table {
    firing: HashMap<PolicyKey, Alert>,
    resolved: Vec<(PolicyKey, Alert, DateTime<Utc>)>,
}

impl Table {
    /// Records what a policy's alert is now; whether that changed anything.
    pub fn set(&mut self, key: &PolicyKey, alert: Option<Alert>, now: DateTime<Utc>) -> bool {
        let old = self.firing.get(key);
        match (old, alert) {
            (None, None) => false,
            (Some(old), Some(new)) if old.same(&new) => false,
            (Some(old), Some(new)) if old.same_labels(&new) => {
                let since = old.since;
                self.firing.insert(key.clone(), Alert { since, ..new });
                true
            }
            (_, new) => {
                if let Some(old) = self.firing.remove(key) {
                    self.resolved.push((key.clone(), old, now));
                }
                if let Some(new) = new {
                    self.firing.insert(key.clone(), new);
                }
                true
            }
        }
    }

    /// The body of one post: every alert resolved (first, so an alert that fired again after
    /// it is said firing last), then every one firing, ending four `resend` intervals after
    /// `now`; with how many resolved ones it holds (taken once posted). A resolved alert not
    /// posted within four intervals is dropped unposted: Alertmanager has let it end by then.
    pub fn batch(
        &mut self,
        now: DateTime<Utc>,
        resend: std::time::Duration,
    ) -> (Vec<Value>, usize) {
        let lasts = chrono::Duration::from_std(resend * 4).unwrap_or_default();
        self.resolved.retain(|(_, _, at)| *at + lasts > now);
        let resolved = self.resolved.iter().map(|(key, a, at)| a.body(key, *at));
        let firing = self.firing.iter().map(|(key, a)| a.body(key, now + lasts));
        (resolved.chain(firing).collect(), self.resolved.len())
    }

    /// Forgets the first `posted` resolved alerts: Alertmanager has them.
    pub fn posted(&mut self, posted: usize) {
        self.resolved.drain(..posted.min(self.resolved.len()));
    }

    /// How many alerts fire.
    pub fn firing(&self) -> usize {
        self.firing.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(name: &'static str, summary: &str, at: i64) -> Alert {
        Alert {
            name,
            severity: "warning",
            reason: "FailedOver".into(),
            group: None,
            summary: summary.into(),
            since: DateTime::from_timestamp(at, 0).unwrap_or_default(),
        }
    }

    #[test]
    fn an_alert_fires_until_it_stops_then_is_posted_resolved_once_with_its_end() {
        let key = PolicyKey::new("shop", "web");
        let mut table = Table::default();
        let t = |s| DateTime::from_timestamp(s, 0).unwrap_or_default();
        assert!(table.set(
            &key,
            Some(alert("FailoverPolicyFailedOver", "a", 10)),
            t(10)
        ));
        // Said again, later: the same alert, its start kept.
        assert!(!table.set(
            &key,
            Some(alert("FailoverPolicyFailedOver", "a", 20)),
            t(20)
        ));
        let resend = std::time::Duration::from_secs(60);
        let (body, resolved) = table.batch(t(30), resend);
        assert_eq!((body.len(), resolved), (1, 0));
        assert_eq!(body[0]["startsAt"], "1970-01-01T00:00:10.000Z");
        assert_eq!(body[0]["endsAt"], "1970-01-01T00:04:30.000Z");
        assert_eq!(body[0]["labels"]["policy"], "web");
        // Another alert for the policy: the first is resolved at that instant.
        assert!(table.set(
            &key,
            Some(alert("FailoverPolicyNoReadyBackend", "b", 40)),
            t(40)
        ));
        // Its reason changed: another alert to Alertmanager, so the one before resolves.
        let mut other = alert("FailoverPolicyNoReadyBackend", "b", 45);
        other.reason = "TrafficSplitWriteFailed".into();
        assert!(table.set(&key, Some(other), t(45)));
        assert!(table.set(&key, None, t(50)));
        let (body, resolved) = table.batch(t(60), resend);
        assert_eq!((body.len(), resolved, table.firing()), (3, 3, 0));
        let ends: Vec<&str> = body.iter().filter_map(|b| b["endsAt"].as_str()).collect();
        assert_eq!(
            ends,
            [
                "1970-01-01T00:00:40.000Z",
                "1970-01-01T00:00:45.000Z",
                "1970-01-01T00:00:50.000Z"
            ]
        );
        table.posted(resolved);
        assert!(table.batch(t(70), resend).0.is_empty());
        // Not posted within four intervals: dropped.
        let again = alert("FailoverPolicyFailedOver", "a", 80);
        assert!(table.set(&key, Some(again), t(80)));
        assert!(table.set(&key, None, t(90)));
        assert!(table.batch(t(90 + 240), resend).0.is_empty());
    }
}
