//! Token counts remembered across steps. Within a ReAct loop the same files, history turns and
//! tool definitions arrive at every step; counting them again is most of a step's CPU. A
//! process-wide cache maps (encoding, text) to its count, so only text never seen before is
//! tokenized. The key is the text's length and two independent 64-bit hashes of it (a false
//! hit needs both to collide at once), never the text itself, so an entry costs the same small
//! size whatever it counts; the cache holds `REACTSTEP_TOKEN_CACHE_MIB` of entries, in shards
//! that each drop their least recently used first. Each thread keeps its own copy of the
//! entries it used lately in front of the shards: a warm step's lookups then touch nothing
//! another core writes.
//!
//! Small texts are counted word by word instead, through a per-thread memo of the pieces the
//! tokenizer's pre-tokenizer cuts text into: the encoder's set-up for each piece costs more than
//! the counting, and the same words recur everywhere.

mod entry;
mod front;

use std::num::NonZeroUsize;
use std::sync::{Mutex, OnceLock};

use foldhash::fast::FixedState;
use lru::LruCache;
use prometheus_client::metrics::counter::Counter;

use entry::{answer_within, key, Key, OVER};
#[cfg(test)]
use front::FRONT_ENTRIES;
use front::{with_front, Fronts};

/// Texts shorter than this are not worth an entry: the per-piece memo counts them fast.
pub const MIN_CACHED_BYTES: usize = 256;

/// What one entry takes: its key, its count and the LRU list's links and table slot.
const ENTRY_BYTES: usize = 96;

/// Shards of the cache, each with its own lock, entries and tallies: a step's dozen lookups from
/// every core would otherwise take turns on one lock, one LRU list and four shared counters
/// (issue 35 named the cache among the suspects of a step that scales worse than its
/// pass-through). A key's shard is chosen by its second hash; each drops its own least recently
/// used entry first.
const SHARDS: usize = 32;

pub struct TokenCache {
    shards: Box<[Shard]>,
    capacity: usize,
    /// What the threads' copies in front of the shards share (see [`front`]).
    fronts: Fronts,
}

/// A shard alone on its cache lines (128 bytes: adjacent lines are fetched in pairs), so that
/// two cores working in two shards never share a line.
#[repr(align(128))]
struct Shard(Mutex<Entries>);

