//! The project's own scripts (`hack/…`) run as a user runs them: from the repository's root,
//! output captured, bounded in time, and read back step by step (the `== step` headings they
//! print).

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use super::repo_root;

/// What a script run printed and how it ended.
#[derive(Debug)]
pub struct ScriptRun {
    /// The exit code (`None`: killed, by a signal or for running over its time).
    pub code: Option<i32>,
    /// Standard output and standard error, interleaved as printed, without terminal colours.
    pub output: String,
    /// How long it ran.
    pub took: Duration,
}

/// One `== heading` of a script's output and the lines printed under it.
#[derive(Debug, Clone)]
pub struct Step {
    /// The heading, without `== `.
    pub title: String,
    /// The lines under it.
    pub lines: Vec<String>,
}

impl ScriptRun {
    /// Runs a script of the repository with arguments; kills it after `limit`.
    pub fn of(script: &str, args: &[&str], limit: Duration) -> Self {
        let n = super::COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let log: PathBuf =
            std::env::temp_dir().join(format!("failover-script-{}-{n}.log", std::process::id()));
        let file = std::fs::File::create(&log).expect("script log file");
        let started = Instant::now();
        let mut child = Command::new(repo_root().join(script))
            .current_dir(repo_root())
            .args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {script}: {e}"));
        let code = loop {
            if let Some(status) = child.try_wait().expect("waiting for the script") {
                break status.code();
            }
            if started.elapsed() > limit {
                // Its cleanup trap runs on TERM; KILL only if it does not end.
                let _ = Command::new("kill")
                    .args(["-TERM", &child.id().to_string()])
                    .status();
                std::thread::sleep(Duration::from_secs(20));
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let raw = std::fs::read(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        Self {
            code,
            output: without_colours(&String::from_utf8_lossy(&raw)),
            took: started.elapsed(),
        }
    }

    /// The steps, in the order printed.
    pub fn steps(&self) -> Vec<Step> {
        let mut steps: Vec<Step> = Vec::new();
        for line in self.output.lines() {
            if let Some(title) = line.strip_prefix("== ") {
                steps.push(Step {
                    title: title.trim().to_string(),
                    lines: Vec::new(),
                });
            } else if let Some(step) = steps.last_mut() {
                step.lines.push(line.to_string());
            }
        }
        steps
    }

    /// The step whose title starts with `prefix`; fails the test naming it when there is none.
    pub fn step(&self, prefix: &str) -> Step {
        self.steps()
            .into_iter()
            .find(|s| s.title.starts_with(prefix))
            .unwrap_or_else(|| panic!("no step '{prefix}…' in the output:\n{}", self.tail(40)))
    }

    /// The last `lines` lines of the output.
    pub fn tail(&self, lines: usize) -> String {
        let all: Vec<&str> = self.output.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Fails the test unless the script exited 0, naming the step it stopped in.
    pub fn assert_success(&self, script: &str) {
        if self.code == Some(0) {
            return;
        }
        // The script names the step it stopped in; else the last one before its clean-up.
        let named = self.output.lines().find_map(|l| {
            let rest = l.split("stopped in step '").nth(1)?;
            Some(rest.split('\'').next()?.to_string())
        });
        let last = named.unwrap_or_else(|| {
            self.steps()
                .iter()
                .rev()
                .find(|s| s.title != "cleaning up")
                .map_or("(before its first step)".to_string(), |s| s.title.clone())
        });
        panic!(
            "{script} failed in step '{last}' (exit {:?} after {:.0?}); its last lines:\n{}",
            self.code,
            self.took,
            self.tail(40)
        );
    }
}

impl Step {
    /// The text under the step.
    pub fn text(&self) -> String {
        self.lines.join("\n")
    }
}

fn without_colours(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // An escape sequence: ESC [ parameters letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The processes whose command line or environment names `path`, as `pid command`.
pub fn processes_naming(path: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != std::process::id())
        .filter_map(|pid| {
            let read =
                |what: &str| std::fs::read(format!("/proc/{pid}/{what}")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&read("cmdline")).replace('\0', " ");
            let environ = String::from_utf8_lossy(&read("environ")).into_owned();
            (cmdline.contains(path) || environ.contains(path)).then(|| format!("{pid} {cmdline}"))
        })
        .collect()
}
