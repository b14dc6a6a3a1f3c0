//! The parser as text streams in: it knows, chunk by chunk, whether the model is writing its
//! thought, an action or the final answer, and hands out the thought and the answer as they
//! form, without their tags and never a byte of the action. A line start is held back only
//! while it may still become a tag (`Acti…`), and a `</think>` split across chunks is held
//! until it is whole. Text before the first tag is not streamed: it may turn out to be the
//! thought or a tagless answer, which only the whole output tells.

mod think;

use super::tags::{Tag, TagNames, Tags};
use super::{ending, markup, pythonic, work};

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
    /// A second thought: the whole output's thought is the first, so this one is not sent.
    LaterThought,
    Action,
    Answer,
    /// After an action, an answer's end, an invented observation or a block (JSON, a call list,
    /// tool-call markup) that may be the action: nothing more is sent.
    Done,
}

const THINK_OPEN: [&str; 2] = ["<think>", "<thinking>"];
/// What a harmony output opens with.
const HARMONY_OPEN: [&str; 2] = ["<|channel|>", "<|start|>"];
/// How much of `text` is a name that a bare call (`read_file(…)`, in backticks or not) may open
/// with, and whether a `(` follows it: an answer that is a call is read from the whole output,
/// so none of it is streamed as an answer.
fn bare_call_opening(text: &str) -> (usize, bool) {
    let lead = usize::from(text.starts_with('`'));
    let name = super::answer_call::call_name_len(&text[lead..]);
    if name == 0 {
        return (0, false);
    }
    (lead + name, text[lead + name..].starts_with('('))
}

