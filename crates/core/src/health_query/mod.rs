//! A health query as the controller holds it: its cost bounded before it is parsed, parsed once
//! per policy generation, scoped to the policy's namespace once, and filled in per backend.
//!
//! **Cost.** `promql-parser` compiles every `=~` and `!~` value with the regex crate at its
//! default size limit of 10 MiB, and its tree and printing recurse as deep as the query nests.
//! A query is a tenant's text, so [`HealthQuery::parse`] reads it on a thread of its own
//! ([`guard`]: a set stack, a panic is a refusal) and, before it is parsed, checks in this order,
//! each refusal naming its limit:
//!
//! 1. the text: at most [`MAX_QUERY_LENGTH`] characters, no counted repetition of three digits
//!    (`{100}`, as the CRD's CEL rule reads the text) and none of the controller's own marker
//!    names (`__failover_…`);
//! 2. the tokens of the parser's own lexer ([`reading`]): at most [`MAX_REGEX_MATCHERS`] regex
//!    matchers, a depth of at most [`MAX_QUERY_DEPTH`], durations that a duration holds, and the
//!    placeholders inside strings;
//! 3. each regex value at most [`MAX_REGEX_LENGTH`] characters, compiled as the parser first
//!    compiles it (anchored) within [`REGEX_SIZE_LIMIT`] bytes, which stops a compile early
//!    instead of at 10 MiB. A value must compile as written: the parser's second try (with each
//!    `{` that starts no repetition escaped) is never reached, so nothing is compiled that was
//!    not checked.
//!
//! 4. once parsed, what Prometheus would do with it: every range (`[5m]`, a subquery's
//!    `[10m:30s]`) at most [`MAX_QUERY_RANGE`], each subquery with its step written, and the
//!    subqueries' evaluations, multiplied where one is inside another, at most
//!    [`MAX_SUBQUERY_STEPS`]: a query that looks cheap, such as a subquery `[7d:1s]`, would hold
//!    one of Prometheus' query slots for seconds. Prometheus stops any query at the `timeout`
//!    every request carries.
//!
//! The CRD's CEL rules count the regex operators in the whole text, so they refuse at least
//! what step 2 refuses. What the checks cost, and what a query at every limit
//! ([`at_every_limit`]) costs to check and parse, is printed by
//! `cargo run --release --example query_cost` (a kept run is cited in docs/security.md); the
//! benchmark's noisy neighbour edits policies holding such queries throughout its window.
//!
//! **Once.** The pipeline parses a query when a policy's generation changes, never per event,
//! per reconcile or per backend. `{{service}}` and `{{namespace}}` are parsed as markers that
//! are plain label-value text; every selector gets a marker label equal to the namespace; the
//! query is printed, and the parsed form (with the regexes its parser compiled) is dropped. The
//! controller's namespace label takes the marker's place in that text
//! ([`HealthQuery::scoped`]), and each backend's query is the text with its names filled in
//! ([`ScopedQuery::for_backend`]). Service and namespace names are DNS labels, so they need no
//! escaping in a string or a regex.
//!
//! **Scope.** Every selector gets the policy's namespace as a matcher on the namespace label
//! (`--prometheus-namespace-label`), the way prom-label-proxy does it: on the parsed query, so a
//! selector hiding in a function, an aggregation, a subquery or an `or` branch is scoped too; a
//! selector that matches the label any other way is refused, and so is `info()`, which reads
//! `target_info` series of its own choosing, outside any selector.

use std::sync::LazyLock;

mod guard;
mod reading;

pub use guard::PARSER_STACK_SIZE;
use reading::Reading;

use crate::api::rules::{
    LONG_REPETITION, MAX_QUERY_DEPTH, MAX_QUERY_LENGTH, MAX_QUERY_RANGE, MAX_REGEX_LENGTH,
    MAX_REGEX_MATCHERS, MAX_SUBQUERY_STEPS, REGEX_MATCHERS_MESSAGE, REGEX_SIZE_LIMIT,
    REPETITION_MESSAGE,
};
use promql_parser::{
    label::{MatchOp, Matcher, Matchers},
    parser::{self, Expr, VectorSelector},
};

