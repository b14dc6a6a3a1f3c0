//! A streamed completion: the provider's events become text deltas as they arrive, and the whole
//! [`Completion`] at the end. Framing (SSE or JSON lines) is shared; what an event means is the
//! provider's [`StreamDecoder`]. A stream that ends before the provider said it was done is an
//! error, never a silently partial answer.

use std::time::Duration;

use super::bounded::MAX_REPLY_BYTES;
use super::provider::Framing;
use super::sse::SseDecoder;
use super::stream_events::{Piece, Sofar, StreamDecoder};
use super::{ApiKey, Completion, LlmError, Provider};

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
    /// Runs of one line in the text: degenerate output is cut short.
    repeats: super::repetition::LineRepeats,
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
            repeats: Default::default(),
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
                    Some(piece @ (Piece::Text(_) | Piece::Preamble(_)))
                        if !piece.text().is_empty() =>
                    {
                        let text = piece.text();
                        let bytes = self.sofar.text.len() + text.len();
                        super::bounded::fits("text", bytes, super::bounded::MAX_TEXT_BYTES)
                            .map_err(|e| e.into_llm(self.provider, key))?;
                        self.sofar.text.push_str(text);
                        if let Some(run) = self.repeats.check(&self.sofar.text) {
                            return Err(super::repetition::degenerate(self.provider, run));
                        }
                        self.pending.push_back(piece);
                    }
                    Some(Piece::Reasoning(text) | Piece::LateReasoning(text))
                        if text.is_empty() => {}
                    Some(piece) if piece.is_reasoning() => {
                        // Checked as it streams, not once all of it was relayed to the client.
                        self.reasoning_read += piece.text().len();
                        let most = super::bounded::MAX_REASONING_BYTES;
                        super::bounded::fits("reasoning", self.reasoning_read, most)
                            .map_err(|e| e.into_llm(self.provider, key))?;
                        self.pending.push_back(piece);
                    }
                    _ => {}
                }
            }
        }
    }

    /// The whole completion, once [`Self::next_piece`] has returned `None`.
    pub fn finish(self) -> Result<Completion, LlmError> {
        let partial = self.framer.is_partial();
        let completion = whole(self.sofar, self.provider, partial)?;
        completion
            .fits_a_turn()
            .map_err(|e| e.into_llm(self.provider, None))?;
        Ok(completion)
    }
}

/// What the stream said, once it has ended: an error unless the provider said it was done.
/// `partial`: the stream ended inside an event.
fn whole(sofar: Sofar, provider: Provider, partial: bool) -> Result<Completion, LlmError> {
    if sofar.events == 0 && !partial {
        return Err(LlmError::EmptyReply { provider });
    }
    if !sofar.done {
        return Err(LlmError::BadResponse {
            provider,
            message: "the stream ended before the model finished (truncated)".into(),
        });
    }
    Ok(sofar.into_completion())
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
