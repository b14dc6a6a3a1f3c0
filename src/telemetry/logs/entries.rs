//! A JSON object written entry by entry, shared by the log line and the span's fields.

/// An object being written: a comma before each entry but the first.
pub(super) struct Entries {
    empty: bool,
}

impl Entries {
    pub(super) fn open(out: &mut Vec<u8>) -> Self {
        out.push(b'{');
        Self { empty: true }
    }

    pub(super) fn key(&mut self, out: &mut Vec<u8>, key: &str) {
        if !std::mem::take(&mut self.empty) {
            out.push(b',');
        }
        crate::json::write_str(out, key);
        out.push(b':');
    }

    pub(super) fn str_entry(&mut self, out: &mut Vec<u8>, key: &str, value: &str) {
        self.key(out, key);
        crate::json::write_str(out, value);
    }

    /// Numbers, booleans and formatted text: serde_json's own bytes, as the format writes them.
    pub(super) fn entry<T: serde::Serialize + ?Sized>(
        &mut self,
        out: &mut Vec<u8>,
        key: &str,
        value: &T,
    ) {
        self.key(out, key);
        if serde_json::to_writer(&mut *out, value).is_err() {
            out.extend_from_slice(b"null");
        }
    }
}