static LONG_REPETITION_RE: LazyLock<Option<regex::Regex>> =
    LazyLock::new(|| regex::Regex::new(LONG_REPETITION).ok());

/// What stands for `{{service}}` while the query is parsed and scoped.
const SERVICE_MARKER: &str = "__failover_service__";
/// What stands for `{{namespace}}` while the query is parsed and scoped.
const NAMESPACE_MARKER: &str = "__failover_namespace__";
/// What stands for the namespace label (`--prometheus-namespace-label`) in the scoped text.
const LABEL_MARKER: &str = "__failover_label__";
/// What every marker starts with: a query may not hold it.
const MARKER_PREFIX: &str = "__failover_";

/// A query that passed the limits and parses, held as text: scoped by a marker label, with its
/// placeholders as markers, and what scoping by a real label must refuse. The parsed query (and
/// the regexes its parser compiled, up to [`REGEX_SIZE_LIMIT`] each) is dropped once the text is
/// printed, so a policy holds a few KiB whatever its query compiles to.
#[derive(Clone, Debug, PartialEq)]
pub struct HealthQuery {
    written: String,
    /// The policy's namespace, for messages.
    namespace: String,
    /// Every selector with `LABEL_MARKER="<namespace>"` added, printed.
    template: String,
    /// The first matcher of each label name that does not select exactly the policy's
    /// namespace, as a refusal shows it (at most [`SHOWN`] characters): scoping by that label
    /// refuses it.
    others: Vec<(String, String)>,
    /// The query calls `info()`.
    calls_info: bool,
}

impl HealthQuery {
    /// Checks the limits, then parses and prints the query scoped to `namespace` by a marker
    /// label; the refusal says which rule the query breaks (without the field's name: the caller
    /// names it).
    /// The check, the parse and the printing run on the parser's own thread ([`guard`]).
    pub fn parse(written: &str, namespace: &str) -> Result<Self, String> {
        guard::guarded(|| Self::read(written, namespace))
    }

    fn read(written: &str, namespace: &str) -> Result<Self, String> {
        check_text(written)?;
        let marked = written
            .replace("{{service}}", SERVICE_MARKER)
            .replace("{{namespace}}", NAMESPACE_MARKER);
        check_reading(&Reading::of(&marked, &[SERVICE_MARKER, NAMESPACE_MARKER])?)?;
        let mut parsed = parser::parse(&marked)
            .map_err(|e| format!("is not PromQL: {}", crate::message::line(&e)))?;
        check_cost(&parsed, 1)?;
        let mut query = Self {
            written: written.to_string(),
            namespace: namespace.to_string(),
            template: String::new(),
            others: Vec::new(),
            calls_info: false,
        };
        scope(&mut parsed, &mut |vs| query.scope_selector(vs, namespace))
            .map_err(|why| format!("has {why}"))?;
        let calls_info = calls(&parsed, "info");
        query.calls_info = calls_info;
        query.template = parsed.to_string();
        Ok(query)
    }

    /// The query as its author wrote it.
    pub fn written(&self) -> &str {
        &self.written
    }

    /// The query reading only the series of its namespace (every selector matches `label`
    /// equal to it); with no label (the admin turned scoping off), as written.
    pub fn scoped(&self, label: Option<&str>) -> Result<ScopedQuery, String> {
        let Some(label) = label else {
            return Ok(ScopedQuery {
                text: self
                    .written
                    .replace("{{service}}", SERVICE_MARKER)
                    .replace("{{namespace}}", NAMESPACE_MARKER),
            });
        };
        if self.calls_info {
            return Err("spec.health.prometheus.query calls info(), which reads series outside the selectors scoped to its namespace".into());
        }
        if let Some((_, shown)) = self.others.iter().find(|(name, _)| name == label) {
            return Err(format!(
                "spec.health.prometheus.query selects {shown}; a policy reads only the series of its namespace ({label}=\"{}\" is added to every selector)",
                self.namespace
            ));
        }
        let name = if is_label_name(label) {
            label.to_string()
        } else {
            format!("\"{}\"", label.replace('\\', "\\\\").replace('"', "\\\""))
        };
        Ok(ScopedQuery {
            text: self.template.replace(LABEL_MARKER, &name),
        })
    }

