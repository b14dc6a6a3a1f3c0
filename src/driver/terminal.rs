//! The person at the terminal, as lines of input: approvals and an MCP server's questions are
//! read from it. The input is read on a thread of its own, so a person who never answers holds
//! up neither Ctrl-C, nor the loop's deadline, nor the exit.

use std::io::{BufRead, Read};

use tokio::sync::{mpsc, Mutex, MutexGuard};

/// Lines typed so far and to come; `None` from [`Conversation::line`] once the input has ended.
pub struct Terminal {
    lines: Mutex<mpsc::Receiver<String>>,
}

/// The terminal held by one exchange (a question and its follow-ups), so two never interleave.
pub struct Conversation<'a>(MutexGuard<'a, mpsc::Receiver<String>>);

impl Conversation<'_> {
    /// The next line typed; `None` once the input has ended, when the prompt that asked for it
    /// gets its line ended, so what is printed next starts a line of its own.
    pub async fn line(&mut self) -> Option<String> {
        let line = self.0.recv().await;
        if line.is_none() {
            eprintln!();
        }
        line
    }
}

/// The longest line kept: a longer one (an endless stream with no newline) is read past and
/// reads as an empty line, so it can hold neither memory nor an answer.
const MAX_LINE_BYTES: u64 = 64 * 1024;

/// The next line without its line ending; `None` at the end of the input or on an error.
fn bounded_line(input: &mut impl BufRead) -> Option<String> {
    let mut line = Vec::new();
    let read = input
        .by_ref()
        .take(MAX_LINE_BYTES + 1)
        .read_until(b'\n', &mut line)
        .ok()?;
    if read == 0 {
        return None;
    }
    if !line.ends_with(b"\n") && line.len() as u64 > MAX_LINE_BYTES {
        skip_past_newline(input);
        line.clear();
    }
    while line.last().is_some_and(|b| matches!(b, b'\n' | b'\r')) {
        line.pop();
    }
    Some(String::from_utf8_lossy(&line).into_owned())
}

fn skip_past_newline(input: &mut impl BufRead) {
    while let Ok(buffer) = input.fill_buf() {
        if buffer.is_empty() {
            return;
        }
        match buffer.iter().position(|&b| b == b'\n') {
            Some(at) => return input.consume(at + 1),
            None => {
                let all = buffer.len();
                input.consume(all);
            }
        }
    }
}

/// Text from elsewhere (a server, a model, a browser) as it may be shown on a terminal: control
/// characters but the line break written as escapes, so none can move the cursor, clear the
/// screen, retitle the window or write the clipboard; and the invisible characters that turn
/// text around or hide it (bidirectional overrides, zero-width characters, Unicode's own line
/// and paragraph separators), so what is shown reads as what was sent.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if hidden(c) {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// JSON text as it may be shown on a terminal: [`printable`]'s characters written as JSON's
/// `\uXXXX` escapes (serde_json escapes only those below U+0020), so it reads back as the same
/// value and shows what it holds.
pub fn printable_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if hidden(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A character not shown as what it is: a control character but the line break, or an
/// invisible one.
fn hidden(c: char) -> bool {
    (c.is_control() && c != '\n') || invisible(c)
}

/// A character that changes how the text around it is shown without showing itself.
fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{61c}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{feff}'
            | '\u{e0000}'..='\u{e007f}'
    )
}

impl Terminal {
    pub fn stdin() -> Self {
        Self::reading(std::io::BufReader::new(std::io::stdin()))
    }

    pub fn reading(mut input: impl BufRead + Send + 'static) -> Self {
        let (sender, lines) = mpsc::channel(16);
        let spawned = std::thread::Builder::new()
            .name("reactstep-terminal".into())
            .spawn(move || {
                while let Some(line) = bounded_line(&mut input) {
                    if sender.blocking_send(line).is_err() {
                        break;
                    }
                }
            });
        if let Err(e) = spawned {
            // The sender went with the closure: the input reads as ended.
            tracing::warn!("the terminal cannot be read: {e}");
        }
        Self {
            lines: Mutex::new(lines),
        }
    }

    pub async fn conversation(&self) -> Conversation<'_> {
        Conversation(self.lines.lock().await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_endless_line_is_read_past_and_the_next_one_is_kept() {
        let mut typed = vec![b'x'; 200_000];
        typed.extend_from_slice(b"\r\na\r\n");
        let terminal = Terminal::reading(std::io::Cursor::new(typed));
        let mut input = terminal.conversation().await;
        assert_eq!(input.line().await.as_deref(), Some(""));
        assert_eq!(input.line().await.as_deref(), Some("a"));
        assert_eq!(input.line().await, None);
    }

    #[test]
    fn json_shows_what_serde_leaves_as_it_is_and_reads_back_the_same() {
        let text = "a\u{9b}2J\u{9d}52;c;x\u{9c}\u{202e}b\u{e0041}\u{7f}\x1b\n";
        let json =
            serde_json::to_string_pretty(&serde_json::json!({"answer": text})).unwrap_or_default();
        let shown = printable_json(&json);
        assert!(
            shown
                .chars()
                .all(|c| c == '\n' || !(c.is_control() || invisible(c))),
            "{shown}"
        );
        assert!(
            shown.contains("\\u009b") && shown.contains("\\udb40\\udc41"),
            "{shown}"
        );
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap_or_default();
        assert_eq!(back["answer"], text);
    }

    #[test]
    fn control_characters_are_shown_as_escapes() {
        assert_eq!(
            printable("ok\x1b[2J\x07\nnext\r"),
            "ok\\u{1b}[2J\\u{7}\nnext\\r"
        );
        // Text turned around or hidden is shown as what it is.
        assert_eq!(
            printable("a\u{202e}txt.exe\u{2066}b\u{200b}c\u{2028}d\u{61c}e\u{e0041}"),
            "a\\u{202e}txt.exe\\u{2066}b\\u{200b}c\\u{2028}d\\u{61c}e\\u{e0041}"
        );
    }
}
