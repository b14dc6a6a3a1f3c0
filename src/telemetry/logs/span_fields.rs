//! A span's fields kept as recorded, and written as one JSON object byte for byte as
//! tracing-subscriber's `JsonFields` writes them (keys in order, the last value of a key kept).
//!
//! `JsonFields` parses a span's fields into a map of `serde_json::Value`s and writes them all
//! again at every `Span::record`, a request's span being recorded several times. Here a record
//! only appends its entries to the span's text (each the field's name, a unit separator, the
//! value's JSON; entries ended by a record separator: JSON text holds neither character
//! unescaped), and the object is put in order once, when a log line writes the span
//! ([`write_object`]). The text is therefore not JSON: only [`super::JsonLine`] reads it.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FormatFields, FormattedFields};

use super::entries::Entries;

/// A span's fields as entries in the order recorded (see the module).
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
        writer.write_str(&visitor.into_text())
    }

    fn add_fields(
        &self,
        current: &'writer mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let mut visitor = Fields {
            text: std::mem::take(&mut current.fields).into_bytes(),
        };
        fields.record(&mut visitor);
        current.fields = visitor.into_text();
        if current.fields.len() > COMPACT_AT {
            current.fields = compacted(&current.fields);
        }
        Ok(())
    }
}

/// Between a field's name and its value.
const UNIT: u8 = 0x1f;
/// After each entry.
const RECORD: u8 = 0x1e;

/// Entries being appended (see the module).
#[derive(Default)]
struct Fields {
    text: Vec<u8>,
}

impl Fields {
    fn key(&mut self, name: &str) {
        // A name holding a separator (none in this service, nor in tracing's own) would break
        // the entries apart: its separators are written as U+FFFD.
        if name.bytes().any(|b| b == UNIT || b == RECORD) {
            self.text
                .extend_from_slice(name.replace(['\x1e', '\x1f'], "\u{fffd}").as_bytes());
        } else {
            self.text.extend_from_slice(name.as_bytes());
        }
        self.text.push(UNIT);
    }

    fn push_json<T: serde::Serialize + ?Sized>(&mut self, name: &str, value: &T) {
        // Numbers, booleans and byte arrays: serde_json's bytes, as a `Value` of them writes.
        self.key(name);
        if serde_json::to_writer(&mut self.text, value).is_err() {
            self.text.extend_from_slice(b"null");
        }
        self.text.push(RECORD);
    }

    fn push_str(&mut self, name: &str, value: &str) {
        self.key(name);
        crate::json::write_str(&mut self.text, value);
        self.text.push(RECORD);
    }

    fn into_text(self) -> String {
        // Always UTF-8: names, separators and JSON text.
        String::from_utf8(self.text).unwrap_or_default()
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
        self.key(name);
        // Written as it is formatted, escaped piece by piece: no string of it in between.
        self.text.push(b'"');
        let _ = fmt::write(&mut Escaping(&mut self.text), format_args!("{value:?}"));
        self.text.push(b'"');
        self.text.push(RECORD);
    }
}

/// A `fmt::Write` that appends what it is given escaped for a JSON string.
struct Escaping<'a>(&'a mut Vec<u8>);

impl fmt::Write for Escaping<'_> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        crate::json::write_escaped(self.0, text);
        Ok(())
    }
}

/// Writes the fields a span recorded (its [`SpanJson`] text) as the object `JsonFields` would
/// hold, without the closing brace: keys in order, each with its last value. The entries that
/// follow are the caller's.
pub(super) fn write_object(out: &mut Vec<u8>, recorded: &str) -> Entries {
    let mut object = Entries::open(out);
    for (key, value) in last_values(recorded) {
        object.key(out, key);
        out.extend_from_slice(value.as_bytes());
    }
    object
}