    /// Adds the marker label to a selector (to each branch of an `or` selector), and notes the
    /// matchers that select anything but the policy's namespace.
    fn scope_selector(&mut self, vs: &mut VectorSelector, namespace: &str) {
        let Matchers {
            matchers,
            or_matchers,
        } = &mut vs.matchers;
        let branches: Vec<&mut Vec<Matcher>> = if or_matchers.is_empty() {
            vec![matchers]
        } else {
            or_matchers.iter_mut().collect()
        };
        for branch in branches {
            for m in branch.iter() {
                let own = m.value == namespace || m.value == NAMESPACE_MARKER;
                let known = self.others.iter().any(|(name, _)| *name == m.name);
                if !(known || matches!(m.op, MatchOp::Equal) && own) {
                    let shown = m
                        .to_string()
                        .replace(SERVICE_MARKER, "{{service}}")
                        .replace(NAMESPACE_MARKER, "{{namespace}}");
                    self.others.push((m.name.clone(), shortened(shown)));
                }
            }
            branch.push(Matcher::new(MatchOp::Equal, LABEL_MARKER, NAMESPACE_MARKER));
        }
    }
}

/// The most characters of a matcher a refusal shows.
const SHOWN: usize = 100;

/// A matcher as a refusal shows it: its first [`SHOWN`] characters.
fn shortened(shown: String) -> String {
    match shown.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("{}…", &shown[..end]),
        None => shown,
    }
}

/// A query scoped to its namespace, with the backend still to fill in.
#[derive(Clone, Debug, PartialEq)]
pub struct ScopedQuery {
    text: String,
}

impl ScopedQuery {
    /// The query for one backend.
    pub fn for_backend(&self, namespace: &str, service: &str) -> String {
        self.text
            .replace(SERVICE_MARKER, service)
            .replace(NAMESPACE_MARKER, namespace)
    }
}

/// The limits read on the text itself, as the CRD's rules read it.
fn check_text(written: &str) -> Result<(), String> {
    let length = written.chars().count();
    if length > MAX_QUERY_LENGTH {
        return Err(format!(
            "holds {length} characters; at most {MAX_QUERY_LENGTH} are allowed"
        ));
    }
    if written.contains(MARKER_PREFIX) {
        return Err(format!(
            "holds {MARKER_PREFIX}, which the controller keeps for its own markers"
        ));
    }
    if LONG_REPETITION_RE
        .as_ref()
        .is_none_or(|re| re.is_match(written))
    {
        return Err(REPETITION_MESSAGE.into());
    }
    Ok(())
}

/// The limits read on the parser's tokens: the regex matchers, each compiled within its limit.
fn check_reading(reading: &Reading) -> Result<(), String> {
    if reading.regex_matchers > MAX_REGEX_MATCHERS {
        return Err(format!(
            "holds {} regex matchers; it {REGEX_MATCHERS_MESSAGE}",
            reading.regex_matchers
        ));
    }
    reading
        .regexes
        .iter()
        .try_for_each(|value| check_regex(value))
}

