use std::time::{Duration, Instant};

use promql_parser::parser;

use super::*;

fn scoped(query: &str) -> Result<String, String> {
    HealthQuery::parse(query, "shop")?
        .scoped(Some("namespace"))
        .map(|q| q.for_backend("shop", "web"))
}

fn printed(q: &str) -> Result<String, String> {
    parser::parse(q).map(|e| e.to_string())
}

#[test]
fn every_selector_reads_only_the_policys_namespace() {
    for (query, expected) in [
        (
            r#"errors{service="{{service}}"}"#,
            r#"errors{service="web",namespace="shop"}"#,
        ),
        (
            r#"sum(rate(a[5m])) / sum(rate(b{code=~"5.."}[5m]))"#,
            r#"sum(rate(a{namespace="shop"}[5m])) / sum(rate(b{code=~"5..",namespace="shop"}[5m]))"#,
        ),
        (
            "max_over_time(up[10m:1m]) or vector(0)",
            r#"max_over_time(up{namespace="shop"}[10m:1m]) or vector(0)"#,
        ),
        (
            r#"topk(1, x{namespace="{{namespace}}", job=~"{{service}}-.*"})"#,
            r#"topk(1, x{namespace="shop", job=~"web-.*", namespace="shop"})"#,
        ),
        ("time()", "time()"),
        (
            r#"y{"k8s.namespace"="shop"}"#,
            r#"y{"k8s.namespace"="shop",namespace="shop"}"#,
        ),
    ] {
        let got = scoped(query).expect(query);
        assert_eq!(printed(&got), printed(expected), "{query}");
    }
}

