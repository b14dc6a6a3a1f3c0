//! The parser as text streams in: it knows, chunk by chunk, whether the model is writing its
//! thought, an action or the final answer, and hands out the thought and the answer as they
//! form, without their tags and never a byte of the action. A line start is held back only
//! while it may still become a tag (`Acti…`), and a `</think>` split across chunks is held
//! until it is whole. Text before the first tag is not streamed: it may turn out to be the
//! thought or a tagless answer, which only the whole output tells.

use super::tags::{Tag, TagNames, Tags};
use super::work;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveDelta {
    Thought(String),
    Answer(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    /// Before any tag.
    Prelude,
    /// Inside `<think>…</think>`.
    Think,
    Thought,
    Action,
    Answer,
    /// After an invented observation: nothing more counts.
    Done,
}

const THINK_OPEN: [&str; 2] = ["<think>", "<thinking>"];
const THINK_CLOSE: [&str; 2] = ["</think>", "</thinking>"];
/// What both closing tags start with.
const THINK_CLOSE_STEM: &str = "</think";

/// A held line start this long or shorter is looked at again with every piece: tags are short.
const HELD_LOOKED_AT_EACH_PIECE: usize = 64;

pub struct LiveParser {
    names: TagNames,
    section: Section,
    /// Text received; what is before `pos` has been decided.
    buf: String,
    pos: usize,
    /// The first line break at or after `pos` (`Some`), or `None` when there is none before
    /// `searched`: the search for it goes on from where it stopped instead of from `pos`.
    newline: Option<usize>,
    searched: usize,
    /// How long the held line start was when last looked at (0 when none is held).
    held: usize,
    /// Whether the start of the current line has been read (as a tag or as text).
    line_read: bool,
    /// Line breaks and spaces inside a section, sent only when more of the section follows.
    breaks: String,
    /// Whether the current section has sent text yet (its leading spaces are skipped).
    started: bool,
}

impl LiveParser {
    pub fn new(tags: &Tags) -> Self {
        Self {
            names: TagNames::new(tags),
            section: Section::Prelude,
            buf: String::new(),
            pos: 0,
            newline: None,
            searched: 0,
            held: 0,
            line_read: false,
            breaks: String::new(),
            started: false,
        }
    }

    /// Reads the next piece of output; returns the deltas it completes.
    pub fn push(&mut self, text: &str) -> Vec<LiveDelta> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        while self.step(&mut out, false) {}
        self.compact();
        out
    }

    /// The output has ended: whatever was held is decided.
    pub fn finish(&mut self) -> Vec<LiveDelta> {
        let mut out = Vec::new();
        while self.step(&mut out, true) {}
        self.compact();
        out
    }

    /// Drops the decided text once per piece, not once per line: moving the rest of a large
    /// piece to the front after every line was quadratic in the piece.
    fn compact(&mut self) {
        if self.pos == 0 {
            return;
        }
        work::add(self.buf.len() - self.pos);
        self.buf.drain(..self.pos);
        self.newline = self.newline.map(|n| n - self.pos);
        self.searched -= self.pos;
        self.pos = 0;
    }

    fn rest(&self) -> &str {
        &self.buf[self.pos..]
    }

    /// Marks `bytes` more as decided.
    fn consume(&mut self, bytes: usize) {
        self.pos += bytes;
        if self.newline.is_some_and(|n| n < self.pos) {
            // Past the line break found: the next one is yet to be searched for.
            self.newline = None;
            self.searched = self.pos;
        }
        self.searched = self.searched.max(self.pos);
    }

    /// Where the current line ends, as an offset in `rest()`; each byte is searched once.
    fn line_end(&mut self) -> Option<usize> {
        if self.newline.is_none() {
            let from = self.searched.max(self.pos);
            self.newline = self.buf[from..].find('\n').map(|i| from + i);
            self.searched = self.newline.unwrap_or(self.buf.len());
            work::add(self.searched - from);
        }
        self.newline.map(|n| n - self.pos)
    }

    /// Decides one piece of the buffer; false when more text is needed.
    fn step(&mut self, out: &mut Vec<LiveDelta>, end: bool) -> bool {
        if self.pos == self.buf.len() || self.section == Section::Done {
            self.consume(self.buf.len() - self.pos);
            return false;
        }
        if self.section == Section::Think {
            return self.think(out, end);
        }
        if !self.line_read {
            return self.line_start(end);
        }
        let line_end = self.line_end();
        let text_end = line_end.unwrap_or(self.buf.len() - self.pos);
        let text: String = self.rest()[..text_end].to_string();
        work::add(text.len());
        self.send(&text, out);
        match line_end {
            Some(i) => {
                self.consume(i + 1);
                if self.started {
                    self.breaks.push('\n');
                }
                self.line_read = false;
                true
            }
            None => {
                self.consume(text_end);
                false
            }
        }
    }

    /// At a line start: a tag, `<think>`, or text of the current section. A line start held
    /// back because it may still become a tag is looked at again only once it has doubled
    /// (past a tag's length), so a long one does not cost its length with every piece; waiting
    /// longer is the same as the piece arriving later, and the output does not depend on that.
    fn line_start(&mut self, end: bool) -> bool {
        let line_end = self.line_end();
        let len = line_end.unwrap_or(self.buf.len() - self.pos);
        let unchanged = len > HELD_LOOKED_AT_EACH_PIECE && len < self.held.saturating_mul(2);
        if line_end.is_none() && !end && unchanged {
            return false;
        }
        let hold = self.read_line_start(line_end.is_some() || end, len);
        self.held = if hold { len } else { 0 };
        !hold
    }

    /// [`Self::line_start`] for the line start `rest()[..len]`; true when it must be held.
    fn read_line_start(&mut self, whole: bool, len: usize) -> bool {
        let line = &self.buf[self.pos..self.pos + len];
        let trimmed = line.trim_start();
        // The tag words count their own; the `<think>` checks look at a few bytes past these.
        work::add(line.len() - trimmed.len() + 16);
        if self.section == Section::Prelude {
            if let Some(open) = THINK_OPEN.iter().find(|o| trimmed.starts_with(**o)) {
                let at = line.len() - trimmed.len() + open.len();
                self.consume(at);
                self.enter(Section::Think);
                return false;
            }
            let may_open = THINK_OPEN.iter().any(|o| o.starts_with(trimmed)) && !trimmed.is_empty();
            if may_open && !whole {
                return true;
            }
        }
        if let Some((tag, offset)) = self.names.at(line) {
            // `**Thought:` may still get its closing `**`.
            if offset == line.len() && !whole {
                return true;
            }
            self.consume(offset);
            self.enter(match tag {
                Tag::Thought => Section::Thought,
                Tag::Action | Tag::ActionInput => Section::Action,
                Tag::FinalAnswer => Section::Answer,
                Tag::Observation => Section::Done,
            });
            self.line_read = true;
            return false;
        }
        if !whole && self.names.may_become_tag(line) {
            return true;
        }
        self.line_read = true;
        false
    }

    /// Inside `<think>`: everything up to the closing tag is thought.
    fn think(&mut self, out: &mut Vec<LiveDelta>, end: bool) -> bool {
        if let Some((at, close)) = think_close(self.rest()) {
            let text: String = self.rest()[..at].to_string();
            self.send(&text, out);
            self.consume(at + close);
            self.enter(Section::Prelude);
            return true;
        }
        let rest = self.rest();
        // Hold back a tail that may be the start of the closing tag.
        let held = if end {
            0
        } else {
            (1..=rest.len().min(11))
                .rev()
                .filter(|&n| rest.is_char_boundary(rest.len() - n))
                .find(|&n| {
                    let tail = &rest[rest.len() - n..];
                    THINK_CLOSE.iter().any(|c| c.starts_with(tail))
                })
                .unwrap_or(0)
        };
        let text: String = rest[..rest.len() - held].to_string();
        self.send(&text, out);
        self.consume(text.len());
        false
    }

    fn enter(&mut self, section: Section) {
        self.section = section;
        self.breaks.clear();
        self.started = false;
        self.line_read = false;
        self.held = 0;
    }

    /// Sends text of the current section, with the line breaks held before it.
    fn send(&mut self, text: &str, out: &mut Vec<LiveDelta>) {
        let thought = match self.section {
            Section::Thought | Section::Think => true,
            Section::Answer => false,
            _ => return,
        };
        let text = if self.started {
            text
        } else {
            text.trim_start()
        };
        // Trailing spaces are held like line breaks: only more text shows they are inside.
        let body = text.trim_end();
        if body.is_empty() {
            if self.started {
                self.breaks.push_str(text);
            }
            return;
        }
        let mut delta = std::mem::take(&mut self.breaks);
        delta.push_str(body);
        self.breaks.push_str(&text[body.len()..]);
        self.started = true;
        match (out.last_mut(), thought) {
            (Some(LiveDelta::Thought(last)), true) | (Some(LiveDelta::Answer(last)), false) => {
                last.push_str(&delta)
            }
            _ if thought => out.push(LiveDelta::Thought(delta)),
            _ => out.push(LiveDelta::Answer(delta)),
        }
    }
}

