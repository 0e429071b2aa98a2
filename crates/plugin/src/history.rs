//! `history`: the policy's last transitions as the controller recorded them in `status.history`,
//! for people (one row per transition, the newest last, as a log reads) or scripts (the entries
//! themselves, as JSON or YAML).
//!
//! The table shows every cell whole: a transition's weights and reason are what someone looking
//! back needs, so its rows are as wide as they are (unlike `status`, it does not keep to 100
//! columns); `-o json` has the same entries for a script.

use std::fmt::Write as _;

use chrono::SecondsFormat;
use failover_core::{
    api::{FailoverPolicy, HistoryEntry},
    message::{escaped, unprintable},
};
use kube::ResourceExt;

use crate::Format;

/// The columns of the table, in order.
const HEADER: [&str; 7] = [
    "ID",
    "TIME",
    "TRANSITION",
    "FROM",
    "TO",
    "TRIGGER",
    "REASON",
];

/// The transitions the status holds, oldest first; none before the controller records one.
pub fn entries(policy: &FailoverPolicy) -> &[HistoryEntry] {
    policy.status.as_ref().map_or(&[], |s| s.history.as_slice())
}

/// The policy's history in the chosen format.
pub fn render(policy: &FailoverPolicy, format: Format) -> anyhow::Result<String> {
    let history = entries(policy);
    Ok(match format {
        Format::Json => terminal_safe_json(&serde_json::to_string_pretty(history)?) + "\n",
        Format::Yaml => serde_yaml::to_string(history)?,
        Format::Text if history.is_empty() => format!(
            "no transitions recorded for {}/{}\n",
            policy.namespace().unwrap_or_default(),
            policy.name_any()
        ),
        Format::Text => table(history),
    })
}

