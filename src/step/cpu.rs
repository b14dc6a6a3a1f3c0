//! The CPU-heavy parts of a step (decoding a large body, compiling tool schemas, tokenising the
//! context, parsing and validating a large output) run on tokio's blocking pool, at most one per
//! core, so that an HTTP worker always comes back to answer others, health checks included.
//! Each part is bounded (linear in an input the body limit bounds); the step's deadline stops
//! the wait for it, and the permit goes with the work, so a step that was given up on still
//! counts against the cores until its work is done.

use std::sync::OnceLock;

use tokio::sync::Semaphore;

/// Below this many bytes of input, a part takes microseconds: the hop to another thread would
/// cost more than it saves.
pub const INLINE_BYTES: usize = 64 * 1024;

/// Runs `work` on the blocking pool once a core is free; an error only if the pool is gone.
pub async fn run<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let permit = cores()
        .clone()
        .acquire_owned()
        .await
        .map_err(|e| format!("the CPU pool is closed: {e}"))?;
    tokio::task::spawn_blocking(move || {
        lower_priority();
        let out = work();
        drop(permit);
        out
    })
    .await
    .map_err(|e| format!("CPU work failed: {e}"))
}

/// CPU work yields to the HTTP workers: its threads run at a lower priority (nice 10), so a
/// worker that wakes to answer (a health check, a small step) takes a core at once instead of
/// waiting for a slice. Once per thread of the blocking pool.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        thread_local!(static LOWERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
        if !LOWERED.get() {
            // SAFETY: plain syscalls on this thread's own id; a failure leaves the priority as it was.
            unsafe {
                let thread = libc::syscall(libc::SYS_gettid) as libc::id_t;
                libc::setpriority(libc::PRIO_PROCESS, thread, 10);
            }
            LOWERED.set(true);
        }
    }
}

/// Permits for CPU work: one per core.
fn cores() -> &'static std::sync::Arc<Semaphore> {
    static CORES: OnceLock<std::sync::Arc<Semaphore>> = OnceLock::new();
    CORES.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
        std::sync::Arc::new(Semaphore::new(cores))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn work_runs_off_the_calling_thread_and_returns_its_value() {
        let caller = std::thread::current().id();
        let ran_on = run(move || std::thread::current().id()).await;
        assert!(matches!(ran_on, Ok(id) if id != caller));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn no_more_pieces_run_at_once_than_there_are_cores() {
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
        let running = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let pieces = (0..cores * 4).map(|_| {
            let (running, most) = (running.clone(), most.clone());
            run(move || {
                use std::sync::atomic::Ordering::SeqCst;
                let now = running.fetch_add(1, SeqCst) + 1;
                most.fetch_max(now, SeqCst);
                // Enough work for the pieces to overlap if nothing held them apart.
                let mut x = 0u64;
                for i in 0..2_000_000u64 {
                    x = std::hint::black_box(x.wrapping_add(i));
                }
                running.fetch_sub(1, SeqCst);
                x
            })
        });
        let results = futures_util::future::join_all(pieces).await;
        assert!(results.iter().all(Result::is_ok));
        assert!(most.load(std::sync::atomic::Ordering::SeqCst) <= cores);
    }
}
