//! What the cache keeps for a text: its key (never the text itself) and its entry, a count or a
//! bound.

use std::hash::BuildHasher;

use foldhash::fast::FixedState;

/// An entry with this bit set is a bound, not a count: the text has more tokens than the rest of
/// the entry says (it was counted only up to a limit).
pub(super) const OVER: u32 = 1 << 31;

/// A text's length and two independent 64-bit hashes of it: a false hit needs both to collide
/// at once, and an entry costs the same small size whatever it counts.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Key {
    encoding: u8,
    len: u64,
    pub(super) hashes: (u64, u64),
}

pub(super) fn key(encoding: u8, text: &str) -> Key {
    Key {
        encoding,
        len: text.len() as u64,
        hashes: (
            FixedState::with_seed(0x9e37_79b9_7f4a_7c15).hash_one(text),
            FixedState::with_seed(0xc2b2_ae3d_27d4_eb4f).hash_one(text),
        ),
    }
}

/// What `entry` answers for a lookup within `limit`: a count, "over the limit" (`Some(None)`),
/// or nothing (a bound below the limit: count again).
pub(super) fn answer_within(entry: u32, limit: u32) -> Option<Option<u32>> {
    match entry {
        n if n & OVER == 0 => Some(Some(n)),
        bound if limit <= bound & !OVER => Some(None),
        _ => None,
    }
}
