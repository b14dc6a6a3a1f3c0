//! Gives freed heap back to the system. glibc's allocator returns memory only from the top of
//! each arena; what a burst freed in between stays resident, so after 5,000 steps the process
//! kept its peak (230–300 MiB) long after the steps were answered. `malloc_trim` releases the
//! free pages anywhere in every arena, holding each arena's lock while it walks it: measured at
//! 30 ms for the first trim after such a burst and 3–6 ms after that, small next to a step that
//! waits seconds on its model, so a thread calls it every few seconds.

use std::sync::Once;
use std::time::Duration;

/// How often freed heap is given back.
pub const PERIOD: Duration = Duration::from_secs(10);

/// Starts the thread that gives freed heap back every [`PERIOD`]; once per process, however
/// many servers it builds (the tests build many).
pub fn keep_trimming() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("heap-trim".into())
            .stack_size(128 * 1024)
            .spawn(|| loop {
                std::thread::sleep(PERIOD);
                trim();
            });
        if let Err(e) = spawned {
            // Only memory is at stake: the service serves as before.
            tracing::warn!(error = %e, "the heap-trim thread did not start");
        }
    });
}

/// Releases the free pages of every arena; true when any were released.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim() -> bool {
    // SAFETY: malloc_trim takes the allocator's own locks and only releases pages that hold no
    // live allocation.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Other allocators return memory by their own rules.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() -> bool {
    false
}
