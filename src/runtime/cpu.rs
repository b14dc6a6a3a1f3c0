//! The CPU-heavy parts of a step (decoding a large body, compiling tool schemas, tokenising the
//! context, parsing and validating a large output) run on tokio's blocking pool, at most one per
//! core, so that an HTTP worker always comes back to answer others, health checks included.
//! Each part is bounded (linear in an input the body limit bounds); the step's deadline stops
//! the wait for it, and the slot goes with the work, so a step that was given up on still
//! counts against the cores until its work is done.
//!
//! The cores are shared fairly. A request whose body is large (at least [`LARGE_BODY_BYTES`])
//! does all its parts in the large lane, which may hold all cores but one; the parts of every
//! other request go first, but never more than [`SMALL_STREAK_MOST`] in a row while a large part
//! waits. In each lane waiting parts are served client by client in turn. So a client looping on
//! 5 MiB bodies cannot hold the pool, clients looping on bodies just under the bound share the
//! small lane with everyone else one part per turn, and a large request is slowed, never
//! starved.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, OnceLock};

use tokio::sync::oneshot;

/// Below this many bytes of input, a part takes microseconds: the hop to another thread would
/// cost more than it saves.
pub const INLINE_BYTES: usize = 64 * 1024;

/// A request body of at least this many bytes puts its work in the large lane. What bounds how
/// long a small step waits is the cost of one part of each other client's below it: 256 KiB
/// keeps that to milliseconds, while a typical step (20 KB) is far below it.
pub const LARGE_BODY_BYTES: usize = 256 * 1024;

/// Whose work a task does, as the request's handler classified it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Job {
    /// A digest of the client (its token, else its address); 0 when unknown.
    pub client: u64,
    pub large: bool,
}

tokio::task_local! {
    static JOB: Cell<Job>;
}

/// Runs `work` (a request's handling) with its CPU parts classified as `job`, which
/// [`classify`] may change once the body is read.
/// Not an `async fn`: that would hold `work` twice, as its argument and inside the scope.
pub fn scoped<F: std::future::Future>(
    job: Job,
    work: F,
) -> impl std::future::Future<Output = F::Output> {
    JOB.scope(Cell::new(job), work)
}

/// Classifies the CPU parts the current request runs from now on.
pub fn classify(job: Job) {
    let _ = JOB.try_with(|j| j.set(job));
}

/// The current request's class (small and of no known client outside a request).
pub fn current() -> Job {
    JOB.try_with(Cell::get).unwrap_or_default()
}

/// Runs `work` on the blocking pool once a core is free for it; an error only if the pool is
/// gone.
pub async fn run<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let slot = pool().acquire(current()).await;
    tokio::task::spawn_blocking(move || {
        lower_priority();
        let out = work();
        drop(slot);
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

/// The cores, and the parts waiting for one.
struct Pool {
    state: Mutex<Lanes>,
}

#[derive(Default)]
struct Lanes {
    free: usize,
    large_running: usize,
    /// Most parts of large requests running at once: all cores but one.
    large_most: usize,
    small: Turns,
    large: Turns,
    /// Cores handed to small parts in a row while large ones waited.
    small_streak: usize,
}

/// After this many small parts in a row, a waiting large part goes next: a steady flow of
/// small requests slows large ones, never starves them.
const SMALL_STREAK_MOST: usize = 4;

/// Waiting parts by client, the clients served in turn: one part each per round.
#[derive(Default)]
struct Turns {
    waiting: HashMap<u64, VecDeque<oneshot::Sender<()>>>,
    order: VecDeque<u64>,
}

impl Turns {
    fn push(&mut self, client: u64, tx: oneshot::Sender<()>) {
        let queue = self.waiting.entry(client).or_default();
        queue.push_back(tx);
        if queue.len() == 1 {
            self.order.push_back(client);
        }
    }

    fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The waiting part of the client whose turn it is; that client goes to the back.
    fn next(&mut self) -> Option<oneshot::Sender<()>> {
        while let Some(client) = self.order.pop_front() {
            let Some(queue) = self.waiting.get_mut(&client) else {
                continue;
            };
            let next = queue.pop_front();
            if queue.is_empty() {
                self.waiting.remove(&client);
            } else {
                self.order.push_back(client);
            }
            if next.is_some() {
                return next;
            }
        }
        None
    }
}

/// A core held by one part; given to the next waiting part when dropped.
pub struct Slot {
    pool: &'static Pool,
    large: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.pool.release(self.large);
    }
}

/// Gives the slot back if the part stopped waiting (the step was given up on) just as it was
/// handed one.
struct Waiting {
    pool: &'static Pool,
    rx: Option<oneshot::Receiver<()>>,
    large: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if rx.try_recv().is_ok() {
                self.pool.release(self.large);
            }
        }
    }
}