/// What Prometheus would do with the parsed query, within [`MAX_QUERY_RANGE`] and
/// [`MAX_SUBQUERY_STEPS`]; `evaluations` is how many times the subqueries around `expr` evaluate
/// it.
fn check_cost(expr: &Expr, evaluations: u64) -> Result<(), String> {
    let range = |range: std::time::Duration| {
        if range > MAX_QUERY_RANGE {
            Err(format!(
                "reads a range of {}; at most {} is allowed",
                go_duration(range),
                go_duration(MAX_QUERY_RANGE)
            ))
        } else {
            Ok(())
        }
    };
    match expr {
        Expr::Aggregate(e) => {
            check_cost(&e.expr, evaluations)?;
            e.param
                .as_deref()
                .map_or(Ok(()), |p| check_cost(p, evaluations))
        }
        Expr::Unary(e) => check_cost(&e.expr, evaluations),
        Expr::Binary(e) => {
            check_cost(&e.lhs, evaluations)?;
            check_cost(&e.rhs, evaluations)
        }
        Expr::Paren(e) => check_cost(&e.expr, evaluations),
        Expr::Subquery(e) => {
            range(e.range)?;
            let step = e.step.filter(|s| !s.is_zero()).ok_or_else(|| {
                format!(
                    "has a subquery [{}:] without its step; write it, as in [{}:1m]",
                    go_duration(e.range),
                    go_duration(e.range)
                )
            })?;
            let steps = e.range.as_nanos().div_ceil(step.as_nanos());
            let total = u128::from(evaluations).saturating_mul(steps);
            if total > u128::from(MAX_SUBQUERY_STEPS) {
                return Err(format!(
                    "evaluates its subqueries {total} times; at most {MAX_SUBQUERY_STEPS} are allowed (a longer step, a shorter range, or fewer subqueries inside each other)"
                ));
            }
            check_cost(&e.expr, u64::try_from(total).unwrap_or(u64::MAX))
        }
        Expr::MatrixSelector(ms) => range(ms.range),
        Expr::Call(call) => call
            .args
            .args
            .iter()
            .try_for_each(|arg| check_cost(arg, evaluations)),
        Expr::NumberLiteral(_)
        | Expr::StringLiteral(_)
        | Expr::VectorSelector(_)
        | Expr::Extension(_) => Ok(()),
    }
}

/// A duration as PromQL writes it (`1h`, `90s`, `250ms`).
fn go_duration(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    match ms {
        _ if ms.is_multiple_of(3_600_000) => format!("{}h", ms / 3_600_000),
        _ if ms.is_multiple_of(60_000) => format!("{}m", ms / 60_000),
        _ if ms.is_multiple_of(1_000) => format!("{}s", ms / 1_000),
        _ => format!("{ms}ms"),
    }
}

/// Whether `name` is written bare in a selector (else it is quoted, as Prometheus 3 allows).
fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// One regex value within [`MAX_REGEX_LENGTH`] and [`REGEX_SIZE_LIMIT`], compiled as the
/// parser first compiles it.
fn check_regex(value: &str) -> Result<(), String> {
    let length = value.chars().count();
    if length > MAX_REGEX_LENGTH {
        return Err(format!(
            "has a regex of {length} characters; at most {MAX_REGEX_LENGTH} are allowed"
        ));
    }
    let compiled = regex::RegexBuilder::new(&format!("^(?:{value})$"))
        .size_limit(REGEX_SIZE_LIMIT)
        .build();
    match compiled {
        Ok(_) => Ok(()),
        Err(regex::Error::CompiledTooBig(_)) => Err(format!(
            "has a regex that compiles to more than {} KiB; simplify it (a Unicode class such as \\w or \\pL repeated is the usual cause)",
            REGEX_SIZE_LIMIT / 1024
        )),
        Err(e) => {
            let text = e.to_string();
            let why = text.lines().last().unwrap_or_default().trim();
            Err(format!(
                "has a regex that does not compile ({why}): {value}; a literal {{ is written \\{{"
            ))
        }
    }
}