/// The first closing think tag in `text`: where it starts and its length. One search for
/// what both tags start with: searching for each tag apart looked through the rest of a large
/// piece for the one that is not there, once per `<think>` block in it.
fn think_close(text: &str) -> Option<(usize, usize)> {
    let mut from = 0;
    while let Some(i) = text[from..].find(THINK_CLOSE_STEM) {
        let at = from + i;
        work::add(i + THINK_CLOSE_STEM.len());
        if let Some(close) = THINK_CLOSE.iter().find(|c| text[at..].starts_with(**c)) {
            return Some((at, close.len()));
        }
        from = at + THINK_CLOSE_STEM.len();
    }
    work::add(text.len() - from);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The deltas for `text` fed in pieces of `size` bytes (at character boundaries), joined.
    fn streamed(text: &str, size: usize) -> (String, String) {
        let mut parser = LiveParser::new(&Tags::default());
        let mut deltas = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let mut cut = size.min(rest.len());
            while !rest.is_char_boundary(cut) {
                cut += 1;
            }
            deltas.extend(parser.push(&rest[..cut]));
            rest = &rest[cut..];
        }
        deltas.extend(parser.finish());
        let (mut thought, mut answer) = (String::new(), String::new());
        for d in deltas {
            match d {
                LiveDelta::Thought(t) => thought.push_str(&t),
                LiveDelta::Answer(a) => answer.push_str(&a),
            }
        }
        (thought, answer)
    }

    fn every_split(text: &str) -> (String, String) {
        let whole = streamed(text, text.len().max(1));
        for size in 1..=12 {
            assert_eq!(streamed(text, size), whole, "pieces of {size} bytes");
        }
        whole
    }

    #[test]
    fn the_thought_streams_without_its_tag_and_never_the_action() {
        let (thought, answer) = every_split(
            "Thought: The login handler is in auth.js.\nIt checks the token.\nAction: read_file(path=\"src/auth.js\")",
        );
        assert_eq!(
            thought,
            "The login handler is in auth.js.\nIt checks the token."
        );
        assert_eq!(answer, "");
    }

    #[test]
    fn the_final_answer_streams_as_answer() {
        let (thought, answer) = every_split(
            "**Thought:** Done.\n\n**Final Answer:** Use `login()`.\n\nIt lives in auth.js.\n",
        );
        assert_eq!(thought, "Done.");
        assert_eq!(answer, "Use `login()`.\n\nIt lives in auth.js.");
    }

    #[test]
    fn think_blocks_stream_as_thought_even_when_their_tag_is_split() {
        let (thought, _) = every_split("<think>The user wants ü and 😀.</think>\nAction: x()");
        assert_eq!(thought, "The user wants ü and 😀.");
    }

    #[test]
    fn an_invented_observation_ends_the_stream() {
        let (thought, answer) =
            every_split("Thought: a\nAction: f()\nObservation: fake\nThought: b\nFinal Answer: c");
        assert_eq!((thought.as_str(), answer.as_str()), ("a", ""));
    }

    #[test]
    fn untagged_text_is_not_streamed() {
        assert_eq!(
            every_split("Just an answer without tags."),
            (String::new(), String::new())
        );
    }

    #[test]
    fn a_line_that_only_starts_like_a_tag_is_thought() {
        let (thought, _) = every_split("Thought: first\nActually, wait.\nAction: f()");
        assert_eq!(thought, "first\nActually, wait.");
    }

    #[test]
    fn client_tags_are_followed() {
        let tags = Tags {
            thought: "Reasoning".into(),
            action: "Tool".into(),
            observation: "Result".into(),
            final_answer: "Reply".into(),
        };
        let mut parser = LiveParser::new(&tags);
        let mut deltas = parser.push("Reasoning: r\nReply: y");
        deltas.extend(parser.finish());
        assert_eq!(
            deltas,
            [
                LiveDelta::Thought("r".into()),
                LiveDelta::Answer("y".into())
            ]
        );
    }
}
