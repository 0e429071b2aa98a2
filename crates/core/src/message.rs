//! Every message a person reads, built in one place: a status condition's or backend's message,
//! an Event's note, a log line's error, what the plugin prints. Each is one line of at most
//! [`MAX_MESSAGE`] characters ([`line`]).
//!
//! Errors are described by what they say first and by their causes, each cause by its first
//! line ([`with_causes`]): a parser's caret drawing or a dump of the input it
//! choked on never reaches a reader. Errors about a Secret's content name the Secret and the
//! position, never the content (see the remote clusters' Secret reader). As a second line of
//! defence, [`line`] hides what looks like a credential: the value after `token`, `password`,
//! `secret`, `authorization` or a kubeconfig's `*-data` key, and any long run of base64 or JWT
//! characters mixing capitals and digits (a DNS name never does).

use std::fmt::Write as _;

/// Longest message written; longer ones are cut at a word and end with `...`.
pub const MAX_MESSAGE: usize = 200;

/// What stands in for a hidden credential.
pub const REDACTED: &str = "[redacted]";

/// `text` as one line: its first line only, runs of white space as one space, control and
/// bidirectional-formatting characters dropped, credentials hidden, at most [`MAX_MESSAGE`]
/// characters (cut at a word, ending with `...`).
pub fn line(text: &str) -> String {
    let first = text
        .split(['\n', '\r'])
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let printable: String;
    let first = if first.chars().any(unprintable) {
        printable = first
            .chars()
            .map(|c| if c == '\t' { ' ' } else { c })
            .filter(|c| !unprintable(*c))
            .collect();
        printable.as_str()
    } else {
        first
    };
    let mut one = String::with_capacity(first.len().min(4 * MAX_MESSAGE));
    let mut hide_next = false;
    for word in first.split_whitespace() {
        if !one.is_empty() {
            one.push(' ');
        }
        if hide_next || looks_like_a_credential(word) {
            one.push_str(REDACTED);
        } else {
            one.push_str(word);
        }
        hide_next = names_a_credential(word);
        if one.len() > 4 * MAX_MESSAGE {
            break;
        }
    }
    bounded(one)
}

/// A character that must not reach a terminal from a message: a C0 or C1 control character
/// (an escape sequence starts with one and can move the cursor or rewrite lines) or a Unicode
/// formatting character that reorders or hides text (bidirectional overrides, zero-width ones).
pub fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
}

