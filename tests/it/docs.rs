//! The documentation's citations: every kept benchmark run that the docs and the code cite is in
//! `docs/bench-runs`.

use std::{fs, path::PathBuf};

use crate::support::repo_root;

/// Every text file of the repository's own that may cite a kept run: the docs, the README, the
/// code's module docs and the benchmark's.
fn citing_files() -> Vec<PathBuf> {
    fn walk(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() && !path.ends_with("bench-runs") {
                walk(&path, out);
            } else if path
                .extension()
                .is_some_and(|e| e == "md" || e == "rs" || e == "sh")
            {
                out.push(path);
            }
        }
    }
    let mut files = vec![repo_root().join("README.md")];
    for dir in ["docs", "src", "crates", "examples", "tests", "hack"] {
        walk(&repo_root().join(dir), &mut files);
    }
    files
}

#[test]
fn every_kept_run_the_docs_and_code_cite_exists() {
    let kept: Vec<String> = fs::read_dir(repo_root().join("docs/bench-runs"))
        .expect("docs/bench-runs")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    // A link (`bench-runs/<file>`) names a file; a citation in words (`docs/bench-runs, run
    // 20261125-1245`) names a run by its start, which some file must have.
    let link = regex::Regex::new(r"bench-runs/([0-9]{8}-[0-9]{4}[A-Za-z0-9._-]*)").expect("re");
    let stamp = regex::Regex::new(r"\b(20[0-9]{6}-[0-9]{4})\b").expect("re");
    let run = regex::Regex::new(r"\bruns? (20[0-9]{6}-[0-9]{4})\b").expect("re");
    let mut missing = Vec::new();
    let mut cited = 0;
    for file in citing_files() {
        let text = fs::read_to_string(&file).unwrap_or_default();
        let relative = file.strip_prefix(repo_root()).unwrap_or(&file).display();
        for (n, line) in text.lines().enumerate() {
            for c in link.captures_iter(line) {
                cited += 1;
                let name = c[1].trim_end_matches(['.', ',']);
                if !kept.iter().any(|k| k == name) {
                    missing.push(format!("{relative}:{}: {name}", n + 1));
                }
            }
            // A stamp counts on a line that names the folder, or after the word "run".
            let stamps: Vec<String> = if line.contains("bench-runs") {
                stamp
                    .captures_iter(line)
                    .map(|c| c[1].to_string())
                    .collect()
            } else {
                run.captures_iter(line).map(|c| c[1].to_string()).collect()
            };
            for run in stamps {
                cited += 1;
                if !kept.iter().any(|k| k.starts_with(&run)) {
                    missing.push(format!("{relative}:{}: a run of {run}", n + 1));
                }
            }
        }
    }
    assert!(
        cited > 10,
        "only {cited} citations found: the scan reads nothing"
    );
    assert!(
        missing.is_empty(),
        "cited runs not in docs/bench-runs: {missing:#?}"
    );
}

/// The benchmarks page's headline: the first full run its Results cite
/// (`bench-runs/<stamp>-<commit>[-dirty]-full.log`), and for a run labelled dirty, the paths that
/// differed from its commit: as its log's header names them, or (a run made before the header
/// named them) as the Results say ("labelled dirty: `PATH` ... differed").
fn headline_run(page: &str) -> Option<(String, String, Vec<String>)> {
    let results = &page[page.find("\n## Results")?..];
    let full =
        regex::Regex::new(r"bench-runs/([0-9]{8}-[0-9]{4}-([0-9a-f]{7,40})(-dirty)?-full)\.log")
            .expect("re");
    let c = full.captures(results)?;
    let (run, commit) = (c[1].to_string(), c[2].to_string());
    let mut differed = Vec::new();
    if c.get(3).is_some() {
        let log = fs::read_to_string(repo_root().join(format!("docs/bench-runs/{run}.log")))
            .unwrap_or_default();
        let header = log
            .lines()
            .take(3)
            .find_map(|l| l.strip_prefix("# differs from the commit: "));
        let said = regex::Regex::new(r"labelled dirty: ([^\n]*?) differed").expect("re");
        let paths = header.map(str::to_string).or_else(|| {
            said.captures(results)
                .map(|c| c[1].replace(['`', ','], " ").replace(" and ", " "))
        })?;
        differed = paths.split_whitespace().map(String::from).collect();
    }
    Some((run, commit, differed))
}

/// What builds or drives the measured binary: a change to any of it makes the headline stale.
const MEASURED: [&str; 6] = [
    "Cargo.toml",
    "Cargo.lock",
    "hack/bench.sh",
    "examples/benchmark",
    "src",
    "crates",
];

