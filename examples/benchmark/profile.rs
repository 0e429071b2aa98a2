//! The API server's CPU profile over each latency window: consecutive one-second profiles
//! (`/debug/pprof/profile`, served when kube-apiserver runs with `--profiling=true`, which
//! `hack/bench.sh` asks of the control plane) taken for as long as the window lasts, through
//! the benchmark's admin client. Go's profiler runs one CPU profile at a time, so the segments
//! never overlap, and the last one ends at most a second after the window. The segments of a
//! window are merged and kept next to the run's results, and summed up by
//! [`crate::pprof`].

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use kube::Client;
use tokio::task::JoinHandle;

/// The length of one profile segment, in seconds.
const SEGMENT_SECONDS: u32 = 1;

/// The profile of one window: its segments, or why there are none.
#[derive(Default)]
pub struct Profile {
    pub segments: Vec<Vec<u8>>,
    pub missing: Option<String>,
}

impl Profile {
    /// Adds another turn of the same window.
    pub fn add(&mut self, other: Self) {
        self.segments.extend(other.segments);
        if self.missing.is_none() {
            self.missing = other.missing;
        }
    }
}

/// Profile segments being taken, one after the other, until [`Recording::finish`].
pub struct Recording {
    stop: Arc<AtomicBool>,
    task: JoinHandle<Profile>,
}

impl Recording {
    /// Starts profiling the API server `client` talks to.
    pub fn start(client: Client) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut profile = Profile::default();
            while !stopped.load(Ordering::SeqCst) {
                match segment(&client).await {
                    Ok(bytes) => profile.segments.push(bytes),
                    Err(why) => {
                        profile.missing = Some(why);
                        break;
                    }
                }
            }
            profile
        });
        Self { stop, task }
    }

    /// Stops after the segment under way, and returns them all.
    pub async fn finish(self) -> Profile {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap_or_else(|e| Profile {
            segments: Vec::new(),
            missing: Some(format!("the profiling task failed: {e}")),
        })
    }
}

/// One CPU profile of [`SEGMENT_SECONDS`], gzipped protobuf as Go writes it.
async fn segment(client: &Client) -> Result<Vec<u8>, String> {
    let request = http::Request::get(format!("/debug/pprof/profile?seconds={SEGMENT_SECONDS}"))
        .body(kube::client::Body::empty())
        .map_err(|e| e.to_string())?;
    let response = client.send(request).await.map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response
        .into_body()
        .collect_bytes()
        .await
        .map_err(|e| e.to_string())?;
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body);
        return Err(format!(
            "the API server answered {status} to /debug/pprof/profile ({}): is it started with --profiling=true (APISERVER_PROFILING=true, as hack/bench.sh sets)?",
            text.trim()
        ));
    }
    Ok(body.to_vec())
}

/// Has the API server collect its garbage now (`/debug/pprof/heap?gc=1` runs a collection
/// before it answers), so that each window starts from a collected heap and the collections
/// within it are those its own allocations caused, not one that the windows before it made due.
/// Best effort: without profiling, windows keep the collections as they fall.
pub async fn collect_garbage(client: &Client) {
    let Ok(request) =
        http::Request::get("/debug/pprof/heap?gc=1").body(kube::client::Body::empty())
    else {
        return;
    };
    if let Ok(response) = client.send(request).await {
        let _ = response.into_body().collect_bytes().await;
    }
}

/// Where a run's profiles go: next to its results, `<results without .json>.apiserver-pprof/`.
pub fn directory(out: &Path) -> PathBuf {
    let stem = out.file_stem().unwrap_or_default().to_string_lossy();
    out.with_file_name(format!("{stem}.apiserver-pprof"))
}

