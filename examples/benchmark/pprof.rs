//! Reading the API server's CPU profiles with `go tool pprof` (the Go toolchain that builds the
//! control plane): the windows' segments merged into one profile each, every sampled stack put
//! in one category of what the API server was doing, and the top functions by cumulative time.
//! Go profiles carry their function names (the runtime symbolizes them from the binary's line
//! tables, kept by stripped builds), so no binary is needed to read them.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

/// What a stack was doing, by the first category (in this order) one of whose patterns is in a
/// frame's name. A category's patterns name the work itself, never a handler-chain wrapper
/// that every request passes through.
const CATEGORIES: &[(&str, &[&str])] = &[
    (
        "garbage collection (background, assists)",
        &[
            "runtime.gcBgMarkWorker",
            "runtime.gcAssistAlloc",
            "runtime.bgsweep",
            "runtime.bgscavenge",
        ],
    ),
    (
        "profiling, /metrics scrapes",
        &["runtime/pprof.", "net/http/pprof.", "promhttp.", ").Gather"],
    ),
    (
        "authentication, authorization",
        &["pkg/authentication/", "pkg/authorization/", "authorizer"],
    ),
    ("admission", &["pkg/admission."]),
    (
        "server-side apply: field management",
        &["fieldmanager", "structured-merge-diff", "managedfields"],
    ),
    (
        "watch serving: encode, write to watchers",
        &["WatchServer", "serveWatch", "watchEncoder"],
    ),
    (
        "watch cache: dispatch to watchers",
        &["cacheWatcher", "Cacher)", "watchCache)"],
    ),
    (
        "etcd watch: decode events",
        &["etcd3.(*watchChan)", "etcd3.(*watcher)"],
    ),
    (
        "etcd client (gRPC)",
        &["go.etcd.io/etcd/client", "google.golang.org/grpc"],
    ),
    (
        "patch, apply (rest of handler)",
        &["PatchResource", "patchResource", "(*patcher)"],
    ),
    (
        "create (rest of handler)",
        &["createHandler", "CreateResource"],
    ),
    (
        "update (rest of handler)",
        &["UpdateResource", "updateHandler"],
    ),
    (
        "get, list (rest of handler)",
        &["getResourceHandler", "GetResource", "ListResource"],
    ),
    ("TLS", &["crypto/"]),
    (
        "HTTP serving (rest)",
        &["net/http", "golang.org/x/net/http2"],
    ),
    ("Go runtime (scheduler, syscalls)", &["runtime."]),
];

/// Work that cuts across the categories: the share of samples with any frame of each.
const ACROSS: &[(&str, &[&str])] = &[
    (
        "JSON encode/decode",
        &[
            "encoding/json",
            "sigs.k8s.io/json",
            "jsoniter",
            "serializer/json",
        ],
    ),
    ("protobuf", &["protobuf", "gogo/"]),
    ("deep copies", &["DeepCopy"]),
    (
        "conversion, defaulting",
        &["Scheme).Convert", "Scheme).Default", "unstructured"],
    ),
    ("memory allocation", &["runtime.mallocgc"]),
];

/// Frames left out of the top functions: the runtime's, and the handlers every request passes
/// through, which would fill the top rows by cumulative time and tell nothing apart.
const HIDDEN: &str = r"-hide=^runtime\.|^net/http|endpoints/filters|server/filters|filterlatency|DefaultBuildHandlerChain|otelhttp|server/mux|server\.director|finisher\.|flowcontrol|go-restful|kube-aggregator";

/// One window's profile, summed up.
#[derive(Default)]
pub struct Summary {
    /// Sampled CPU seconds: in all, per category, per cross-cutting kind of work.
    pub total_s: f64,
    pub categories: BTreeMap<&'static str, f64>,
    pub across: BTreeMap<&'static str, f64>,
    /// `go tool pprof -top -cum`, its header and first rows.
    pub top: Vec<String>,
}

fn go() -> Result<PathBuf, String> {
    let go = PathBuf::from("go");
    match Command::new(&go).arg("version").output() {
        Ok(out) if out.status.success() => Ok(go),
        Ok(out) => Err(format!(
            "`go version` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Err(format!(
            "no Go toolchain on PATH ({e}): the profiles are kept unread; install Go (as hack/build-control-plane.sh needs) to read them"
        )),
    }
}