/// Whether a kept run's log says it was a full run: `hack/bench.sh` with no argument (every
/// scale, every phase), to its end.
fn is_full_run(log: &str) -> bool {
    log.lines().next().map(str::trim_end) == Some("# hack/bench.sh")
        && log.lines().any(|l| l.starts_with("All scales ("))
}

#[test]
fn the_benchmarks_headline_is_a_full_run_of_the_code_as_it_is() {
    let page = fs::read_to_string(repo_root().join("docs/benchmarks.md")).expect("benchmarks.md");
    let (run, commit, differed) = headline_run(&page).expect(
        "docs/benchmarks.md's Results cite no full run (bench-runs/<stamp>-<commit>-full.log), or one labelled dirty without saying what differed",
    );
    let log = fs::read_to_string(repo_root().join(format!("docs/bench-runs/{run}.log")))
        .unwrap_or_default();
    assert!(
        is_full_run(&log),
        "the headline's run {run} is not a full run: its log's header is {:?}, and a full run is hack/bench.sh with no argument, to its \"All scales\" table",
        log.lines().next()
    );
    let measured = |p: &&String| MEASURED.iter().any(|m| p.starts_with(m));
    assert!(
        !differed.iter().any(|p| measured(&p)),
        "the headline's run {run} ran code that differed from its commit: {differed:?}"
    );
    let diff = std::process::Command::new("git")
        .current_dir(repo_root())
        .args(["diff", "--name-only", &commit, "HEAD", "--"])
        .args(MEASURED)
        .output()
        .expect("git");
    assert!(
        diff.status.success(),
        "the headline's run {run} is of commit {commit}, which this clone cannot read (a shallow clone?): {}",
        String::from_utf8_lossy(&diff.stderr)
    );
    let changed: Vec<String> = String::from_utf8_lossy(&diff.stdout)
        .lines()
        .map(String::from)
        .collect();
    assert!(
        changed.is_empty(),
        "the headline of docs/benchmarks.md is the run {run}, of commit {commit}; {} files of what builds or drives the measured binary ({MEASURED:?}) changed since (first: {:?}): run hack/bench.sh on the code as it is and make that run the headline",
        changed.len(),
        &changed[..changed.len().min(5)]
    );
}

#[test]
fn a_run_with_arguments_or_cut_short_is_not_a_full_run() {
    let full = "# hack/bench.sh \n# commit abc1234\n...\nAll scales (58.1 min, 2 cores):\n";
    assert!(is_full_run(full));
    assert!(!is_full_run(
        "# hack/bench.sh --scales 100\n# commit abc1234\nAll scales (3.0 min, 2 cores):\n"
    ));
    assert!(!is_full_run(
        "# hack/bench.sh \n# commit abc1234\n[100] ...\n"
    ));
}

/// The bounds the benchmarks page quotes for the tests on the node, as the tests state them:
/// each row (by its first cell) and its last cell, made from the tests' constants.
fn quoted_bounds() -> Vec<(&'static str, String)> {
    use crate::{capacity_traffic as capacity, groups, support::failovers::LOST_IN_A_FAILOVER};
    vec![
        (
            "unplanned failover at 50 requests/s through the proxy",
            format!("at most {LOST_IN_A_FAILOVER}, none after"),
        ),
        (
            "group failover at 50 requests/s per hostname through the proxy",
            format!(
                "routes at most {} ms apart; the trigger's at most {LOST_IN_A_FAILOVER} failed, the other member's 0",
                groups::ROUTES_APART.as_millis()
            ),
        ),
        (
            "failover with capacity and scaling (test)",
            format!(
                "at most 1/{} of the failures without capacity over the same {} s; {}% overloaded",
                capacity::FRACTION_OF_WITHOUT,
                capacity::SPAN.as_secs(),
                capacity::OVERLOAD_BOUND
            ),
        ),
        (
            "failback by the primary's ready Pods (test)",
            format!("{}% failed", capacity::OVERLOAD_BOUND),
        ),
    ]
}

#[test]
fn the_bounds_the_benchmarks_page_quotes_are_the_tests_own() {
    let page = fs::read_to_string(repo_root().join("docs/benchmarks.md")).expect("benchmarks.md");
    for (row, bound) in quoted_bounds() {
        let line = page
            .lines()
            .find(|l| l.starts_with(&format!("| {row} |")))
            .unwrap_or_else(|| panic!("docs/benchmarks.md has no row {row:?}"));
        let last = line
            .trim_end_matches('|')
            .rsplit('|')
            .next()
            .unwrap_or_default()
            .trim();
        assert_eq!(
            last, bound,
            "docs/benchmarks.md quotes the bound of {row:?} as {last:?}; the test's is {bound:?}"
        );
    }
}
