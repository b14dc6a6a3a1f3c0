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

/// An entry with this bit set is a bound, not a count: the text has more tokens than the rest of
/// the entry says (it was counted only up to a limit).
const OVER: u32 = 1 << 31;

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
    /// The text looked up, answered from the cache and counted afresh: how cold steps are.
    hit_bytes: AtomicU64,
    miss_bytes: AtomicU64,
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
            hit_bytes: AtomicU64::new(0),
            miss_bytes: AtomicU64::new(0),
        })
    }

    /// The count of `text`, from the cache or from `count` (then remembered). `count` may
    /// decline (`None`: the text has more than `limit` tokens, and was counted only that far);
    /// that is remembered as a bound, so a later lookup within the same limit is answered
    /// `None` at once instead of counting that far again: a large observation is over its limit
    /// at every step of a loop. A lookup with a higher limit counts again.
    pub fn count_with(
        &self,
        encoding: u8,
        text: &str,
        limit: u32,
        count: impl FnOnce() -> Option<u32>,
    ) -> Option<u32> {
        let key = key(encoding, text);
        let bytes = text.len() as u64;
        let answered = match self.lock().get(&key).copied() {
            Some(n) if n & OVER == 0 => Some(Some(n)),
            Some(bound) if limit <= bound & !OVER => Some(None),
            _ => None,
        };
        if let Some(answer) = answered {
            self.hits.fetch_add(1, Ordering::Relaxed);
            self.hit_bytes.fetch_add(bytes, Ordering::Relaxed);
            lookups(true).inc();
            return answer;
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        self.miss_bytes.fetch_add(bytes, Ordering::Relaxed);
        lookups(false).inc();
        // Counted without the lock held: counting takes long, and other threads count too.
        let counted = count();
        let entry = match counted {
            Some(n) if n < OVER => n,
            // A count too large to keep with its flag (never, for a body the service accepts).
            Some(_) => return counted,
            None => OVER | limit.min(OVER - 1),
        };
        let len = {
            let mut counts = self.lock();
            counts.put(key, entry);
            while counts.len() > self.capacity {
                counts.pop_lru();
            }
            counts.len()
        };
        crate::telemetry::metrics::global()
            .token_cache_bytes
            .set(i64::try_from(len * ENTRY_BYTES).unwrap_or(i64::MAX));
        counted
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

    /// The bytes of text looked up so far: answered from the cache, and counted afresh.
    pub fn looked_up_bytes(&self) -> (u64, u64) {
        (
            self.hit_bytes.load(Ordering::Relaxed),
            self.miss_bytes.load(Ordering::Relaxed),
        )
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
            let got = cache.count_with(0, &text, u32::MAX, || {
                calls += 1;
                Some(u32::try_from(i).unwrap_or(0))
            });
            assert_eq!(got, u32::try_from(i).ok());
        }
        assert_eq!(calls, capacity + 1);
        // The first entry was the least recently used: it is gone, the last one is still there.
        let mut recounted = false;
        cache.count_with(0, &format!("text {capacity}"), u32::MAX, || {
            recounted = true;
            Some(0)
        });
        assert!(!recounted);
        cache.count_with(0, "text 0", u32::MAX, || {
            recounted = true;
            Some(0)
        });
        assert!(recounted);
        assert_eq!(cache.bytes().0, capacity * ENTRY_BYTES);
    }

    #[test]
    fn encodings_are_kept_apart() {
        let cache = TokenCache::with_mib(1).unwrap_or_else(|| panic!("a cache"));
        assert_eq!(
            cache.count_with(0, "same text", u32::MAX, || Some(3)),
            Some(3)
        );
        assert_eq!(
            cache.count_with(1, "same text", u32::MAX, || Some(4)),
            Some(4)
        );
        assert_eq!((cache.hits(), cache.misses()), (0, 2));
        assert_eq!(
            cache.count_with(0, "same text", 2, || None),
            Some(3),
            "a count, not a bound"
        );
        // 9 + 9 bytes counted afresh, then 9 answered.
        assert_eq!(cache.looked_up_bytes(), (9, 18));
    }

    #[test]
    fn a_declined_count_is_a_bound_for_the_same_limit_and_counted_again_for_a_higher_one() {
        let cache = TokenCache::with_mib(1).unwrap_or_else(|| panic!("a cache"));
        let mut calls = 0;
        let mut count = |limit: u32, actual: u32| {
            cache.count_with(0, "a long observation", limit, || {
                calls += 1;
                (actual <= limit).then_some(actual)
            })
        };
        assert_eq!(count(5, 9), None);
        assert_eq!(count(5, 9), None, "known to be over 5");
        assert_eq!(count(3, 9), None, "and so over 3");
        assert_eq!(
            count(20, 9),
            Some(9),
            "over 5 says nothing of 20: counted again"
        );
        assert_eq!(count(5, 9), Some(9), "now a count: the caller judges it");
        assert_eq!(calls, 2);
        assert_eq!((cache.hits(), cache.misses()), (3, 2));
    }

    #[test]
    fn zero_mib_is_no_cache() {
        assert!(TokenCache::with_mib(0).is_none());
    }
}
