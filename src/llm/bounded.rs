//! Lists in a provider's reply, bounded while they are decoded. A reply under the byte cap can
//! still hold millions of tiny elements (`"tool_calls": [{}, {}, …]`), each of which would cost
//! a hundred bytes and more once built, and several times that as the step carries it on: the
//! elements past the bound are skipped unbuilt and only counted.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::WireError;

/// No reply of a chat API comes near this, streamed or not; a body that does is refused, not
/// held in memory.
pub const MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;

/// Calls one assistant turn may hold: as many as the parser reads from one output, and as many
/// as a request's history may carry back, so that what a step returns is a valid next request.
pub const MAX_CALLS_PER_TURN: usize = 64;

/// Content blocks of one reply (text, calls, thinking): room for every call a turn may hold and
/// the text and thinking around them.
pub const MAX_BLOCKS: usize = 256;

/// The most text a reply may hold: what a step answers with goes back in the next request's
/// history, twice over in an answer (the answer and its turn), so a reply far past what any model
/// writes (128K tokens are about 500 KB) would make answers of tens of MiB that no next request
/// could carry.
pub const MAX_TEXT_BYTES: usize = 1024 * 1024;

/// The most reasoning a reply may hold: it goes back with the next request
/// (`reasoning_state`), so it must fit well under the request body limit.
pub const MAX_REASONING_BYTES: usize = 1024 * 1024;

/// The most one thought signature may hold. A signature is opaque and goes back whole (Gemini's
/// are a few KB of base64); one far past that is no signature a step could carry back.
pub const MAX_SIGNATURE_BYTES: usize = 64 * 1024;

/// Refuses a reply that holds more than `most` bytes of `what` ("text", "reasoning"), before
/// anything is built from it.
pub fn fits(what: &str, bytes: usize, most: usize) -> Result<(), WireError> {
    if bytes <= most {
        return Ok(());
    }
    Err(WireError::Shape(format!(
        "the model's reply holds more than {most} bytes of {what}, more than a step can carry back to it"
    )))
}

/// The most a call's arguments may hold, as JSON text, and in values and depth once read: a
/// call's arguments go back in the next request's history, which holds at most 100,000 values in
/// all and nests only so deep, and are echoed in its answer.
pub const MAX_ARGUMENT_BYTES: usize = 1024 * 1024;
pub const MAX_ARGUMENT_VALUES: usize = 10_000;
pub const MAX_ARGUMENT_DEPTH: usize = 32;

/// Why a call's arguments were not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unread {
    /// The text as the model wrote it, which is no JSON object.
    NotAnObject(String),
    /// Past a bound: which one (never the text, which would be echoed).
    PastBound(String),
}

impl Unread {
    /// What stands for the arguments where the call is written out: the model's own text, or
    /// the bound's note in brackets.
    pub fn shown(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Self::NotAnObject(text) => text.into(),
            Self::PastBound(note) => format!("[{note}]").into(),
        }
    }
}

/// A call's arguments read from their JSON text, or why not.
pub fn arguments(text: &str) -> Result<Map<String, Value>, Unread> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    if text.len() > MAX_ARGUMENT_BYTES {
        return Err(Unread::PastBound(format!(
            "{} bytes of arguments, more than the {MAX_ARGUMENT_BYTES} a call may hold",
            text.len()
        )));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => match shape_within(&map) {
            true => Ok(map),
            false => Err(Unread::PastBound(format!(
                "arguments of more than {MAX_ARGUMENT_VALUES} values or nested more than {MAX_ARGUMENT_DEPTH} deep"
            ))),
        },
        _ => Err(Unread::NotAnObject(text.to_string())),
    }
}

/// Whether `map` holds at most [`MAX_ARGUMENT_VALUES`] values nested at most
/// [`MAX_ARGUMENT_DEPTH`] deep; walked with a stack of its own.
fn shape_within(map: &Map<String, Value>) -> bool {
    let mut stack: Vec<(&Value, usize)> = map.values().map(|v| (v, 1)).collect();
    let mut values = stack.len();
    while let Some((value, depth)) = stack.pop() {
        if depth > MAX_ARGUMENT_DEPTH || values > MAX_ARGUMENT_VALUES {
            return false;
        }
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(fields) => Box::new(fields.values()),
            _ => continue,
        };
        for child in children {
            values += 1;
            stack.push((child, depth + 1));
        }
    }
    values <= MAX_ARGUMENT_VALUES
}

/// The most a reply's text and calls may take as JSON (escapes included) in the turn a step
/// returns: a quarter of the default body limit, so that the turn goes back whole.
pub const MAX_TURN_JSON_BYTES: usize = 2 * 1024 * 1024;

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

    #[test]
    fn arguments_past_a_bound_are_a_short_note_never_read_whole() {
        let past = |text: &str| match arguments(text) {
            Err(Unread::PastBound(note)) => note,
            other => panic!("{other:?}"),
        };
        let big = format!("{{\"path\":[{}0]}}", "0,".repeat(MAX_ARGUMENT_BYTES));
        let note = past(&big);
        assert!(
            note.len() < 200 && note.contains("bytes of arguments"),
            "{note}"
        );
        let many = format!("{{\"a\":[{}0]}}", "0,".repeat(MAX_ARGUMENT_VALUES));
        assert!(past(&many).contains("values"));
        let deep = format!(
            "{{\"a\":{}1{}}}",
            "[".repeat(MAX_ARGUMENT_DEPTH),
            "]".repeat(MAX_ARGUMENT_DEPTH)
        );
        assert!(past(&deep).contains("nested"));
        let fine = format!(
            "{{\"a\":{}1{}}}",
            "[".repeat(MAX_ARGUMENT_DEPTH - 1),
            "]".repeat(MAX_ARGUMENT_DEPTH - 1)
        );
        assert!(arguments(&fine).is_ok());
        assert_eq!(arguments(" ").unwrap(), Map::new());
        assert_eq!(
            arguments("[1]").unwrap_err(),
            Unread::NotAnObject("[1]".into()),
            "not an object: the text as written"
        );
    }
}
