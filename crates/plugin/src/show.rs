//! `status`: each policy with a per-backend table and its conditions, for people (at most 100
//! columns) or scripts (JSON, YAML).

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use failover_core::api::{
    BackendStatus, Condition, FailoverPolicy, FailoverPolicyStatus, Role, conditions::READY,
};
use kube::ResourceExt;
use serde::Serialize;

use crate::{Format, Verdict};

/// Widest line of text output.
pub const WIDTH: usize = 100;
/// Widest Service name shown in full in a table; longer ones are shortened in the middle.
const NAME_WIDTH: usize = 36;

/// One policy as scripts read it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PolicyView<'a> {
    namespace: String,
    name: String,
    #[serde(flatten)]
    status: Option<&'a FailoverPolicyStatus>,
}

/// The policies in the chosen format.
pub fn render(policies: &[FailoverPolicy], format: Format) -> anyhow::Result<String> {
    let views: Vec<PolicyView> = policies
        .iter()
        .map(|p| PolicyView {
            namespace: p.namespace().unwrap_or_default(),
            name: p.name_any(),
            status: written_status(p),
        })
        .collect();
    Ok(match format {
        Format::Json => serde_json::to_string_pretty(&views)? + "\n",
        Format::Yaml => serde_yaml::to_string(&views)?,
        Format::Text if policies.is_empty() => "No FailoverPolicies found.\n".to_string(),
        Format::Text => {
            let now = Utc::now();
            policies
                .iter()
                .map(|p| text(p, now))
                .collect::<Vec<_>>()
                .join("\n")
        }
    })
}

/// The status the controller wrote, if it wrote one: until then the API server serves the
/// schema's default, `observedGeneration: 0`.
pub fn written_status(policy: &FailoverPolicy) -> Option<&FailoverPolicyStatus> {
    policy
        .status
        .as_ref()
        .filter(|s| s.observed_generation.unwrap_or(0) > 0)
}

/// A condition of the policy's written status.
pub fn condition<'a>(policy: &'a FailoverPolicy, type_: &str) -> Option<&'a Condition> {
    written_status(policy)?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// Ready when every policy's status observes its current spec and says `Ready=True`.
pub fn verdict(policies: &[FailoverPolicy]) -> Verdict {
    let ready = |p: &FailoverPolicy| {
        let current = written_status(p)
            .and_then(|s| s.observed_generation)
            .is_some_and(|g| Some(g) == p.metadata.generation);
        current && condition(p, READY).is_some_and(|c| c.status == "True")
    };
    if policies.iter().all(ready) {
        Verdict::Ready
    } else {
        Verdict::NotReady
    }
}

/// One policy as text.
fn text(policy: &FailoverPolicy, now: DateTime<Utc>) -> String {
    let mut out = String::new();
    let ns = policy.namespace().unwrap_or_default();
    let _ = writeln!(out, "{} (namespace {ns})", policy.name_any());
    let Some(status) = written_status(policy) else {
        out.push_str("  no status yet: is the controller running?\n");
        return out;
    };
    let phase = status.phase.map_or("-".to_string(), |p| p.to_string());
    let route = match status.route() {
        Some((kind, name)) => format!("{kind} {name}"),
        None => "-".to_string(),
    };
    let active = status.active_summary.as_deref().unwrap_or("-");
    let summary = format!(
        "  phase {phase}, strategy {}, {route}, active {active}",
        policy.spec.strategy
    );
    out.push_str(&wrap(&summary, "    "));
    out.push_str(&backend_table(&status.backends, now));
    out.push_str(&capacity_lines(status));
    for parent in &status.route_parents {
        let answer = match parent.accepted.as_deref() {
            Some("True") => "accepted the route".to_string(),
            Some(_) => format!(
                "did not accept the route: {}: {}",
                parent.reason.as_deref().unwrap_or("-"),
                parent.message.as_deref().unwrap_or("")
            ),
            None => "has not answered yet".to_string(),
        };
        let line = format!(
            "  parent {} {}/{}: {answer}",
            parent.kind, parent.namespace, parent.name
        );
        out.push_str(&wrap(&line, "    "));
    }
    for b in &status.backends {
        if let Some(h) = &b.health {
            let value = h.value.map_or("no data".to_string(), |v| v.to_string());
            let verdict = if h.healthy { "healthy" } else { "unhealthy" };
            let line = format!(
                "  health of {}: {value} ({}), {verdict}, read {} ago",
                b.service,
                h.threshold,
                age(now, h.read_at.0)
            );
            out.push_str(&wrap(&line, "    "));
        }
    }
    for c in &status.conditions {
        let line = format!("  {} {} {}: {}", c.type_, c.status, c.reason, c.message);
        out.push_str(&wrap(&line, "      "));
    }
    out
}

