//! The scenario's arguments as the command line writes them: `--health SERVICE=VALUE`,
//! `--ready BACKEND=N`, `--at DURATION`.

use std::time::Duration;

/// Parses `--health SERVICE=VALUE`.
pub fn parse_health(text: &str) -> Result<(String, f64), String> {
    let form = Form {
        value: "VALUE",
        example: "web=0.3",
        what: "a number",
    };
    parse_pair(text, form, |value: &f64| {
        (!value.is_finite()).then_some("is not a finite number")
    })
}

/// Parses `--ready BACKEND=N`.
pub fn parse_ready(text: &str) -> Result<(String, i32), String> {
    let form = Form {
        value: "COUNT",
        example: "web=2",
        what: "a count of endpoints",
    };
    parse_pair(text, form, |count: &i32| {
        (*count < 0).then_some("is not a count of endpoints: it is 0 or more")
    })
}

/// How a `SERVICE=VALUE` argument is written, for its errors.
struct Form {
    /// The value's placeholder.
    value: &'static str,
    /// An example of the argument.
    example: &'static str,
    /// What the value is.
    what: &'static str,
}

/// Parses `SERVICE=VALUE` written in `form`; `refused` says why a parsed value does not do, if
/// it does not.
fn parse_pair<T: std::str::FromStr + std::fmt::Display>(
    text: &str,
    form: Form,
    refused: impl Fn(&T) -> Option<&'static str>,
) -> Result<(String, T), String> {
    let Form {
        value: placeholder,
        example,
        what,
    } = form;
    let (service, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text}: expected SERVICE={placeholder}, e.g. {example}"))?;
    let parsed: T = value
        .parse()
        .map_err(|_| format!("{text}: {value} is not {what}"))?;
    match refused(&parsed) {
        Some(why) => Err(format!("{text}: {parsed} {why}")),
        None => Ok((service.to_string(), parsed)),
    }
}

/// Parses `--at` (`5m`, or `+5m`).
pub fn parse_at(text: &str) -> Result<Duration, String> {
    failover_core::api::rules::parse_duration(text.strip_prefix('+').unwrap_or(text))
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_values_ready_counts_and_offsets_parse_as_written() {
        assert_eq!(parse_health("web=0.3"), Ok(("web".into(), 0.3)));
        assert_eq!(
            parse_health("web"),
            Err("web: expected SERVICE=VALUE, e.g. web=0.3".into())
        );
        assert_eq!(
            parse_health("web=NaN"),
            Err("web=NaN: NaN is not a finite number".into())
        );
        assert_eq!(parse_ready("web=2"), Ok(("web".into(), 2)));
        assert_eq!(
            parse_ready("web=two"),
            Err("web=two: two is not a count of endpoints".into())
        );
        assert_eq!(
            parse_ready("web=-1"),
            Err("web=-1: -1 is not a count of endpoints: it is 0 or more".into())
        );
        assert_eq!(parse_at("+5m"), Ok(Duration::from_secs(300)));
    }
}
