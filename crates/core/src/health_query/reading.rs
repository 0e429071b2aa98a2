//! A query as the parser reads it, before the parser builds anything: the tokens of
//! promql-parser's own lexer (the one its grammar consumes), so that what the limits count is
//! what the parser will compile and nest. There is no second scan of the text: a comment, a
//! string or a line end reads here exactly as it reads there.
//!
//! From the tokens come:
//! - each regex value (the string after `=~` or `!~`), unquoted by the parser's own function;
//! - the depth the parsed query can reach, an upper bound of its tree's height: the deepest
//!   parenthesis, plus one for every operator and every `[` (each binary or unary operation,
//!   subquery and range is one level; everything else that nests sits inside a parenthesis);
//! - each number the grammar reads as a duration (after `[`, a subquery's `:` or `offset`),
//!   converted as the grammar converts it, so that a number no duration holds is refused here
//!   instead of panicking there;
//! - whether a placeholder's marker is outside a string.

use lrpar::{Lexeme, Lexer, NonStreamingLexer};
use promql_parser::{
    parser::{lexer, token::*},
    util::{parse_duration, parse_str_radix, unquote_string},
};

use crate::api::rules::MAX_QUERY_DEPTH;

/// What the tokens of a query say about its cost.
#[derive(Debug, Default)]
pub(super) struct Reading {
    /// Each regex value, as the parser will compile it (unanchored).
    pub regexes: Vec<String>,
    /// How many regex matchers (`=~`, `!~`) the query holds.
    pub regex_matchers: usize,
    /// An upper bound of the parsed query's depth.
    pub depth: usize,
}

/// One token: its id and its text.
type Token<'a> = (TokenId, &'a str);

impl Reading {
    /// Reads `text` with the parser's lexer; `markers` are the placeholders' stand-ins, which
    /// must sit inside strings.
    pub fn of(text: &str, markers: &[&str]) -> Result<Self, String> {
        let lexed =
            lexer(text).map_err(|e| format!("is not PromQL: {}", crate::message::line(&e)))?;
        let tokens: Vec<Token> = lexed
            .iter()
            .filter_map(Result::ok)
            .map(|l| (l.tok_id(), lexed.span_str(l.span())))
            .collect();
        let mut reading = Self::default();
        let mut parens = 0usize;
        let mut deepest = 0usize;
        for (at, &(id, text)) in tokens.iter().enumerate() {
            let before = at.checked_sub(1).and_then(|i| tokens.get(i)).copied();
            if id != T_STRING && markers.iter().any(|m| text.contains(m)) {
                return Err(
                    "places {{service}} and {{namespace}} outside a string: they fill in label values"
                        .into(),
                );
            }
            match id {
                T_LEFT_PAREN => {
                    parens += 1;
                    deepest = deepest.max(parens);
                }
                T_RIGHT_PAREN => parens = parens.saturating_sub(1),
                T_LEFT_BRACKET => reading.depth += 1,
                T_EQL_REGEX | T_NEQ_REGEX => reading.regex_matchers += 1,
                T_STRING
                    if before.is_some_and(|(id, _)| matches!(id, T_EQL_REGEX | T_NEQ_REGEX)) =>
                {
                    let value = unquote_string(text)
                        .map_err(|e| format!("has a string that does not parse: {e}"))?;
                    reading.regexes.push(value);
                }
                T_NUMBER if is_duration_position(&tokens[..at]) => check_seconds(text)?,
                T_DURATION => {
                    parse_duration(text).map_err(|e| format!("has a duration {text} that {e}"))?;
                }
                id if is_operation(id) => reading.depth += 1,
                _ => {}
            }
        }
        reading.depth += deepest;
        if reading.depth > MAX_QUERY_DEPTH {
            return Err(format!(
                "nests {} deep; at most {MAX_QUERY_DEPTH} levels are allowed (each parenthesis around another, each operator and each range or subquery is one)",
                reading.depth
            ));
        }
        Ok(reading)
    }
}

/// An operator that makes one node of the tree (a binary or unary operation).
fn is_operation(id: TokenId) -> bool {
    matches!(
        id,
        T_ADD
            | T_SUB
            | T_MUL
            | T_DIV
            | T_MOD
            | T_POW
            | T_ATAN2
            | T_EQLC
            | T_NEQ
            | T_GTE
            | T_GTR
            | T_LSS
            | T_LTE
            | T_LAND
            | T_LOR
            | T_LUNLESS
    )
}

/// Whether the grammar reads a number after these tokens as a duration: after `[`, after the
/// `:` of a subquery, and after `offset` (with or without a sign).
fn is_duration_position(before: &[Token]) -> bool {
    match before {
        [.., (T_OFFSET, _), (T_ADD | T_SUB, _)] => true,
        [.., (id, _)] => matches!(*id, T_LEFT_BRACKET | T_COLON | T_OFFSET),
        [] => false,
    }
}

/// A number the grammar turns into a duration of that many seconds: it must hold one.
fn check_seconds(text: &str) -> Result<(), String> {
    let seconds = parse_str_radix(text).map_err(|e| format!("has a number {text} that {e}"))?;
    std::time::Duration::try_from_secs_f64(seconds)
        .map(|_| ())
        .map_err(|_| format!("has a duration of {text} seconds, which no duration holds"))
}
