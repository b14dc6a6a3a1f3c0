//! Lists in a provider's reply, bounded while they are decoded. A reply under the byte cap can
//! still hold millions of tiny elements (`"tool_calls": [{}, {}, …]`), each of which would cost
//! a hundred bytes and more once built, and several times that as the step carries it on: the
//! elements past the bound are skipped unbuilt and only counted.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, IgnoredAny, SeqAccess, Visitor};

/// Calls one assistant turn may hold: as many as the parser reads from one output, and as many
/// as a request's history may carry back, so that what a step returns is a valid next request.
pub const MAX_CALLS_PER_TURN: usize = 64;

/// Content blocks of one reply (text, calls, thinking): room for every call a turn may hold and
/// the text and thinking around them.
pub const MAX_BLOCKS: usize = 256;

/// The most text a reply may hold: what a step answers with goes back in the next request's
/// history, twice over in an answer (the answer and its turn), so a reply far past what any model
/// writes (128K tokens are about 500 KB) would make answers of tens of MiB that no next request
/// could carry. Reasoning has the same bound (`MAX_REASONING_BYTES` of the step).
pub const MAX_TEXT_BYTES: usize = 1024 * 1024;

/// Refuses a reply whose text is past [`MAX_TEXT_BYTES`], before anything is built from it.
pub fn text_fits(provider: super::Provider, bytes: usize) -> Result<(), super::LlmError> {
    if bytes <= MAX_TEXT_BYTES {
        return Ok(());
    }
    Err(super::LlmError::BadResponse {
        provider,
        message: format!(
            "the model's reply holds more than {MAX_TEXT_BYTES} bytes of text, more than a step can carry back to it"
        ),
    })
}

/// The first `N` elements of a JSON array, and how many more there were.
#[derive(Debug)]
pub struct Bounded<T, const N: usize> {
    pub kept: Vec<T>,
    pub dropped: usize,
}

impl<T, const N: usize> Default for Bounded<T, N> {
    fn default() -> Self {
        Self {
            kept: Vec::new(),
            dropped: 0,
        }
    }
}

impl<'de, T: Deserialize<'de>, const N: usize> Deserialize<'de> for Bounded<T, N> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(BoundedVisitor(PhantomData))
    }
}

struct BoundedVisitor<T, const N: usize>(PhantomData<T>);

impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for BoundedVisitor<T, N> {
    type Value = Bounded<T, N>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // The hint is the sender's word: never more room than the bound.
        let mut kept = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(N));
        while kept.len() < N {
            match seq.next_element()? {
                Some(element) => kept.push(element),
                None => return Ok(Bounded { kept, dropped: 0 }),
            }
        }
        let mut dropped = 0;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            dropped += 1;
        }
        Ok(Bounded { kept, dropped })
    }
}

/// Whether a call id can go back to a provider as written: 1 to 256 printable ASCII characters,
/// as every provider's are. The same rule holds for the ids a request's history carries.
pub fn is_call_id(id: &str) -> bool {
    (1..=256).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod tests {
    use super::*;

    #[test]
    fn the_elements_past_the_bound_are_counted_not_kept() {
        let list: Bounded<u32, 3> = serde_json::from_str("[1,2,3,4,5]").unwrap();
        assert_eq!((list.kept, list.dropped), (vec![1, 2, 3], 2));
        let list: Bounded<u32, 3> = serde_json::from_str("[1]").unwrap();
        assert_eq!((list.kept, list.dropped), (vec![1], 0));
    }

    #[test]
    fn skipped_elements_need_not_have_the_kept_ones_type_but_must_be_json() {
        let list: Bounded<u32, 1> = serde_json::from_str(r#"[1,{"a":[2]},"x",null]"#).unwrap();
        assert_eq!((list.kept, list.dropped), (vec![1], 3));
        assert!(serde_json::from_str::<Bounded<u32, 1>>("[1,{]").is_err());
        assert!(serde_json::from_str::<Bounded<u32, 1>>(r#"["x"]"#).is_err());
        assert!(serde_json::from_str::<Bounded<u32, 1>>("{}").is_err());
    }

    #[test]
    fn a_million_empty_elements_build_nothing_past_the_bound() {
        let json = format!("[{}{{}}]", "{},".repeat(1_000_000));
        let list: Bounded<serde_json::Map<String, serde_json::Value>, MAX_CALLS_PER_TURN> =
            serde_json::from_str(&json).unwrap();
        assert_eq!(list.kept.len(), MAX_CALLS_PER_TURN);
        assert_eq!(list.kept.capacity(), MAX_CALLS_PER_TURN);
        assert_eq!(list.dropped, 1_000_001 - MAX_CALLS_PER_TURN);
    }

    #[test]
    fn call_ids_are_printable_ascii_up_to_256() {
        assert!(is_call_id("call_abc") && is_call_id(&"a".repeat(256)));
        for bad in ["", " x", "a b", "é", "a\n", &"a".repeat(257)] {
            assert!(!is_call_id(bad), "{bad:?}");
        }
    }
}