/// The recorded entries as (name, value JSON), in name order, each name once with its last value.
fn last_values(recorded: &str) -> Vec<(&str, &str)> {
    let mut entries: Vec<(&str, &str)> = Vec::with_capacity(16);
    let mut start = 0;
    // Byte searches: the separators are ASCII, so every cut is at a character boundary.
    for end in memchr::memchr_iter(RECORD, recorded.as_bytes()) {
        let entry = recorded.get(start..end).unwrap_or_default();
        entries.push(match memchr::memchr(UNIT, entry.as_bytes()) {
            Some(at) => (&entry[..at], &entry[at + 1..]),
            None => (entry, "null"),
        });
        start = end + 1;
    }
    // Stable: of equal names, the last recorded stays last, and is the one kept.
    entries.sort_by_key(|e| e.0);
    let mut kept: Vec<(&str, &str)> = Vec::with_capacity(entries.len());
    for entry in entries {
        match kept.last_mut() {
            Some(last) if last.0 == entry.0 => *last = entry,
            _ => kept.push(entry),
        }
    }
    kept
}

/// Past this size a span's text is compacted at its next record (each name once), so that a
/// span recorded in a loop does not grow without bound.
const COMPACT_AT: usize = 8 * 1024;

/// The same entries, each name once with its last value.
fn compacted(recorded: &str) -> String {
    let mut text = String::with_capacity(recorded.len());
    for (key, value) in last_values(recorded) {
        text.extend([key, "\x1f", value, "\x1e"]);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The object written from these (name, value JSON) records.
    fn object(recorded: &[(&str, &str)]) -> String {
        let mut text = String::new();
        for (name, value) in recorded {
            text.extend([name, "\x1f", value, "\x1e"]);
        }
        let mut out = Vec::new();
        write_object(&mut out, &text);
        out.push(b'}');
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn recorded_entries_become_one_object_in_key_order_with_the_last_values() {
        assert_eq!(
            object(&[
                ("e", r#"[1,{"f":2}]"#),
                ("c", r#""x,}y""#),
                ("a", "1"),
                ("b", "true"),
                ("c", "null"),
                ("z", r#""\"""#),
            ]),
            r#"{"a":1,"b":true,"c":null,"e":[1,{"f":2}],"z":"\""}"#
        );
        assert_eq!(
            object(&[("a", "1"), ("a\"b", "2"), ("a", "3"), ("a\\", "4")]),
            r#"{"a":3,"a\"b":2,"a\\":4}"#
        );
        assert_eq!(object(&[]), "{}");
    }

    #[test]
    fn a_name_with_a_separator_cannot_split_its_entry() {
        let mut visitor = Fields::default();
        visitor.push_str("a\x1fb\x1ec", "v");
        visitor.push_json("n", &1);
        let text = visitor.into_text();
        let mut out = Vec::new();
        write_object(&mut out, &text);
        out.push(b'}');
        assert_eq!(
            String::from_utf8(out).unwrap_or_default(),
            "{\"a\u{fffd}b\u{fffd}c\":\"v\",\"n\":1}"
        );
    }

    #[test]
    fn a_span_recorded_in_a_loop_keeps_one_entry_a_name() {
        let mut current = FormattedFields::<SpanJson>::new(String::new());
        let mut visitor = Fields::default();
        visitor.push_str("name", "first");
        current.fields = visitor.into_text();
        let span = tracing::info_span!("loop", n = tracing::field::Empty, note = "x");
        let metadata = span.metadata().map(|m| m.fields());
        let (Some(fields), Some(n)) = (metadata, metadata.and_then(|f| f.field("n"))) else {
            panic!("the span has its fields")
        };
        for i in 0..10_000u64 {
            let values = [(&n, Some(&i as &dyn tracing::Value))];
            let set = fields.value_set(&values);
            let _ = SpanJson.add_fields(&mut current, &tracing::span::Record::new(&set));
            assert!(
                current.fields.len() <= COMPACT_AT + 64,
                "{}",
                current.fields.len()
            );
        }
        let mut out = Vec::new();
        write_object(&mut out, &current.fields);
        out.push(b'}');
        assert_eq!(
            String::from_utf8(out).unwrap_or_default(),
            r#"{"n":9999,"name":"first"}"#
        );
    }
}
