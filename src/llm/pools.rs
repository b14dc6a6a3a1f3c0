//! The connection pools upstream calls are spread over. Over HTTP/2 a pool keeps one connection
//! per host, and when the server's limit on streams per connection is reached hyper queues the
//! next call on that connection instead of opening another. One pool would therefore cap a busy
//! service at one provider's streams per connection (commonly 100 to 256); several pools, taken
//! in turn, multiply that cap. Over HTTP/1.1 nothing changes but which pool a connection sits in.
//!
//! Each HTTP worker runs its own single-threaded runtime, and a pooled connection is driven by a
//! task on the runtime that opened it: a call from one worker over another's connection wakes
//! that worker to write the request and again to read the reply, and then wakes the caller (two
//! threads, four wake-ups and their context switches per call). So there is one set of pools per
//! core, and a thread keeps to its own set: a worker's calls go over connections its own runtime
//! drives.

use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug)]
pub struct Pools {
    /// One set of `count` clients per core; a thread takes the set of its `thread_slot`.
    sets: Box<[Box<[reqwest::Client]>]>,
}

impl Pools {
    /// `count` pools (at least one) for each core, each client made by `build`.
    pub fn new(
        count: usize,
        build: impl Fn() -> Result<reqwest::Client, reqwest::Error>,
    ) -> Result<Self, reqwest::Error> {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        let sets = (0..cores)
            .map(|_| {
                (0..count.max(1))
                    .map(|_| build())
                    .collect::<Result<Box<[_]>, _>>()
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { sets })
    }

    /// The pool for the next call: the next of this thread's set. The turn is the thread's own
    /// too: one counter for every core would be a cache line they all write at every call.
    pub fn next(&self) -> &reqwest::Client {
        thread_local!(static TURN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) });
        let set = &self.sets[thread_slot() % self.sets.len()];
        let turn = TURN.get();
        TURN.set(turn.wrapping_add(1));
        &set[turn % set.len()]
    }
}

/// A number for this thread, given in the order threads first make a call: the HTTP workers,
/// the only threads that call upstream in the service, get 0, 1, ... and so a set each.
fn thread_slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed));
    SLOT.with(|slot| *slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_take_the_pools_in_turn() {
        let pools = Pools::new(3, || reqwest::Client::builder().build()).unwrap_or_else(|e| {
            panic!("a client builds: {e}");
        });
        let first: Vec<*const reqwest::Client> = (0..3).map(|_| pools.next() as *const _).collect();
        let second: Vec<*const reqwest::Client> =
            (0..3).map(|_| pools.next() as *const _).collect();
        assert_eq!(first, second, "the fourth call goes where the first went");
        assert!(first[0] != first[1] && first[1] != first[2] && first[0] != first[2]);
    }

    #[test]
    fn zero_pools_means_one() {
        let pools = Pools::new(0, || reqwest::Client::builder().build()).unwrap_or_else(|e| {
            panic!("a client builds: {e}");
        });
        assert!(std::ptr::eq(pools.next(), pools.next()));
    }

    #[test]
    fn threads_keep_to_their_own_pools() {
        let pools = Pools::new(2, || reqwest::Client::builder().build()).unwrap_or_else(|e| {
            panic!("a client builds: {e}");
        });
        let mine: Vec<usize> = (0..4).map(|_| pools.next() as *const _ as usize).collect();
        let (theirs, their_slot): (Vec<usize>, usize) = std::thread::scope(|s| {
            s.spawn(|| {
                let calls = (0..4).map(|_| pools.next() as *const _ as usize).collect();
                (calls, thread_slot())
            })
            .join()
            .unwrap_or_default()
        });
        // Each thread cycles over the two pools of its set...
        assert_eq!((mine[0], mine[1]), (mine[2], mine[3]));
        assert_ne!(mine[0], mine[1]);
        // ...and two threads share a set only when their slots fall on the same core's.
        let cores = pools.sets.len();
        let same_set = thread_slot() % cores == their_slot % cores;
        let shared = theirs.iter().any(|t| mine.contains(t));
        assert_eq!(shared, same_set);
    }
}
