//! Map keys: a string key is written by the fast escape; any other key (a number, a bool, a
//! newtype) is handed to serde_json, which quotes it or refuses it as it always does.

use serde::ser::{Impossible, Serialize, Serializer};
use serde_json::Error;

use super::escape::write_str;

/// Writes `key` as the key of a JSON object.
pub fn write_key<T: ?Sized + Serialize>(out: &mut Vec<u8>, key: &T) -> Result<(), Error> {
    if let Ok(true) = key.serialize(StrKey(out)) {
        return Ok(());
    }
    // serde_json's own map writes `{` and then the key: keep the key.
    let mut by_serde_json = Vec::new();
    {
        let mut serializer = serde_json::Serializer::new(&mut by_serde_json);
        let mut map = serializer.serialize_map(None)?;
        serde::ser::SerializeMap::serialize_key(&mut map, key)?;
    }
    out.extend_from_slice(by_serde_json.get(1..).unwrap_or_default());
    Ok(())
}

/// Writes a string key and answers `true`; answers `false` (or fails) for any other key, having
/// written nothing.
struct StrKey<'a>(&'a mut Vec<u8>);

fn not_str() -> Result<bool, Error> {
    Ok(false)
}

fn not_str_compound<T>() -> Result<T, Error> {
    Err(serde::ser::Error::custom("not a string key"))
}

impl Serializer for StrKey<'_> {
    type Ok = bool;
    type Error = Error;
    type SerializeSeq = Impossible<bool, Error>;
    type SerializeTuple = Impossible<bool, Error>;
    type SerializeTupleStruct = Impossible<bool, Error>;
    type SerializeTupleVariant = Impossible<bool, Error>;
    type SerializeMap = Impossible<bool, Error>;
    type SerializeStruct = Impossible<bool, Error>;
    type SerializeStructVariant = Impossible<bool, Error>;

    fn serialize_str(self, v: &str) -> Result<bool, Error> {
        write_str(self.0, v);
        Ok(true)
    }
    fn serialize_bool(self, _: bool) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_i8(self, _: i8) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_i16(self, _: i16) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_i32(self, _: i32) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_i64(self, _: i64) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_i128(self, _: i128) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_u8(self, _: u8) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_u16(self, _: u16) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_u32(self, _: u32) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_u64(self, _: u64) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_u128(self, _: u128) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_f32(self, _: f32) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_f64(self, _: f64) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_char(self, _: char) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_none(self) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_unit(self) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<bool, Error> {
        not_str()
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Error> {
        not_str_compound()
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Error> {
        not_str_compound()
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Error> {
        not_str_compound()
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        not_str_compound()
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Error> {
        not_str_compound()
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Error> {
        not_str_compound()
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        not_str_compound()
    }
}
