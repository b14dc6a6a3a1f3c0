//! Scrubbing text before it is cut, shown or logged: a secret in any fragment long enough to
//! matter, however it is split or encoded, and serde's error messages without the value they
//! quote.
//!
//! Fragments are found with the secret's n-grams (n = 8) packed into `u64`s: each window of 8
//! kept bytes of the text is one integer, looked up in the sorted n-grams of the secret behind a
//! 64 Kibit prefilter. That is exact (the integer is the 8 bytes themselves, so no hash can
//! collide), linear in the text (one shift and, rarely, one binary search per byte), and its cost
//! depends on nobody's choice of input, unlike a hash table a crafted key could fill with
//! collisions. A suffix automaton would find the same runs; this is a third of the code.
//!
//! The encodings upstreams were seen to echo a key in are undone on the way, in the same pass:
//! letters are compared in lower case (so upper case and any mix of cases match), each window is
//! also looked up in rot13, and when the text holds a `%` it is read a second time with `%XX` as
//! the byte it encodes (per byte or only here and there, in either case of hex).

mod serde_message;
pub use serde_message::{json_error, serde_message};

/// Fragments shorter than this say too little of a key to matter; longer ones are removed.
pub const MIN_FRAGMENT: usize = 8;

/// What a removed span becomes.
pub const MARK: &str = "[REDACTED]";

/// Bytes that upstreams put between pieces of a key they echo: whitespace, JSON and path
/// punctuation, dots, and every non-ASCII byte (an ellipsis, a zero-width space).
fn is_separator(b: u8) -> bool {
    !b.is_ascii_graphic()
        || matches!(
            b,
            b'.' | b'"'
                | b'\''
                | b'`'
                | b','
                | b':'
                | b';'
                | b'{'
                | b'}'
                | b'['
                | b']'
                | b'('
                | b')'
                | b'<'
                | b'>'
                | b'\\'
                | b'/'
                | b'|'
        )
}

/// Removes from `text` every run of [`MIN_FRAGMENT`] or more characters that is a piece of
/// `secret`, also when the run is split by separators, written in another case, in rot13, or
/// percent-encoded. Runs are matched with the separators skipped, and with everything but
/// letters and digits skipped, so that a key split by dashes is found too. The text spanned by a
/// match, separators included, becomes [`MARK`]; text holding no such run is returned unchanged.
/// A secret with fewer than [`MIN_FRAGMENT`] characters between its separators is removed only
/// where it stands whole, in its own case (see [`whole_words`]).
pub fn secret_fragments(secret: &str, text: &str) -> String {
    if secret.bytes().filter(|&b| !is_separator(b)).count() < MIN_FRAGMENT {
        return whole_words(secret, text);
    }
    // Only a text holding a `%` can hold a percent-encoded piece: the rest are read once a pass.
    let encoded = memchr::memchr(b'%', text.as_bytes()).is_some();
    let mut spans = Vec::new();
    find(secret, text, |b| !is_separator(b), 1, encoded, &mut spans);
    // Only for a key with a fragment's worth of letters and digits: one with fewer is found
    // whole above, and a few letters alone would match everywhere.
    let alnum = |b: u8| b.is_ascii_alphanumeric();
    find(secret, text, alnum, MIN_FRAGMENT, encoded, &mut spans);
    if spans.is_empty() {
        return text.to_string();
    }
    spans.sort_unstable();
    replace(text, &merge(spans))
}

