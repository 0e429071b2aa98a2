//! What a health query costs the controller: each regex compiled at the regex crate's default
//! size limit and at the controller's, and a whole query checked, parsed and scoped, as
//! `failover_core::health_query` does it (on the parser's own thread), the deepest queries allowed and
//! the shapes refused. Prints the least of five runs of each (build with `--release`, as the
//! controller runs).
//!
//! ```sh
//! cargo run --release --example query_cost
//! ```

use std::time::{Duration, Instant};

use failover_core::{api::rules::REGEX_SIZE_LIMIT, health_query::HealthQuery};

/// The least time of five runs of `f`, and its last result.
fn least<T>(mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..5 {
        let started = Instant::now();
        last = Some(f());
        best = best.min(started.elapsed());
    }
    (best, last.expect("five runs"))
}

fn compiled(pattern: &str, limit: usize) -> (Duration, String) {
    let anchored = format!("^(?:{pattern})$");
    let (took, result) = least(|| {
        regex::RegexBuilder::new(&anchored)
            .size_limit(limit)
            .build()
            .map(|_| ())
    });
    let verdict = match result {
        Ok(()) => "compiles".to_string(),
        Err(regex::Error::CompiledTooBig(_)) => "too big".to_string(),
        Err(_) => "does not parse".to_string(),
    };
    (took, verdict)
}

fn main() {
    println!("One regex, anchored as PromQL compiles it (least of 5):\n");
    println!("| regex | default limit (10 MiB) | the controller's limit (256 KiB) |");
    println!("|---|---|---|");
    for pattern in [
        "5..",
        ".*",
        "(GET|POST|PUT).*",
        r"\pL{6}",
        r"\w{5}",
        r"(?i)\pL{6}",
        r"\w{6}",
        r"\w{100}",
    ] {
        let (default, at_default) = compiled(pattern, 10 << 20);
        let (ours, at_ours) = compiled(pattern, REGEX_SIZE_LIMIT);
        println!(
            "| `{}` | {:.3} ms, {at_default} | {:.3} ms, {at_ours} |",
            pattern.replace('|', "\\|"),
            default.as_secs_f64() * 1e3,
            ours.as_secs_f64() * 1e3
        );
    }
    let at_limits = failover_core::health_query::at_every_limit();
    let (parse, parsed) = least(|| HealthQuery::parse(&at_limits, "shop"));
    let parsed = parsed.expect("a query at every limit passes");
    let (scope, _) = least(|| parsed.scoped(Some("namespace")));
    println!(
        "\nA query at every limit ({} characters, 8 of the costliest regexes that pass): checked and parsed in {:.2} ms, scoped in {:.3} ms (least of 5)",
        at_limits.len(),
        parse.as_secs_f64() * 1e3,
        scope.as_secs_f64() * 1e3
    );
    let flood: Vec<String> = (0..210).map(|i| format!(r#"l{i}=~"\\w{{100}}""#)).collect();
    let flood = format!("x{{{}}}", flood.join(","));
    let (refused, why) = least(|| HealthQuery::parse(&flood, "shop"));
    println!(
        "210 matchers of \\w{{100}} ({} characters): refused in {:.3} ms: {}",
        flood.len(),
        refused.as_secs_f64() * 1e3,
        why.err().unwrap_or_default()
    );
    for query in failover_core::health_query::deepest_at_limit() {
        let (took, parsed) = least(|| HealthQuery::parse(&query, "shop"));
        println!(
            "The deepest query allowed ({}…, {} characters): {} in {:.3} ms",
            query.chars().take(24).collect::<String>(),
            query.len(),
            if parsed.is_ok() {
                "checked and parsed"
            } else {
                "REFUSED"
            },
            took.as_secs_f64() * 1e3
        );
    }
    let deep = format!("{}up{}", "(".repeat(2000), ")".repeat(2000));
    let (refused, why) = least(|| HealthQuery::parse(&deep, "shop"));
    println!(
        "2,000 parentheses deep: refused in {:.3} ms: {}",
        refused.as_secs_f64() * 1e3,
        why.err().unwrap_or_default()
    );
    let hidden = failover_core::health_query::behind_a_comment();
    let (refused, why) = least(|| HealthQuery::parse(&hidden, "shop"));
    println!(
        "8 matchers of (\\w{{99}}){{9}} behind a comment ending with \\r: refused in {:.3} ms: {}",
        refused.as_secs_f64() * 1e3,
        why.err().unwrap_or_default()
    );
    let costly: Vec<String> = (0..8).map(|i| format!(r#"l{i}=~"\\pL{{40}}""#)).collect();
    let costly = format!("x{{{}}}", costly.join(","));
    let (refused, why) = least(|| HealthQuery::parse(&costly, "shop"));
    println!(
        "8 matchers of \\pL{{40}}: refused in {:.3} ms: {}",
        refused.as_secs_f64() * 1e3,
        why.err().unwrap_or_default()
    );
}
