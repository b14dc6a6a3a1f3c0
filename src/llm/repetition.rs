//! A reply that has gone degenerate: a small model that writes the same line over and over would
//! otherwise go on until the output cap or the step's deadline (ten minutes, seen on a local 1.5B
//! model). A streamed run of identical lines is cut short as an error instead; a reply that came
//! in one piece is held to the same rule, so the same output is the same outcome on either
//! endpoint.

use super::{LlmError, Provider};

/// Identical lines in a row that end a stream: no answer or call needs this many.
pub const MAX_REPEATED_LINES: u32 = 32;

/// Lines shorter than this (trimmed) are not counted: `}`, `---` and blank lines repeat in real
/// output.
const MIN_LINE_CHARS: usize = 8;

/// Watches the text of a stream, line by line, as it grows.
#[derive(Debug, Default)]
pub struct LineRepeats {
    /// Where the first line not yet looked at begins.
    checked: usize,
    /// How much of the text was searched for a line break: each byte is searched once, or a
    /// line that never ends costs its length with every piece.
    searched: usize,
    /// The last counted line's hash, and how many times in a row it came.
    last: Option<(u64, u32)>,
}

impl LineRepeats {
    /// Looks at the lines `text` completed since the last call; the run's length when it
    /// reaches [`MAX_REPEATED_LINES`].
    pub fn check(&mut self, text: &str) -> Option<u32> {
        let fresh = text.get(self.searched..)?;
        let ended = fresh.rfind('\n').map(|i| self.searched + i);
        self.searched = text.len();
        let rest = text.get(self.checked..)?;
        let done = ended? - self.checked;
        for line in rest[..done].split('\n') {
            let line = line.trim();
            if line.chars().count() < MIN_LINE_CHARS {
                continue;
            }
            let hash = hash(line);
            let run = match self.last {
                Some((last, run)) if last == hash => run + 1,
                _ => 1,
            };
            self.last = Some((hash, run));
            if run >= MAX_REPEATED_LINES {
                return Some(run);
            }
        }
        self.checked += done + 1;
        None
    }
}

/// The run of one line in a whole reply, read as a stream would have read it: only lines that
/// end with a line break count.
pub fn run_in(text: &str) -> Option<u32> {
    // Most replies have fewer lines than a run needs: counted, not hashed.
    let breaks = memchr::memchr_iter(b'\n', text.as_bytes()).count();
    if breaks < MAX_REPEATED_LINES as usize {
        return None;
    }
    LineRepeats::default().check(text)
}

/// The error a degenerate reply ends the call with.
pub fn degenerate(provider: Provider, run: u32) -> LlmError {
    LlmError::BadResponse {
        provider,
        message: format!("the model wrote the same line {run} times in a row (degenerate output); the reply was cut short"),
    }
}

fn hash(line: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    line.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_one_line_is_found_however_the_text_arrives() {
        let line = "{\"name\": \"read_file\", \"arguments\": {}}\n";
        let text = line.repeat(40);
        for piece in [1, 7, line.len(), 1000] {
            let mut watch = LineRepeats::default();
            let mut found = None;
            let mut end = 0;
            while found.is_none() && end < text.len() {
                end = (end + piece).min(text.len());
                found = watch.check(&text[..end]);
            }
            assert_eq!(found, Some(MAX_REPEATED_LINES), "pieces of {piece}");
        }
    }

    #[test]
    fn a_whole_reply_is_read_as_a_stream_is() {
        let line = "the same long line\n";
        assert_eq!(run_in(&line.repeat(32)), Some(MAX_REPEATED_LINES));
        // The last line unended, as a stream would not count it yet.
        assert_eq!(run_in(line.repeat(32).trim_end()), None);
        assert_eq!(run_in(&line.repeat(31)), None);
    }

    #[test]
    fn real_output_with_short_or_varied_repeats_passes() {
        let mut text = String::from("Thought: the table\n");
        for i in 0..100 {
            text.push_str("}\n\n---\n");
            text.push_str(&format!("| row {i} | value |\n"));
        }
        let mut watch = LineRepeats::default();
        assert_eq!(watch.check(&text), None);
        // A run just short of the bound, broken, then again: no run reaches it.
        let line = "the same long line\n";
        let text = [
            line.repeat(31),
            "another line here\n".into(),
            line.repeat(31),
        ]
        .concat();
        assert_eq!(LineRepeats::default().check(&text), None);
    }
}
