//! A streamed completion: the provider's events become text deltas as they arrive, and the whole
//! [`Completion`] at the end. Framing (SSE or JSON lines) is shared; what an event means is the
//! provider's [`StreamDecoder`]. A stream that ends before the provider said it was done is an
//! error, never a silently partial answer.

use std::collections::BTreeMap;
use std::time::Duration;

use super::bounded::{MAX_BLOCKS, MAX_CALLS_PER_TURN};
use super::provider::Framing;
use super::sse::SseDecoder;
use super::transport::MAX_REPLY_BYTES;
use super::{
    ApiKey, Completion, FinishReason, LlmError, NativeCall, Provider, ReasoningState,
    ThinkingBlock, Usage, WireError,
};

/// What the events of a stream add up to so far.
#[derive(Debug, Default)]
pub struct Sofar {
    pub text: String,
    /// Tool calls by index: name and the argument fragments joined.
    pub calls: BTreeMap<u64, PartialCall>,
    /// Calls past [`MAX_CALLS_PER_TURN`], counted and never built.
    pub dropped_calls: usize,
    pub usage: Option<Usage>,
    pub finish: Option<FinishReason>,
    /// The provider said the reply is complete.
    pub done: bool,
    /// Events read, of any kind.
    pub events: u64,
    /// Reasoning text of an OpenAI-compatible server, joined.
    pub reasoning_content: String,
    /// Anthropic's thinking blocks by index, as their pieces arrive.
    pub thinking: BTreeMap<u64, ThinkingBlock>,
}

/// A piece of what the model writes, as it arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Text of the reply.
    Text(String),
    /// Reasoning the model did before it (thinking, `reasoning_content`).
    Reasoning(String),
}

/// A tool call whose pieces are still arriving.
#[derive(Debug, Default)]
pub struct PartialCall {
    pub id: Option<String>,
    pub name: String,
    pub arguments: String,
}

impl Sofar {
    /// The call at `index`, a new one while the turn has room for it; `None` (and the call
    /// counted as dropped) past [`MAX_CALLS_PER_TURN`].
    pub fn call(&mut self, index: u64) -> Option<&mut PartialCall> {
        if !self.calls.contains_key(&index) && self.calls.len() >= MAX_CALLS_PER_TURN {
            self.dropped_calls += 1;
            return None;
        }
        Some(self.calls.entry(index).or_default())
    }

    /// Starts the thinking block at `index`. Each must go back whole, so one past
    /// [`MAX_BLOCKS`] is an error, not dropped.
    pub fn thinking_block(&mut self, index: u64, block: ThinkingBlock) -> Result<(), WireError> {
        if !self.thinking.contains_key(&index) && self.thinking.len() >= MAX_BLOCKS {
            return Err(WireError::Shape(format!(
                "the reply holds more than {MAX_BLOCKS} thinking blocks"
            )));
        }
        self.thinking.insert(index, block);
        Ok(())
    }

    /// `partial`: the stream ended inside an event.
    fn completion(self, provider: Provider, partial: bool) -> Result<Completion, LlmError> {
        if self.events == 0 && !partial {
            return Err(LlmError::EmptyReply { provider });
        }
        if !self.done {
            return Err(LlmError::BadResponse {
                provider,
                message: "the stream ended before the model finished (truncated)".into(),
            });
        }
        Ok(self.into_completion())
    }

    /// What the pieces add up to, whole or not.
    pub(super) fn into_completion(self) -> Completion {
        let calls = self
            .calls
            .into_values()
            .map(|c| NativeCall::from_text(c.id, c.name, &c.arguments))
            .collect();
        let reasoning = ReasoningState {
            blocks: self.thinking.into_values().collect(),
            reasoning_content: Some(self.reasoning_content).filter(|r| !r.is_empty()),
        };
        Completion {
            text: self.text,
            finish: self.finish.unwrap_or(FinishReason::Stop),
            usage: self.usage,
            calls,
            dropped_calls: self.dropped_calls,
            reasoning,
        }
    }
}

/// What one provider's stream events mean.
pub trait StreamDecoder: Send {
    /// Reads one event's data into `sofar`; returns the text or reasoning it adds, if any.
    fn event(&mut self, data: &str, sofar: &mut Sofar) -> Result<Option<Piece>, WireError>;
}

/// Splits the bytes of a stream into the data of its events.
enum Framer {
    Sse(SseDecoder),
    Lines(Vec<u8>),
}

impl Framer {
    fn new(framing: Framing) -> Self {
        match framing {
            Framing::Sse => Self::Sse(SseDecoder::default()),
            Framing::JsonLines => Self::Lines(Vec::new()),
        }
    }

    /// The data of the events `bytes` complete; `Err` when the stream is not UTF-8 text.
    fn push(&mut self, bytes: &[u8]) -> Result<Vec<String>, ()> {
        match self {
            Self::Sse(decoder) => decoder
                .push(bytes)
                .map(|events| events.into_iter().map(|e| e.data).collect())
                .map_err(|_| ()),
            Self::Lines(pending) => {
                // Only the new bytes are searched: what was pending holds no line break.
                let Some(last) = bytes.iter().rposition(|&b| b == b'\n') else {
                    pending.extend_from_slice(bytes);
                    return Ok(Vec::new());
                };
                let mut whole = std::mem::take(pending);
                whole.extend_from_slice(&bytes[..=last]);
                pending.extend_from_slice(&bytes[last + 1..]);
                let text = std::str::from_utf8(&whole).map_err(|_| ())?;
                Ok(text
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(str::to_string)
                    .collect())
            }
        }
    }