/// `text` for a terminal, whole: every [`unprintable`] character written as its escape
/// (`\u{1b}`), so what a status holds is shown, never obeyed. For what the plugin prints.
pub fn escaped(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(unprintable) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unprintable(c) {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Keys whose value is a credential.
const CREDENTIAL_KEYS: [&str; 6] = [
    "token",
    "password",
    "secret",
    "authorization",
    "-data",
    "apikey",
];

/// A word that introduces a credential (`token:`, `password=`, `client-key-data:`, `Bearer`),
/// so that the word after it is hidden.
fn names_a_credential(word: &str) -> bool {
    let key = word
        .trim_end_matches([':', '='])
        .trim_matches(['"', '\'', '{', ','])
        .to_ascii_lowercase();
    let introduces = word.ends_with(':') || word.ends_with('=');
    key == "bearer"
        || key == "basic"
        || (introduces && CREDENTIAL_KEYS.iter().any(|k| key.ends_with(k)))
}

/// A word that is a credential itself: `key=value` or `key:value` with a credential key, or a
/// long run of base64 or JWT characters with capitals and digits (a DNS name has no capital).
fn looks_like_a_credential(word: &str) -> bool {
    if let Some((key, value)) = word.split_once(['=', ':'])
        && !value.is_empty()
        && CREDENTIAL_KEYS.iter().any(|k| {
            key.trim_matches(['"', '\''])
                .to_ascii_lowercase()
                .ends_with(k)
        })
    {
        return true;
    }
    let base64 = |c: char| c.is_ascii_alphanumeric() || "+/=._-".contains(c);
    let token = word.trim_matches(|c: char| !base64(c));
    token.len() >= 32
        && token.chars().all(base64)
        && token.chars().any(|c| c.is_ascii_uppercase())
        && token.chars().any(|c| c.is_ascii_digit())
}

/// A one-line text cut to [`MAX_MESSAGE`] characters at a word boundary.
fn bounded(text: String) -> String {
    if text.chars().count() <= MAX_MESSAGE {
        return text;
    }
    let cut: String = text.chars().take(MAX_MESSAGE - 3).collect();
    let at = cut.rfind(' ').filter(|at| *at > 0).unwrap_or(cut.len());
    format!("{}...", cut[..at].trim_end())
}

/// An error and the causes under it, each by its first line, as one line:
/// `client error (Connect): tcp connect error: Connection refused (os error 111)`.
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = first_line(&error.to_string());
    let mut cause = error.source();
    while let Some(c) = cause {
        let said = first_line(&c.to_string());
        if !said.is_empty() && !text.contains(&said) {
            let _ = write!(text, ": {said}");
        }
        cause = c.source();
    }
    line(&text)
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_at_a_word() {
        let long = "word ".repeat(100);
        let cut = line(&long);
        assert!(cut.chars().count() <= MAX_MESSAGE, "{}", cut.len());
        assert!(cut.ends_with("word..."), "{cut}");
        assert_eq!(line("short"), "short");
    }

    #[test]
    fn credentials_are_hidden() {
        let jwt = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEyMyJ9.eyJzdWIiOiJhIn0.c2lnbmF0dXJlMTIz";
        for text in [
            format!("bad user: token: {jwt}"),
            format!("Authorization: Bearer {jwt}"),
            format!("password=hunter2 and {jwt}"),
            "client-key-data: LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JSUV2".to_string(),
        ] {
            let said = line(&text);
            assert!(said.contains(REDACTED), "{said}");
            for secret in [
                jwt,
                "hunter2",
                "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JSUV2",
            ] {
                assert!(!said.contains(secret), "{said}");
            }
        }
        assert_eq!(
            line("cluster east-production-eu-central-1-replica-0003 is not declared"),
            "cluster east-production-eu-central-1-replica-0003 is not declared"
        );
    }

    proptest::proptest! {
        /// Whatever an error says, the message is one line of at most MAX_MESSAGE characters,
        /// with no control character.
        #[test]
        fn any_text_becomes_one_bounded_line(text in "(?s).{0,2000}") {
            let said = line(&text);
            proptest::prop_assert!(said.chars().count() <= MAX_MESSAGE);
            proptest::prop_assert!(!said.contains('\n') && !said.contains('\r'));
            proptest::prop_assert!(!said.chars().any(unprintable), "{:?}", said);
        }

        /// Escape sequences, C1 controls and bidirectional overrides among words never reach a
        /// message, and the words around them do.
        #[test]
        fn control_characters_never_reach_a_message(
            words in proptest::collection::vec("[a-z]{1,8}", 1..6),
            controls in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::char::range('\u{0}', '\u{1f}'),
                    proptest::char::range('\u{7f}', '\u{9f}'),
                    proptest::char::range('\u{202a}', '\u{202e}'),
                ],
                1..6,
            ),
        ) {
            let mut text = String::new();
            for (i, word) in words.iter().enumerate() {
                text.push_str(word);
                text.push(controls[i % controls.len()]);
                text.push_str("[1A[2K");
            }
            let said = line(&text);
            proptest::prop_assert!(!said.chars().any(unprintable), "{:?}", said);
            let shown = escaped(&text);
            proptest::prop_assert!(!shown.chars().any(unprintable), "{:?}", shown);
            proptest::prop_assert!(shown.contains(words[0].as_str()));
        }

        /// A token anywhere in a kubeconfig an error quotes never shows.
        #[test]
        fn a_quoted_kubeconfigs_token_never_shows(
            token in "[A-Za-z0-9]{8}[A-Z][0-9][A-Za-z0-9]{30,60}",
            noise in "[ -~]{0,300}",
            cut in 0usize..3,
        ) {
            let kubeconfig = format!(
                "apiVersion: v1\nusers:\n- name: reader\n  user:\n    token: {token}\n"
            );
            let text = match cut {
                0 => format!("failed to parse kubeconfig: {noise} {kubeconfig}"),
                1 => format!("invalid type: string \"{token}\", expected a map {noise}"),
                _ => format!("{noise} token: {token}"),
            };
            let said = line(&text);
            proptest::prop_assert!(!said.contains(&token), "{}", said);
        }
    }

    #[test]
    fn an_escape_sequence_in_a_query_is_neither_written_nor_obeyed() {
        let query = "sum(x{a=~\"\u{1b}[1A\u{1b}[2K(\"})";
        assert_eq!(line(query), "sum(x{a=~\"[1A[2K(\"})");
        assert_eq!(escaped(query), "sum(x{a=~\"\\u{1b}[1A\\u{1b}[2K(\"})");
        assert_eq!(line("a\tb\u{202e}c"), "a bc");
    }

    #[test]
    fn only_the_first_line_is_kept() {
        let text = "cannot parse: line 1 column 10\n --> <input>:1:10\n  |\n1 | token: abc\n";
        assert_eq!(line(text), "cannot parse: line 1 column 10");
        assert_eq!(line("\n\n  spaced   out \t words \n"), "spaced out words");
    }
}