/// JSON with every unprintable character but the line breaks written as a JSON escape
/// (`\u200b`): serde leaves some (DEL, C1 controls, zero-width and bidirectional marks) as they
/// are, and the plugin's `screen` would then write them as `\u{200b}`, which is not JSON. Outside
/// strings pretty JSON holds only spaces and line breaks, so this changes no value: a script
/// reads the entries exactly.
fn terminal_safe_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if c != '\n' && unprintable(c) {
            let mut units = [0; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A header and one row per transition, by id so the newest is the last line; columns two
/// spaces apart, the ids right-aligned, the reason last and unpadded.
fn table(history: &[HistoryEntry]) -> String {
    let mut sorted: Vec<&HistoryEntry> = history.iter().collect();
    sorted.sort_by_key(|e| e.id);
    // Each cell as it is printed (control characters escaped), so the widths are the printed
    // ones.
    let rows: Vec<[String; 7]> = sorted
        .iter()
        .map(|e| {
            [
                e.id.to_string(),
                e.time.0.to_rfc3339_opts(SecondsFormat::Secs, true),
                escaped(&e.transition).into_owned(),
                escaped(&e.from).into_owned(),
                escaped(&e.to).into_owned(),
                escaped(&e.trigger).into_owned(),
                escaped(&e.reason).into_owned(),
            ]
        })
        .collect();
    let mut widths = HEADER.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(HEADER.map(String::from)).chain(rows) {
        let [id, time, transition, from, to, trigger, reason] = &row;
        let [w_id, w_time, w_transition, w_from, w_to, w_trigger, _] = widths;
        let line = format!(
            "{id:>w_id$}  {time:<w_time$}  {transition:<w_transition$}  {from:<w_from$}  \
             {to:<w_to$}  {trigger:<w_trigger$}  {reason}"
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;
    use failover_core::api::{
        FailoverPolicySpec, FailoverPolicyStatus, SecondaryBackend, Timestamp,
    };

    fn entry(id: u64, transition: &str, from: &str, to: &str, trigger: &str) -> HistoryEntry {
        HistoryEntry {
            id,
            time: Timestamp(
                DateTime::from_timestamp(1_800_000_000 + 60 * id as i64, 0).unwrap_or_default(),
            ),
            transition: transition.into(),
            from: from.into(),
            to: to.into(),
            trigger: trigger.into(),
            reason: format!("{transition} because of {trigger}"),
        }
    }

    fn policy(history: Vec<HistoryEntry>) -> FailoverPolicy {
        let spec = FailoverPolicySpec {
            service: "web".into(),
            primary: "web".into(),
            secondaries: vec![SecondaryBackend::new("web-east")],
            ..Default::default()
        };
        let mut policy = FailoverPolicy::new("web", spec);
        policy.metadata.namespace = Some("shop".into());
        policy.status = Some(FailoverPolicyStatus {
            observed_generation: Some(1),
            history,
            ..Default::default()
        });
        policy
    }

    /// Every row's reason starts where the header's REASON does, two spaces after the trigger.
    fn reason_column_aligned(text: &str) {
        let header = text.lines().next().expect("header");
        let at = header.find("REASON").expect("REASON");
        for line in text.lines().skip(1) {
            let chars: Vec<char> = line.chars().collect();
            assert!(
                chars[at - 2..at] == [' ', ' '] && chars[at] != ' ',
                "reason not at column {at}:\n{text}"
            );
        }
    }

    fn two() -> Vec<HistoryEntry> {
        vec![
            entry(
                1,
                "FailedOver",
                "web=1,web-east=0",
                "web=0,web-east=1",
                "web not ready",
            ),
            entry(
                2,
                "FailedBack",
                "web=0,web-east=1",
                "web=1,web-east=0",
                "web ready",
            ),
        ]
    }

    #[test]
    fn the_table_has_a_header_and_a_row_per_transition_the_newest_last() {
        let text = render(&policy(two()), Format::Text).expect("text");
        let expected = "\
ID  TIME                  TRANSITION  FROM              TO                TRIGGER        REASON
 1  2027-01-15T08:01:00Z  FailedOver  web=1,web-east=0  web=0,web-east=1  web not ready  FailedOver because of web not ready
 2  2027-01-15T08:02:00Z  FailedBack  web=0,web-east=1  web=1,web-east=0  web ready      FailedBack because of web ready
";
        assert_eq!(text, expected);
    }

    #[test]
    fn rows_follow_the_ids_whatever_the_order_kept() {
        let mut history = two();
        history.push(entry(
            10,
            "NoReadyBackend",
            "web=1,web-east=0",
            "web=1,web-east=0",
            "x",
        ));
        history.reverse();
        let text = render(&policy(history), Format::Text).expect("text");
        let ids: Vec<&str> = text
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(ids, ["1", "2", "10"], "{text}");
        reason_column_aligned(&text);
        assert!(
            text.lines().nth(3).is_some_and(|l| l.starts_with("10  ")),
            "{text}"
        );
    }

    #[test]
    fn control_characters_are_escaped_and_keep_the_columns_aligned() {
        let mut history = two();
        history[0].trigger = "web\u{1b}[2J not ready".into();
        let text = render(&policy(history), Format::Text).expect("text");
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(text.contains("web\\u{1b}[2J not ready"), "{text}");
        reason_column_aligned(&text);
    }

    #[test]
    fn no_transitions_is_one_line() {
        let text = render(&policy(vec![]), Format::Text).expect("text");
        assert_eq!(text, "no transitions recorded for shop/web\n");
        let mut no_status = policy(vec![]);
        no_status.status = None;
        assert_eq!(render(&no_status, Format::Text).expect("text"), text);
    }

    #[test]
    fn json_is_the_entries_themselves() {
        let json = render(&policy(two()), Format::Json).expect("json");
        let parsed: Vec<HistoryEntry> = serde_json::from_str(&json).expect("parses");
        assert_eq!(parsed, two());
        let value: serde_json::Value = serde_json::from_str(&json).expect("parses");
        assert_eq!(value[0]["transition"], "FailedOver");
        assert_eq!(value[1]["time"], "2027-01-15T08:02:00.000Z");
        let mut keys: Vec<&str> = value[0]
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "from",
                "id",
                "reason",
                "time",
                "to",
                "transition",
                "trigger"
            ]
        );
        assert!(
            json.ends_with("]\n") && json.contains("\n  {"),
            "pretty: {json}"
        );
    }

    #[test]
    fn json_escapes_what_a_terminal_would_obey_and_parses_to_the_same_entries() {
        let mut history = two();
        history[0].reason = "a\u{200b}b\u{202e}c\u{1b}d\u{85}e\u{7f}".into();
        let json = render(&policy(history.clone()), Format::Json).expect("json");
        assert!(!json.chars().any(|c| c != '\n' && unprintable(c)), "{json}");
        assert_eq!(crate::screen(&json), json);
        let parsed: Vec<HistoryEntry> = serde_json::from_str(&json).expect("parses");
        assert_eq!(parsed, history);
    }

    #[test]
    fn json_with_no_transitions_is_an_empty_array() {
        assert_eq!(render(&policy(vec![]), Format::Json).expect("json"), "[]\n");
        let yaml = render(&policy(vec![]), Format::Yaml).expect("yaml");
        assert_eq!(yaml.trim(), "[]");
    }
}
