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
/// step's `thought` joins them: what was reasoned, a preamble, the written thought, and what
/// was reasoned after the text began (held to the end, where the step's thought puts it).
struct Reading<'l> {
    relay: Relay<'l>,
    tags: &'l parse::Tags,
    parser: parse::live::LiveParser,
    /// A preamble being read, and its text as written (`end_preamble`).
    preamble: Option<(parse::live::LiveParser, String)>,
    native: bool,
    /// Some thought was told: another part of it is told a blank line after it.
    told: bool,
    /// The part told last, which a piece of the same kind goes on.
    open: Part,
    /// The next reasoning begins a part of its own.
    new_part: bool,
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
            told: false,
            open: Part::None,
            new_part: false,
            late: Vec::new(),
        }
    }

    async fn piece(&mut self, piece: Piece) -> Result<(), StepError> {
        match piece {
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
        let late: Vec<&str> = (late.iter().map(|p| p.trim()))
            .filter(|p| !p.is_empty())
            .collect();
        self.new_part = true;
        self.thought(Part::Reasoning, late.join("\n\n")).await?;
        Ok(self.relay)
    }

    /// Thought of a `kind`: a blank line before it when it begins a part after another.
    async fn thought(&mut self, kind: Part, text: String) -> Result<(), StepError> {
        if text.is_empty() {
            return Ok(());
        }
        let new = std::mem::take(&mut self.new_part) || self.open != kind;
        if new && self.told {
            self.relay.thought("\n\n".into()).await?;
        }
        (self.told, self.open) = (true, kind);
        self.relay.thought(text).await
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

    /// A preamble's text, read by a parser of its own: what it is shows only as it goes on
    /// (plain text is never told before that).
    async fn preamble_text(&mut self, text: &str) -> Result<(), StepError> {
        let tags = self.tags;
        let (parser, written) = self
            .preamble
            .get_or_insert_with(|| (parse::live::LiveParser::new(tags), String::new()));
        written.push_str(text);
        let deltas = parser.push(text);
        self.preamble_deltas(deltas).await
    }

    /// The preamble is over (the text begins, or the reply ends). A plain one is told whole, as
    /// the thought before the answer, a part of its own. One that is more (a tag, a call): in
    /// text tool mode it began the step itself, and its parser reads on, the text a blank line
    /// after it, as the whole reply reads it (`reply::stepping_preamble`); with tools called
    /// natively it is only thought, and what the text says is a part after it.
    async fn end_preamble(&mut self) -> Result<(), StepError> {
        let Some((mut parser, written)) = self.preamble.take() else {
            return Ok(());
        };
        if !self.native {
            let deltas = parser.push(crate::llm::MESSAGES_APART);
            if parser.past_plain_text() {
                self.parser = parser;
                return self.deltas(deltas).await;
            }
        } else if parser.past_plain_text() {
            let deltas = parser.finish();
            self.preamble_deltas(deltas).await?;
            self.open = Part::Preamble;
            return Ok(());
        }
        // As the whole reply's thought has it: trimmed, and nothing when blank.
        self.new_part = true;
        self.thought(Part::Preamble, written.trim().to_string())
            .await
    }

    /// A preamble's deltas: with tools called natively, only its thought (it is never the
    /// answer, nor a call, which the provider makes).
    async fn preamble_deltas(
        &mut self,
        deltas: Vec<parse::live::LiveDelta>,
    ) -> Result<(), StepError> {
        let native = self.native;
        let deltas = deltas.into_iter();
        let kept = deltas.filter(|d| !native || matches!(d, parse::live::LiveDelta::Thought(_)));
        self.deltas(kept.collect()).await
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
