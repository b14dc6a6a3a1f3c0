//! What a streaming client is told while the step runs: the model's reply (or the client's
//! `mock_response`) streamed as thought and answer text as it forms.

use super::error::{StepError, StepErrorKind};
use super::input::StepInput;
use super::parse;
use crate::llm::{ChatRequest, Completion, LlmClients, Piece};

/// What a streaming client is told while the step runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Live {
    /// The provider accepted the call: from here on, failures arrive inside the stream.
    Started,
    Thought(String),
    Answer(String),
    /// The output streamed so far was not a valid step (the reason): it is discarded, and a
    /// repair round's output streams next.
    Retry(String),
}

pub type LiveSender = tokio::sync::mpsc::Sender<Live>;

/// Bytes per piece when a `mock_response` is streamed, as a model's tokens arrive; a long one
/// comes in at most [`MOCK_PIECES`] pieces, so that 1 MB is not 125,000 events (500 such streams
/// at once once spent the step deadline on events alone).
const MOCK_PIECE_BYTES: usize = 8;
const MOCK_PIECES: usize = 256;

/// The call with the answer streamed: thought and answer text go to the client as they form.
/// Also whether any did: a reply nothing of which was shown may still give way to a fallback.
pub(super) async fn stream_call(
    llm: &LlmClients,
    input: &StepInput,
    request: &ChatRequest,
    live: &LiveSender,
) -> Result<(Completion, bool), StepError> {
    let key = input.key.as_ref();
    let mut stream = llm
        .stream(input.llm.provider, request, key, input.deadline)
        .await?;
    tell(live, Live::Started).await?;
    let native = !request.tools.is_empty();
    let mut reading = Reading::new(&input.react.tags, Relay::new(live, native), native);
    while let Some(piece) = stream.next_piece(key).await? {
        reading.piece(piece).await?;
    }
    let relay = reading.finish().await?;
    let completion = stream.finish()?;
    // A held answer the model declined is kept back while another model may give one: not once
    // something was shown, which rules the fallback out (`reply::refusal`).
    let declined = input.falls_back && super::reply::declined(&completion.finish);
    let keep_back = declined && !relay.shown;
    let shown = relay.end(completion.calls.is_empty() && !keep_back).await?;
    Ok((completion, shown))
}

/// The reply's pieces read as they come. Thought is told in parts a blank line apart, as the
/// step's `thought` joins them: what was reasoned (each part trimmed), a preamble, the written
/// thought, and what was reasoned after the text began (held to the end, where the step's
/// thought puts it).
struct Reading<'l> {
    relay: Relay<'l>,
    tags: &'l parse::Tags,
    parser: parse::live::LiveParser,
    /// A preamble being read, and its text as written (`end_preamble`).
    preamble: Option<(parse::live::LiveParser, String)>,
    native: bool,
    /// The text's parser has read some text.
    wrote: bool,
    /// In text tool mode, a preamble began the step: every message after it is read in order.
    in_order: bool,
    /// Some thought was told: another part of it is told a blank line after it.
    told: bool,
    /// The part being told, which a piece of the same kind goes on, and whether any of it was.
    open: Part,
    part_told: bool,
    /// The next reasoning begins a part of its own.
    new_part: bool,
    /// White space that ends what was told of a reasoning part: told only if more follows.
    space: String,
    /// Reasoning that came after the text began, by part.
    late: Vec<String>,
}

/// What a part of the told thought is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    None,
    Reasoning,
    Preamble,
    Written,
}

impl<'l> Reading<'l> {
    fn new(tags: &'l parse::Tags, relay: Relay<'l>, native: bool) -> Self {
        Self {
            relay,
            tags,
            parser: parse::live::LiveParser::new(tags),
            preamble: None,
            native,
            wrote: false,
            in_order: false,
            told: false,
            open: Part::None,
            part_told: false,
            new_part: false,
            space: String::new(),
            late: Vec::new(),
        }
    }