struct Entries {
    counts: LruCache<Key, u32, FixedState>,
    capacity: usize,
    hits: u64,
    misses: u64,
    /// The text looked up, answered from the cache and counted afresh: how cold steps are.
    hit_bytes: u64,
    miss_bytes: u64,
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
        Self::sharded(mib, SHARDS)
    }

    /// A cache of `mib` in `shards` shards (fewer when it holds fewer entries than that), their
    /// capacities differing by one entry at most.
    fn sharded(mib: u64, shards: usize) -> Option<Self> {
        let bytes = usize::try_from(mib.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
        let capacity = NonZeroUsize::new(bytes / ENTRY_BYTES)?.get();
        let shards = shards.clamp(1, capacity);
        let shards = (0..shards)
            .map(|i| {
                Shard(Mutex::new(Entries {
                    // Unbounded, with the bound kept here: `with_hasher` would allocate (and
                    // touch) the whole table at start-up, tens of MiB before a single count.
                    counts: LruCache::unbounded_with_hasher(FixedState::with_seed(0)),
                    capacity: capacity / shards + usize::from(i < capacity % shards),
                    hits: 0,
                    misses: 0,
                    hit_bytes: 0,
                    miss_bytes: 0,
                }))
            })
            .collect();
        Some(Self {
            shards,
            capacity,
            fronts: Fronts::default(),
        })
    }

    /// The count of `text`, from the cache or from `count` (then remembered). `count` may
    /// decline (`None`: the text has more than `limit` tokens, and was counted only that far);
    /// that is remembered as a bound, so a later lookup within the same limit is answered
    /// `None` at once instead of counting that far again: a large observation is over its limit
    /// at every step of a loop. A lookup with a higher limit counts again.
    pub fn count_with(
        &'static self,
        encoding: u8,
        text: &str,
        limit: u32,
        count: impl FnOnce() -> Option<u32>,
    ) -> Option<u32> {
        let key = key(encoding, text);
        if let Some(Some(answer)) = with_front(|f| f.answer(&self.fronts, &key, text.len(), limit))
        {
            return answer;
        }
        let shard = self.shard(&key);
        let (entry, answered) = Self::answered(&mut lock(shard), &key, text.len(), limit);
        if let (Some(entry), Some(answer)) = (entry, answered) {
            with_front(|f| f.keep(&self.fronts, key, entry));
            return answer;
        }
        // Counted without the lock held: counting takes long, and other threads count too.
        let counted = count();
        let entry = match counted {
            Some(n) if n < OVER => n,
            // A count too large to keep with its flag (never, for a body the service accepts).
            Some(_) => return counted,
            None => OVER | limit.min(OVER - 1),
        };
        let mut entries = lock(shard);
        entries.counts.put(key, entry);
        while entries.counts.len() > entries.capacity {
            entries.counts.pop_lru();
        }
        drop(entries);
        with_front(|f| f.keep(&self.fronts, key, entry));
        counted
    }

    /// The entry the shard holds for `key` and the answer it gives within `limit`, if any,
    /// tallied as a hit or a miss.
    fn answered(
        entries: &mut Entries,
        key: &Key,
        bytes: usize,
        limit: u32,
    ) -> (Option<u32>, Option<Option<u32>>) {
        let entry = entries.counts.get(key).copied();
        let answer = entry.and_then(|entry| answer_within(entry, limit));
        let (lookups, looked_up) = match answer {
            Some(_) => (&mut entries.hits, &mut entries.hit_bytes),
            None => (&mut entries.misses, &mut entries.miss_bytes),
        };
        *lookups += 1;
        *looked_up += bytes as u64;
        (entry, answer)
    }

    fn shard(&self, key: &Key) -> &Shard {
        // The second hash's high bits: the LRU's table uses the key's own hash of all fields.
        &self.shards[(key.hashes.1 >> 32) as usize % self.shards.len()]
    }

    /// Forgets every count: for benchmarks that measure text never seen before.
    pub fn clear(&self) {
        for shard in &self.shards {
            lock(shard).counts.clear();
        }
        // After the shards: a front that takes an entry from a shard not yet cleared still
        // holds the old generation, and drops it at its next lookup.
        self.fronts.clear();
    }

    /// Brings the metrics up to the shards' tallies. Lookups are tallied in their shard, under
    /// the lock they take anyway, not on a counter that every core would update at every
    /// lookup; `/metrics` publishes them when it is read.
    fn publish(&self) {
        // Two readers at once would both add the same difference.
        static PUBLISHING: Mutex<()> = Mutex::new(());
        let _one = PUBLISHING.lock().unwrap_or_else(|e| e.into_inner());
        for (hit, total) in [(true, self.hits()), (false, self.misses())] {
            let counter = lookups(hit);
            counter.inc_by(total.saturating_sub(counter.get()));
        }
        crate::telemetry::metrics::global()
            .token_cache_bytes
            .set(i64::try_from(self.bytes().0).unwrap_or(i64::MAX));
    }

    /// The sum over the shards of `f` of each.
    fn total(&self, f: impl Fn(&Entries) -> u64) -> u64 {
        self.shards.iter().map(|shard| f(&lock(shard))).sum()
    }

    pub fn hits(&self) -> u64 {
        self.total(|e| e.hits) + self.fronts.hits().0
    }

    pub fn misses(&self) -> u64 {
        self.total(|e| e.misses)
    }

    /// The bytes of text looked up so far: answered from the cache, and counted afresh.
    pub fn looked_up_bytes(&self) -> (u64, u64) {
        let hit_bytes = self.total(|e| e.hit_bytes) + self.fronts.hits().1;
        (hit_bytes, self.total(|e| e.miss_bytes))
    }

    /// Bytes the shards' entries take now, and at most (the threads' fronts beside them take
    /// up to `front::FRONT_ENTRIES` entries each).
    pub fn bytes(&self) -> (usize, usize) {
        let len = self.total(|e| e.counts.len() as u64) as usize;
        (len * ENTRY_BYTES, self.capacity * ENTRY_BYTES)
    }
}

/// Brings the cache's metrics (lookups by kind, bytes held) up to date: for `/metrics`.
pub fn publish_metrics() {
    if let Some(cache) = CACHE.get().and_then(Option::as_ref) {
        cache.publish();
    }
}

fn lock(shard: &Shard) -> std::sync::MutexGuard<'_, Entries> {
    // A panic while holding the lock cannot leave a half-written entry: use it anyway.
    shard.0.lock().unwrap_or_else(|e| e.into_inner())
}

