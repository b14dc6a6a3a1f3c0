//! The serializer: objects, arrays and strings written here, scalars by serde_json.

use serde::ser::{self, Serialize, Serializer};
use serde_json::Error;

use super::escape::write_str;
use super::key::write_key;

/// The JSON written so far.
#[derive(Default)]
pub struct Out(Vec<u8>);

impl Out {
    pub fn with_capacity(bytes: usize) -> Self {
        Self(Vec::with_capacity(bytes))
    }

    pub fn into_inner(self) -> Vec<u8> {
        self.0
    }

    /// serde_json's own serializer over the same buffer, for one scalar.
    fn scalar(&mut self) -> serde_json::Serializer<&mut Vec<u8>> {
        serde_json::Serializer::new(&mut self.0)
    }

    /// `{"variant":` — the opening of an enum variant that carries data.
    fn open_variant(&mut self, variant: &str) {
        self.0.push(b'{');
        write_str(&mut self.0, variant);
        self.0.push(b':');
    }

    fn open(&mut self, bracket: u8, close: &'static [u8]) -> Compound<'_> {
        self.0.push(bracket);
        Compound {
            out: self,
            first: true,
            close,
        }
    }
}

/// An array or object being written; `close` ends it (and the variant around it, if any).
pub struct Compound<'a> {
    out: &'a mut Out,
    first: bool,
    close: &'static [u8],
}

impl Compound<'_> {
    fn comma(&mut self) {
        if !self.first {
            self.out.0.push(b',');
        }
        self.first = false;
    }

    fn element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        self.comma();
        value.serialize(&mut *self.out)
    }

    fn field<T: ?Sized + Serialize>(&mut self, key: &str, value: &T) -> Result<(), Error> {
        self.comma();
        write_str(&mut self.out.0, key);
        self.out.0.push(b':');
        value.serialize(&mut *self.out)
    }

    fn finish(self) -> Result<(), Error> {
        self.out.0.extend_from_slice(self.close);
        Ok(())
    }
}

impl<'a> Serializer for &'a mut Out {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn serialize_str(self, v: &str) -> Result<(), Error> {
        write_str(&mut self.0, v);
        Ok(())
    }
    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.scalar().serialize_bool(v)
    }
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        self.scalar().serialize_i8(v)
    }
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        self.scalar().serialize_i16(v)
    }
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        self.scalar().serialize_i32(v)
    }
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        self.scalar().serialize_i64(v)
    }
    fn serialize_i128(self, v: i128) -> Result<(), Error> {
        self.scalar().serialize_i128(v)
    }
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        self.scalar().serialize_u8(v)
    }
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.scalar().serialize_u16(v)
    }
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.scalar().serialize_u32(v)
    }
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        self.scalar().serialize_u64(v)
    }
    fn serialize_u128(self, v: u128) -> Result<(), Error> {
        self.scalar().serialize_u128(v)
    }
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        self.scalar().serialize_f32(v)
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        self.scalar().serialize_f64(v)
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Error> {
        self.scalar().serialize_bytes(v)
    }
    fn serialize_none(self) -> Result<(), Error> {
        self.scalar().serialize_none()
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        self.scalar().serialize_unit()
    }
    fn serialize_unit_struct(self, name: &'static str) -> Result<(), Error> {
        self.scalar().serialize_unit_struct(name)
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.open_variant(variant);
        value.serialize(&mut *self)?;
        self.0.push(b'}');
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Compound<'a>, Error> {
        Ok(self.open(b'[', b"]"))
    }
    fn serialize_tuple(self, _len: usize) -> Result<Compound<'a>, Error> {
        Ok(self.open(b'[', b"]"))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Compound<'a>, Error> {
        Ok(self.open(b'[', b"]"))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'a>, Error> {
        self.open_variant(variant);
        Ok(self.open(b'[', b"]}"))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Compound<'a>, Error> {
        Ok(self.open(b'{', b"}"))
    }
    fn serialize_struct(self, name: &'static str, _len: usize) -> Result<Compound<'a>, Error> {
        refuse_private(name)?;
        Ok(self.open(b'{', b"}"))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'a>, Error> {
        self.open_variant(variant);
        Ok(self.open(b'{', b"}}"))
    }
}

/// serde_json's raw values and arbitrary-precision numbers are structs with private names that
/// only its own serializer understands; none is built with the features this crate uses, and
/// one that appears fails loudly rather than being written differently.
fn refuse_private(name: &str) -> Result<(), Error> {
    if name.starts_with("$serde_json::private::") {
        return Err(ser::Error::custom(
            "serde_json private types are not written by crate::json",
        ));
    }
    Ok(())
}

impl ser::SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish()
    }
}

impl ser::SerializeTuple for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish()
    }
}

impl ser::SerializeTupleStruct for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish()
    }
}

impl ser::SerializeTupleVariant for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish()
    }
}

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), Error> {
        self.comma();
        write_key(&mut self.out.0, key)
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        self.out.0.push(b':');
        value.serialize(&mut *self.out)
    }
    fn end(self) -> Result<(), Error> {
        self.finish()
    }
}

impl ser::SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.field(key, value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish()
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.field(key, value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish()
    }
}
