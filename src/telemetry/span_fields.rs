//! A span's fields as one JSON object, byte for byte what tracing-subscriber's `JsonFields`
//! writes (keys in order, the last value of a key kept), written directly rather than through a
//! map of `serde_json::Value`s, and extended at each `Span::record` without reading the object
//! back (see [`SpanJson`]).

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FormatFields, FormattedFields};

use super::json_line::Entries;

/// A span's fields as JSON, exactly as `JsonFields` writes them (one object, keys in order),
/// but adding recorded fields without reading the object into values. `JsonFields` parses a
/// span's fields into a map of `serde_json::Value`s and writes them all again at every
/// `Span::record`. Here the new fields alone are written, and merged into the object's text by
/// key.
#[derive(Debug, Default, Clone, Copy)]
pub struct SpanJson;

impl<'writer> FormatFields<'writer> for SpanJson {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        let mut visitor = Fields::default();
        fields.record(&mut visitor);
        writer.write_str(&visitor.object())
    }

    fn add_fields(
        &self,
        current: &'writer mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let mut visitor = Fields::default();
        fields.record(&mut visitor);
        let added = visitor.object();
        if current.fields.is_empty() {
            current.fields = added;
            return Ok(());
        }
        match merged(&current.fields, &added) {
            Some(object) => current.fields = object,
            // Not an object of plain keys as `JsonFields` writes them: let it do the work.
            None => {
                let mut theirs =
                    FormattedFields::<JsonFields>::new(std::mem::take(&mut current.fields));
                JsonFields::new().add_fields(&mut theirs, fields)?;
                current.fields = theirs.fields;
            }
        }
        Ok(())
    }
}

/// The fields of a span or a record, each as its key and its value's JSON text, in the order
/// recorded.
#[derive(Default)]
struct Fields {
    entries: Vec<(&'static str, Vec<u8>)>,
}

impl Fields {
    fn push(&mut self, name: &'static str, value: Vec<u8>) {
        self.entries.push((name, value));
    }

    fn push_json<T: serde::Serialize + ?Sized>(&mut self, name: &'static str, value: &T) {
        // Numbers, booleans and byte arrays: serde_json's bytes, as a `Value` of them writes.
        let json = serde_json::to_vec(value).unwrap_or_else(|_| b"null".to_vec());
        self.push(name, json);
    }

    fn push_str(&mut self, name: &'static str, value: &str) {
        let mut json = Vec::with_capacity(value.len() + 2);
        crate::json::write_str(&mut json, value);
        self.push(name, json);
    }