/// What some chat templates wrap a call in (`<tools>{…}</tools>`).
const TOOLS_OPEN: &str = "<tools>";

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
    /// The same for the opening of an answer held while it may still be a call.
    answer_held: usize,
    /// Whether the start of the current line has been read (as a tag or as text).
    line_read: bool,
    /// Line breaks and spaces inside a section, sent only when more of the section follows.
    breaks: String,
    /// Whether the current section has sent text yet (its leading spaces are skipped).
    started: bool,
    /// Whether the current line is the start of the observation tag, sent only if more follows.
    remnant: bool,
    observation: String,
    /// Whether any thought has been sent (a second section of it is set apart by a blank line).
    thought_sent: bool,
    /// Fence marks (```) seen on the current line, and whether a fence is open.
    fence_marks: usize,
    in_fence: bool,
    /// Inside `<think>`: what is left at `pos` begins at a line start.
    think_line_start: bool,
    /// Text other than thinking came before any tag: a `<think>` after it opens no block.
    prelude_text: bool,
    /// A section other than the prelude was entered once (a closed `<think>` goes back to it).
    left_the_prelude: bool,
    /// The prelude's text held a `<think>`: a closing tag after it closes that, not one the
    /// chat template opened (`unopened_think_close`).
    think_in_prelude: bool,
    /// Inside `<think>`: a line from `pos` on begins a step (see [`Self::think`]), and where the
    /// search for the closing tag goes on.
    drafted: Option<usize>,
    tags: Tags,
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
            answer_held: 0,
            line_read: false,
            breaks: String::new(),
            started: false,
            remnant: false,
            observation: tags.observation.clone(),
            thought_sent: false,
            fence_marks: 0,
            in_fence: false,
            think_line_start: true,
            prelude_text: false,
            left_the_prelude: false,
            think_in_prelude: false,
            drafted: None,
            tags: tags.clone(),
        }
    }

    /// Whether the output so far is more than plain text: a tag, a `<think>` block, a block
    /// that may be a call, a turn the model made up (plain text before any of them is never
    /// sent, as only the whole output tells what it is).
    pub fn past_plain_text(&self) -> bool {
        self.left_the_prelude
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
        self.drafted = self.drafted.map(|d| d.saturating_sub(self.pos));
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
        let mut text_end = line_end.unwrap_or(self.buf.len() - self.pos);
        if line_end.is_none() && !end {
            text_end -= self.tail_to_hold(text_end);
        }
        let whole = line_end.is_some() || end;
        if self.answer_still_held(text_end, whole) {
            return false;
        }
        let text: String = self.rest()[..text_end].to_string();
        work::add(text.len());
        if self.unopened_think_close(&text) {
            return true;
        }
        if self.answer_opens_with_tag(&text, whole) {
            return false;
        }
        if let Some(at) = self.invented_turn_at(&text) {
            // The model went on past the end of its turn: none of that is this output.
            self.send(&text[..at], out);
            self.breaks.clear();
            self.enter(Section::Done);
            return true;
        }
        if let Some(at) = self
            .before_decision()
            .then(|| markup::opener_at(&text))
            .flatten()
        {
            // Tool-call markup after the thought's words on the same line: the action.
            self.send(&text[..at], out);
            self.enter(Section::Done);
            return true;
        }
        if self.tracks_fences() {
            self.fence_marks += text.matches("```").count();
        }
        if self.remnant {
            self.breaks.push_str(&text);
        } else {
            self.send(&text, out);
        }
        match line_end {
            Some(i) => {
                self.consume(i + 1);
                if self.fence_marks % 2 == 1 {
                    self.in_fence = !self.in_fence;
                }
                self.fence_marks = 0;
                if self.started {
                    self.breaks.push('\n');
                }
                self.line_read = false;
                self.remnant = false;
                true
            }
            None => {
                self.consume(text_end);
                false
            }
        }
    }

    /// Where in `text` (the current line's next stretch) a turn the model invented begins: at an
    /// end token followed by a turn start, or at a turn start when the text held back ends in
    /// an end token. A turn start split across pieces is held by `tail_to_hold`.
    fn invented_turn_at(&self, text: &str) -> Option<usize> {
        let held_end = ending::END_TOKENS
            .iter()
            .any(|t| self.breaks.trim_end().ends_with(t));
        if held_end && ending::starts_a_turn(text.trim_start()) {
            return Some(0);
        }
        ending::invented_turn_at(text)
    }

    /// Whether no action or answer has begun: a block here may still be the decision.
    fn before_decision(&self) -> bool {
        matches!(
            self.section,
            Section::Prelude | Section::Thought | Section::LaterThought
        )
    }

    /// How many bytes at the end of `rest()[..len]`, a line still being written, may be the
    /// start of an end token or (in a thought) of tool-call markup, and so wait for more.
    fn tail_to_hold(&self, len: usize) -> usize {
        let text = &self.rest()[..len];
        let token = ending::held_prefix_len(text, ending::END_TOKENS.iter().copied());
        let markup = if self.before_decision() {
            markup::opener_prefix_len(text)
        } else {
            0
        };
        let turn = ending::turn_start_prefix_len(text);
        // Backticks that may be the start of a fence mark, counted once whole.
        let ticks = text.len() - text.trim_end_matches('`').len();
        let close = self.unopened_close_prefix(text);
        work::add(64);
        token.max(markup).max(turn).max(ticks.min(64)).max(close)
    }

    /// Whether fences are followed: once a thought, an action or an answer has begun (before
    /// any tag, a fence may wrap the whole step).
    fn tracks_fences(&self) -> bool {
        !matches!(self.section, Section::Prelude | Section::Think)
    }

    /// An answer whose text opens with a tag (`Final Answer: Thought: …`) is no answer: the
    /// whole output's reading refuses it, so none of it is sent. Nor is an answer that opens
    /// like a call written as JSON (`{`, `<tools>`): in native mode it may be read as the call,
    /// and the `step` event carries it when it is an answer. True while that is unknown.
    fn answer_opens_with_tag(&mut self, text: &str, whole: bool) -> bool {
        if self.section != Section::Answer || self.started {
            return false;
        }
        let held = self.answer_opening_held(text, whole);
        self.answer_held = if held { text.len() } else { 0 };
        held
    }

    /// Whether the answer's opening, held when last looked at, is still held without a look:
    /// as with a line start, it is looked at again only once it has doubled, so an opening that
    /// stays undecided (a run of letters that may be a tool's name) does not cost its length
    /// with every piece (a 400 KB line in 4-byte pieces took 26 s).
    fn answer_still_held(&self, len: usize, whole: bool) -> bool {
        self.section == Section::Answer
            && !self.started
            && !whole
            && len > HELD_LOOKED_AT_EACH_PIECE
            && len < self.answer_held.saturating_mul(2)
    }

    /// [`Self::answer_opens_with_tag`] for an answer that has sent nothing yet.
    fn answer_opening_held(&mut self, text: &str, whole: bool) -> bool {
        let text = text.trim_start();
        if text.is_empty() {
            return false;
        }
        let json_call = text.starts_with('{') || text.starts_with(TOOLS_OPEN);
        let (name_len, bare_call) = bare_call_opening(text);
        let tag = self.names.at(text);
        // A tag that reaches the end of a line still being written (a heading: `## Final
        // Answer`) may be none once the line goes on (`## Final Answer**Action:**`).
        if !whole && tag.is_some_and(|(_, offset)| offset == text.len()) {
            return true;
        }
        if json_call || bare_call || tag.is_some() || markup::opener_at(text) == Some(0) {
            self.enter(Section::Done);
            return false;
        }
        let may_open = markup::opener_prefix_len(text) == text.len()
            || TOOLS_OPEN.starts_with(text)
            || name_len == text.len();
        !whole && (self.names.may_become_tag(text) || may_open)
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
        let indent = len - self.buf[self.pos..self.pos + len].trim_start().len();
        // The tag words count their own; the `<think>` checks look at a few bytes past these.
        work::add(indent + 16);
        if self.section == Section::Prelude {
            if let Some(hold) = self.prelude_opening(indent, len, whole) {
                return hold;
            }
        }
        let line = &self.buf[self.pos..self.pos + len];
        let trimmed = &line[indent..];
        if self.in_fence && self.tracks_fences() {
            // A tag inside a code fence is the fence's content.
            self.line_read = true;
            return false;
        }
        if matches!(self.section, Section::Thought | Section::LaterThought) {
            if trimmed.starts_with("```") {
                // Whatever the thought quotes in a fence is not sent: the whole output's
                // reading may take it for part of a step, or leave it out of the thought.
                self.enter(Section::LaterThought);
                self.line_read = true;
                return false;
            }
            if !whole && !trimmed.is_empty() && "```".starts_with(trimmed) {
                return true;
            }
        }
        if self.section == Section::Answer {
            // A turn the model invents after its answer (`Human: thanks!`) ends it.
            const TURNS: [&str; 2] = ["Human:", "User:"];
            if TURNS.iter().any(|t| line.starts_with(t)) {
                self.enter(Section::Done);
                return false;
            }
            if !whole && !line.is_empty() && TURNS.iter().any(|t| t.starts_with(line)) {
                return true;
            }
        }
        let tag = if self.section == Section::Answer {
            self.names.at_in_answer(line)
        } else {
            self.names.at(line)
        };
        if let Some((tag, offset)) = tag {
            // `**Thought:` may still get its closing `**`.
            if offset == line.len() && !whole {
                return true;
            }
            let heading = tag == Tag::FinalAnswer && !line[..offset].contains([':', '：']);
            self.take_tag(tag, offset, heading);
            return false;
        }
        if self.before_decision() {
            if is_block(trimmed) {
                self.enter(Section::Done);
                return false;
            }
            if !whole && may_become_block(trimmed) {
                return true;
            }
        }
        if whole && ending::is_observation_remnant(line, &self.observation) {
            // Sent only if more of the section follows: a split stop sequence leaves it last.
            self.remnant = true;
        }
        if !whole && self.names.may_become_tag(line) {
            return true;
        }
        self.prelude_text |= self.section == Section::Prelude && !trimmed.is_empty();
        self.line_read = true;
        false
    }

    /// Before any tag, a line start that opens `<think>` or harmony messages: `Some(hold)` when
    /// it does or still may, `None` when it is read as any other line.
    fn prelude_opening(&mut self, indent: usize, len: usize, whole: bool) -> Option<bool> {
        let trimmed = &self.rest()[indent..len];
        // Thinking comes first: a block after other text is text (`split_think`).
        let thinking = THINK_OPEN.iter().find(|o| trimmed.starts_with(**o));
        if let Some(open) = thinking.filter(|_| !self.prelude_text) {
            let at = indent + open.len();
            self.consume(at);
            self.enter(Section::Think);
            self.think_line_start = true;
            return Some(false);
        }
        // Harmony messages are read from the whole output (`harmony.rs`): their final
        // channel may hold a ReAct step whose tags are not this stream's.
        if HARMONY_OPEN.iter().any(|o| trimmed.starts_with(o)) {
            self.enter(Section::Done);
            return Some(false);
        }
        let think_open = THINK_OPEN.iter().filter(|_| !self.prelude_text);
        let may_open = think_open
            .chain(&HARMONY_OPEN)
            .any(|o| o.starts_with(trimmed))
            && !trimmed.is_empty();
        (may_open && !whole).then_some(true)
    }

    /// Reads the tag of `offset` bytes at the line start. An answer under a heading (`## Final
    /// Answer`) is no answer if an action follows it: it is left to the whole output's reading.
    fn take_tag(&mut self, tag: Tag, offset: usize, heading: bool) {
        self.consume(offset);
        let section = match heading {
            true => Section::Done,
            false => self.after_tag(tag),
        };
        self.enter(section);
        self.line_read = true;
    }

    /// The section a tag starts: the whole output's reading takes the first thought, the first
    /// action or answer, and nothing after an action or after an answer's end.
    fn after_tag(&self, tag: Tag) -> Section {
        match (self.section, tag) {
            (_, Tag::Observation) | (Section::Action | Section::Answer | Section::Done, _) => {
                Section::Done
            }
            (_, Tag::Action | Tag::ActionInput) => Section::Action,
            (_, Tag::FinalAnswer) => Section::Answer,
            (Section::Thought | Section::LaterThought, Tag::Thought) => Section::LaterThought,
            (_, Tag::Thought) => Section::Thought,
        }
    }

    fn enter(&mut self, section: Section) {
        self.section = section;
        self.left_the_prelude |= section != Section::Prelude;
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
        let body = ending::strip_end_tokens(text);
        if body.is_empty() {
            if self.started {
                self.breaks.push_str(text);
            }
            return;
        }
        let mut delta = std::mem::take(&mut self.breaks);
        if !self.started && thought && self.thought_sent {
            // The whole output's thought joins the `<think>` text and the tagged one so.
            delta.insert_str(0, "\n\n");
        }
        self.thought_sent |= thought;
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

/// Whether a line opens a block the whole output's reading may take for the action: a JSON
/// object, a call list or tool-call markup.
fn is_block(line: &str) -> bool {
    line[super::json::stray_lead(line)..].starts_with('{')
        || pythonic::opens_a_list(line)
        || markup::opener_at(line) == Some(0)
}

/// Whether a line start, still being written, may yet open a block.
fn may_become_block(line: &str) -> bool {
    let list = line.strip_prefix('[').is_some_and(|rest| {
        rest.trim_start()
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
    });
    // A stray character that may still be followed by a JSON call's `{`.
    let stray = matches!(line, "`" | "\"" | "'" | ".");
    list || stray || markup::opener_prefix_len(line) == line.len() && !line.is_empty()
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
    fn an_answer_that_opens_like_a_heading_is_read_by_its_whole_line() {
        // `## Final Answer` alone is a tag; with more on its line it is the answer's text.
        let (_, answer) = every_split("x\nFinal Answer:## Final Answer**Action:**");
        assert_eq!(answer, "## Final Answer**Action:**");
        assert_eq!(
            every_split("x\nFinal Answer: ## Final Answer\n"),
            (String::new(), String::new())
        );
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

    /// A step drafted in a `<think>` block that never closes is the output's step (the whole
    /// reading's `split_think`): its action once streamed as thought. Closed, all of the block is
    /// thought, the drafted lines too; the streamed thought is the whole reading's either way.
    #[test]
    fn a_step_drafted_in_an_unclosed_think_block_is_not_thought() {
        for text in [
            "<think>\nI should read it.\nAction: read_file(path=\"a.rs\")",
            "<think>I should read it.\nAction: read_file(path=\"a.rs\")\n",
            "<think>Action: read_file(path=\"a.rs\")",
            "<think>\nI should read it. <tool_call>{\"name\": \"read_file\", \"arguments\": {}}</tool_call>",
            "<think>\nMaybe:\nAction: read_file(path=\"a.rs\")\nNo, the tests.\n</think>\nThought: Tests.\nAction: read_file(path=\"t.rs\")",
            "<think>\nThe plan.\nActually no tag here.\nThought 3 is later",
            "<think>\nThought about it.\nThoughtless line",
            "<think>\nI could write:\nThought: search the code\nAction: code_search(query=\"login\")",
            "<think>a</think>\n<think>b</think>\nThought: k\nAction: x()",
            "<think>\n\n</think>\n\n<think>\nAction: code_search(query=\"login\")\nno, not that.\n</think>\nThought: I know it.\nAction: x()",
            "<think>a1</think>\nsome text\n<think>b2</think>\nThought: k\nAction: x()",
        ] {
            let (thought, answer) = every_split(text);
            let whole = super::super::parse(text, &Tags::default()).map(|p| p.thought);
            assert_eq!(Some(thought.clone()), whole, "{text:?}");
            assert_eq!(answer, "", "{text:?}");
        }
    }

    /// A `</think>` no `<think>` opened (the chat template opened it): what follows it begins a
    /// line, as the whole reading has it. The answer after an action on its line once streamed
    /// while the step proposed the action.
    #[test]
    fn what_follows_an_unopened_think_close_begins_a_line() {
        for (text, told) in [
            (
                "</think>Action: read_file(path=\"b.rs\")\nFinal Answer: done",
                ("", ""),
            ),
            ("I should look.</think>Thought: x\nAction: y()", ("x", "")),
            ("hm\n</thinking>\n\nFinal Answer: 42", ("", "42")),
            // A block opened after text is text, and call markup before it is the step.
            (
                "plain words<think>inner</think>\nFinal Answer: z",
                ("", "z"),
            ),
            ("plain <think>\ninner</think>Final Answer: z", ("", "")),
            (
                "<tool_call>{}</tool_call></think>Final Answer: 42",
                ("", ""),
            ),
        ] {
            let streamed = every_split(text);
            assert_eq!((streamed.0.as_str(), streamed.1.as_str()), told, "{text:?}");
            let whole = super::super::parse(text, &Tags::default());
            if let Some(whole) = whole.filter(|_| !streamed.0.is_empty()) {
                assert!(
                    whole.thought.ends_with(&streamed.0),
                    "{text:?}: {}",
                    whole.thought
                );
            }
        }
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
    fn harmony_output_is_left_to_the_whole_reading() {
        for text in [
            "<|channel|>analysis<|message|>Explain.<|end|><|start|>assistant<|channel|>final<|message|>Write:\nThought: why\nAction: f()<|return|>",
            "<|start|>assistant<|channel|>final<|message|>Thought: t\nFinal Answer: 4<|return|>",
        ] {
            assert_eq!(every_split(text), (String::new(), String::new()), "{text}");
        }
    }

    #[test]
    fn markup_and_blocks_end_the_thought_wherever_they_start() {
        for text in [
            "Thought: I need the file.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>",
            "Thought: I need the file.<|tool_calls_section_begin|><|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{}<|tool_call_end|>",
            "Thought: I need the file.\n[read_file(path='a')]",
            "Thought: I need the file.\n{\"action\": \"read_file\", \"action_input\": \"a\"}\nFinal Answer: no",
            "Thought: I need the file. [TOOL_CALLS]read_file[ARGS]{\"path\": \"a\"}",
        ] {
            assert_eq!(every_split(text), ("I need the file.".to_string(), String::new()), "{text}");
        }
    }

    #[test]
    fn what_ends_an_output_is_never_streamed() {
        for tail in [
            "\nObs",
            "\nobserv",
            "<|im_end|>",
            "</s>",
            "\nObservation",
            "<|eot_id|>\n",
        ] {
            let (_, answer) = every_split(&format!("Thought: t\nFinal Answer: It is 4.{tail}"));
            assert_eq!(answer, "It is 4.", "{tail:?}");
        }
        let (_, answer) = every_split("Final Answer: a\nObs\nmore");
        assert_eq!(answer, "a\nObs\nmore");
    }

    #[test]
    fn only_what_the_whole_output_keeps_is_streamed() {
        // An invented answer after the action, a second thought, an answer that is a step.
        assert_eq!(
            every_split("Thought: a\nAction: f()\nFinal Answer: made up"),
            ("a".to_string(), String::new())
        );
        assert_eq!(
            every_split("Thought: a\nThought: b\nFinal Answer: c"),
            ("a".to_string(), "c".to_string())
        );
        assert_eq!(
            every_split("Thought: a\nFinal Answer: Thought: b\nAction: f()"),
            ("a".to_string(), String::new())
        );
    }

    #[test]
    fn an_answer_that_opens_like_a_call_is_held_for_the_step() {
        for answer in [
            "{\"name\": \"grep\", \"arguments\": {\"q\": \"x\"}}",
            "\n{{\"name\": \"grep\"}}",
            "<tools>{\"name\": \"grep\"}</tools>",
        ] {
            let (thought, streamed) = every_split(&format!("Thought: a\nFinal Answer: {answer}"));
            assert_eq!((thought.as_str(), streamed.as_str()), ("a", ""), "{answer}");
        }
        // Text that only begins like `<tools>` goes out once it is plainly not.
        assert_eq!(
            every_split("Final Answer: <tool> is a word").1,
            "<tool> is a word"
        );
        assert_eq!(every_split("Final Answer: It is {x}.").1, "It is {x}.");
        // A bare call, as a real 0.5B model wrote: held; a word that is no call goes out.
        for answer in ["read_file(path=\"a.py\")", "`read_file(path=\"a.py\")`"] {
            let (_, streamed) = every_split(&format!("Thought: a\nFinal Answer: {answer}"));
            assert_eq!(streamed, "", "{answer}");
        }
        assert_eq!(
            every_split("Final Answer: Login is in a.py").1,
            "Login is in a.py"
        );
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
