//! The token encoders, built from the packed tables that build.rs puts in the binary.
//!
//! bpe-openai's own encoders (`bpe_openai::o200k_base()`) would bring 47 MB of uncompressed
//! msgpack into the executable; these are the same encoders written by their own serde
//! implementation in postcard's form (read in half the instructions of msgpack), compressed
//! (`packed_table`: 29 MB in release builds). Each is inflated once, when its encoder is first
//! built, and the inflated bytes are dropped as soon as the encoder is read from them.
//!
//! The pre-tokenizer is OpenAI's published pattern for each encoding, given to bpe-openai's
//! `Tokenizer::new_lookahead`: the regex engine has no look-ahead, so tiktoken's `\s+(?!\S)` (a
//! run of whitespace not followed by a non-space) is written as `\s+$` (the run ends the text)
//! and as `\s+\s` marked as a look-ahead, whose last character is given back to the next piece.
//! `tests/encoders.rs` checks the counts against tiktoken's.
//!
//! The counting that steps do goes through a second copy of the same pre-tokenizer
//! (`Encoder::split`), searched with a cache that belongs to the counting thread. bpe-openai's
//! own splitter borrows a search cache from a pool shared by every thread for each piece it
//! cuts (some 4,000 pieces for a cold step's 16 KB): off the pool's first thread that is a lock
//! taken twice per piece, the same lock on every core.

use std::cell::RefCell;
use std::ops::ControlFlow;
use std::sync::LazyLock;

use bpe_openai::byte_pair_encoding::BytePairEncoding;
use bpe_openai::Tokenizer;
use regex_automata::meta::{Cache, Regex};
use regex_automata::{Anchored, Input};

use super::packed_table::{inflate, Packing};

static O200K_TABLE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/o200k_base.postcard.lz4"));
static CL100K_TABLE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cl100k_base.postcard.zst"));

/// The pre-tokenizer's alternatives after the main ones, with whether each ends in one
/// character of look-ahead (given back to the next piece).
const WHITESPACE: [(&str, bool); 2] = [(r"\s+\s", true), (r"\s+", false)];

/// Contractions, case-insensitive, as both encodings split them off a word.
const CONTRACTIONS: &str = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";

/// An encoding's tokenizer (bpe-openai's, the reference) and the same pre-tokenizer compiled
/// again for counting with a per-thread search cache.
pub struct Encoder {
    pub tokenizer: Tokenizer,
    pre: Regex,
    /// For each of the pre-tokenizer's patterns, whether its last character is look-ahead.
    lookahead: [bool; 3],
    /// Which slot of each thread's search caches is this encoder's.
    slot: usize,
}

thread_local! {
    /// Each thread's search caches, one per encoder (`Encoder::slot`), made at first use.
    static CACHES: RefCell<[Option<Cache>; 2]> = const { RefCell::new([None, None]) };
}

impl Encoder {
    pub fn bpe(&self) -> &BytePairEncoding {
        &self.tokenizer.bpe
    }

    /// Calls `f` with each piece of `text` as the pre-tokenizer cuts it (bpe-openai's pieces,
    /// the same as tiktoken's), in order, until `f` breaks.
    pub fn split<B>(&self, text: &str, mut f: impl FnMut(&str) -> ControlFlow<B>) -> Option<B> {
        CACHES.with(|caches| {
            let mut caches = caches.borrow_mut();
            let cache = caches[self.slot].get_or_insert_with(|| self.pre.create_cache());
            let mut at = 0;
            while at < text.len() {
                let rest = &text[at..];
                let Some(found) = self
                    .pre
                    .search_with(cache, &Input::new(rest).anchored(Anchored::Yes))
                else {
                    // Cannot happen: `\s+` and the main alternatives take any first character.
                    break;
                };
                let mut end = found.end();
                if self.lookahead[found.pattern().as_usize()] {
                    // The look-ahead pattern matches at least two characters: one stays.
                    end -= rest[..end].chars().next_back().map_or(0, char::len_utf8);
                }
                if end == 0 {
                    break;
                }
                if let ControlFlow::Break(b) = f(&rest[..end]) {
                    return Some(b);
                }
                at += end;
            }
            None
        })
    }
}

