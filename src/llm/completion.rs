//! What a provider answers: one completion in provider-neutral terms (the text, the calls the
//! model made through the provider's tool calling, the reasoning, the usage and why it ended).

use serde::Serialize;

use super::bounded;
use super::reasoning::ReasoningState;

/// A call the model made through the provider's tool calling.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeCall {
    /// The provider's id for the call (OpenAI `call_…`, Anthropic `toolu_…`); Ollama gives none.
    pub id: Option<String>,
    pub name: String,
    /// The arguments object, or the text the model wrote when it is not a JSON object.
    pub arguments: Result<serde_json::Map<String, serde_json::Value>, String>,
}

impl NativeCall {
    /// Arguments as the reply carries them: the JSON text of an object (Anthropic, Ollama), or
    /// of a string holding one (OpenAI); empty when there were none.
    pub fn new(id: Option<String>, name: String, json: &str) -> Self {
        let arguments = match json.trim_start().as_bytes().first() {
            Some(b'"') if json.len() <= bounded::MAX_ARGUMENT_BYTES => {
                match serde_json::from_str::<String>(json) {
                    Ok(text) => bounded::arguments(&text),
                    Err(_) => Err(json.to_string()),
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
}