/// `text` with each occurrence of `secret` that stands whole (no letter, digit or `_` on either
/// side) as [`MARK`]. A secret this short is a placeholder (vLLM's `EMPTY`, Ollama's `ollama`)
/// or a local server's own word: matched in any case, in pieces or in rot13 as a long key is,
/// it would take ordinary words out of every message (a key `a` took each `a` and, in rot13,
/// each `n`).
fn whole_words(secret: &str, text: &str) -> String {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = text.as_bytes();
    // A JSON escape before it (`\nEMPTY` in an upstream's error body) is a boundary too, and so
    // is a URL's (`Bearer%20EMPTY`).
    let escape = |at: usize| at >= 2 && bytes[at - 2] == b'\\';
    let percent = |at: usize| {
        at >= 3 && bytes[at - 3] == b'%' && bytes[at - 2..at].iter().all(u8::is_ascii_hexdigit)
    };
    let standing = |at: usize| {
        let end = at + secret.len();
        let before = at == 0 || !word(bytes[at - 1]) || escape(at) || percent(at);
        before && !bytes.get(end).is_some_and(|&b| word(b))
    };
    let spans: Vec<(usize, usize)> = match secret {
        "" => Vec::new(),
        _ => memchr::memmem::find_iter(bytes, secret)
            .filter(|&at| standing(at))
            .map(|at| (at, at + secret.len()))
            .collect(),
    };
    if spans.is_empty() {
        return text.to_string();
    }
    replace(text, &merge(spans))
}

/// Texts longer than this are scrubbed afresh every time by [`secret_fragments_remembered`].
const REMEMBERED_BYTES: usize = 256;

/// [`secret_fragments`] of a short text that every step of a loop repeats with the same secret
/// (its session id, logged with each line), from this thread's memo when the two were scrubbed
/// lately: 16 K instructions a step otherwise. The memo keeps a 128-bit fingerprint of the
/// secret, never the secret itself.
pub fn secret_fragments_remembered(secret: &str, text: &str) -> String {
    use crate::runtime::memo::{remembered, Memo};
    thread_local! {
        static SCRUBBED: std::cell::RefCell<Memo<Box<str>>> =
            const { std::cell::RefCell::new(Memo::new()) };
    }
    if text.len() > REMEMBERED_BYTES {
        return secret_fragments(secret, text);
    }
    let print = fingerprint(secret);
    let print = std::str::from_utf8(&print).unwrap_or_default();
    remembered(&SCRUBBED, &[print, text], || {
        secret_fragments(secret, text).into()
    })
    .into()
}

/// Two independent 64-bit hashes of `secret`, as 32 hex digits.
fn fingerprint(secret: &str) -> [u8; 32] {
    use std::hash::BuildHasher;
    let hash = |seed| foldhash::fast::FixedState::with_seed(seed).hash_one(secret);
    let both =
        u128::from(hash(0x243f_6a88_85a3_08d3)) << 64 | u128::from(hash(0x1319_8a2e_0370_7344));
    let mut hex = [0u8; 32];
    for (i, digit) in hex.iter_mut().enumerate() {
        *digit = b"0123456789abcdef"[(both >> (124 - 4 * i) & 0xf) as usize];
    }
    hex
}

/// The spans of `text` holding a run of the secret's `keep` bytes (when it has `min_kept` of
/// them), read as is and, when the text is `encoded`, with `%XX` decoded.
fn find(
    secret: &str,
    text: &str,
    keep: impl Fn(u8) -> bool + Copy,
    min_kept: usize,
    encoded: bool,
    spans: &mut Vec<(usize, usize)>,
) {
    // Sized once: a filter's collect grows the vector from nothing, a realloc at every doubling.
    let mut kept: Vec<u8> = Vec::with_capacity(secret.len());
    kept.extend(
        secret
            .bytes()
            .filter(|&b| keep(b))
            .map(|b| b.to_ascii_lowercase()),
    );
    let Some(grams) = Grams::new(&kept, text.len()).filter(|_| kept.len() >= min_kept) else {
        return;
    };
    spans.extend(matches::<false>(&grams, text, keep));
    if encoded {
        spans.extend(matches::<true>(&grams, text, keep));
    }
}

/// The n-grams of a secret's kept bytes, packed and sorted, with a bit per prefilter slot.
struct Grams {
    n: usize,
    sorted: Vec<u64>,
    filter: Option<Vec<u64>>,
}

const FILTER_BITS: u32 = 16;

/// Texts shorter than this are searched without the prefilter: zeroing its 8 KiB costs more
/// than the binary searches it would spare (a model name is scrubbed on every step).
const FILTER_FROM_BYTES: usize = 1024;