    async fn piece(&mut self, piece: Piece) -> Result<(), StepError> {
        match piece {
            Piece::Preamble(text) if self.in_order => {
                let deltas = self.parser.push(&text);
                self.deltas(deltas).await
            }
            Piece::Preamble(text) => self.preamble_text(&text).await,
            Piece::ReasoningPart(text) => {
                self.new_part = true;
                self.thought(Part::Reasoning, text).await
            }
            Piece::Reasoning(text) => self.thought(Part::Reasoning, text).await,
            Piece::LateReasoningPart(text) => {
                self.late.push(text);
                Ok(())
            }
            Piece::LateReasoning(text) => {
                match self.late.last_mut() {
                    Some(part) => part.push_str(&text),
                    None => self.late.push(text),
                }
                Ok(())
            }
            Piece::Text(text) => {
                self.end_preamble().await?;
                self.wrote |= !text.is_empty();
                let deltas = self.parser.push(&text);
                self.deltas(deltas).await
            }
        }
    }

    /// The reply is over: what was held is decided, and what was reasoned late is told, its
    /// parts trimmed, as the step's thought has them (`ReasoningState::text_around_writing`).
    async fn finish(mut self) -> Result<Relay<'l>, StepError> {
        self.end_preamble().await?;
        let deltas = self.parser.finish();
        self.deltas(deltas).await?;
        let late = std::mem::take(&mut self.late);
        let late = crate::llm::thought_parts(late.iter().map(|p| p.trim()));
        self.new_part = true;
        self.thought(Part::Reasoning, late).await?;
        Ok(self.relay)
    }

    /// Thought of a `kind`: a blank line before it when it begins a part after another.
    async fn thought(&mut self, kind: Part, text: String) -> Result<(), StepError> {
        if std::mem::take(&mut self.new_part) || self.open != kind {
            (self.open, self.part_told) = (kind, false);
            self.space.clear();
        }
        let text = match kind {
            Part::Reasoning => self.trimmed(&text),
            _ => text,
        };
        if text.is_empty() {
            return Ok(());
        }
        if !self.part_told && self.told {
            self.relay.thought("\n\n".into()).await?;
        }
        (self.told, self.part_told) = (true, true);
        self.relay.thought(text).await
    }

    /// A piece of a reasoning part as the part trimmed has it: white space before the part
    /// dropped, white space after what was told held until more follows.
    fn trimmed(&mut self, text: &str) -> String {
        let text = if self.part_told {
            text
        } else {
            text.trim_start()
        };
        let body = text.trim_end();
        if body.is_empty() {
            self.space.push_str(text);
            return String::new();
        }
        let told = [std::mem::take(&mut self.space).as_str(), body].concat();
        self.space = text[body.len()..].to_string();
        told
    }

    /// The written text's deltas: its thought a part of its own.
    async fn deltas(&mut self, deltas: Vec<parse::live::LiveDelta>) -> Result<(), StepError> {
        for delta in deltas {
            match delta {
                parse::live::LiveDelta::Thought(text) => self.thought(Part::Written, text).await?,
                answer => self.relay.delta(answer).await?,
            }
        }
        Ok(())
    }

    /// A preamble's text, read by a parser of its own. What it is shows only as it goes on:
    /// only one that may begin the step (in text tool mode, before any text) is told as it
    /// forms; the others once they end.
    async fn preamble_text(&mut self, text: &str) -> Result<(), StepError> {
        let tags = self.tags;
        let (parser, written) = self
            .preamble
            .get_or_insert_with(|| (parse::live::LiveParser::new(tags), String::new()));
        written.push_str(text);
        let deltas = parser.push(text);
        if self.native || self.wrote {
            return Ok(());
        }
        self.deltas(deltas).await
    }

    /// The preamble is over (the text begins, or the reply ends). In text tool mode one that
    /// is more than plain text (a tag, a call) is read in order with the text, as the whole
    /// reply reads it (`reply::stepping_preamble`): before the text its parser reads on, after
    /// it the text's parser reads it. Any other is a part of the thought, told as the step's
    /// thought has it (`reply::preamble_thought`).
    async fn end_preamble(&mut self) -> Result<(), StepError> {
        let Some((mut parser, written)) = self.preamble.take() else {
            return Ok(());
        };
        let apart = crate::llm::MESSAGES_APART;
        let deltas = parser.push(apart);
        if !self.native && parser.past_plain_text() {
            self.in_order = true;
            if !self.wrote {
                self.parser = parser;
                return self.deltas(deltas).await;
            }
            // Its own parser's reading was never told: the text's parser reads it on.
            let written = match written.starts_with(apart) {
                true => written,
                false => [apart, &written].concat(),
            };
            let deltas = self.parser.push(&written);
            return self.deltas(deltas).await;
        }
        self.new_part = true;
        let thought = super::reply::preamble_thought(&written, self.tags);
        self.thought(Part::Preamble, thought).await
    }
}