impl Pool {
    fn new(cores: usize) -> Self {
        Self {
            state: Mutex::new(Lanes {
                free: cores,
                large_most: cores.saturating_sub(1).max(1),
                ..Lanes::default()
            }),
        }
    }

    fn lanes(&self) -> std::sync::MutexGuard<'_, Lanes> {
        // The lock guards plain counters and queues, left whole by a panic elsewhere.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn acquire(&'static self, job: Job) -> Slot {
        let rx = {
            let mut lanes = self.lanes();
            let room = lanes.free > 0 && (!job.large || lanes.large_running < lanes.large_most);
            if room {
                lanes.free -= 1;
                lanes.large_running += usize::from(job.large);
                return Slot {
                    pool: self,
                    large: job.large,
                };
            }
            let (tx, rx) = oneshot::channel();
            match job.large {
                true => lanes.large.push(job.client, tx),
                false => lanes.small.push(job.client, tx),
            }
            rx
        };
        let mut waiting = Waiting {
            pool: self,
            rx: Some(rx),
            large: job.large,
        };
        if let Some(rx) = waiting.rx.as_mut() {
            // A sender is dropped only when its slot was handed over: it cannot fail.
            let _ = rx.await;
        }
        waiting.rx = None;
        Slot {
            pool: self,
            large: job.large,
        }
    }

    /// Hands a freed core to the next part: a small request's first, client by client, else the
    /// next client's large part while the large lane has room; a large part also goes first
    /// after [`SMALL_STREAK_MOST`] small ones in a row.
    fn release(&self, large: bool) {
        let mut lanes = self.lanes();
        lanes.large_running -= usize::from(large);
        let large_may = lanes.large_running < lanes.large_most && !lanes.large.is_empty();
        let large_first = large_may && lanes.small_streak >= SMALL_STREAK_MOST;
        if !large_first && lanes.small.hand_over() {
            lanes.small_streak += usize::from(large_may);
            return;
        }
        if large_may && lanes.large.hand_over() {
            lanes.large_running += 1;
            lanes.small_streak = 0;
            return;
        }
        if lanes.small.hand_over() {
            return;
        }
        lanes.free += 1;
    }
}

impl Turns {
    /// Hands the core to the next waiting part still waiting; false when none is.
    fn hand_over(&mut self) -> bool {
        while let Some(tx) = self.next() {
            if tx.send(()).is_ok() {
                return true;
            }
        }
        false
    }
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
        Pool::new(cores)
    })
}

