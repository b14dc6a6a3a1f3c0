//! The top-level fields of a body that its type does not name, noted while the body decodes: a
//! misspelt field (`conversationHistory`) would otherwise be dropped without a word. Only the
//! top-level object's keys pass through here; every value, and everything below the top level,
//! goes to the type's own decoding untouched, so an unknown value is still skipped however deep
//! it is, never built, and a body pays a comparison per top-level key. The names compared with
//! are serde's list of the type's fields (their serialised names).

use std::borrow::Cow;
use std::fmt;

use serde::de::value::CowStrDeserializer;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Names kept; the rest are counted.
const NAMED: usize = 8;

/// The unknown top-level fields of one body: the first [`NAMED`] names, and how many in all.
#[derive(Debug, Default)]
pub struct Unknown {
    pub names: Vec<String>,
    pub count: usize,
    /// Names the endpoint reads beyond the type's (a plan's `previous_plan`).
    also_known: &'static [&'static str],
}

impl Unknown {
    /// Not noting `also_known` either.
    pub fn knowing(also_known: &'static [&'static str]) -> Self {
        Self {
            also_known,
            ..Self::default()
        }
    }

    fn note(&mut self, name: &str) {
        if self.also_known.contains(&name) {
            return;
        }
        self.count += 1;
        if self.names.len() < NAMED {
            self.names.push(name.to_string());
        }
    }
}

/// `inner`, with the keys of the top-level struct compared with the fields it names.
pub struct Noting<'u, D> {
    pub inner: D,
    pub unknown: &'u mut Unknown,
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Noting<'_, D> {
    type Error = D::Error;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let visitor = Keyed {
            inner: visitor,
            fields,
            unknown: self.unknown,
        };
        self.inner.deserialize_struct(name, fields, visitor)
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.inner.deserialize_any(visitor)
    }

    // Anything but a struct at the top has no fields to compare: decoded as `inner` would.
    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// The struct's own visitor, then the map it is handed, with the fields to compare keys with:
/// a visitor that hands on the map wrapped, and a map that notes its keys.
struct Keyed<'u, T> {
    inner: T,
    fields: &'static [&'static str],
    unknown: &'u mut Unknown,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Keyed<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_map(Keyed {
            inner: map,
            fields: self.fields,
            unknown: self.unknown,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_seq(seq)
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Keyed<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let Some(key) = self.inner.next_key_seed(KeyText)? else {
            return Ok(None);
        };
        if !self.fields.contains(&key.as_ref()) {
            self.unknown.note(&key);
        }
        seed.deserialize(CowStrDeserializer::new(key)).map(Some)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.inner.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// A key's text, borrowed from the body when it holds no escape.
struct KeyText;

impl<'de> DeserializeSeed<'de> for KeyText {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyText {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Shape {
        a: u32,
        #[serde(rename = "bName", default)]
        b: Option<String>,
    }

    fn decode(text: &str) -> (Result<Shape, serde_json::Error>, Unknown) {
        let mut unknown = Unknown::default();
        let mut de = serde_json::Deserializer::from_str(text);
        let value = Shape::deserialize(Noting {
            inner: &mut de,
            unknown: &mut unknown,
        });
        (value.and_then(|v| de.end().map(|()| v)), unknown)
    }

    #[test]
    fn unknown_keys_are_noted_and_known_ones_decode_as_before() {
        let (value, unknown) =
            decode(r#"{"a": 1, "b_name": "x", "bName": "y", "n\u0065sted": {"a": 2}}"#);
        assert_eq!(
            value.unwrap_or_else(|e| panic!("{e}")),
            Shape {
                a: 1,
                b: Some("y".into())
            }
        );
        assert_eq!(unknown.names, ["b_name", "nested"]);
        assert_eq!(unknown.count, 2);
    }

    #[test]
    fn past_the_named_ones_unknown_keys_are_counted() {
        let extra: Vec<String> = (0..20).map(|i| format!(r#""k{i}": {i}"#)).collect();
        let (value, unknown) = decode(&format!(r#"{{"a": 1, {}}}"#, extra.join(", ")));
        assert!(value.is_ok());
        assert_eq!(unknown.names.len(), NAMED);
        assert_eq!(unknown.count, 20);
    }

    #[test]
    fn an_unknown_value_is_skipped_however_deep() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let (value, unknown) = decode(&format!(r#"{{"a": 1, "deep": {deep}}}"#));
        assert!(value.is_ok(), "{value:?}");
        assert_eq!(unknown.names, ["deep"]);
    }

    #[test]
    fn errors_are_the_types_own() {
        let (Err(e), _) = decode(r#"{"a": "one"}"#) else {
            panic!("a string for a number decoded")
        };
        assert!(e.to_string().starts_with("invalid type: string"), "{e}");
        let (Err(e), _) = decode(r#"{"bName": "y"}"#) else {
            panic!("a missing field decoded")
        };
        assert!(e.to_string().starts_with("missing field `a`"), "{e}");
        let (value, _) = decode(r#"[1]"#);
        assert!(
            value.is_ok(),
            "a struct may come as an array, as serde_json reads one"
        );
    }
}
