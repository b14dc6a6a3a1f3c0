//! Compact JSON written byte for byte as `serde_json::to_vec` writes it, faster on long strings.
//!
//! The upstream request carries the whole prompt (tens of KB of source code) and the response
//! echoes the history back: serde_json spends most of writing them testing each byte of those
//! strings for an escape. Here strings go through [`escape::write_str`], a word at a time; numbers,
//! booleans, nulls and unusual map keys are still written by serde_json itself.

mod counted;
pub use counted::from_slice_within;
mod escape;
pub use escape::{write_escaped, write_str};
mod key;
mod object_only;
pub(crate) use object_only::objects_only;
pub use object_only::ObjectOnly;
mod write;

/// `value` as compact JSON, the same bytes as `serde_json::to_vec(value)`.
pub fn to_vec<T: ?Sized + serde::Serialize>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    to_vec_for(value, 0)
}

/// The same, in a buffer with room for a text of about `text_bytes` from the start: a body of
/// tens of kilobytes grown by doubling is copied again at every step of the way.
pub fn to_vec_for<T: ?Sized + serde::Serialize>(
    value: &T,
    text_bytes: usize,
) -> Result<Vec<u8>, serde_json::Error> {
    // Escapes (a newline is two bytes) and the punctuation around the text.
    let room = if text_bytes == 0 {
        0
    } else {
        text_bytes + text_bytes / 16 + 1024
    };
    let mut out = write::Out::with_capacity(room);
    value.serialize(&mut out)?;
    Ok(out.into_inner())
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde::Serialize;
    use serde_json::Value;

    /// Both writers' bytes, or both errors.
    fn same<T: Serialize + ?Sized>(value: &T) {
        match (super::to_vec(value), serde_json::to_vec(value)) {
            (Ok(ours), Ok(theirs)) => assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&theirs)
            ),
            (Err(_), Err(_)) => {}
            (ours, theirs) => panic!("ours {ours:?}, serde_json {theirs:?}"),
        }
    }

    /// Any JSON value, strings dense in escapes among them.
    pub(crate) fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            any::<String>().prop_map(Value::String),
            "[\"\\\\\\x00-\\x1f\\x7féü😀 a-z]{0,40}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::vec((any::<String>(), inner), 0..8)
                    .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_value_is_written_as_serde_json_writes_it(v in value()) {
            same(&v);
        }

        #[test]
        fn any_text_is_written_as_serde_json_writes_it(text in any::<String>(), pad in 0usize..40) {
            same(&format!("{}{text}", "p".repeat(pad)));
        }
    }

    #[derive(Serialize)]
    enum Shape {
        Unit,
        Newtype(f64),
        Tuple(u8, Option<&'static str>),
        Struct {
            inner: Vec<char>,
            bytes: &'static [u8],
        },
    }

    #[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
    struct Wrapped(String);

    #[derive(Serialize)]
    struct Unit;

    #[derive(Serialize)]
    struct Request {
        model: &'static str,
        temperature: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<u32>,
        shapes: Vec<Shape>,
        pair: (i128, u128),
        unit: Unit,
        wrapped: Wrapped,
    }

    #[test]
    fn structs_enums_and_numbers_as_serde_json() {
        for temperature in [Some(0.2), Some(0.7), Some(1.0), Some(f64::NAN), None] {
            same(&Request {
                model: "gpt-4o \"mini\"\n\u{1}\u{1f}é😀\\",
                temperature,
                skipped: None,
                shapes: vec![
                    Shape::Unit,
                    Shape::Newtype(1e300),
                    Shape::Tuple(255, None),
                    Shape::Struct {
                        inner: vec!['"', '\u{8}', '€'],
                        bytes: b"\x00\xff",
                    },
                ],
                pair: (i128::MIN, u128::MAX),
                unit: Unit,
                wrapped: Wrapped("w".into()),
            });
        }
    }

    #[test]
    fn map_keys_of_every_kind_as_serde_json() {
        same(&BTreeMap::from([(-3i64, "a"), (u32::MAX.into(), "b")]));
        same(&BTreeMap::from([(true, 1), (false, 2)]));
        same(&BTreeMap::from([('\n', 1), ('x', 2)]));
        same(&BTreeMap::from([(Wrapped("k\"".into()), 1)]));
        same(&vec![(vec![1u8], 2)].into_iter().collect::<BTreeMap<_, _>>());
        same(&BTreeMap::from([((1, 2), 3)]));
        same(&BTreeMap::from([((), 1)]));
    }

    #[test]
    #[expect(clippy::unwrap_used, reason = "a test fails loudly")]
    fn key_order_is_kept() {
        let v: Value =
            serde_json::from_str(r#"{"z":1,"a":{"y":2,"b":3},"m":[{"q":0,"c":1}]}"#).unwrap();
        assert_eq!(
            super::to_vec(&v).unwrap(),
            br#"{"z":1,"a":{"y":2,"b":3},"m":[{"q":0,"c":1}]}"#
        );
    }
}