#[cfg(test)]
#[expect(clippy::expect_used, reason = "a test fails loudly")]
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

    fn leaked(cores: usize) -> &'static Pool {
        Box::leak(Box::new(Pool::new(cores)))
    }

    const SMALL: Job = Job {
        client: 9,
        large: false,
    };

    fn large(client: u64) -> Job {
        Job {
            client,
            large: true,
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn large_requests_leave_a_core_to_everyone_else() {
        use futures_util::FutureExt;
        let pool = leaked(2);
        let _running = pool.acquire(large(1)).await;
        let mut queued = Box::pin(pool.acquire(large(1)));
        assert!(
            (&mut queued).now_or_never().is_none(),
            "one core stays free"
        );
        assert!(
            pool.acquire(SMALL).now_or_never().is_some(),
            "a small part runs at once"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn waiting_large_parts_are_served_client_by_client() {
        use futures_util::FutureExt;
        let pool = leaked(2);
        let running = pool.acquire(large(1)).await;
        let mut a2 = Box::pin(pool.acquire(large(1)));
        let mut a3 = Box::pin(pool.acquire(large(1)));
        let mut b1 = Box::pin(pool.acquire(large(2)));
        for waiting in [&mut a2, &mut a3, &mut b1] {
            assert!(waiting.now_or_never().is_none());
        }
        drop(running);
        let a2 = (&mut a2).now_or_never().expect("the first client's turn");
        assert!((&mut b1).now_or_never().is_none() && (&mut a3).now_or_never().is_none());
        drop(a2);
        let b1 = (&mut b1)
            .now_or_never()
            .expect("then the second's, before the first's third");
        assert!((&mut a3).now_or_never().is_none());
        drop(b1);
        assert!((&mut a3).now_or_never().is_some());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_small_part_waiting_goes_before_any_large_one() {
        use futures_util::FutureExt;
        let pool = leaked(1);
        let running = pool.acquire(large(1)).await;
        let mut big = Box::pin(pool.acquire(large(2)));
        let mut small = Box::pin(pool.acquire(SMALL));
        assert!((&mut big).now_or_never().is_none() && (&mut small).now_or_never().is_none());
        drop(running);
        let served = (&mut small).now_or_never();
        assert!(served.is_some());
        assert!((&mut big).now_or_never().is_none());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_part_given_up_on_gives_back_the_core_it_was_handed() {
        use futures_util::FutureExt;
        let pool = leaked(1);
        let running = pool.acquire(SMALL).await;
        let mut waiting = Box::pin(pool.acquire(SMALL));
        assert!((&mut waiting).now_or_never().is_none());
        drop(running);
        // Handed the core, then dropped before it ran: the core comes back.
        drop(waiting);
        assert_eq!(pool.lanes().free, 1);
        let mut gone = Box::pin(pool.acquire(large(3)));
        assert!((&mut gone).now_or_never().is_some());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_steady_flow_of_small_parts_lets_a_large_one_through() {
        use futures_util::FutureExt;
        let pool = leaked(2);
        let mut held = vec![pool.acquire(SMALL).await, pool.acquire(SMALL).await];
        let mut big = Box::pin(pool.acquire(large(1)));
        assert!((&mut big).now_or_never().is_none());
        // Each freed core has a small part waiting for it; the large part still gets its turn.
        for served_small in 0..2 * SMALL_STREAK_MOST + 2 {
            let mut small = Box::pin(pool.acquire(Job {
                client: 7,
                large: false,
            }));
            assert!((&mut small).now_or_never().is_none());
            drop(held.remove(0));
            if let Some(slot) = (&mut big).now_or_never() {
                assert!(
                    served_small <= SMALL_STREAK_MOST,
                    "{served_small} small parts first"
                );
                drop(slot);
                return;
            }
            held.push(
                (&mut small)
                    .now_or_never()
                    .expect("the small part got the core"),
            );
        }
        panic!("the large part never got a core");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn small_parts_are_served_client_by_client_too() {
        use futures_util::FutureExt;
        let pool = leaked(1);
        let running = pool.acquire(SMALL).await;
        let busy = Job {
            client: 1,
            large: false,
        };
        let mut first = Box::pin(pool.acquire(busy));
        let mut second = Box::pin(pool.acquire(busy));
        let mut other = Box::pin(pool.acquire(Job {
            client: 2,
            large: false,
        }));
        for waiting in [&mut first, &mut second, &mut other] {
            assert!(waiting.now_or_never().is_none());
        }
        drop(running);
        let one = (&mut first)
            .now_or_never()
            .expect("the first client's turn");
        drop(one);
        let two = (&mut other)
            .now_or_never()
            .expect("then the other client's");
        assert!((&mut second).now_or_never().is_none());
        drop(two);
        assert!((&mut second).now_or_never().is_some());
    }
}