/// `go tool pprof` with `args`: its standard output.
fn pprof(args: &[&std::ffi::OsStr]) -> Result<String, String> {
    let out = Command::new(go()?)
        .args(["tool", "pprof"])
        .args(args)
        .output()
        .map_err(|e| format!("running go tool pprof: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "go tool pprof failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Merges the profiles `files` into one, `into`.
pub fn merge(files: &[PathBuf], into: &Path) -> Result<(), String> {
    let mut args = vec!["-proto".as_ref(), "-output".as_ref(), into.as_os_str()];
    args.extend(files.iter().map(|f| f.as_os_str()));
    pprof(&args).map(drop)
}

/// Sums up the profile `file`.
pub fn summarize(file: &Path, top_rows: usize) -> Result<Summary, String> {
    let traces = pprof(&["-traces".as_ref(), file.as_os_str()])?;
    let nodecount = format!("-nodecount={top_rows}");
    let top = pprof(&[
        "-top".as_ref(),
        "-cum".as_ref(),
        nodecount.as_ref(),
        HIDDEN.as_ref(),
        file.as_os_str(),
    ])?;
    let mut summary = Summary {
        top: top
            .lines()
            .filter(|l| !l.starts_with("File:") && !l.starts_with("Type:"))
            .map(str::to_string)
            .collect(),
        ..Summary::default()
    };
    for (seconds, stack) in stacks(&traces) {
        summary.total_s += seconds;
        let category = first_match(CATEGORIES, &stack).unwrap_or("other");
        *summary.categories.entry(category).or_default() += seconds;
        for (name, patterns) in ACROSS {
            if stack.iter().any(|f| patterns.iter().any(|p| f.contains(p))) {
                *summary.across.entry(name).or_default() += seconds;
            }
        }
    }
    Ok(summary)
}

fn first_match(categories: &[(&'static str, &[&str])], stack: &[String]) -> Option<&'static str> {
    categories
        .iter()
        .find(|(_, patterns)| stack.iter().any(|f| patterns.iter().any(|p| f.contains(p))))
        .map(|(name, _)| *name)
}

/// The samples of `go tool pprof -traces` output: each one's seconds and its frames, leaf
/// first. A sample is a run of lines between separators; its first frame line starts with its
/// value, right-aligned in ten columns, and every frame's name starts at the fourteenth.
fn stacks(traces: &str) -> Vec<(f64, Vec<String>)> {
    let mut samples = Vec::new();
    let mut current: Option<(f64, Vec<String>)> = None;
    for line in traces.lines() {
        if line.starts_with("-----------+") {
            samples.extend(current.take());
            current = Some((0.0, Vec::new()));
            continue;
        }
        let (Some(sample), Some(value), Some(name)) =
            (current.as_mut(), line.get(..10), line.get(13..))
        else {
            continue;
        };
        // Label lines (`key:  value`) are no frames.
        if line.get(10..13) != Some("   ") {
            continue;
        }
        if let Some(seconds) = duration_s(value.trim()) {
            sample.0 = seconds;
        }
        sample
            .1
            .push(name.trim_end_matches(" (inline)").to_string());
    }
    samples.extend(current);
    samples.retain(|(_, frames)| !frames.is_empty());
    samples
}

/// A duration as pprof prints it (`10ms`, `1.20s`, `1.50mins`), in seconds.
fn duration_s(text: &str) -> Option<f64> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale = match unit {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "min" | "mins" => 60.0,
        "hr" | "hrs" => 3600.0,
        _ => return None,
    };
    Some(number * scale)
}

/// Every category's name, in order, then "other".
pub fn category_names() -> impl Iterator<Item = &'static str> {
    CATEGORIES
        .iter()
        .map(|(name, _)| *name)
        .chain(std::iter::once("other"))
}

/// Every cross-cutting kind of work's name, in order.
pub fn across_names() -> impl Iterator<Item = &'static str> {
    ACROSS.iter().map(|(name, _)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_sample_of_the_traces_output() {
        let traces = "File: kube-apiserver\nType: cpu\n-----------+-------\n      10ms   runtime.memmove\n             k8s.io/apiserver/pkg/storage/cacher.(*cacheWatcher).process (inline)\n-----------+-------\n   bytes:  [64]\n     1.20s   runtime.gcBgMarkWorker\n-----------+-------\n";
        let samples = stacks(traces);
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[0].0, 0.01);
        assert_eq!(
            samples[0].1[1],
            "k8s.io/apiserver/pkg/storage/cacher.(*cacheWatcher).process"
        );
        assert_eq!(
            first_match(CATEGORIES, &samples[0].1),
            Some("watch cache: dispatch to watchers")
        );
        assert_eq!(
            samples[1],
            (1.2, vec!["runtime.gcBgMarkWorker".to_string()])
        );
    }
}
