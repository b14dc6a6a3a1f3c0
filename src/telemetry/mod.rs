//! Tracing setup: JSON or pretty log lines, filtered by `RUST_LOG` (default `info`), and with
//! `REACTSTEP_OTLP_ENDPOINT` set, traces over OTLP beside them (see `traces`).
//! Secrets never reach a log line because the key type prints a mask (see `llm::ApiKey`).

use std::fmt;

use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FormatFields, FormattedFields};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use crate::config::LogFormat;
use crate::traces::Traces;

mod json_line;
pub use json_line::JsonLine;

/// Installs the global subscriber once; later calls (as in tests) are harmless no-ops. With an
/// OTLP endpoint, the traces to shut down when the service stops (an endpoint that is not a
/// usable URL is an error).
pub fn init(format: LogFormat, otlp_endpoint: Option<&str>) -> std::io::Result<Option<Traces>> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let Some(endpoint) = otlp_endpoint else {
        logs_only(format, filter);
        return Ok(None);
    };
    let (traces, tracer) = Traces::start(endpoint).map_err(std::io::Error::other)?;
    // The log filter becomes the log layer's own, so that it does not hide the phase spans from
    // the traces.
    let logs = match format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .fmt_fields(SpanJson)
            .event_format(JsonLine { timestamps: true })
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Pretty => tracing_subscriber::fmt::layer()
            .pretty()
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let installed = tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(crate::traces::layer(tracer))
        .try_init();
    if installed.is_ok() {
        traces.switch_on();
    }
    Ok(Some(traces))
}

/// The subscriber without traces: the log filter for the whole of it, as lean as it gets.
fn logs_only(format: LogFormat, filter: EnvFilter) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _already_set = match format {
        LogFormat::Json => builder
            .fmt_fields(SpanJson)
            .event_format(JsonLine { timestamps: true })
            .try_init(),
        LogFormat::Pretty => builder.pretty().try_init(),
    };
}

/// A span's fields as JSON, exactly as `JsonFields` writes them (one object, keys in order),
/// but adding recorded fields without reading the object back. `JsonFields` parses a span's
/// fields and writes them all again at every `Span::record`: a request's span is recorded six
/// times (provider, model, token counts, status, latency), about a tenth of the service's work
/// per step. Here the new fields alone are written, and merged into the object by key.
#[derive(Debug, Default, Clone, Copy)]
pub struct SpanJson;

impl<'writer> FormatFields<'writer> for SpanJson {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        JsonFields::new().format_fields(writer, fields)
    }

    fn add_fields(
        &self,
        current: &'writer mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let mut added = String::new();
        JsonFields::new().format_fields(Writer::new(&mut added), fields)?;
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
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            if let Ok(mut buffer) = self.0.lock() {
                buffer.extend_from_slice(data);
            }
            Ok(data.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Which formatters a test's subscriber uses.
    #[derive(Clone, Copy)]
    enum Formatters {
        /// tracing-subscriber's JSON format and `JsonFields`.
        Theirs,
        /// Its JSON format with [`SpanJson`].
        OurFields,
        /// [`JsonLine`] with [`SpanJson`]: the service's.
        Ours,
    }

    /// What a request's span and its log lines go through: fields recorded one by one, a child
    /// span, a span without fields, an event with another parent, values of every kind.
    fn log_lines(formatters: Formatters) -> String {
        let buffer = Buffer::default();
        let sink = buffer.clone();
        let builder = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .without_time()
            .json()
            .flatten_event(true);
        let run = || {
            let span = tracing::info_span!(
                "request",
                request_id = %"req-\"1\"",
                method = "POST",
                path = %"/api/agent/react_step",
                status = tracing::field::Empty,
                latency_ms = tracing::field::Empty,
                provider = tracing::field::Empty,
                model = tracing::field::Empty,
                prompt_tokens = tracing::field::Empty,
                completion_tokens = tracing::field::Empty,
                error_type = tracing::field::Empty,
            );
            span.in_scope(|| tracing::info!(note = "a, b}", "inside, before the records"));
            span.record("provider", tracing::field::display("openai"));
            span.record("model", "gpt-4o \\ \"mini\" , {x}");
            span.in_scope(|| tracing::warn!("inside, after two"));
            span.record("prompt_tokens", 4698u32);
            span.record("completion_tokens", 32u32);
            span.record("status", 200u16);
            span.record("model", "gpt-4o, again");
            span.record("error_type", true);
            span.record("latency_ms", 3.142_857_142_857_143_f64);
            span.in_scope(|| {
                let call = tracing::info_span!("llm call", attempt = 2u8, url = ?"x\u{1}y");
                call.in_scope(|| {
                    tracing::warn!(
                        wait_ms = 1.5f64,
                        retry = true,
                        left = -3i64,
                        big = u64::MAX,
                        error = &std::io::Error::other("closed \"early\"") as &dyn std::error::Error,
                        kind = ?Some("tab\there"),
                        "upstream: {}",
                        "é😀\u{7f}"
                    );
                    let bare = tracing::info_span!("bare");
                    bare.in_scope(|| tracing::info!("in a span without fields"));
                    tracing::info!(parent: &span, "explicit parent");
                });
                tracing::info!("request answered");
            });
            tracing::info!("outside any span");
        };
        match formatters {
            Formatters::Theirs => tracing::subscriber::with_default(builder.finish(), run),
            Formatters::OurFields => {
                tracing::subscriber::with_default(builder.fmt_fields(SpanJson).finish(), run)
            }
            Formatters::Ours => tracing::subscriber::with_default(
                builder
                    .fmt_fields(SpanJson)
                    .event_format(JsonLine { timestamps: false })
                    .finish(),
                run,
            ),
        }
        let bytes = buffer.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8(bytes).unwrap_or_default()
    }

    #[test]
    fn log_lines_are_those_of_the_json_format() {
        let theirs = log_lines(Formatters::Theirs);
        assert_eq!(theirs.lines().count(), 7, "{theirs}");
        assert!(theirs.contains("\"status\":200"), "{theirs}");
        assert!(theirs.contains("\"name\":\"bare\""), "{theirs}");
        assert_eq!(log_lines(Formatters::OurFields), theirs);
        let ours = log_lines(Formatters::Ours);
        for (o, t) in ours.lines().zip(theirs.lines()) {
            assert_eq!(o, t);
        }
        assert_eq!(ours, theirs);
    }

    #[test]
    fn timestamps_are_written_as_the_format_writes_them() {
        let buffer = Buffer::default();
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .fmt_fields(SpanJson)
            .event_format(JsonLine { timestamps: true })
            .finish();
        tracing::subscriber::with_default(subscriber, || tracing::info!("now"));
        let bytes = buffer.0.lock().map(|b| b.clone()).unwrap_or_default();
        let line: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        let timestamp = line["timestamp"].as_str().unwrap_or_default();
        assert!(
            chrono::DateTime::parse_from_rfc3339(timestamp).is_ok(),
            "{line}"
        );
        assert_eq!(line["message"], "now");
        assert_eq!(line.as_object().map(|o| o.len()), Some(4), "{line}");
    }

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
