//! Structs read from a JSON object only. serde's derived structs also take an array of their
//! fields in order (`["a.py", "text"]` for `{"path": "a.py", "content": "text"}`), which the
//! contract does not allow: every struct of a request is `type: object` in `openapi.yaml`. A type
//! derives `Deserialize` with `#[serde(remote = "Self")]` (so the derive writes an inherent
//! `deserialize` instead of the trait's) and gets the trait from [`objects_only!`], which calls
//! it through [`ObjectOnly`].

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Unexpected, Visitor};

/// `D`, with a struct's visitor refusing an array.
pub struct ObjectOnly<D>(pub D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for ObjectOnly<D> {
    type Error = D::Error;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0
            .deserialize_struct(name, fields, NoSeq(visitor, PhantomData))
    }

    // An internally tagged enum reads its content through `deserialize_any`, and takes the tag
    // from an array's first item as readily as from an object's `type`.
    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(NoSeq(visitor, PhantomData))
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }

    // A derived struct asks for a struct, a tagged enum for anything; nothing else reaches here.
    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// A struct's (or a tagged enum's) visitor that takes a map and refuses a sequence.
struct NoSeq<'de, V>(V, PhantomData<&'de ()>);

impl<'de, V: Visitor<'de>> Visitor<'de> for NoSeq<'de, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.0.visit_map(map)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> Result<Self::Value, A::Error> {
        Err(de::Error::invalid_type(Unexpected::Seq, &self))
    }
}

/// `Deserialize` (and `Serialize`, for the types listed after `both:`) for structs derived with
/// `#[serde(remote = "Self")]`: read from an object only, written as derived.
macro_rules! objects_only {
    ($($read:ty),* $(; both: $($both:ty),*)?) => {
        $(
            impl<'de> serde::Deserialize<'de> for $read {
                fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                    <$read>::deserialize($crate::json::ObjectOnly(d))
                }
            }
        )*
        $(
            $crate::json::objects_only!($($both),*);
            $(impl serde::Serialize for $both {
                fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                    <$both>::serialize(self, s)
                }
            })*
        )?
    };
}
pub(crate) use objects_only;

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Deserialize, Serialize)]
    #[serde(remote = "Self")]
    struct File {
        path: String,
        content: Option<String>,
        inner: Option<Inner>,
    }

    #[derive(Debug, PartialEq, Deserialize, Serialize)]
    #[serde(remote = "Self", deny_unknown_fields)]
    struct Inner {
        n: u32,
    }

    #[derive(Debug, PartialEq, Deserialize, Serialize)]
    #[serde(remote = "Self", tag = "type", rename_all = "snake_case")]
    enum Block {
        Thinking { text: String },
    }

    objects_only!(; both: Inner, File, Block);

    #[test]
    fn a_tagged_enum_is_read_from_an_object_only() {
        let block: Block = serde_json::from_str(r#"{"type":"thinking","text":"t"}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(block, Block::Thinking { text: "t".into() });
        assert!(serde_json::from_str::<Block>(r#"["thinking","t"]"#).is_err());
        assert_eq!(
            serde_json::to_string(&block).unwrap_or_default(),
            r#"{"type":"thinking","text":"t"}"#
        );
    }

    #[test]
    fn an_object_is_read_and_an_array_refused_at_any_level() {
        let file: File = serde_json::from_str(r#"{"path":"a.py","content":"x","inner":{"n":1}}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(file.inner, Some(Inner { n: 1 }));
        assert_eq!(
            serde_json::to_string(&file).unwrap_or_default(),
            r#"{"path":"a.py","content":"x","inner":{"n":1}}"#
        );
        for body in [r#"["a.py","x",null]"#, r#"{"path":"a.py","inner":[1]}"#] {
            let err = serde_json::from_str::<File>(body)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.starts_with("invalid type: sequence, expected struct"),
                "{body}: {err}"
            );
        }
        let unknown = serde_json::from_str::<File>(r#"{"path":"a","inner":{"m":1}}"#);
        assert!(unknown.is_err(), "the type's own rules still apply");
        let v: Vec<File> = serde_json::from_value(serde_json::json!([{"path": "b"}]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v[0].path, "b");
    }
}