impl Grams {
    /// The n-grams of `kept` (lower case). Its rot13 is looked up with a second window instead
    /// of twice the n-grams: a short text (a model name, every step) then costs a sort of half
    /// as many.
    fn new(kept: &[u8], text_len: usize) -> Option<Self> {
        let n = kept.len().min(MIN_FRAGMENT);
        // No secret, or a text too short to hold a fragment of it.
        if n == 0 || text_len < n {
            return None;
        }
        let mut sorted: Vec<u64> = kept.windows(n).map(pack).collect();
        sorted.sort_unstable();
        sorted.dedup();
        let filter = (text_len >= FILTER_FROM_BYTES).then(|| {
            let mut filter = vec![0u64; (1 << FILTER_BITS) / 64];
            for &g in &sorted {
                let slot = slot(g);
                filter[slot / 64] |= 1 << (slot % 64);
            }
            filter
        });
        Some(Self { n, sorted, filter })
    }

    fn contains(&self, gram: u64) -> bool {
        let maybe = self.filter.as_ref().is_none_or(|filter| {
            let slot = slot(gram);
            filter[slot / 64] & (1 << (slot % 64)) != 0
        });
        maybe && self.sorted.binary_search(&gram).is_ok()
    }
}

fn pack(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0, |acc, &b| acc << 8 | u64::from(b))
}

/// A lower-case letter 13 places on; any other byte as it is.
fn rot13(b: u8) -> u8 {
    match b {
        b'a'..=b'z' => (b - b'a' + 13) % 26 + b'a',
        _ => b,
    }
}

/// The byte `%XX` at the start of `bytes` encodes, when it is one.
fn percent_byte(bytes: &[u8]) -> Option<u8> {
    let hex = |b: u8| char::from(b).to_digit(16);
    match bytes {
        [b'%', hi, lo, ..] => Some((hex(*hi)? * 16 + hex(*lo)?) as u8),
        _ => None,
    }
}

/// A multiplicative hash's top bits: every byte of the gram moves them.
fn slot(gram: u64) -> usize {
    (gram.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - FILTER_BITS)) as usize
}

/// The byte spans of `text` whose kept bytes, in lower case, are a run of the secret's n-grams,
/// merged; with `DECODE`, `%XX` is read as the byte it encodes and spans its three characters.
fn matches<const DECODE: bool>(
    grams: &Grams,
    text: &str,
    keep: impl Fn(u8) -> bool,
) -> Vec<(usize, usize)> {
    let n = grams.n;
    let mask = if n == 8 { u64::MAX } else { (1 << (8 * n)) - 1 };
    // Where in the text the last n kept bytes start, as a ring.
    let mut at = [0usize; MIN_FRAGMENT];
    // The window, and the same bytes in rot13: a text holding the secret's rot13 holds its
    // n-grams there.
    let (mut window, mut rotated, mut seen) = (0u64, 0u64, 0usize);
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(&raw) = bytes.get(i) {
        let start = i;
        let decoded = if DECODE {
            percent_byte(&bytes[i..])
        } else {
            None
        };
        let b = match decoded {
            Some(b) => {
                i += 3;
                b
            }
            None => {
                i += 1;
                raw
            }
        };
        if !keep(b) {
            continue;
        }
        let b = b.to_ascii_lowercase();
        window = (window << 8 | u64::from(b)) & mask;
        rotated = (rotated << 8 | u64::from(rot13(b))) & mask;
        at[seen % n] = start;
        seen += 1;
        if seen >= n && (grams.contains(window) || grams.contains(rotated)) {
            push_span(&mut spans, (at[seen % n], i));
        }
    }
    spans
}

fn push_span(spans: &mut Vec<(usize, usize)>, span: (usize, usize)) {
    match spans.last_mut() {
        Some(last) if span.0 <= last.1 => last.1 = last.1.max(span.1),
        _ => spans.push(span),
    }
}

fn merge(sorted: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    let mut out = Vec::with_capacity(sorted.len());
    for span in sorted {
        push_span(&mut out, span);
    }
    out
}

