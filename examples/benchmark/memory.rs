//! The controller's memory, phase by phase: the peak RSS within the phase (the kernel's
//! high-water mark, reset when the phase starts), and at its end the RSS, the heap and the live
//! allocations as the controller's allocator counts them (`failover_heap_*` on `/metrics`), and
//! the allocations made since the end of the start-up.

use crate::support::{ControllerProcess, metric};

/// The first phase: from the controller's start until every route and status is in place and
/// the controller has settled (its end is the memory at rest).
pub const COLD_START: &str = "cold start";

/// The phase of the failover groups.
pub const GROUPS: &str = "failover groups";

/// One phase's memory.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PhaseMemory {
    pub phase: String,
    pub peak_rss_mib: f64,
    pub rss_mib: f64,
    /// Of the RSS at the phase's end, the pages backed by files: the binary's code and data
    /// the process has touched so far, which grows with the code paths run, not with policies.
    pub rss_file_mib: f64,
    pub heap_mib: f64,
    pub live_allocations: f64,
    /// Allocations made during the phase.
    pub allocations: f64,
}

/// The phases of one controller process, measured in turn.
pub struct Phases {
    pid: u32,
    allocations_at_start: f64,
    pub measured: Vec<PhaseMemory>,
}

/// A field of `/proc/<pid>/status` in KiB (0 when it cannot be read).
pub fn status_kib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// Resets the process's peak RSS to its current RSS (`clear_refs` 5); false where the kernel
/// refuses it, and the next phase's peak then includes the earlier ones.
fn reset_peak(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

impl Phases {
    /// Phases of `controller`, the first one running since its start.
    pub fn of(controller: &ControllerProcess) -> Self {
        Self {
            pid: controller.pid(),
            allocations_at_start: 0.0,
            measured: Vec::new(),
        }
    }

    /// Ends the phase running now, records and prints its memory, and starts the next one.
    pub async fn end(&mut self, controller: &ControllerProcess, n: usize, phase: &str) {
        let text = controller.admin_get("/metrics").await.1;
        let value = |name: &str| metric(&text, name).unwrap_or(0.0);
        let allocations = value("failover_heap_allocations_total");
        let m = PhaseMemory {
            phase: phase.to_string(),
            peak_rss_mib: status_kib(self.pid, "VmHWM:") / 1024.0,
            rss_mib: status_kib(self.pid, "VmRSS:") / 1024.0,
            rss_file_mib: status_kib(self.pid, "RssFile:") / 1024.0,
            heap_mib: value("failover_heap_bytes") / 1024.0 / 1024.0,
            live_allocations: value("failover_heap_live_allocations"),
            allocations: allocations - self.allocations_at_start,
        };
        eprintln!(
            "[{n}] memory, {phase}: peak RSS {:.1} MiB; at its end RSS {:.1} MiB ({:.1} MiB file-backed), heap {:.1} MiB in {:.0} live allocations; {:.0} allocations made",
            m.peak_rss_mib,
            m.rss_mib,
            m.rss_file_mib,
            m.heap_mib,
            m.live_allocations,
            m.allocations
        );
        self.allocations_at_start = allocations;
        self.measured.push(m);
        if !reset_peak(self.pid) {
            eprintln!(
                "[{n}] memory: the peak RSS cannot be reset; later phases include earlier peaks"
            );
        }
    }
}
