//! Inside `<think>…</think>` as the text streams in: everything up to the closing tag is
//! thought, except a line that begins a step, which is held in case the block never closes.

use super::{markup, work, LiveDelta, LiveParser, Section, HELD_LOOKED_AT_EACH_PIECE, THINK_OPEN};

const THINK_CLOSE: [&str; 2] = ["</think>", "</thinking>"];
/// What both closing tags start with.
const THINK_CLOSE_STEM: &str = "</think";

impl LiveParser {
    /// Before anything but plain text, a closing think tag no `<think>` opened (the chat
    /// template opened it in the prompt): what came before it was thinking, as the whole
    /// output's reading takes it (`split_think`), and what follows it begins a line, where a
    /// tag may stand. True when one was read (up to `text`'s end, the current stretch).
    pub(super) fn unopened_think_close(&mut self, text: &str) -> bool {
        if self.section != Section::Prelude || self.left_the_prelude {
            return false;
        }
        let opens = |text: &str| THINK_OPEN.iter().any(|open| text.contains(open));
        let Some((at, len)) = think_close(text) else {
            self.think_in_prelude |= opens(text);
            return false;
        };
        if self.think_in_prelude || opens(&text[..at]) || markup::opener_at(&text[..at]).is_some() {
            // It closes a block opened after other text, or call markup before it is the step.
            self.think_in_prelude = true;
            return false;
        }
        self.consume(at + len);
        self.left_the_prelude = true;
        self.prelude_text = false;
        self.line_read = false;
        true
    }

    /// In the prelude, the end of the current stretch that may still become such a tag, or an
    /// opening one (which makes a later closing tag its own).
    pub(super) fn unopened_close_prefix(&self, text: &str) -> usize {
        if self.section != Section::Prelude || self.left_the_prelude || self.think_in_prelude {
            return 0;
        }
        let open = super::ending::held_prefix_len(text, THINK_OPEN.iter().copied());
        close_prefix_len(text).max(open)
    }

    /// Inside `<think>`: everything up to the closing tag is thought. But a line there that
    /// begins a step (a tag, tool-call markup) is held, with all after it: should the block
    /// never close, the whole output's reading takes that step for the output (`split_think`),
    /// and none of it is thought.
    pub(super) fn think(&mut self, out: &mut Vec<LiveDelta>, end: bool) -> bool {
        if self.drafted.is_some() {
            return self.think_drafted(out, end);
        }
        // A held line start is looked at again only once it has doubled, as in `line_start`.
        let len = self.rest().len();
        if !end && len > HELD_LOOKED_AT_EACH_PIECE && len < self.held.saturating_mul(2) {
            return false;
        }
        if let Some((at, close)) = think_close(self.rest()) {
            let text: String = self.rest()[..at].to_string();
            self.send(&text, out);
            self.consume(at + close);
            self.enter(Section::Prelude);
            return true;
        }
        let rest = self.rest();
        // Hold back a tail that may be the start of the closing tag.
        let held = if end { 0 } else { close_prefix_len(rest) };
        let (len, hold) = self.think_lines(rest.len() - held, end);
        self.held = match hold {
            Hold::Undecided => self.rest().len() - len,
            _ => 0,
        };
        let text: String = self.rest()[..len].to_string();
        self.think_line_start = match text.is_empty() {
            true => self.think_line_start,
            false => text.ends_with('\n'),
        };
        self.send(&text, out);
        self.consume(len);
        if hold == Hold::Step {
            self.drafted = Some(self.pos);
            return true;
        }
        false
    }

    /// How much of `rest()[..len]` is thought to send: up to a line that begins a step with a
    /// tag, or the markup that begins one ([`Hold::Step`]), or what still may ([`Hold::Undecided`]).
    fn think_lines(&self, len: usize, end: bool) -> (usize, Hold) {
        let text = &self.rest()[..len];
        let (mut at, mut line_start) = (0, self.think_line_start);
        loop {
            let next = text[at..].find('\n').map(|i| at + i + 1);
            let line = &text[at..next.unwrap_or(len)];
            work::add(line.len() + 16);
            if line_start && self.names.at(line).is_some() {
                return (at, Hold::Step);
            }
            if let Some(markup) = markup::opener_at(line) {
                return (at + markup, Hold::Step);
            }
            if next.is_none() && !end {
                if line_start && self.names.may_become_tag(line) {
                    return (at, Hold::Undecided);
                }
                let opening = markup::opener_prefix_len(line);
                if opening > 0 {
                    return (at + line.len() - opening, Hold::Undecided);
                }
            }
            match next {
                Some(n) if n < len || !end => (at, line_start) = (n, true),
                _ => return (len, Hold::None),
            }
        }
    }

    /// Inside `<think>`, from a line that begins a step: if the block closes, all of it was
    /// thought; if the output ends first, the step drafted there is read as the output, unless
    /// it turns out to hold none.
    fn think_drafted(&mut self, out: &mut Vec<LiveDelta>, end: bool) -> bool {
        let mut from = self.drafted.unwrap_or(self.pos).max(self.pos);
        while !self.buf.is_char_boundary(from) {
            from -= 1;
        }
        let close = think_close(&self.buf[from..]);
        if close.is_none() && !end {
            self.drafted = Some(self.buf.len() - close_prefix_len(&self.buf[from..]));
            return false;
        }
        self.drafted = None;
        let (thought, skip) = match close {
            Some((at, close)) => (from - self.pos + at, close),
            None if super::super::drafts_a_step(self.rest(), &self.tags) => {
                self.enter(Section::Prelude);
                return true;
            }
            None => (self.rest().len(), 0),
        };
        let text: String = self.rest()[..thought].to_string();
        self.send(&text, out);
        self.consume(thought + skip);
        self.enter(Section::Prelude);
        true
    }
}

/// What a line inside `<think>` holds back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    None,
    /// The line begins a step.
    Step,
    /// The line, still being written, may yet begin one.
    Undecided,
}

/// The longest end of `text` that may be the start of a closing think tag.
pub(super) fn close_prefix_len(text: &str) -> usize {
    (1..=text.len().min(11))
        .rev()
        .filter(|&n| text.is_char_boundary(text.len() - n))
        .find(|&n| {
            let tail = &text[text.len() - n..];
            THINK_CLOSE.iter().any(|c| c.starts_with(tail))
        })
        .unwrap_or(0)
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
