//! Gives back to the system the memory a burst freed.
//!
//! glibc's malloc returns freed memory to the system only from the top of its heap; what a burst
//! (the first list, a relist, the start-up pass over every policy) frees below live allocations
//! stays in the process. At 10,000 policies the heap was 62.6 MiB after the cold start while RSS
//! stayed at the cold start's 104 MiB peak (docs/bench-runs, run 20261125-1245). `malloc_trim`
//! hands every free page back, wherever it is; it runs only when the heap has shrunk by
//! [`SHRUNK`] since the last trim, checked every [`EVERY`], so a steady controller never calls it.
//! mimalloc in place of glibc's malloc was measured too: a higher peak (115.9 MiB at the same
//! cold start), so the system allocator stays.

use std::time::Duration;

/// How often the heap is looked at.
pub const EVERY: Duration = Duration::from_secs(2);
/// How much the heap must have shrunk from its high point since the last trim.
pub const SHRUNK: i64 = 4 << 20;

/// Trims whenever the heap (in bytes, as `heap` reads it) has shrunk by [`SHRUNK`] from the
/// highest it was since the last trim. Runs forever.
pub async fn trim_after_bursts(heap: impl Fn() -> i64) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut high = heap();
    loop {
        tick.tick().await;
        let now = heap();
        high = high.max(now);
        if high - now >= SHRUNK {
            trim();
            high = now;
        }
    }
}

/// Hands the allocator's free pages back to the system, from every arena: also after work on a
/// blocking thread, whose allocations glibc serves from an arena of that thread's own. Without
/// it, the noisy-neighbour phase at 1,000 policies (a query at every limit compiled every
/// second) ended at 28.1 MiB RSS against 24.6 MiB at the end of the phase before, with the heap
/// at 5.9 against 5.0 MiB (docs/bench-runs, run 20261126-1141); with it, 26.2 against
/// 25.4 MiB, the heap at 6.2 against 5.3 MiB (run 20261126-1150).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim() {
    // SAFETY: malloc_trim takes no pointer and only releases memory malloc holds free.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Nothing to hand back with another allocator.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() {}