    /// The object `JsonFields` writes: keys in order, each with the last value recorded for it.
    fn object(mut self) -> String {
        // Stable: of equal keys, the last recorded stays last.
        self.entries.sort_by_key(|e| e.0);
        let mut out = Vec::with_capacity(
            2 + self
                .entries
                .iter()
                .map(|e| e.0.len() + e.1.len() + 4)
                .sum::<usize>(),
        );
        let mut object = Entries::open(&mut out);
        for (i, (key, value)) in self.entries.iter().enumerate() {
            if self.entries.get(i + 1).is_some_and(|next| next.0 == *key) {
                continue;
            }
            object.key(&mut out, key);
            out.extend_from_slice(value);
        }
        out.push(b'}');
        String::from_utf8(out).unwrap_or_else(|_| "{}".into())
    }
}

/// What `JsonVisitor` records, and how.
impl Visit for Fields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push_json(field.name(), &value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push_json(field.name(), &value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push_json(field.name(), &value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push_json(field.name(), &value);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.push_str(field.name(), value);
    }

    fn record_bytes(&mut self, field: &Field, value: &[u8]) {
        self.push_json(field.name(), value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        // `log.` fields are the metadata of a `log` record, already written elsewhere.
        if name.starts_with("log.") {
            return;
        }
        let name = name.strip_prefix("r#").unwrap_or(name);
        self.push_str(name, &format!("{value:?}"));
    }
}

/// The entries of a compact JSON object, each as (key, `"key":value` text), in order; `None`
/// when the text is not such an object or a key holds an escape (keys are then compared as
/// written, which is their order only without escapes).
fn entries(object: &str) -> Option<Vec<(&str, &str)>> {
    let bytes = object.as_bytes();
    if bytes.first() != Some(&b'{') || bytes.last() != Some(&b'}') {
        return None;
    }
    let inner = &object[1..object.len() - 1];
    let b = inner.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let start = at;
        // The key: a string without escapes.
        if b[at] != b'"' {
            return None;
        }
        let key_end = at + 1 + inner[at + 1..].find('"')?;
        let key = &inner[at + 1..key_end];
        if key.contains('\\') || b.get(key_end + 1) != Some(&b':') {
            return None;
        }
        // The value: a string to its closing quote, or anything else up to the next comma
        // outside strings, arrays and objects.
        at = key_end + 2;
        at = if b.get(at) == Some(&b'"') {
            string_end(inner, at)?
        } else {
            other_end(b, at)?
        };
        if b.get(at).is_some_and(|&c| c != b',') {
            return None;
        }
        out.push((key, &inner[start..at]));
        // Past the comma, if any.
        at += 1;
    }
    Some(out)
}

/// Just past the JSON string that opens at `at`.
fn string_end(text: &str, at: usize) -> Option<usize> {
    let mut from = at + 1;
    loop {
        let quote = from + text[from..].find('"')?;
        let backslashes = text.as_bytes()[..quote]
            .iter()
            .rev()
            .take_while(|&&c| c == b'\\')
            .count();
        if backslashes % 2 == 0 {
            return Some(quote + 1);
        }
        from = quote + 1;
    }
}

/// Just past a value that is not a string, opening at `at`: at the next comma outside strings,
/// arrays and objects, or at the end.
fn other_end(b: &[u8], mut at: usize) -> Option<usize> {
    let start = at;
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    while at < b.len() {
        let c = b[at];
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else {
            match c {
                b'"' => in_string = true,
                b'[' | b'{' => depth += 1,
                b']' | b'}' => depth = depth.checked_sub(1)?,
                b',' if depth == 0 => break,
                _ => {}
            }
        }
        at += 1;
    }
    (!in_string && depth == 0 && at > start).then_some(at)
}

/// `current` with the entries of `added`: both objects as `JsonFields` writes them, keys in
/// order; a key in both takes the added value, where the current one stood.
fn merged(current: &str, added: &str) -> Option<String> {
    let old = entries(current)?;
    let new = entries(added)?;
    let mut out = String::with_capacity(current.len() + added.len());
    out.push('{');
    let (mut i, mut j) = (0, 0);
    let mut push = |entry: &str| {
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(entry);
    };
    while i < old.len() || j < new.len() {
        match (old.get(i), new.get(j)) {
            (Some(o), Some(n)) if o.0 == n.0 => {
                push(n.1);
                i += 1;
                j += 1;
            }
            (Some(o), Some(n)) if o.0 < n.0 => {
                push(o.1);
                i += 1;
            }
            (Some(_), Some(n)) | (None, Some(n)) => {
                push(n.1);
                j += 1;
            }
            (Some(o), None) => {
                push(o.1);
                i += 1;
            }
            (None, None) => break,
        }
    }
    out.push('}');
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_merge_by_key_and_odd_ones_are_refused() {
        assert_eq!(
            merged(
                r#"{"a":1,"c":"x,}y","e":[1,{"f":2}]}"#,
                r#"{"b":true,"c":null,"z":"\""}"#
            )
            .as_deref(),
            Some(r#"{"a":1,"b":true,"c":null,"e":[1,{"f":2}],"z":"\""}"#)
        );
        assert_eq!(merged("{}", r#"{"a":1}"#).as_deref(), Some(r#"{"a":1}"#));
        assert_eq!(
            merged(r#"{"a":"x\\","c":"\\\",2"}"#, r#"{"b":"q\"r"}"#).as_deref(),
            Some(r#"{"a":"x\\","b":"q\"r","c":"\\\",2"}"#)
        );
        for odd in [
            r#"{"a\"b":1}"#,
            r#"{"a":"1}"#,
            r#"{"a":}"#,
            r#"{"a":"1\"}"#,
            r#"{"a":"1"x}"#,
            "[1]",
            r#"{"a" :1}"#,
            "",
        ] {
            assert_eq!(merged(odd, r#"{"b":1}"#), None, "{odd}");
        }
    }
}
