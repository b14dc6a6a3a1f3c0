//! JSON read into a `Value` with a bound on how many values it holds. A body of a few MiB can
//! hold millions of tiny values (`[{},{},…]`), each costing tens of bytes and more once built:
//! bounding the bytes alone lets a small answer take gigabytes. The count is checked as each
//! value is read, so the one past the bound is never built.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// `bytes` as JSON, or why not: not JSON, or more than `most` values (each key, each element
/// and each container counted).
pub fn from_slice_within(bytes: &[u8], most: usize) -> Result<Value, String> {
    let left = Cell::new(most);
    let mut reader = serde_json::Deserializer::from_slice(bytes);
    let value = Counted(&left)
        .deserialize(&mut reader)
        .map_err(|e| e.to_string())?;
    reader.end().map_err(|e| e.to_string())?;
    Ok(value)
}

/// A value read, counted against what is left.
#[derive(Clone, Copy)]
struct Counted<'a>(&'a Cell<usize>);

impl Counted<'_> {
    fn take<E: de::Error>(self) -> Result<(), E> {
        match self.0.get().checked_sub(1) {
            Some(left) => {
                self.0.set(left);
                Ok(())
            }
            None => Err(E::custom("more JSON values than an answer may hold")),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Counted<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Counted<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.take()?;
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.take()?;
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.take()?;
        Ok(Value::from(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.take()?;
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.take()?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.take()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.take()?;
        let mut fields = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.take()?;
            let value = map.next_value_seed(self)?;
            fields.insert(key, value);
        }
        Ok(Value::Object(fields))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_up_to_the_bound_are_read_as_serde_json_reads_them() {
        let text = r#"{"a": [1, -2, 3.5, "x", null, true, {"b": []}], "c": "d"}"#;
        let expected: Value = serde_json::from_str(text).unwrap_or_default();
        // The object, 2 keys, the array and its 7 elements, 1 key inside and its array, "d".
        assert_eq!(from_slice_within(text.as_bytes(), 14), Ok(expected));
        assert!(from_slice_within(text.as_bytes(), 13).is_err());
    }

    #[test]
    fn millions_of_tiny_values_are_refused_before_they_are_built() {
        let wide = format!("[{}{{}}]", "{},".repeat(2_000_000));
        let refused = from_slice_within(wide.as_bytes(), 1_000);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("more JSON values than")),
            "{refused:?}"
        );
        assert!(from_slice_within(b"[1] x", 10).is_err(), "trailing text");
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(
            from_slice_within(deep.as_bytes(), 1_000).is_err(),
            "too deep"
        );
    }
}
