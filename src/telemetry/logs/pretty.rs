//! The terminal's log lines (`REACTSTEP_LOG_FORMAT=pretty`): tracing-subscriber's full format,
//! one line a record, with fields whose values have their control characters escaped. A value
//! can hold a client's text (a session id in the step's span, a model name an upstream's error
//! quotes), and tracing-subscriber's formats write values as they are: a newline in one started
//! a forged line, and an escape sequence reached the operator's terminal. (Its multi-line
//! `pretty` format reads an event's fields with a visitor of its own, past any field format, so
//! it is not used.) The JSON format escapes them already.

use std::fmt::{self, Write as _};

use tracing::field::Field;
use tracing_subscriber::field::MakeExt as _;
use tracing_subscriber::fmt::format::Writer;

/// Fields as `name: value`, the message bare, separated by commas; every value escaped.
pub fn escaped_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + 'static {
    tracing_subscriber::fmt::format::debug_fn(write_field).delimited(", ")
}

fn write_field(writer: &mut Writer<'_>, field: &Field, value: &dyn fmt::Debug) -> fmt::Result {
    if field.name() != "message" {
        write!(writer, "{}: ", field.name())?;
    }
    Escaped(writer).write_fmt(format_args!("{value:?}"))
}

/// Whether `c` is written escaped: control characters (C0, DEL, C1), and those that break or
/// turn a line around in a viewer without being controls: line and paragraph separators, bidi
/// marks and overrides, zero-width characters, tag characters.
fn escaped(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061C}' | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{2069}' | '\u{FEFF}' | '\u{E0000}'..='\u{E007F}')
}

/// Writes through to `0`, each character [`escaped`] says as `\u{…}`.
struct Escaped<'a, 'w>(&'a mut Writer<'w>);

impl fmt::Write for Escaped<'_, '_> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let mut rest = text;
        while let Some(at) = rest.find(escaped) {
            self.0.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            write!(self.0, "\\u{{{:x}}}", u32::from(c))?;
            rest = &rest[at + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::super::captured::Captured;

    /// A client's text in a span's field and in an event's: no line starts with what it forged,
    /// and no escape reaches the terminal.
    #[test]
    fn a_clients_text_cannot_forge_a_line_or_reach_the_terminal() {
        let buffer = Captured::default();
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .without_time()
            .fmt_fields(super::escaped_fields())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let forged = "s1\nFORGED  INFO reactstep: all is well\x1b]0;pwned\x07";
            let span = tracing::info_span!("react step", session_id = %forged);
            span.in_scope(|| {
                tracing::warn!(error = %"model `x\nFORGED2 ERROR` not found\u{9b}2J \u{202e}txet\u{2028}", "request refused");
            });
        });
        let text = buffer.text();
        assert!(text.contains("request refused"), "{text}");
        assert!(text.contains("s1\\u{a}FORGED"), "{text}");
        for line in text.lines() {
            assert!(!line.trim_start().starts_with("FORGED"), "{text}");
        }
        assert!(
            !text.contains(['\x1b', '\x07', '\u{9b}', '\u{202e}', '\u{2028}']),
            "{text:?}"
        );
    }
}