/// With `spec.capacity`: the demand, what each backend serves, the unserved share, and the
/// workloads raised for a failover.
fn capacity_lines(status: &FailoverPolicyStatus) -> String {
    let mut out = String::new();
    if let Some(load) = &status.capacity {
        let serves: Vec<String> = status
            .backends
            .iter()
            .map(|b| format!("{} {}", b.service, b.capacity.unwrap_or(0)))
            .collect();
        let line = format!(
            "  capacity: demand {} requests/s, {} unserved; ready capacity {}",
            load.demand,
            load.unserved,
            serves.join(", ")
        );
        out.push_str(&wrap(&line, "    "));
    }
    for w in &status.scaled {
        let state = if w.released {
            "changed by someone since, kept as it is"
        } else {
            "restored after the failback"
        };
        let line = format!(
            "  scaled: {:?} {} from {} to {} for the failover ({state})",
            w.kind, w.name, w.original_replicas, w.replicas
        );
        out.push_str(&wrap(&line, "    "));
    }
    out
}

fn backend_table(backends: &[BackendStatus], now: DateTime<Utc>) -> String {
    let name_width = backends
        .iter()
        .map(|b| b.service.chars().count().min(NAME_WIDTH))
        .chain(std::iter::once("SERVICE".len()))
        .max()
        .unwrap_or(NAME_WIDTH);
    let mut out = format!(
        "  {:<name_width$}  {:<9}  {:<5}  {:>9}  {:>6}  {:>7}  {:>7}\n",
        "SERVICE", "ROLE", "READY", "ENDPOINTS", "WEIGHT", "SHARE", "SINCE"
    );
    for b in backends {
        let role = match b.role {
            Role::Primary => "primary",
            Role::Secondary => "secondary",
        };
        let endpoints = format!("{}/{}", b.ready_endpoints, b.total_endpoints);
        let since = b
            .last_transition_time
            .map_or("-".to_string(), |t| age(now, t.0));
        let _ = writeln!(
            out,
            "  {:<name_width$}  {role:<9}  {:<5}  {endpoints:>9}  {:>6}  {:>7}  {since:>7}",
            shorten(&b.service, NAME_WIDTH),
            if b.ready { "yes" } else { "no" },
            b.weight,
            b.share.as_deref().unwrap_or("-"),
        );
    }
    out
}

/// A name of at most `width` characters: longer ones keep their start and end.
fn shorten(name: &str, width: usize) -> String {
    let chars: Vec<char> = name.chars().collect();
    if chars.len() <= width {
        return name.to_string();
    }
    let keep = width - 1;
    let (head, tail) = (keep / 2, keep - keep / 2);
    let start: String = chars[..head].iter().collect();
    let end: String = chars[chars.len() - tail..].iter().collect();
    format!("{start}~{end}")
}

/// How long ago, in at most two units: `45s`, `3m10s`, `2h5m`, `3d4h`.
pub fn age(now: DateTime<Utc>, then: DateTime<Utc>) -> String {
    let s = (now - then).num_seconds().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        3600..86400 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86400, s % 86400 / 3600),
    }
}

/// Wraps a line at [`WIDTH`] columns on spaces, continuation lines indented.
pub fn wrap(line: &str, indent: &str) -> String {
    let text = line.trim_start();
    let mut out = String::new();
    let mut current = line[..line.len() - text.len()].to_string();
    for word in text.split(' ') {
        let fits = current.chars().count() + 1 + word.chars().count() <= WIDTH;
        if !current.trim().is_empty() && !fits {
            out.push_str(current.trim_end());
            out.push('\n');
            current = indent.to_string();
        } else if !current.trim().is_empty() {
            current.push(' ');
        }
        current.push_str(word);
    }
    out.push_str(current.trim_end());
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_wrap_within_the_width() {
        let line = format!("  Ready True FailedOver: {}", "word ".repeat(60));
        for l in wrap(&line, "      ").lines() {
            assert!(l.chars().count() <= WIDTH, "{l}");
        }
    }

    #[test]
    fn wrapping_keeps_the_first_lines_indent() {
        assert_eq!(wrap("  a b", "    "), "  a b\n");
    }

    #[test]
    fn long_names_keep_their_ends() {
        let name = "a".repeat(30) + &"b".repeat(33);
        let short = shorten(&name, NAME_WIDTH);
        assert_eq!(short.chars().count(), NAME_WIDTH);
        assert!(short.starts_with("aaa") && short.ends_with("bbb") && short.contains('~'));
    }

    #[test]
    fn ages_use_two_units() {
        let now = Utc::now();
        let ago = |s: i64| age(now, now - chrono::Duration::seconds(s));
        assert_eq!(ago(45), "45s");
        assert_eq!(ago(190), "3m10s");
        assert_eq!(ago(7500), "2h5m");
        assert_eq!(ago(3 * 86400 + 4 * 3600), "3d4h");
    }
}