static O200K: LazyLock<Encoder> = LazyLock::new(|| {
    let upper = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]";
    let lower = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]";
    let main = [
        format!(r"[^\r\n\p{{L}}\p{{N}}]?{upper}*{lower}+{CONTRACTIONS}?"),
        format!(r"[^\r\n\p{{L}}\p{{N}}]?{upper}+{lower}*{CONTRACTIONS}?"),
        r"\p{N}{1,3}".to_string(),
        r" ?[^\s\p{L}\p{N}]+[\r\n/]*".to_string(),
        r"\s*[\r\n]+".to_string(),
        r"\s+$".to_string(),
    ]
    .join("|");
    build("o200k_base", O200K_TABLE, Packing::Lz4, &main, 0)
});

static CL100K: LazyLock<Encoder> = LazyLock::new(|| {
    let main = format!(
        r"{CONTRACTIONS}|[^\r\n\p{{L}}\p{{N}}]?\p{{L}}+|\p{{N}}{{1,3}}| ?[^\s\p{{L}}\p{{N}}]+[\r\n]*|\s*[\r\n]+|\s+$"
    );
    build("cl100k_base", CL100K_TABLE, Packing::Zstd, &main, 1)
});

/// `o200k_base`, built on first use.
pub fn o200k_base() -> &'static Encoder {
    &O200K
}

/// `cl100k_base`, built on first use.
pub fn cl100k_base() -> &'static Encoder {
    &CL100K
}

/// The encoder from its compressed table and the main alternatives of its pre-tokenizer. The
/// tables are built into the binary, so a failure here is a broken build: it panics.
fn build(name: &str, packed: &[u8], packing: Packing, main: &str, slot: usize) -> Encoder {
    let table = inflate(packed, packing).unwrap_or_else(|e| panic!("{name}: bad table: {e}"));
    let bpe: BytePairEncoding =
        postcard::from_bytes(&table).unwrap_or_else(|e| panic!("{name}: bad table: {e}"));
    drop(table);
    let patterns = [(main, false), WHITESPACE[0], WHITESPACE[1]];
    let tokenizer = Tokenizer::new_lookahead(bpe, &patterns, false)
        .unwrap_or_else(|e| panic!("{name}: bad pre-tokenizer: {e}"));
    let pre = Regex::new_many(&patterns.map(|(p, _)| p))
        .unwrap_or_else(|e| panic!("{name}: bad pre-tokenizer: {e}"));
    Encoder {
        tokenizer,
        pre,
        lookahead: patterns.map(|(_, l)| l),
        slot,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compressed_tables_give_bpe_openais_encoders() {
        for (ours, theirs) in [
            (&o200k_base().tokenizer, bpe_openai::o200k_base()),
            (&cl100k_base().tokenizer, bpe_openai::cl100k_base()),
        ] {
            let text = "Hello,   world!\n\n  fn main() { let x = 12345; }\t\r\nIt's ÉTÉ déjà 😀  ";
            assert_eq!(ours.encode(text), theirs.encode(text));
            assert_eq!(ours.bpe.num_tokens(), theirs.bpe.num_tokens());
        }
    }

    #[test]
    fn the_counting_splitter_cuts_as_bpe_openai_does() {
        let text =
            "Hello,   world!\n\n  fn main() { let x = 12345; }\t\r\nIt's ÉTÉ déjà 😀  \n \u{a0}x  ";
        for encoder in [o200k_base(), cl100k_base()] {
            let mut ours = Vec::new();
            let none: Option<()> = encoder.split(text, |piece| {
                ours.push(piece.to_string());
                ControlFlow::Continue(())
            });
            assert!(none.is_none());
            let theirs: Vec<String> = encoder.tokenizer.split(text).map(str::to_string).collect();
            assert_eq!(ours, theirs);
        }
    }
}
