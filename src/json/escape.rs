//! A string written as a JSON string exactly as serde_json writes it, 16 bytes tested at a time.
//!
//! serde_json looks every byte up in a table; the text the service sends upstream is mostly
//! source code, runs of dozens of bytes that need no escape, so each run is found with vector
//! compares and copied in one go.

/// Appends `text` to `out` quoted and escaped: `"` and `\` escaped, `\b \t \n \f \r` by name,
/// other bytes below 0x20 as `\u00xx` (lower-case hex); everything else as it is.
pub fn write_str(out: &mut Vec<u8>, text: &str) {
    out.reserve(text.len() + 2);
    out.push(b'"');
    write_escaped(out, text);
    out.push(b'"');
}

/// Appends `text` escaped as [`write_str`] does, without the quotes: for a string written in
/// pieces (a value's `Debug` output).
pub fn write_escaped(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    let mut start = 0;
    while let Some(at) = next_escape(bytes, start) {
        out.extend_from_slice(&bytes[start..at]);
        write_escape(out, bytes[at]);
        start = at + 1;
    }
    out.extend_from_slice(&bytes[start..]);
}

/// Bytes tested at once: one SSE2 register.
const BLOCK: usize = 16;

/// The index of the first byte from `from` on that needs an escape.
fn next_escape(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(block) = bytes.get(at..at + BLOCK) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE2 is part of x86_64 itself: every CPU that runs this binary has it.
        let hits = unsafe { block_hits(block) };
        #[cfg(not(target_arch = "x86_64"))]
        let hits = block_hits(block);
        if hits != 0 {
            return Some(at + hits.trailing_zeros() as usize);
        }
        at += BLOCK;
    }
    let rest = bytes.get(at..)?;
    rest.iter().position(|&b| escaped(b)).map(|i| at + i)
}

/// Bit `i` set when byte `i` of the 16-byte `block` needs an escape: three SSE2 compares (part
/// of every x86_64 CPU, so no detection at run time).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn block_hits(block: &[u8]) -> u32 {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
        _mm_set_epi64x,
    };
    let half = |at: usize| {
        let mut word = [0; 8];
        word.copy_from_slice(&block[at..at + 8]);
        i64::from_le_bytes(word)
    };
    let v = _mm_set_epi64x(half(8), half(0));
    let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
    let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
    // Unsigned `min(b, 0x1f) == b` is `b < 0x20`.
    let control = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
    _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control)) as u32
}

#[cfg(not(target_arch = "x86_64"))]
fn block_hits(block: &[u8]) -> u32 {
    block
        .iter()
        .enumerate()
        .fold(0, |hits, (i, &b)| hits | u32::from(escaped(b)) << i)
}

fn escaped(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

#[inline]
fn write_escape(out: &mut Vec<u8>, byte: u8) {
    let named = match byte {
        b'"' => b'"',
        b'\\' => b'\\',
        0x08 => b'b',
        0x0c => b'f',
        b'\n' => b'n',
        b'\r' => b'r',
        b'\t' => b't',
        _ => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            let (high, low) = (HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]);
            out.extend_from_slice(&[b'\\', b'u', b'0', b'0', high, low]);
            return;
        }
    };
    out.extend_from_slice(&[b'\\', named]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(text: &str) -> String {
        let mut out = Vec::new();
        write_str(&mut out, text);
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    #[expect(clippy::unwrap_used, reason = "a test fails loudly")]
    fn every_byte_and_position_as_serde_json() {
        // Each character alone and at every offset of a word, among clean and non-ASCII text.
        let mut cases: Vec<String> = (0u32..0x80)
            .filter_map(char::from_u32)
            .map(String::from)
            .collect();
        cases.extend(
            ["é", "€", "😀", "\u{7f}", "\u{2028}", "a\"b\\c\u{1}d\u{1f}e"].map(String::from),
        );
        for c in cases.clone() {
            for pad in 0..17 {
                let text = format!("{}{c}{}é{c}", "x".repeat(pad), "ü".repeat(pad % 3));
                assert_eq!(
                    ours(&text),
                    serde_json::to_string(&text).unwrap(),
                    "{text:?}"
                );
            }
        }
    }
    proptest::proptest! {
        /// Dense escapes, runs of every length across block edges, multi-byte characters, and
        /// text written after other text (the short-run copy writes past the length it keeps).
        #[test]
        fn dense_escapes_are_written_as_serde_json_writes_them(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::sample::select(vec!["\n", "\"", "\\", "\u{1}", "\t", "é", "😀", "\u{1f}", "\u{7f}"]),
                    proptest::sample::select(vec!["a", "ab", "abcdefghijklmnop", "0123456789abcdefq", "xyz "]),
                ],
                0..60,
            ),
            before in "[a-z\n]{0,20}",
        ) {
            let text: String = parts.concat();
            let mut out = Vec::new();
            write_str(&mut out, &before);
            write_str(&mut out, &text);
            let expected = [
                serde_json::to_string(&before).unwrap_or_default(),
                serde_json::to_string(&text).unwrap_or_default(),
            ]
            .concat();
            proptest::prop_assert_eq!(String::from_utf8(out).unwrap_or_default(), expected);
        }
    }
}
