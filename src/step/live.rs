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
    let mut parser = parse::live::LiveParser::new(&input.react.tags);
    let mut relay = Relay::new(live, !request.tools.is_empty());
    // Reasoning streams as thought, its parts a blank line apart; a preamble and the written
    // thought follow it after a blank line, as the step's `thought` joins them.
    let (mut reasoned, mut new_part, mut in_preamble) = (false, false, false);
    while let Some(piece) = stream.next_piece(key).await? {
        new_part |= reasoned && matches!(piece, Piece::ReasoningPart(_));
        new_part |= reasoned && !in_preamble && matches!(piece, Piece::Preamble(_));
        in_preamble = matches!(piece, Piece::Preamble(_));
        match piece {
            Piece::ReasoningPart(text) | Piece::Reasoning(text) | Piece::Preamble(text) => {
                if text.is_empty() {
                    continue;
                }
                if std::mem::take(&mut new_part) {
                    relay.thought("\n\n".into()).await?;
                }
                reasoned = true;
                relay.thought(text).await?;
            }
            Piece::Text(text) => {
                for delta in parser.push(&text) {
                    if std::mem::take(&mut reasoned)
                        && matches!(delta, parse::live::LiveDelta::Thought(_))
                    {
                        relay.thought("\n\n".into()).await?;
                    }
                    relay.delta(delta).await?;
                }
            }
        }
    }
    for delta in parser.finish() {
        relay.delta(delta).await?;
    }
    let completion = stream.finish()?;
    // A held answer the model declined is kept back while another model may give one: not once
    // something was shown, which rules the fallback out (`reply::refusal`).
    let declined = input.falls_back && super::reply::declined(&completion.finish);
    let keep_back = declined && !relay.shown;
    let shown = relay.end(completion.calls.is_empty() && !keep_back).await?;
    Ok((completion, shown))
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
