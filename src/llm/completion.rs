//! What a provider answers: one completion in provider-neutral terms (the text, the calls the
//! model made through the provider's tool calling, the reasoning, the usage and why it ended).

use serde::Serialize;

use super::bounded::{self, MAX_TURN_JSON_BYTES};
use super::reasoning::ReasoningState;
use super::WireError;

/// A call the model made through the provider's tool calling.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeCall {
    /// The provider's id for the call (OpenAI `call_…`, Anthropic `toolu_…`); Ollama gives none.
    pub id: Option<String>,
    pub name: String,
    /// The arguments object, or why it was not read.
    pub arguments: Result<serde_json::Map<String, serde_json::Value>, bounded::Unread>,
}

impl NativeCall {
    /// Arguments as the reply carries them: the JSON text of an object (Anthropic, Ollama), or
    /// of a string holding one (OpenAI); empty when there were none.
    pub fn new(id: Option<String>, name: String, json: &str) -> Self {
        let arguments = match json.trim_start().as_bytes().first() {
            Some(b'"') if json.len() <= bounded::MAX_ARGUMENT_BYTES => {
                match serde_json::from_str::<String>(json) {
                    Ok(text) => bounded::arguments(&text),
                    Err(_) => Err(bounded::Unread::NotAnObject(json.to_string())),
                }
            }
            _ => bounded::arguments(json),
        };
        Self {
            id,
            name,
            arguments,
        }
    }

    /// Arguments as a stream writes them: the text of an object, in pieces joined.
    pub fn from_text(id: Option<String>, name: String, text: &str) -> Self {
        Self {
            id,
            name,
            arguments: bounded::arguments(text),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// The provider reported none (some local servers leave usage out, on streams above all):
    /// these are the service's own counts.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub approximate: bool,
    /// Prompt tokens read from the provider's cache (part of `prompt_tokens`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached_prompt_tokens: Option<u64>,
    /// Prompt tokens written to the provider's cache (part of `prompt_tokens`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_creation_prompt_tokens: Option<u64>,
    /// Tokens the model reasoned with (part of `completion_tokens`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

/// A figure worth reporting: providers send 0 for "none" (no cache hit, no reasoning).
pub(crate) fn nonzero(n: Option<u64>) -> Option<u64> {
    n.filter(|&n| n > 0)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// The model ended its turn or hit a stop sequence.
    Stop,
    /// The output cap was reached; the text may be cut.
    Length,
    /// Anything else the provider reported (content filter, refusal …), as it spelled it.
    Other(String),
}

/// Between the texts of two messages of one reply (a Responses preamble and its answer).
pub const MESSAGES_APART: &str = "\n\n";

#[derive(Debug, Clone)]
pub struct Completion {
    pub text: String,
    pub finish: FinishReason,
    pub usage: Option<Usage>,
    /// Tool calls made through the provider's tool calling, in order: at most
    /// [`bounded::MAX_CALLS_PER_TURN`].
    pub calls: Vec<NativeCall>,
    /// Calls the reply held past that bound, counted and never built.
    pub dropped_calls: usize,
    /// What the model reasoned, where the provider returns it.
    pub reasoning: ReasoningState,
    /// The text is only a preamble the model marked as such (a Responses `commentary` message)
    /// and it neither called a tool nor marked an answer final: not a step to take.
    pub preamble_only: bool,
    /// Text the model marked as a preamble, kept apart from an answer it wrote after it (a
    /// Responses `commentary` message before a `final_answer` one): the answer's thought.
    pub preamble: String,
}

impl Completion {
    /// The text of every message in the order the model wrote them (the Responses API's items
    /// say it), a blank line apart; else the preamble, then the text after it.
    pub fn in_order(&self) -> String {
        let messages = self.reasoning.messages();
        if messages.is_empty() {
            return [self.preamble.as_str(), MESSAGES_APART, &self.text].concat();
        }
        let texts: Vec<&str> = messages.iter().map(|(_, text)| text.as_str()).collect();
        texts.join(MESSAGES_APART)
    }

    /// The preamble in two: what the model marked as such before the first other message that
    /// holds text, and what after it (the whole preamble, and nothing, where the order is not
    /// known).
    pub fn preambles_around_text(&self) -> (String, String) {
        let messages = self.reasoning.messages();
        if messages.is_empty() {
            return (self.preamble.clone(), String::new());
        }
        let first = messages.iter().position(|(preamble, _)| !preamble);
        let (before, after) = messages.split_at(first.unwrap_or(messages.len()));
        let joined = |part: &[(bool, String)]| {
            let preambles = part.iter().filter(|(preamble, _)| *preamble);
            let texts: Vec<&str> = preambles.map(|(_, text)| text.as_str()).collect();
            texts.join(MESSAGES_APART)
        };
        (joined(before), joined(after))
    }

    /// Refuses a reply whose text, calls and output items (the Responses API's, which go back
    /// with the turn), written as JSON, pass [`MAX_TURN_JSON_BYTES`].
    pub fn fits_a_turn(&self) -> Result<(), WireError> {
        let mut bytes = json_len(&self.text) + json_len(&self.reasoning.items);
        for call in &self.calls {
            bytes += json_len(&call.name)
                + match &call.arguments {
                    Ok(map) => json_len(map),
                    Err(unread) => json_len(&unread.shown()),
                };
        }
        if bytes <= MAX_TURN_JSON_BYTES {
            return Ok(());
        }
        Err(WireError::Shape(format!(
            "the model's reply takes {bytes} bytes as JSON, more than the {MAX_TURN_JSON_BYTES} a step can carry back to it"
        )))
    }
}

/// Bytes `value` takes as JSON, counted without writing it anywhere.
fn json_len(value: &impl Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_is_measured_as_json_with_its_escapes() {
        let completion = |text: String| Completion {
            text,
            finish: FinishReason::Stop,
            usage: None,
            calls: Vec::new(),
            dropped_calls: 0,
            reasoning: ReasoningState::default(),
            preamble_only: false,
            preamble: String::new(),
        };
        // 400 KB of control characters are 2.4 MB once escaped.
        assert!(completion("\u{1}".repeat(400_000)).fits_a_turn().is_err());
        assert!(completion("a".repeat(400_000)).fits_a_turn().is_ok());
    }
}
