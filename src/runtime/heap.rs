//! Gives back to the system the memory a burst freed.
//!
//! glibc's malloc returns freed memory to the system only from the top of its heap; what a burst
//! (the first list, a relist, the start-up pass over every policy) frees below live allocations
//! stays in the process, so without a trim RSS stays at a cold start's peak however far the heap
//! falls after it (docs/benchmarks.md). `malloc_trim` hands every free page back, wherever it
//! is; it runs only when the heap has shrunk by [`SHRUNK`] since the last trim, checked every
//! [`EVERY`], so a steady controller never calls it. mimalloc in place of glibc's malloc was
//! tried too: its cold start peaked higher, so the system allocator stays.

use std::time::Duration;

/// How often the heap is looked at.
pub const EVERY: Duration = Duration::from_secs(2);
/// How much the heap must have shrunk from its high point since the last trim.
pub const SHRUNK: i64 = 1 << 20;

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
/// blocking thread, whose allocations glibc serves from an arena of that thread's own: what
/// such work freed (queries compiled off the async threads, as a noisy neighbour makes them
/// compile over and over) goes back too, not only what the main arena freed.
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
