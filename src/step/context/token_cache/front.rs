//! Each thread's own copy of the entries it looked up lately, in front of the shared shards. The
//! count of a text never changes, so a copy cannot go stale; it only lives longer than the
//! shard's entry when the shard drops that first. A hit here writes nothing another core reads,
//! where a shard's hit takes its lock and moves the entry up its LRU list: on 16 cores a warm
//! step's lookups took 4.2 times as long as on one.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use foldhash::fast::FixedState;

use super::entry::{answer_within, Key};

/// Entries a thread keeps in its front, about 80 bytes each with the table's room: a few
/// hundred loops' texts. A full front is emptied and fills again from the shards.
pub(super) const FRONT_ENTRIES: usize = 2048;

/// What the threads' fronts of one cache share: the cache's generation, and their tallies.
#[derive(Default)]
pub(super) struct Fronts {
    /// Bumped when the cache is cleared: a thread's front made before it is dropped.
    generation: AtomicU64,
    tallies: Mutex<FrontTallies>,
}

/// A thread's front: the entries, the cache's fronts they are of with its generation when they
/// were taken, and what the front answered.
pub(super) struct Front {
    of: Option<(&'static Fronts, u64)>,
    entries: HashMap<Key, u32, FixedState>,
    tallies: Arc<ThreadTallies>,
}

/// What one thread's front answered: written by that thread alone, read by `/metrics`.
#[derive(Default)]
struct ThreadTallies {
    hits: AtomicU64,
    hit_bytes: AtomicU64,
}

/// The tallies of the fronts of one cache: those of living threads, and what threads that
/// ended or moved to another cache had answered.
#[derive(Default)]
struct FrontTallies {
    living: Vec<Arc<ThreadTallies>>,
    hits: u64,
    hit_bytes: u64,
}

thread_local! {
    static FRONT: RefCell<Front> = RefCell::new(Front {
        of: None,
        entries: HashMap::with_hasher(FixedState::with_seed(0)),
        tallies: Arc::default(),
    });
}

/// Runs `f` on this thread's front; nothing once the thread is ending and its front is gone
/// (the shards answer alone then).
pub(super) fn with_front<T>(f: impl FnOnce(&mut Front) -> T) -> Option<T> {
    FRONT.try_with(|front| f(&mut front.borrow_mut())).ok()
}

impl Fronts {
    /// Drops what every front holds, at its next lookup.
    pub(super) fn clear(&self) {
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// What the fronts answered, in lookups and in bytes.
    pub(super) fn hits(&self) -> (u64, u64) {
        let tallies = self.lock();
        let living = |f: fn(&ThreadTallies) -> &AtomicU64| -> u64 {
            let sum = tallies.living.iter();
            sum.map(|t| f(t).load(Ordering::Relaxed)).sum()
        };
        (
            tallies.hits + living(|t| &t.hits),
            tallies.hit_bytes + living(|t| &t.hit_bytes),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FrontTallies> {
        // Tallies are whole numbers written one at a time: nothing a panic could leave half done.
        self.tallies.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Front {
    /// The answer this front holds for `key` of the cache of `fronts` within `limit`, tallied as
    /// a hit.
    pub(super) fn answer(
        &mut self,
        fronts: &'static Fronts,
        key: &Key,
        bytes: usize,
        limit: u32,
    ) -> Option<Option<u32>> {
        self.bind(fronts);
        let answer = answer_within(*self.entries.get(key)?, limit)?;
        // This thread alone writes its tallies: a load and a store, no locked instruction.
        let add = |tally: &AtomicU64, n: u64| {
            tally.store(tally.load(Ordering::Relaxed) + n, Ordering::Relaxed)
        };
        add(&self.tallies.hits, 1);
        add(&self.tallies.hit_bytes, bytes as u64);
        Some(answer)
    }

    /// Keeps `entry` for `key` of the cache of `fronts`; a full front is emptied first.
    pub(super) fn keep(&mut self, fronts: &'static Fronts, key: Key, entry: u32) {
        self.bind(fronts);
        if self.entries.len() >= FRONT_ENTRIES {
            self.entries.clear();
        }
        self.entries.insert(key, entry);
    }

    /// Holds entries of the cache of `fronts` as it is now: what it held of another cache, or
    /// of this one before it was cleared, is dropped, and its tallies go to the cache they were
    /// of.
    fn bind(&mut self, fronts: &'static Fronts) {
        let generation = fronts.generation.load(Ordering::Relaxed);
        match self.of {
            Some((of, at)) if std::ptr::eq(of, fronts) => {
                if at != generation {
                    self.entries.clear();
                    self.of = Some((fronts, generation));
                }
            }
            _ => {
                self.leave();
                self.entries.clear();
                fronts.lock().living.push(self.tallies.clone());
                self.of = Some((fronts, generation));
            }
        }
    }

    /// Hands this thread's tallies to its cache's total, and starts new ones.
    fn leave(&mut self) {
        let Some((fronts, _)) = self.of.take() else {
            return;
        };
        let mut tallies = fronts.lock();
        tallies.hits += self.tallies.hits.load(Ordering::Relaxed);
        tallies.hit_bytes += self.tallies.hit_bytes.load(Ordering::Relaxed);
        tallies.living.retain(|t| !Arc::ptr_eq(t, &self.tallies));
        drop(tallies);
        self.tallies = Arc::default();
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.leave();
    }
}