    /// Whether the bytes so far end inside an event.
    fn is_partial(&self) -> bool {
        match self {
            Self::Sse(decoder) => !decoder.is_between_events(),
            Self::Lines(pending) => !pending.is_empty(),
        }
    }

    /// A last line a JSON-lines stream left without its line break.
    fn rest(&mut self) -> Option<String> {
        match self {
            Self::Lines(pending) if !pending.is_empty() => {
                let line = String::from_utf8_lossy(pending).trim().to_string();
                pending.clear();
                (!line.is_empty()).then_some(line)
            }
            _ => None,
        }
    }
}

pub struct CompletionStream {
    provider: Provider,
    response: reqwest::Response,
    framer: Framer,
    decoder: Box<dyn StreamDecoder>,
    sofar: Sofar,
    pending: std::collections::VecDeque<Piece>,
    timeout: Duration,
    /// Bytes read so far: a stream that never ends a line or an event must not grow without
    /// bound.
    read: usize,
    /// What was read, held against the memory budget until the stream is done with.
    held: crate::runtime::memory_budget::Held,
    /// Reasoning streamed so far, of any block.
    reasoning_read: usize,
}

impl CompletionStream {
    pub(crate) fn new(
        provider: Provider,
        response: reqwest::Response,
        timeout: Duration,
        held: crate::runtime::memory_budget::Held,
    ) -> Self {
        let api = provider.api();
        Self {
            provider,
            response,
            framer: Framer::new(api.framing()),
            decoder: api.stream_decoder(),
            sofar: Sofar::default(),
            pending: Default::default(),
            timeout,
            read: 0,
            held,
            reasoning_read: 0,
        }
    }

    /// The next piece the model wrote, or `None` once the stream has ended. `key` is scrubbed
    /// from any error the provider reports inside the stream.
    pub async fn next_piece(&mut self, key: Option<&ApiKey>) -> Result<Option<Piece>, LlmError> {
        loop {
            if let Some(piece) = self.pending.pop_front() {
                return Ok(Some(piece));
            }
            if self.sofar.done {
                return Ok(None);
            }
            let chunk = self
                .response
                .chunk()
                .await
                .map_err(|e| LlmError::from_transport(self.provider, &e, self.timeout))?;
            self.read += chunk.as_ref().map_or(0, |c| c.len());
            if self.read > MAX_REPLY_BYTES {
                return Err(LlmError::BadResponse {
                    provider: self.provider,
                    message: format!("the streamed reply is larger than {MAX_REPLY_BYTES} bytes"),
                });
            }
            self.held
                .grow_to(self.read)
                .map_err(|_| LlmError::Overloaded {
                    provider: self.provider,
                })?;
            let events = match chunk {
                Some(chunk) => self
                    .framer
                    .push(&chunk)
                    .map_err(|()| LlmError::BadResponse {
                        provider: self.provider,
                        message: "the stream is not UTF-8 text".into(),
                    })?,
                None => match self.framer.rest() {
                    Some(last) => vec![last],
                    None => return Ok(None),
                },
            };
            for data in events {
                // Whatever follows the provider's end is not part of the reply.
                if self.sofar.done {
                    break;
                }
                self.sofar.events += 1;
                let piece = self
                    .decoder
                    .event(&data, &mut self.sofar)
                    .map_err(|e| e.into_llm(self.provider, key))?;
                match piece {
                    Some(Piece::Text(text)) if !text.is_empty() => {
                        let bytes = self.sofar.text.len() + text.len();
                        super::bounded::fits(
                            self.provider,
                            "text",
                            bytes,
                            super::bounded::MAX_TEXT_BYTES,
                        )?;
                        self.sofar.text.push_str(&text);
                        self.pending.push_back(Piece::Text(text));
                    }
                    Some(Piece::Reasoning(text)) if !text.is_empty() => {
                        // Checked as it streams, not once all of it was relayed to the client.
                        self.reasoning_read += text.len();
                        let most = super::bounded::MAX_REASONING_BYTES;
                        super::bounded::fits(
                            self.provider,
                            "reasoning",
                            self.reasoning_read,
                            most,
                        )?;
                        self.pending.push_back(Piece::Reasoning(text));
                    }
                    _ => {}
                }
            }
        }
    }

    /// The whole completion, once [`Self::next_piece`] has returned `None`.
    pub fn finish(self) -> Result<Completion, LlmError> {
        let partial = self.framer.is_partial();
        let completion = self.sofar.completion(self.provider, partial)?;
        super::bounded::turn_fits(self.provider, &completion)?;
        Ok(completion)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_are_split_at_line_breaks_however_the_bytes_arrive() {
        let mut framer = Framer::new(Framing::JsonLines);
        assert_eq!(framer.push(b"{\"a\":").ok(), Some(Vec::new()));
        assert_eq!(
            framer.push(b"1}\n\n{\"b\"").ok(),
            Some(vec!["{\"a\":1}".to_string()])
        );
        assert_eq!(framer.push(b":2}").ok(), Some(Vec::new()));
        assert_eq!(framer.rest(), Some("{\"b\":2}".to_string()));
        assert_eq!(framer.rest(), None);
        assert!(framer.push(b"\xff\n").is_err());
    }
}