/// Kept bytes and `%XX` are ASCII, so every span starts and ends on a character boundary.
fn replace(text: &str, spans: &[(usize, usize)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    for &(start, end) in spans {
        out.push_str(text.get(from..start).unwrap_or_default());
        out.push_str(MARK);
        from = end;
    }
    out.push_str(text.get(from..).unwrap_or_default());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: &str = "sk-proj-Qz7Xv3Lm9Wd2Kf8Hn4Tr6Yb1Pc5Gj0";

    /// The text as the scrubber may read it: as is and percent-decoded, each with separators
    /// or all but letters and digits dropped, in lower case.
    fn views(text: &str) -> Vec<Vec<u8>> {
        let decoded = decode(text);
        let mut out = Vec::new();
        for bytes in [text.as_bytes(), &decoded[..]] {
            for keep in [|b: u8| !is_separator(b), |b: u8| b.is_ascii_alphanumeric()] {
                out.push(
                    bytes
                        .iter()
                        .filter(|&&b| keep(b))
                        .map(u8::to_ascii_lowercase)
                        .collect(),
                );
            }
        }
        out
    }

    fn decode(text: &str) -> Vec<u8> {
        let bytes = text.as_bytes();
        let (mut out, mut i) = (Vec::new(), 0);
        while i < bytes.len() {
            match percent_byte(&bytes[i..]) {
                Some(b) => {
                    out.push(b);
                    i += 3;
                }
                None => {
                    out.push(bytes[i]);
                    i += 1;
                }
            }
        }
        out
    }

    /// Whether any piece of `key` of `MIN_FRAGMENT` kept bytes (all of it when shorter; its
    /// letters and digits when it has 8), in any case or in rot13, is in any view of `text`: a
    /// reference the scrubber is checked against, written without it.
    fn holds_fragment(key: &str, text: &str) -> bool {
        let texts = views(text);
        let keys = views(key);
        let (kept, alnum) = (&keys[0], &keys[1]);
        let alnum = (alnum.len() >= MIN_FRAGMENT).then_some(alnum);
        let held = [Some(kept), alnum].into_iter().flatten().any(|key| {
            let n = key.len().min(MIN_FRAGMENT);
            let rot: Vec<u8> = key.iter().map(|&b| rot13(b)).collect();
            n > 0
                && [key, &rot].iter().any(|key| {
                    key.windows(n)
                        .any(|w| texts.iter().any(|t| t.windows(n).any(|t| t == w)))
                })
        });
        held
    }

    #[test]
    fn the_whole_key_and_its_pieces_are_removed() {
        let text = format!("bad key {KEY}, prefix sk-proj-Qz7X, tail Tr6Yb1Pc5Gj0. ok");
        assert_eq!(
            secret_fragments(KEY, &text),
            "bad key [REDACTED], prefix [REDACTED], tail [REDACTED]. ok"
        );
    }

    #[test]
    fn pieces_split_by_separators_are_removed_with_what_splits_them() {
        for text in [
            r#"{"a":"sk-proj-Qz7X","b":"v3Lm9Wd2"}"#,
            "sk-proj-Qz7X v3Lm9Wd2",
            "sk.proj.Qz7X.v3Lm.9Wd2",
            "sk-proj-Qz7X\nv3Lm9Wd2",
            "sk-pro\u{200b}j-Qz7Xv3",
            "Qz-7X-v3-Lm-9W",
            "s\\\"k\\\"-\\\"p\\\"r\\\"o\\\"j",
        ] {
            let out = secret_fragments(KEY, text);
            assert!(!holds_fragment(KEY, &out), "{text:?} became {out:?}");
        }
    }

    #[test]
    fn short_pieces_and_unrelated_text_stay() {
        let text = "limit 40000 tokens for gpt-4o (sk-p Qz7); see https://example.com/docs";
        assert_eq!(secret_fragments(KEY, text), text);
    }

    #[test]
    fn a_key_shorter_than_a_fragment_is_removed_whole() {
        assert_eq!(
            secret_fragments("sk-abc", "bad key sk-abc, sk-abc"),
            "bad key [REDACTED], [REDACTED]"
        );
        assert_eq!(
            secret_fragments("sk-abc", "(sk-abc)\\nsk-abc\tsk-abc"),
            "([REDACTED])\\n[REDACTED]\t[REDACTED]"
        );
    }

    /// A placeholder or a one-letter key leaves the service's own words alone: only the key
    /// standing whole, in its own case, is removed.
    #[test]
    fn a_short_key_takes_no_ordinary_word_out_of_a_message() {
        let message = "user_query: must not be empty when conversation_history is empty; the parameters schema is not valid";
        for key in ["EMPTY", "a", "n", "tools", "sk", "ollama", "1234567"] {
            assert_eq!(secret_fragments(key, message), message, "{key}");
        }
        assert_eq!(
            secret_fragments("EMPTY", "key EMPTY refused, EMPTYish, xEMPTY, EMPTY_1"),
            "key [REDACTED] refused, EMPTYish, xEMPTY, EMPTY_1"
        );
        assert_eq!(secret_fragments("a", "a: b a"), "[REDACTED]: b [REDACTED]");
        assert_eq!(
            secret_fragments("EMPTY", "Bearer%20EMPTY rejected, %2aEMPTY%20"),
            "Bearer%20[REDACTED] rejected, %2a[REDACTED]%20"
        );
        assert_eq!(secret_fragments("", message), message);
    }

    #[test]
    fn a_megabyte_with_a_long_key_is_scanned_in_one_pass() {
        let key: String = (0..4096)
            .map(|i| char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[(i * 7 + i / 36) % 36]))
            .collect();
        let mut text = "lorem ipsum dolor sit amet ".repeat(40_000);
        text.push_str(&key);
        let out = secret_fragments(&key, &text);
        assert_eq!(out.len(), text.len() - key.len() + MARK.len());
        assert!(out.ends_with(&format!("amet {MARK}")));
    }

    fn rot13_any_case(b: u8) -> u8 {
        match b {
            b'A'..=b'Z' => rot13(b.to_ascii_lowercase()).to_ascii_uppercase(),
            _ => rot13(b),
        }
    }

    #[test]
    fn case_rot13_and_percent_encoded_forms_are_removed() {
        let upper = KEY.to_ascii_uppercase();
        let lower = KEY.to_ascii_lowercase();
        let rot: String = KEY.bytes().map(|b| char::from(rot13_any_case(b))).collect();
        let percent: String = KEY.bytes().map(|b| format!("%{b:02X}")).collect();
        let percent_lower: String = KEY.bytes().map(|b| format!("%{b:02x}")).collect();
        let mixed = format!("sk%2dPROJ%2D{}", &KEY[8..]);
        for form in [upper, lower, rot, percent, percent_lower, mixed] {
            let text = format!("invalid key '{form}' (see docs)");
            let out = secret_fragments(KEY, &text);
            assert_eq!(out, format!("invalid key '{MARK}' (see docs)"), "{form}");
        }
    }

    fn separator() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(" ".to_string()),
            Just(".".to_string()),
            Just("\n".to_string()),
            Just("\",\"b\":\"".to_string()),
            Just("\\\"".to_string()),
            Just("…".to_string()),
            Just("}, {".to_string()),
        ]
    }

    proptest! {
        #[test]
        fn no_fragment_survives_any_splitting(
            key in "[A-Za-z0-9_-]{8,80}",
            cuts in proptest::collection::vec((0usize..80, separator()), 0..6),
            before in "[ a-z]{0,20}",
            after in "[ a-z]{0,20}",
        ) {
            let mut split = key.clone();
            let mut cuts = cuts;
            cuts.sort_by_key(|c| std::cmp::Reverse(c.0));
            for (at, sep) in cuts {
                let at = at.min(split.len());
                if split.is_char_boundary(at) {
                    split.insert_str(at, &sep);
                }
            }
            let text = format!("{before}{split}{after}");
            let out = secret_fragments(&key, &text);
            prop_assert!(!holds_fragment(&key, &out), "{:?} -> {:?}", text, out);
            // The same text far enough in to be searched behind the prefilter.
            let padded = format!("{}{text}", " ".repeat(FILTER_FROM_BYTES));
            let out_padded = secret_fragments(&key, &padded);
            prop_assert_eq!(out_padded.trim_start(), out.trim_start());
        }

        #[test]
        fn text_without_fragments_is_unchanged(
            key in "[A-Z0-9]{8,64}",
            text in "[a-z .,:\"{}\\[\\]\n%-]{0,200}",
        ) {
            // Lower-case letters hold no piece of an upper-case key unless the key folds onto them.
            prop_assume!(!holds_fragment(&key, &text));
            prop_assert_eq!(secret_fragments(&key, &text), text);
        }

        #[test]
        fn no_piece_survives_any_mix_of_case_rot13_and_percent_encoding(
            key in "[A-Za-z0-9_-]{8,80}",
            piece in (0usize..80, 8usize..80),
            rot in any::<bool>(),
            forms in proptest::collection::vec(0u8..5, 80),
            before in "[ a-z]{0,20}",
            after in "[ a-z%]{0,20}",
        ) {
            // A piece of 8 or more characters (the whole key, often), each byte in a form of its
            // own: as is, upper case, lower case, `%XX` or `%xx`.
            let start = piece.0 % (key.len() - 7);
            let end = (start + piece.1).min(key.len());
            let mut echoed = String::new();
            for (&b, form) in key.as_bytes()[start..end].iter().zip(&forms) {
                let b = if rot { rot13_any_case(b) } else { b };
                match form {
                    0 => echoed.push(char::from(b)),
                    1 => echoed.push(char::from(b.to_ascii_uppercase())),
                    2 => echoed.push(char::from(b.to_ascii_lowercase())),
                    3 => echoed.push_str(&format!("%{b:02X}")),
                    _ => echoed.push_str(&format!("%{b:02x}")),
                }
            }
            let text = format!("{before}{echoed}{after}");
            prop_assert!(holds_fragment(&key, &text), "the reference sees {:?}", text);
            let out = secret_fragments(&key, &text);
            prop_assert!(!holds_fragment(&key, &out), "{:?} -> {:?}", text, out);
            let padded = format!("{}{text}", " ".repeat(FILTER_FROM_BYTES));
            let out_padded = secret_fragments(&key, &padded);
            prop_assert_eq!(out_padded.trim_start(), out.trim_start());
        }
    }

    #[test]
    fn a_remembered_scrub_is_the_scrub_for_that_secret_alone() {
        let (a, b) = (
            "sk-proj-Abcdefgh12345678Zyxwvuts",
            "sk-proj-Qrstuvwx87654321Mnopqrst",
        );
        // A session id holding a fragment of `a` only, scrubbed first for `b` (nothing to take
        // out), then for `a`: the memo must not answer `a` with what it kept for `b`.
        let id = "run-abcdefgh12345678-x";
        assert_eq!(secret_fragments_remembered(b, id), id);
        let for_a = secret_fragments_remembered(a, id);
        assert_eq!(for_a, secret_fragments(a, id));
        assert!(
            for_a.contains(MARK) && !for_a.contains("12345678"),
            "{for_a}"
        );
        // Again, now from the memo, and alternating.
        for _ in 0..3 {
            assert_eq!(secret_fragments_remembered(a, id), for_a);
            assert_eq!(secret_fragments_remembered(b, id), id);
        }
        // A longer text is scrubbed afresh, and the same.
        let long = format!("{}{id}", "x".repeat(REMEMBERED_BYTES));
        assert_eq!(
            secret_fragments_remembered(a, &long),
            secret_fragments(a, &long)
        );
    }

    #[test]
    fn a_fingerprint_is_32_hex_digits_that_differ_by_secret() {
        let (a, b) = (fingerprint("sk-one"), fingerprint("sk-two"));
        assert!(a.iter().chain(&b).all(u8::is_ascii_hexdigit));
        assert_ne!(a, b);
        assert_eq!(a, fingerprint("sk-one"));
    }
}
