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

/// Blocks of this size and more get pages of their own, given back the moment they are freed.
pub const MMAP_THRESHOLD: usize = 128 * 1024;

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

/// glibc raises its threshold for blocks with pages of their own to the size of each such block
/// freed (up to 32 MiB), so after one burst of large bodies and replies every later one of that
/// size is carved from the arenas, where it leaves holes among live blocks that no trim gives
/// back: 192 answers of 1 MB left 150–187 MiB resident, 91 MiB 100 s later (57 idle). A fixed
/// threshold keeps large blocks out of the arenas: 66–69 MiB right after the same burst.
/// Called before start-up allocates much: the encoders' tables go the same way.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn fix_mmap_threshold() {
    // SAFETY: mallopt only sets the allocator's parameter; it fails (returns 0) on a bad value.
    let set = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int) };
    if set == 0 {
        tracing::warn!("the allocator's mmap threshold could not be set");
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn fix_mmap_threshold() {}

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
