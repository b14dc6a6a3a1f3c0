//! Tracing setup: JSON or pretty log lines, filtered by `RUST_LOG` (default `info`), and with
//! `REACTSTEP_OTLP_ENDPOINT` set, traces over OTLP beside them (see `traces`).
//! Secrets never reach a log line because the key type prints a mask (see `llm::ApiKey`).

use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use crate::telemetry::traces::Traces;

#[cfg(test)]
mod captured;
mod entries;
mod json_line;
mod pretty;
mod span_fields;
pub use json_line::JsonLine;
pub use span_fields::SpanJson;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line, for log collectors.
    Json,
    /// Human-readable, coloured lines for a terminal: one a record, each value's control
    /// characters escaped (`pretty.rs`).
    Pretty,
}

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
            .fmt_fields(pretty::escaped_fields())
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let installed = tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(crate::telemetry::traces::layer(tracer))
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
        LogFormat::Pretty => builder.fmt_fields(pretty::escaped_fields()).try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::captured::Captured;
    use super::*;

    /// Which formatters a test's subscriber uses.
    #[derive(Clone, Copy)]
    enum Formatters {
        /// tracing-subscriber's JSON format and `JsonFields`.
        Theirs,
        /// [`JsonLine`] with [`SpanJson`]: the service's. (`SpanJson` keeps entries in record
        /// order, which only `JsonLine` reads.)
        Ours,
    }

    /// What a request's span and its log lines go through: fields recorded one by one, a child
    /// span, a span without fields, an event with another parent, values of every kind.
    fn log_lines(formatters: Formatters) -> String {
        let buffer = Captured::default();
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
                let call = tracing::info_span!(
                    "llm call",
                    attempt = 2u8,
                    url = ?"x\u{1}y",
                    r#type = ?"raw",
                    r#loop = "str",
                    log.target = ?"skipped",
                    bytes = tracing::field::Empty,
                    nan = f64::NAN,
                );
                call.record("bytes", &b"\x00\xff"[..]);
                call.record("attempt", 3u8);
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
            Formatters::Ours => tracing::subscriber::with_default(
                builder
                    .fmt_fields(SpanJson)
                    .event_format(JsonLine { timestamps: false })
                    .finish(),
                run,
            ),
        }
        buffer.text()
    }

    #[test]
    fn log_lines_are_those_of_the_json_format() {
        let theirs = log_lines(Formatters::Theirs);
        assert_eq!(theirs.lines().count(), 7, "{theirs}");
        assert!(theirs.contains("\"status\":200"), "{theirs}");
        assert!(theirs.contains("\"name\":\"bare\""), "{theirs}");
        for field in [
            r#""bytes":[0,255]"#,
            r#""nan":null"#,
            r#""type":"\"raw\"""#,
            r#""loop":"str""#,
            r#""attempt":3"#,
        ] {
            assert!(theirs.contains(field), "{field} in {theirs}");
        }
        assert!(!theirs.contains("skipped"), "{theirs}");
        let ours = log_lines(Formatters::Ours);
        for (o, t) in ours.lines().zip(theirs.lines()) {
            assert_eq!(o, t);
        }
        assert_eq!(ours, theirs);
    }

    #[test]
    fn timestamps_are_written_as_the_format_writes_them() {
        let buffer = Captured::default();
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .fmt_fields(SpanJson)
            .event_format(JsonLine { timestamps: true })
            .finish();
        tracing::subscriber::with_default(subscriber, || tracing::info!("now"));
        let line: serde_json::Value = serde_json::from_str(&buffer.text()).unwrap_or_default();
        let timestamp = line["timestamp"].as_str().unwrap_or_default();
        assert!(
            chrono::DateTime::parse_from_rfc3339(timestamp).is_ok(),
            "{line}"
        );
        assert_eq!(line["message"], "now");
        assert_eq!(line.as_object().map(|o| o.len()), Some(4), "{line}");
    }
}