/// Applies `selector` to every selector of the query, wherever it hides (a function, an
/// aggregation, a subquery, either side of a binary operation).
fn scope(
    expr: &mut Expr,
    selector: &mut impl FnMut(&mut VectorSelector),
) -> Result<(), &'static str> {
    match expr {
        Expr::Aggregate(e) => {
            scope(&mut e.expr, selector)?;
            match &mut e.param {
                Some(param) => scope(param, selector),
                None => Ok(()),
            }
        }
        Expr::Unary(e) => scope(&mut e.expr, selector),
        Expr::Binary(e) => {
            scope(&mut e.lhs, selector)?;
            scope(&mut e.rhs, selector)
        }
        Expr::Paren(e) => scope(&mut e.expr, selector),
        Expr::Subquery(e) => scope(&mut e.expr, selector),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => Ok(()),
        Expr::VectorSelector(vs) => {
            selector(vs);
            Ok(())
        }
        Expr::MatrixSelector(ms) => {
            selector(&mut ms.vs);
            Ok(())
        }
        Expr::Call(call) => call
            .args
            .args
            .iter_mut()
            .try_for_each(|arg| scope(arg, selector)),
        Expr::Extension(_) => Err("a part that cannot be scoped to its namespace"),
    }
}

/// Whether the query calls the function `name` anywhere.
fn calls(expr: &Expr, name: &str) -> bool {
    match expr {
        Expr::Aggregate(e) => {
            calls(&e.expr, name) || e.param.as_ref().is_some_and(|p| calls(p, name))
        }
        Expr::Unary(e) => calls(&e.expr, name),
        Expr::Binary(e) => calls(&e.lhs, name) || calls(&e.rhs, name),
        Expr::Paren(e) => calls(&e.expr, name),
        Expr::Subquery(e) => calls(&e.expr, name),
        Expr::Call(call) => call.func.name == name || call.args.args.iter().any(|a| calls(a, name)),
        _ => false,
    }
}

/// A query at every limit that passes them: 4,000 characters, [`MAX_REGEX_MATCHERS`] matchers,
/// each of the costliest regexes found that compile within [`REGEX_SIZE_LIMIT`] (for tests and
/// the benchmark's noisy neighbour).
pub fn at_every_limit() -> String {
    let values = [
        r"\\pL{6}",
        r"\\w{5}",
        r"[\\pL\\pN\\pS\\pP]{5}",
        r"(?i)\\pL{6}",
    ];
    let matchers: Vec<String> = (0..MAX_REGEX_MATCHERS)
        .map(|i| format!(r#"l{i}=~"{}""#, values[i % values.len()]))
        .collect();
    let query = format!("sum(x{{{},pad=\"\"}})", matchers.join(","));
    // Padded to 4,000 characters with a plain label value, near the length limit too.
    let pad = "a".repeat(4000usize.saturating_sub(query.len()));
    query.replace("pad=\"\"", &format!("pad=\"{pad}\""))
}

/// The deepest queries allowed, one of each form that nests ([`MAX_QUERY_DEPTH`] levels): a
/// parenthesis in a parenthesis, unary minus on unary minus, a chain of additions, and
/// functions and subqueries in each other (for tests and the benchmark's noisy neighbour).
pub fn deepest_at_limit() -> [String; 4] {
    let d = MAX_QUERY_DEPTH;
    let calls = d / 3;
    [
        format!("{}up{}", "(".repeat(d), ")".repeat(d)),
        format!("{}1", "- ".repeat(d)),
        format!("up{}", " + 1".repeat(d)),
        format!(
            "-{}up{}",
            "max_over_time(abs(".repeat(calls),
            ")[1m:1m])".repeat(calls)
        ),
    ]
}

/// Regex matchers behind a comment that ends with a carriage return, each a regex whose
/// compile at the regex crate's default limit costs the most: the parser's lexer reads them
/// as matchers, and so do the checks (for tests and the benchmark's noisy neighbour).
pub fn behind_a_comment() -> String {
    let matchers: Vec<String> = (0..MAX_REGEX_MATCHERS)
        .map(|i| format!(r#"l{i}=~"(\\w{{99}}){{9}}""#))
        .collect();
    format!("up # a comment\r or x{{{}}}", matchers.join(","))
}

#[cfg(test)]
mod tests;