/// Tells the client the reply's thought and answer, and whether any was told. With tools
/// called natively the answer is held until the reply is over: the provider sends its calls
/// after the text, and a reply that calls a tool is no answer (it once streamed `answer`
/// events for a step that proposed a call).
struct Relay<'l> {
    live: &'l LiveSender,
    shown: bool,
    held: Option<String>,
}

impl<'l> Relay<'l> {
    fn new(live: &'l LiveSender, native: bool) -> Self {
        let held = native.then(String::new);
        Self {
            live,
            shown: false,
            held,
        }
    }

    async fn thought(&mut self, text: String) -> Result<(), StepError> {
        self.shown = true;
        tell(self.live, Live::Thought(text)).await
    }

    async fn delta(&mut self, delta: parse::live::LiveDelta) -> Result<(), StepError> {
        match (delta, &mut self.held) {
            (parse::live::LiveDelta::Answer(text), Some(held)) => {
                held.push_str(&text);
                Ok(())
            }
            (delta, _) => {
                self.shown = true;
                tell(self.live, delta.into()).await
            }
        }
    }

    /// The reply is over: a held answer is told unless the reply `answers` nothing (it called,
    /// or declined while another model may answer).
    async fn end(mut self, answers: bool) -> Result<bool, StepError> {
        match self.held.take().filter(|held| answers && !held.is_empty()) {
            Some(held) => {
                tell(self.live, Live::Answer(held)).await?;
                Ok(true)
            }
            None => Ok(self.shown),
        }
    }
}

/// A `mock_response` streamed in small pieces, as a model would write it.
pub(super) async fn stream_mock(
    text: &str,
    live: &LiveSender,
    tags: &parse::Tags,
) -> Result<(), StepError> {
    tell(live, Live::Started).await?;
    let mut parser = parse::live::LiveParser::new(tags);
    let mut rest = text;
    let piece = MOCK_PIECE_BYTES.max(text.len().div_ceil(MOCK_PIECES));
    while !rest.is_empty() {
        let mut cut = piece.min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        for delta in parser.push(&rest[..cut]) {
            tell(live, delta.into()).await?;
        }
        rest = &rest[cut..];
    }
    for delta in parser.finish() {
        tell(live, delta.into()).await?;
    }
    Ok(())
}

/// Sends to the streaming client; a client that has gone away ends the step.
pub(super) async fn tell(live: &LiveSender, event: Live) -> Result<(), StepError> {
    live.send(event)
        .await
        .map_err(|_| StepErrorKind::ClientGone.into())
}

impl From<parse::live::LiveDelta> for Live {
    fn from(delta: parse::live::LiveDelta) -> Self {
        match delta {
            parse::live::LiveDelta::Thought(t) => Self::Thought(t),
            parse::live::LiveDelta::Answer(a) => Self::Answer(a),
        }
    }
}
