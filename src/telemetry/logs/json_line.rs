//! A log event as one JSON line, byte for byte what tracing-subscriber's JSON format writes with
//! `flatten_event(true)`, without reading the spans' fields back. That format parses each span's
//! recorded fields into a `serde_json::Value` and writes them again, for the current span and
//! once more in the span list: half of a request log line's cost. The entries [`SpanJson`] keeps
//! are already JSON written by serde_json's rules, so they are only put in order here.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::registry::{LookupSpan, SpanRef};

use super::entries::Entries;
use super::SpanJson;

/// The event formatter of JSON logs; `timestamps: false` only in tests.
#[derive(Debug, Clone, Copy)]
pub struct JsonLine {
    pub timestamps: bool,
}

impl<S> FormatEvent<S, SpanJson> for JsonLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, SpanJson>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut out = Vec::with_capacity(1024);
        let mut line = Entries::open(&mut out);
        if self.timestamps {
            let mut now = String::with_capacity(32);
            SystemTime.format_time(&mut Writer::new(&mut now))?;
            line.str_entry(&mut out, "timestamp", &now);
        }
        line.str_entry(&mut out, "level", meta.level().as_str());
        event.record(&mut EventFields {
            out: &mut out,
            line: &mut line,
        });
        line.str_entry(&mut out, "target", meta.target());
        let current = event
            .parent()
            .and_then(|id| ctx.span(id))
            .or_else(|| ctx.lookup_current());
        if let Some(current) = &current {
            line.key(&mut out, "span");
            let start = out.len();
            write_span(&mut out, current);
            let written = start..out.len();
            line.key(&mut out, "spans");
            out.push(b'[');
            let leaf = ctx.lookup_current();
            for (i, span) in leaf.iter().flat_map(|s| s.scope().from_root()).enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                // The current span again (a request's line): its object as just written.
                if span.id() == current.id() {
                    out.extend_from_within(written.clone());
                } else {
                    write_span(&mut out, &span);
                }
            }
            out.push(b']');
        }
        out.extend_from_slice(b"}\n");
        writer.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
    }
}

/// A span as the format writes it: its fields, then its name.
fn write_span<S: for<'a> LookupSpan<'a>>(out: &mut Vec<u8>, span: &SpanRef<'_, S>) {
    let extensions = span.extensions();
    let recorded = extensions
        .get::<FormattedFields<SpanJson>>()
        .map_or("", |f| f.fields.as_str());
    let mut object = super::span_fields::write_object(out, recorded);
    object.str_entry(out, "name", span.metadata().name());
    out.push(b'}');
}

/// The event's own fields, flattened into the line as tracing-serde's map visitor writes them.
struct EventFields<'a> {
    out: &'a mut Vec<u8>,
    line: &'a mut Entries,
}

impl Visit for EventFields<'_> {
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.line.entry(self.out, field.name(), &value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.line
            .entry(self.out, field.name(), &format_args!("{value:?}"));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.line.entry(self.out, field.name(), &value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.line.entry(self.out, field.name(), &value);
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.line.entry(self.out, field.name(), &value);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.line.str_entry(self.out, field.name(), value);
    }
}
