//! Token counts remembered across steps. Within a ReAct loop the same files, history turns and
//! tool definitions arrive at every step; counting them again is most of a step's CPU. A
//! process-wide cache maps (encoding, text) to its count, so only text never seen before is
//! tokenized. The key is the text's length and two independent 64-bit hashes of it (a false
//! hit needs both to collide at once), never the text itself, so an entry costs the same small
//! size whatever it counts; the cache holds `REACTSTEP_TOKEN_CACHE_MIB` of entries and drops the
//! least recently used first.
//!
//! Small texts are counted word by word instead, through a per-thread memo of the pieces the
//! tokenizer's pre-tokenizer cuts text into: the encoder's set-up for each piece costs more than
//! the counting, and the same words recur everywhere.

use std::hash::BuildHasher;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use foldhash::fast::FixedState;
use lru::LruCache;
use prometheus_client::metrics::counter::Counter;

/// Texts shorter than this are not worth an entry: the per-piece memo counts them fast.
pub const MIN_CACHED_BYTES: usize = 256;

/// What one entry takes: its key, its count and the LRU list's links and table slot.
const ENTRY_BYTES: usize = 96;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    encoding: u8,
    len: u64,
    hashes: (u64, u64),
}

pub struct TokenCache {
    counts: Mutex<LruCache<Key, u32, FixedState>>,
    capacity: usize,
    hits: AtomicU64,
    misses: AtomicU64,
}

static CACHE: OnceLock<Option<TokenCache>> = OnceLock::new();

/// Sets the cache's size; the first call wins (start-up makes it). 0 turns the cache off.
pub fn configure(mib: u64) {
    let _ = CACHE.get_or_init(|| TokenCache::with_mib(mib));
}

/// The cache, sized by default if start-up did not configure it (tests, benches).
pub fn global() -> Option<&'static TokenCache> {
    CACHE
        .get_or_init(|| TokenCache::with_mib(DEFAULT_MIB))
        .as_ref()
}

pub const DEFAULT_MIB: u64 = 64;

impl TokenCache {
    fn with_mib(mib: u64) -> Option<Self> {
        let bytes = usize::try_from(mib.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
        let capacity = NonZeroUsize::new(bytes / ENTRY_BYTES)?;
        Some(Self {
            // Unbounded, with the bound kept here: `with_hasher` would allocate (and touch) the
            // whole table at start-up, tens of MiB before a single count.
            counts: Mutex::new(LruCache::unbounded_with_hasher(FixedState::with_seed(0))),
            capacity: capacity.get(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    /// The count of `text`, from the cache or from `count` (then remembered). `count` may
    /// decline (`None`: the text exceeds a limit and was not counted in full); that is not
    /// remembered.
    pub fn count_with(
        &self,
        encoding: u8,
        text: &str,
        count: impl FnOnce() -> Option<u32>,
    ) -> Option<u32> {
        let key = key(encoding, text);
        let known = self.lock().get(&key).copied();
        if known.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
            lookups(true).inc();
            return known;
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        lookups(false).inc();
        // Counted without the lock held: counting takes long, and other threads count too.
        let counted = count()?;
        let len = {
            let mut counts = self.lock();
            counts.put(key, counted);
            while counts.len() > self.capacity {
                counts.pop_lru();
            }
            counts.len()
        };
        crate::telemetry::metrics::global()
            .token_cache_bytes
            .set(i64::try_from(len * ENTRY_BYTES).unwrap_or(i64::MAX));
        Some(counted)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<Key, u32, FixedState>> {
        // A panic while holding the lock cannot leave a half-written entry: use it anyway.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets every count: for benchmarks that measure text never seen before.
    pub fn clear(&self) {
        self.lock().clear();
    }

    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    /// Bytes the entries take now, and at most.
    pub fn bytes(&self) -> (usize, usize) {
        let len = self.lock().len();
        (len * ENTRY_BYTES, self.capacity * ENTRY_BYTES)
    }
}

/// The counter of hits or of misses, fetched from its family once: a step makes a dozen
/// lookups, each a hashed read of the family before. Created at first use, as before.
fn lookups(hit: bool) -> &'static Counter {
    static HIT: OnceLock<Counter> = OnceLock::new();
    static MISS: OnceLock<Counter> = OnceLock::new();
    let (cell, kind) = if hit { (&HIT, "hit") } else { (&MISS, "miss") };
    cell.get_or_init(|| {
        crate::telemetry::metrics::global()
            .token_cache_lookups
            .get_or_create(&crate::telemetry::metrics::KindLabels {
                kind: std::borrow::Cow::Borrowed(kind),
            })
            .clone()
    })
}

fn key(encoding: u8, text: &str) -> Key {
    Key {
        encoding,
        len: text.len() as u64,
        hashes: (
            FixedState::with_seed(0x9e37_79b9_7f4a_7c15).hash_one(text),
            FixedState::with_seed(0xc2b2_ae3d_27d4_eb4f).hash_one(text),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_is_remembered_and_the_least_recently_used_goes_first() {
        let cache = TokenCache::with_mib(1).unwrap_or_else(|| panic!("a cache"));
        let capacity = cache.capacity;
        let mut calls = 0;
        for i in 0..capacity + 1 {
            let text = format!("text {i}");
            let got = cache.count_with(0, &text, || {
                calls += 1;
                Some(u32::try_from(i).unwrap_or(0))
            });
            assert_eq!(got, u32::try_from(i).ok());
        }
        assert_eq!(calls, capacity + 1);
        // The first entry was the least recently used: it is gone, the last one is still there.
        let mut recounted = false;
        cache.count_with(0, &format!("text {capacity}"), || {
            recounted = true;
            Some(0)
        });
        assert!(!recounted);
        cache.count_with(0, "text 0", || {
            recounted = true;
            Some(0)
        });
        assert!(recounted);
        assert_eq!(cache.bytes().0, capacity * ENTRY_BYTES);
    }

    #[test]
    fn encodings_and_declined_counts_are_kept_apart() {
        let cache = TokenCache::with_mib(1).unwrap_or_else(|| panic!("a cache"));
        assert_eq!(cache.count_with(0, "same text", || Some(3)), Some(3));
        assert_eq!(cache.count_with(1, "same text", || Some(4)), Some(4));
        assert_eq!(cache.count_with(0, "over", || None), None);
        assert_eq!(cache.count_with(0, "over", || Some(9)), Some(9));
        assert_eq!((cache.hits(), cache.misses()), (0, 4));
    }

    #[test]
    fn zero_mib_is_no_cache() {
        assert!(TokenCache::with_mib(0).is_none());
    }
}
