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

/// The reply's pieces read as they come. Reasoning streams as thought, its parts a blank line
/// apart; a preamble and the written thought follow it after a blank line, as the step's
/// `thought` joins them.
struct Reading<'l> {
    relay: Relay<'l>,
    tags: &'l parse::Tags,
    parser: parse::live::LiveParser,
    /// In text tool mode, a preamble being read, and its text as written (`end_preamble`).
    preamble: Option<(parse::live::LiveParser, String)>,
    native: bool,
    reasoned: bool,
    new_part: bool,
    in_preamble: bool,
}

impl<'l> Reading<'l> {
    fn new(tags: &'l parse::Tags, relay: Relay<'l>, native: bool) -> Self {
        Self {
            relay,
            tags,
            parser: parse::live::LiveParser::new(tags),
            preamble: None,
            native,
            reasoned: false,
            new_part: false,
            in_preamble: false,
        }
    }

    async fn piece(&mut self, piece: Piece) -> Result<(), StepError> {
        self.new_part |= self.reasoned && matches!(piece, Piece::ReasoningPart(_));
        self.new_part |= self.reasoned && !self.in_preamble && matches!(piece, Piece::Preamble(_));
        self.in_preamble = matches!(piece, Piece::Preamble(_));
        match piece {
            Piece::Preamble(text) if !self.native => self.preamble_text(&text).await,
            Piece::ReasoningPart(text) | Piece::Reasoning(text) | Piece::Preamble(text) => {
                self.thought(text).await
            }
            Piece::Text(text) => {
                self.end_preamble().await?;
                let deltas = self.parser.push(&text);
                self.deltas(deltas).await
            }
        }
    }

    /// The reply is over: what was held is decided.
    async fn finish(mut self) -> Result<Relay<'l>, StepError> {
        self.end_preamble().await?;
        let deltas = self.parser.finish();
        self.deltas(deltas).await?;
        Ok(self.relay)
    }

    /// Reasoning, or a preamble told as written: thought, a blank line after another part.
    async fn thought(&mut self, text: String) -> Result<(), StepError> {
        if text.is_empty() {
            return Ok(());
        }
        if std::mem::take(&mut self.new_part) {
            self.relay.thought("\n\n".into()).await?;
        }
        self.reasoned = true;
        self.relay.thought(text).await
    }

    /// The written text's deltas: its thought a blank line after what was reasoned before it.
    async fn deltas(&mut self, deltas: Vec<parse::live::LiveDelta>) -> Result<(), StepError> {
        for delta in deltas {
            if std::mem::take(&mut self.reasoned)
                && matches!(delta, parse::live::LiveDelta::Thought(_))
            {
                self.relay.thought("\n\n".into()).await?;
            }
            self.relay.delta(delta).await?;
        }
        Ok(())
    }

    /// A preamble's text in text tool mode, read by a parser of its own: what it is shows only
    /// as it goes on (plain text is never told before that).
    async fn preamble_text(&mut self, text: &str) -> Result<(), StepError> {
        let tags = self.tags;
        let (parser, written) = self
            .preamble
            .get_or_insert_with(|| (parse::live::LiveParser::new(tags), String::new()));
        written.push_str(text);
        let deltas = parser.push(text);
        self.deltas(deltas).await
    }

    /// The preamble is over (the text begins, or the reply ends). A plain one is told whole, as
    /// the thought before the answer; one that is more (a tag, a call) began the step itself,
    /// and its parser reads on, the text a blank line after it, as the whole reply reads it
    /// (`reply::stepping_preamble`).
    async fn end_preamble(&mut self) -> Result<(), StepError> {
        let Some((mut parser, written)) = self.preamble.take() else {
            return Ok(());
        };
        let deltas = parser.push(crate::llm::MESSAGES_APART);
        if !parser.past_plain_text() {
            // As the whole reply's thought has it: trimmed, and nothing when blank.
            return self.thought(written.trim().to_string()).await;
        }
        self.new_part = false;
        self.parser = parser;
        self.deltas(deltas).await
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