/// The counter of hits or of misses, fetched from its family once. Created when first
/// published, so that a process with the cache off has neither.
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    /// A cache for one test: lookups need one that lives as long as the threads' fronts.
    fn leaked(cache: Option<TokenCache>) -> &'static TokenCache {
        Box::leak(Box::new(cache.unwrap_or_else(|| panic!("a cache"))))
    }

    #[test]
    fn a_count_is_remembered_and_the_least_recently_used_goes_first() {
        // One shard: the order is the whole cache's.
        let cache = leaked(TokenCache::sharded(1, 1));
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
        let cache = leaked(TokenCache::with_mib(1));
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
        let cache = leaked(TokenCache::with_mib(1));
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
    fn shards_hold_the_capacity_between_them_and_keep_the_newest() {
        let cache = leaked(TokenCache::with_mib(1));
        let capacity = cache.capacity;
        let smallest = capacity / SHARDS;
        assert_eq!(cache.shards.len(), SHARDS);
        let texts: Vec<String> = (0..2 * capacity).map(|i| format!("text {i}")).collect();
        for text in &texts {
            cache.count_with(0, text, u32::MAX, || Some(1));
        }
        assert_eq!(cache.bytes().0, capacity * ENTRY_BYTES, "full, not over");
        // Looked at without a lookup, which would move or add entries.
        let held = |text: &str| {
            let key = key(0, text);
            lock(cache.shard(&key)).counts.peek(&key).is_some()
        };
        // No shard took more of the last `smallest` texts than it holds: all are still there.
        for text in &texts[texts.len() - smallest..] {
            assert!(held(text), "{text} was dropped");
        }
        // And the older half was pushed out: each shard took about its share of the newer.
        let kept = texts[..capacity].iter().filter(|t| held(t)).count();
        assert!(kept < capacity / 10, "{kept} of the oldest kept");
    }

    #[test]
    fn lookups_racing_on_every_shard_are_all_tallied() {
        let cache = leaked(TokenCache::with_mib(1));
        let texts: Vec<String> = (0..200).map(|i| format!("shared text {i}")).collect();
        let lookups = 8 * 50 * texts.len() as u64;
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            // Reads the tallies while threads tally and end (their fronts handing theirs over):
            // never one lookup twice, never one lost.
            let reader = scope.spawn(|| {
                let mut last = 0;
                while !done.load(Ordering::Relaxed) {
                    let seen = cache.hits() + cache.misses();
                    assert!((last..=lookups).contains(&seen), "{last} then {seen}");
                    last = seen;
                }
            });
            let mut lookers = Vec::new();
            for _ in 0..8 {
                lookers.push(scope.spawn(|| {
                    for _ in 0..50 {
                        for (i, text) in texts.iter().enumerate() {
                            let got = cache.count_with(0, text, u32::MAX, || u32::try_from(i).ok());
                            assert_eq!(got, u32::try_from(i).ok());
                        }
                    }
                }));
            }
            for looker in lookers {
                looker
                    .join()
                    .unwrap_or_else(|_| panic!("a looker panicked"));
            }
            done.store(true, Ordering::Relaxed);
            reader
                .join()
                .unwrap_or_else(|_| panic!("the reader saw a wrong total"));
        });
        assert_eq!(cache.hits() + cache.misses(), lookups);
        // Each text was counted at least once and at most once per thread.
        assert!(
            (200..=8 * 200).contains(&cache.misses()),
            "{}",
            cache.misses()
        );
        let bytes: u64 = texts.iter().map(|t| t.len() as u64).sum::<u64>() * 8 * 50;
        let (hit, miss) = cache.looked_up_bytes();
        assert_eq!(hit + miss, bytes);
        assert_eq!(cache.bytes().0, texts.len() * ENTRY_BYTES);
    }

    /// The hits the shards answered (not the threads' fronts).
    fn shard_hits(cache: &TokenCache) -> u64 {
        cache.total(|e| e.hits)
    }

    #[test]
    fn a_thread_answers_again_from_its_front_and_its_tallies_outlive_it() {
        let cache = leaked(TokenCache::with_mib(1));
        let text = "fn main() {}\n".repeat(30);
        let look = || cache.count_with(0, &text, u32::MAX, || Some(7));
        std::thread::scope(|scope| {
            scope.spawn(|| {
                assert_eq!(look(), Some(7));
                assert_eq!(look(), Some(7));
                assert_eq!((cache.hits(), shard_hits(cache)), (1, 0), "from the front");
            });
        });
        // The thread has ended: its hit stays counted, once.
        assert_eq!((cache.hits(), cache.misses()), (1, 1));
        // Another thread finds it in the shard, then in its own front.
        assert_eq!(look(), Some(7));
        assert_eq!(look(), Some(7));
        assert_eq!((cache.hits(), shard_hits(cache)), (3, 1));
        let bytes = text.len() as u64;
        assert_eq!(cache.looked_up_bytes(), (3 * bytes, bytes));
    }

    #[test]
    fn clearing_the_cache_empties_every_front() {
        let cache = leaked(TokenCache::with_mib(1));
        let mut counted = 0;
        let mut look = || {
            cache.count_with(0, "a text of its own", u32::MAX, || {
                counted += 1;
                Some(5)
            })
        };
        look();
        look();
        cache.clear();
        assert_eq!(look(), Some(5));
        assert_eq!(
            counted, 2,
            "counted again after the clear, not answered by the front"
        );
    }

    #[test]
    fn a_front_keeps_two_caches_apart_and_each_its_tallies() {
        let (a, b) = (
            leaked(TokenCache::with_mib(1)),
            leaked(TokenCache::with_mib(1)),
        );
        assert_eq!(a.count_with(0, "same text", u32::MAX, || Some(3)), Some(3));
        assert_eq!(a.count_with(0, "same text", u32::MAX, || Some(0)), Some(3));
        // The front holds `a`'s count: `b` must not answer with it.
        assert_eq!(b.count_with(0, "same text", u32::MAX, || Some(4)), Some(4));
        assert_eq!(b.count_with(0, "same text", u32::MAX, || Some(0)), Some(4));
        assert_eq!(a.count_with(0, "same text", u32::MAX, || Some(0)), Some(3));
        assert_eq!(
            (a.hits(), a.misses()),
            (2, 1),
            "the front's hit in `a` kept"
        );
        assert_eq!((b.hits(), b.misses()), (1, 1));
    }

    #[test]
    fn a_full_front_starts_again_from_the_shards() {
        let cache = leaked(TokenCache::with_mib(1));
        let texts: Vec<String> = (0..=FRONT_ENTRIES).map(|i| format!("text {i}")).collect();
        for text in &texts {
            cache.count_with(0, text, u32::MAX, || Some(1));
        }
        // The last one went into an emptied front; the first only the shards still hold.
        cache.count_with(0, &texts[FRONT_ENTRIES], u32::MAX, || None);
        assert_eq!(shard_hits(cache), 0);
        assert_eq!(cache.count_with(0, &texts[0], u32::MAX, || None), Some(1));
        assert_eq!((cache.hits(), shard_hits(cache)), (2, 1));
    }

    #[test]
    fn a_bound_in_the_front_is_counted_again_for_a_higher_limit() {
        let cache = leaked(TokenCache::with_mib(1));
        let text = "a long observation";
        assert_eq!(cache.count_with(0, text, 5, || None), None);
        assert_eq!(
            cache.count_with(0, text, 5, || Some(0)),
            None,
            "the front's bound"
        );
        assert_eq!(cache.count_with(0, text, 50, || Some(9)), Some(9));
        assert_eq!(
            cache.count_with(0, text, 5, || None),
            Some(9),
            "the front's count"
        );
        assert_eq!((cache.hits(), cache.misses()), (2, 2));
    }

    #[test]
    fn a_cache_smaller_than_its_shards_has_one_entry_a_shard() {
        let cache = leaked(TokenCache::sharded(1, usize::MAX));
        assert_eq!(cache.shards.len(), cache.capacity);
        assert!(cache.shards.iter().all(|s| lock(s).capacity == 1));
    }

    /// The only test that publishes: the counters are the process's.
    #[test]
    fn publishing_again_or_at_once_adds_only_what_is_new() {
        let cache = leaked(TokenCache::with_mib(1));
        let lookup = |text: &str| cache.count_with(0, text, u32::MAX, || Some(1));
        lookup("a");
        lookup("a");
        lookup("b");
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| cache.publish());
            }
        });
        cache.publish();
        assert_eq!((lookups(true).get(), lookups(false).get()), (1, 2));
        lookup("b");
        cache.publish();
        assert_eq!((lookups(true).get(), lookups(false).get()), (2, 2));
    }

    #[test]
    fn zero_mib_is_no_cache() {
        assert!(TokenCache::with_mib(0).is_none());
    }
}