/// Keeps the profile of window `name` in `dir`: merged into `<name>.pb.gz` when `go tool pprof`
/// can merge it, else as its segments, `<name>-<i>.pb.gz`. Returns the merged file, if any.
pub fn save(dir: &Path, name: &str, profile: &Profile) -> Option<PathBuf> {
    if profile.segments.is_empty() {
        return None;
    }
    let parts = dir.join(format!("{name}.segments"));
    std::fs::create_dir_all(&parts).ok()?;
    let files: Vec<PathBuf> = profile
        .segments
        .iter()
        .enumerate()
        .filter_map(|(i, bytes)| {
            let file = parts.join(format!("{name}-{i:03}.pb.gz"));
            std::fs::write(&file, bytes).ok().map(|()| file)
        })
        .collect();
    let merged = dir.join(format!("{name}.pb.gz"));
    match crate::pprof::merge(&files, &merged) {
        Ok(()) => {
            let _ = std::fs::remove_dir_all(&parts);
            Some(merged)
        }
        Err(why) => {
            eprintln!(
                "the profile of {name} is kept as {} segments in {}: {why}",
                files.len(),
                parts.display()
            );
            None
        }
    }
}

/// How many functions by cumulative time are printed per window.
const TOP_ROWS: usize = 15;

/// Keeps each window's profile next to the run's results (`out`), then prints what the API
/// server spent its CPU on in each: a table by category, side by side, and each window's top
/// functions by cumulative time. The windows are the controller's changes (`controller`), the
/// relay's (`relay`) and those of the relay making the same writes (`relay-same`).
pub fn report(n: usize, churn_per_second: u64, out: &Path, windows: [(&str, &Profile); 3]) {
    let dir = directory(out);
    let mut summaries = Vec::new();
    for (name, profile) in windows {
        if let Some(why) = &profile.missing {
            eprintln!("[{n}] the API server's profile over the {name} window is incomplete: {why}");
        }
        let file = save(
            &dir,
            &format!("{n}-churn{churn_per_second}-{name}"),
            profile,
        );
        let summary = file.map(|f| (crate::pprof::summarize(&f, TOP_ROWS), f));
        match summary {
            Some((Ok(summary), file)) => {
                let shown = file
                    .strip_prefix(crate::support::repo_root())
                    .unwrap_or(&file);
                eprintln!(
                    "[{n}] the API server's CPU profile over the {name} window: {}",
                    shown.display()
                );
                summaries.push((name, summary));
            }
            Some((Err(why), _)) => {
                eprintln!("[{n}] the {name} window's profile could not be read: {why}")
            }
            None => eprintln!("[{n}] no profile of the API server over the {name} window"),
        }
    }
    if !summaries.is_empty() {
        print_table(n, &summaries);
    }
}

fn print_table(n: usize, summaries: &[(&str, crate::pprof::Summary)]) {
    let mut lines = vec![format!(
        "[{n}] the API server's sampled CPU by what it was doing, in seconds (share of the window's samples; a garbage collection's cost lands in the window where the heap reached its goal, whichever window's allocations filled it):"
    )];
    let header: String = summaries
        .iter()
        .map(|(name, _)| format!("{name:>18}"))
        .collect();
    lines.push(format!("  {:<44}{header}", ""));
    let row = |label: &str, value: &dyn Fn(&crate::pprof::Summary) -> f64| {
        let cells: String = summaries
            .iter()
            .map(|(_, s)| {
                let v = value(s);
                format!("{:>10.2} ({:>3.0}%)", v, 100.0 * v / s.total_s.max(1e-9))
            })
            .collect();
        format!("  {label:<44}{cells}")
    };
    lines.push(row("all samples", &|s| s.total_s));
    let collecting = crate::pprof::category_names().next().unwrap_or_default();
    lines.push(row("all but garbage collection", &|s| {
        s.total_s - s.categories.get(collecting).copied().unwrap_or(0.0)
    }));
    for name in crate::pprof::category_names() {
        lines.push(row(name, &|s| {
            s.categories.get(name).copied().unwrap_or(0.0)
        }));
    }
    lines.push(format!("  {:<44}", "of which, across categories:"));
    for name in crate::pprof::across_names() {
        lines.push(row(name, &|s| s.across.get(name).copied().unwrap_or(0.0)));
    }
    for (name, summary) in summaries {
        lines.push(format!(
            "[{n}] the {name} window, top functions by cumulative CPU (the runtime's and the handler chain's frames hidden):"
        ));
        lines.extend(summary.top.iter().map(|l| format!("  {l}")));
    }
    eprintln!("{}", lines.join("\n"));
}
