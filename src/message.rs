//! Every message a person reads, built in one place: a status condition's or backend's message,
//! an Event's note, a log line's error, what the plugin prints. Each is one line of at most
//! [`MAX_MESSAGE`] characters ([`line`]).
//!
//! Errors are described by what they say first and by their causes, each cause by its first
//! line ([`describe`], [`with_causes`]): a parser's caret drawing or a dump of the input it
//! choked on never reaches a reader. Errors about a Secret's content name the Secret and the
//! position, never the content (see the remote clusters' Secret reader).

use std::fmt::Write as _;

/// Longest message written; longer ones are cut at a word and end with `...`.
pub const MAX_MESSAGE: usize = 200;

/// `text` as one line: its first line only, runs of white space as one space, at most
/// [`MAX_MESSAGE`] characters (cut at a word, ending with `...`).
pub fn line(text: &str) -> String {
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let mut one = String::with_capacity(first.len().min(4 * MAX_MESSAGE));
    for word in first.split_whitespace() {
        if !one.is_empty() {
            one.push(' ');
        }
        one.push_str(word);
        if one.len() > 4 * MAX_MESSAGE {
            break;
        }
    }
    bounded(one)
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

/// An API error as a short sentence: the API server's own message and reason, not the client's
/// debug dump.
pub fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if !status.message.is_empty() && !status.reason.is_empty() => {
            line(&format!("{} ({})", status.message, status.reason))
        }
        kube::Error::Api(status) if !status.message.is_empty() => line(&status.message),
        kube::Error::Api(status) => line(&format!("HTTP {} {}", status.code, status.reason)),
        other => with_causes(other),
    }
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
    fn only_the_first_line_is_kept() {
        let text = "cannot parse: line 1 column 10\n --> <input>:1:10\n  |\n1 | token: abc\n";
        assert_eq!(line(text), "cannot parse: line 1 column 10");
        assert_eq!(line("\n\n  spaced   out \t words \n"), "spaced out words");
    }
}