#[test]
fn a_selector_naming_another_namespace_any_way_is_refused_naming_the_field() {
    for query in [
        r#"errors{namespace="payments"}"#,
        r#"errors{namespace=~".*"}"#,
        r#"errors{namespace!="shop"}"#,
        r#"sum(x) + on() group_left count(y{namespace=~"shop|payments"})"#,
    ] {
        let refused = scoped(query).expect_err(query);
        assert!(
            refused.starts_with("spec.health.prometheus.query selects namespace"),
            "{refused}"
        );
    }
    let info = scoped(r#"info(rate(http_requests_total[5m]))"#).expect_err("info");
    assert!(info.contains("calls info()"), "{info}");
    let unscoped = HealthQuery::parse(r#"x{namespace="a",s="{{service}}"}"#, "shop")
        .and_then(|q| q.scoped(None))
        .map(|q| q.for_backend("shop", "web"));
    assert_eq!(unscoped.as_deref(), Ok(r#"x{namespace="a",s="web"}"#));
    // A label that is not a bare name is quoted, as Prometheus 3 reads it.
    let dotted = HealthQuery::parse("up", "shop")
        .and_then(|q| q.scoped(Some("k8s.namespace.name")))
        .map(|q| q.for_backend("shop", "web"));
    assert_eq!(dotted.as_deref(), Ok(r#"up{"k8s.namespace.name"="shop"}"#));
}

#[test]
fn each_limit_refuses_naming_itself() {
    let matcher = |i: usize| format!(r#"l{i}=~"a{{3}}""#);
    let many: Vec<String> = (0..=MAX_REGEX_MATCHERS).map(matcher).collect();
    for (query, says) in [
        (format!("x{{{}}}", many.join(",")), "holds 9 regex matchers"),
        (r#"x{a=~"\\w{100}"}"#.to_string(), "three digits"),
        (r#"x{a="{1,250}"}"#.to_string(), "three digits"),
        (
            format!(r#"x{{a=~"{}"}}"#, "a".repeat(257)),
            "257 characters",
        ),
        (r#"x{a=~"\\w{20}"}"#.to_string(), "more than 256 KiB"),
        (r#"x{a=~"\\pL{40}"}"#.to_string(), "more than 256 KiB"),
        (r#"x{a=~"b{x}"}"#.to_string(), "a literal { is written \\{"),
        ("sum(".to_string(), "is not PromQL"),
        (r#"x{a="b}"#.to_string(), "is not PromQL"),
        ("{{service}}_total".to_string(), "outside a string"),
        ("up[1e30]".to_string(), "which no duration holds"),
        ("up offset -1e30".to_string(), "which no duration holds"),
        (
            "max_over_time(up[5m:1e300])".to_string(),
            "which no duration holds",
        ),
        ("up[9999999999999y]".to_string(), "duration"),
        (deep(MAX_QUERY_DEPTH + 1), "nests 65 deep"),
    ] {
        let refused = HealthQuery::parse(&query, "shop").expect_err(&query);
        assert!(refused.contains(says), "{query}: {refused}");
    }
}

#[test]
fn what_a_query_makes_prometheus_do_is_bounded_before_it_is_sent() {
    for (query, says) in [
        ("rate(x[2h])", "reads a range of 2h; at most 1h is allowed"),
        ("max_over_time(x[7d:1s])", "reads a range of 168h"),
        (
            "max_over_time(rate(x[30d])[1h:1m])",
            "reads a range of 720h",
        ),
        (
            "max_over_time(x[1h:1s])",
            "evaluates its subqueries 3600 times; at most 1000",
        ),
        ("max_over_time(x[10m:])", "subquery [10m:] without its step"),
        (
            "max_over_time(max_over_time(x[10m:10s])[10m:10s])",
            "evaluates its subqueries 3600 times",
        ),
        (
            "sum(rate(x[5m])) / max_over_time(max_over_time(x[1h:1m])[1h:1m])",
            "3600 times",
        ),
    ] {
        let refused = HealthQuery::parse(query, "shop").expect_err(query);
        assert!(refused.contains(says), "{query}: {refused}");
    }
    for within in [
        "rate(x[1h])",
        "max_over_time(rate(x[1m])[1h:5s])",
        "max_over_time(max_over_time(x[10m:20s])[10m:20s])",
    ] {
        let parsed = HealthQuery::parse(within, "shop");
        assert!(parsed.is_ok(), "{within}: {parsed:?}");
    }
}

#[test]
fn what_the_parsers_lexer_skips_the_checks_skip() {
    // What the parser's lexer skips, the checks skip: strings and comments.
    let fine = HealthQuery::parse(
        "x{a=\"=~ !~ =~\"} # =~ =~ =~ =~ =~ =~ =~ =~ =~ \"\n",
        "shop",
    );
    assert!(fine.is_ok(), "{fine:?}");
}

fn deep(levels: usize) -> String {
    format!("{}up{}", "(".repeat(levels), ")".repeat(levels))
}

#[test]
fn matchers_behind_a_comment_that_ends_with_any_line_end_are_counted_and_compiled() {
    // The lexer ends a comment at `\r` as at `\n`: what follows is read, and so checked.
    for end in ["\n", "\r", "\r\n"] {
        let query = behind_a_comment().replace('\r', end);
        let refused = HealthQuery::parse(&query, "shop").expect_err(&query);
        assert!(refused.contains("more than 256 KiB"), "{end:?}: {refused}");
        let nine = format!(r#"up # {end} or x{{{}}}"#, [r#"a=~"b""#; 9].join(","));
        let refused = HealthQuery::parse(&nine, "shop").expect_err(&nine);
        assert!(
            refused.contains("holds 9 regex matchers"),
            "{end:?}: {refused}"
        );
    }
}

#[test]
fn the_controllers_markers_are_refused_wherever_they_are_written() {
    for query in [
        "sum(x) * on() group_left __failover_service__ y",
        r#"x{a="__failover_namespace__"}"#,
        "x # __failover_label__",
    ] {
        let refused = HealthQuery::parse(query, "shop").expect_err(query);
        assert!(refused.contains("holds __failover_"), "{query}: {refused}");
    }
    let refused = HealthQuery::parse("sum(x) by ({{service}})", "shop").expect_err("label");
    assert!(refused.contains("outside a string"), "{refused}");
}

#[test]
fn the_cel_rule_counts_at_least_the_matchers_the_parser_reads() {
    // CEL counts the operators anywhere in the text, strings and comments included; the
    // parser's tokens count only matchers, so CEL never lets through more than the check.
    let query = r#"x{a=~"1",b!~"2"} or y{c=~"=~"} # =~"#;
    let cel_count = query.split("=~").count() + query.split("!~").count() - 2;
    assert_eq!(cel_count, 5);
    let reading = Reading::of(query, &[]).map(|r| r.regex_matchers);
    assert_eq!(reading, Ok(3));
    let rule = serde_json::to_value(crate::api::rules::regex_matchers_rule()).expect("rule");
    assert!(rule["rule"].as_str().is_some_and(|r| r.contains("<= 8")));
}

#[test]
fn a_query_at_every_limit_passes() {
    // Eight of the costliest regexes found that pass, each near the size limit's edge.
    let query = at_every_limit();
    assert_eq!(Reading::of(&query, &[]).map(|r| r.regex_matchers), Ok(8));
    assert_eq!(query.len(), 4000);
    let parsed = HealthQuery::parse(&query, "shop");
    assert!(parsed.is_ok(), "{parsed:?}");
}

#[test]
fn the_deepest_query_of_every_form_parses_on_the_parsers_thread() {
    // In this (debug) build, on the stack the controller gives the parser.
    for query in deepest_at_limit() {
        let depth = Reading::of(&query, &[]).map(|r| r.depth);
        assert_eq!(depth, Ok(MAX_QUERY_DEPTH), "{query}");
        let parsed = scoped(&query);
        assert!(parsed.is_ok(), "{query}: {parsed:?}");
        let deeper = format!("-({query})");
        let refused = HealthQuery::parse(&deeper, "shop").expect_err(&deeper);
        assert!(refused.contains("at most 64 levels"), "{refused}");
    }
}

#[test]
fn a_query_thousands_deep_is_refused_without_crashing_the_thread() {
    // About 2,000 levels within the length limit: the depth is read before anything recurses.
    for query in [
        deep(2000),
        format!("{}1", "-".repeat(4000)),
        format!("1{}", "+1".repeat(2000)),
    ] {
        let refused = HealthQuery::parse(&query, "shop").expect_err("too deep");
        assert!(refused.contains("deep"), "{refused}");
    }
}

/// Texts built to break a reader: nesting, comments with every line end, every quote kind
/// with escapes, huge numbers and durations, markers and placeholders.
fn hostile() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let piece = prop_oneof![
        Just("(".to_string()),
        Just(")".to_string()),
        Just("- ".to_string()),
        Just(" + 1".to_string()),
        Just("up".to_string()),
        Just("x{a=~\"".to_string()),
        Just("\"}".to_string()),
        Just("'\\''".to_string()),
        Just("`\\`".to_string()),
        Just("\"\\\"\\u00e9\\x41\"".to_string()),
        Just("# c\r".to_string()),
        Just("# c\n".to_string()),
        Just("# c\r\n".to_string()),
        Just("#".to_string()),
        Just("[1e30]".to_string()),
        Just("[5m:9999999999y]".to_string()),
        Just(" offset -1e308".to_string()),
        Just(" @ 1e400".to_string()),
        Just("0x7fffffffffffffffffff".to_string()),
        Just("NaN".to_string()),
        Just("{{service}}".to_string()),
        Just("\"{{namespace}}\"".to_string()),
        Just("__failover_service__".to_string()),
        Just("(\\\\w{99}){9}".to_string()),
        Just(", ".to_string()),
        "[a-z(){}\\[\\]\"'`#\r\n=~!:,.0-9 +-]{0,8}",
    ];
    proptest::collection::vec(piece, 0..160).prop_map(|p| p.concat())
}

/// What a read of any text may take, in a debug build, before it counts as a stall.
const STALL: Duration = Duration::from_secs(20);

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]
    /// Whatever the text, it is read on the parser's thread without a panic reaching the
    /// caller, and refused or parsed without stalling.
    #[test]
    fn any_text_is_refused_or_parsed_without_a_panic_or_a_stall(query in hostile()) {
        let started = Instant::now();
        let _ = HealthQuery::parse(&query, "shop");
        proptest::prop_assert!(started.elapsed() < STALL);
    }

    #[test]
    fn any_short_text_is_read_without_a_panic(query in "(?s).{0,300}") {
        let _ = HealthQuery::parse(&query, "shop");
    }
}
