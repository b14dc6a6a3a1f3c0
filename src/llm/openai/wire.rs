//! Chat Completions on the wire: the request body, the reply and the stream's chunks, as the API
//! documents them. Fields the service does not use are left out; a field it uses that is missing
//! or of another type fails the decode, so a drifted format is an error, never zeros.

use serde::{Deserialize, Serialize};

use super::content::{ArgumentsText, Content};
use crate::llm::bounded::{fits, Bounded, MAX_CALLS_PER_TURN, MAX_SIGNATURE_BYTES};
use crate::llm::strict_schema::openai_strict_misfit;
use crate::llm::{nonzero, FinishReason, Usage, WireError};

#[derive(Serialize)]
pub struct Body<'a> {
    pub model: &'a str,
    pub messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<&'static str>,
    /// Sent only as `false`, and only with tools (OpenAI refuses it without).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_cache_key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_cache_retention: Option<&'static str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
pub struct StreamOptions {
    pub include_usage: bool,
}

#[derive(Serialize)]
pub struct Tool<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: Function<'a>,
}

/// The tools in the `{"type": "function", "function": {…}}` form (also Ollama's); with
/// `strict`, each whose schema fits OpenAI's strict subset is marked strict.
pub fn function_tools(specs: &[crate::llm::ToolSpec], strict: bool) -> Vec<Tool<'_>> {
    specs
        .iter()
        .map(|t| Tool {
            kind: "function",
            function: Function {
                name: &t.name,
                description: &t.description,
                parameters: &t.parameters,
                strict: (strict && openai_strict_misfit(&t.parameters).is_none()).then_some(true),
            },
        })
        .collect()
}

#[derive(Serialize)]
pub struct Function<'a> {
    pub name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub description: &'a str,
    pub parameters: &'a serde_json::Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

#[derive(Serialize)]
pub struct Message<'a> {
    pub role: &'static str,
    /// Null on an assistant message that only called tools.
    pub content: Option<std::borrow::Cow<'a, str>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<OutCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<&'a str>,
    /// An assistant turn's reasoning, for servers that want it back (DeepSeek, on turns that
    /// called tools).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<&'a str>,
}

impl<'a> Message<'a> {
    pub fn text(role: &'static str, content: &'a str) -> Self {
        Self {
            role,
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
            reasoning_content: None,
        }
    }

    /// A message of the conversation: an assistant's calls as `tool_calls`, a tool's result as
    /// a `tool` message naming the call (a failure said in its text: the API has no flag).
    /// `appended`: what continues the turn after a tool's result (`ChatMessage::in_turn`).
    pub fn of(
        m: &'a crate::llm::ChatMessage,
        appended: Option<&str>,
        echo_reasoning: bool,
    ) -> Self {
        let content: Option<std::borrow::Cow<'a, str>> = match (m.is_error, m.content.is_empty()) {
            (true, _) => Some(m.text_as_sent()),
            (false, true) if !m.calls.is_empty() => None,
            (false, _) => Some(m.content.as_str().into()),
        };
        let content = match (content, appended) {
            (Some(text), Some(more)) => Some(
                crate::llm::with_appended(&text, Some(more))
                    .into_owned()
                    .into(),
            ),
            (content, _) => content,
        };
        Self {
            role: m.role.as_str(),
            content,
            tool_calls: m
                .calls
                .iter()
                .map(|c| OutCall {
                    id: &c.id,
                    kind: "function",
                    function: OutFunction {
                        name: &c.name,
                        arguments: serde_json::Value::Object(c.arguments.clone()).to_string(),
                    },
                    extra_content: None,
                })
                .collect(),
            tool_call_id: m.answers.as_deref(),
            // A turn another model made has none: DeepSeek refuses the field missing ("Missing
            // reasoning_content field in the assistant message"), so it goes empty.
            reasoning_content: (echo_reasoning && !m.calls.is_empty()).then(|| {
                let own = m
                    .reasoning
                    .as_ref()
                    .and_then(|r| r.reasoning_content.as_deref());
                own.unwrap_or_default()
            }),
        }
    }
}

impl<'a> Message<'a> {
    /// Gemini's thought signatures back on the calls they came with (it refuses a call of the
    /// current turn without one). The first call of a message that has none, history Gemini did
    /// not write (another provider's turns, a client's own, a state another model made), gets
    /// the documented stand-in instead.
    pub fn signed(mut self, m: &'a crate::llm::ChatMessage) -> Self {
        let state = m.reasoning.as_ref();
        for (i, (out, call)) in self.tool_calls.iter_mut().zip(&m.calls).enumerate() {
            let own = state.and_then(|r| r.signature_of(&call.id));
            out.extra_content =
                own.or((i == 0).then_some(SKIP_SIGNATURE))
                    .map(|thought_signature| OutExtra {
                        google: OutGoogle { thought_signature },
                    });
        }
        self
    }
}

/// An earlier call, as an assistant message carries it.
#[derive(Serialize)]
pub struct OutCall<'a> {
    pub id: &'a str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: OutFunction<'a>,
    /// Gemini's thought signature for the call (only for servers that take it back).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra_content: Option<OutExtra<'a>>,
}

/// `{"google": {"thought_signature": …}}`.
#[derive(Serialize)]
pub struct OutExtra<'a> {
    pub google: OutGoogle<'a>,
}

#[derive(Serialize)]
pub struct OutGoogle<'a> {
    pub thought_signature: &'a str,
}

#[derive(Serialize)]
pub struct OutFunction<'a> {
    pub name: &'a str,
    /// The arguments as a JSON string, as the API returns them.
    pub arguments: String,
}

#[derive(Deserialize)]
pub struct Reply {
    /// Only the first choice is read (the service asks for one).
    pub choices: Bounded<Choice, 1>,
    pub usage: Option<ReplyUsage>,
}

#[derive(Deserialize)]
pub struct Choice {
    pub message: ReplyMessage,
    pub finish_reason: Option<String>,
}

#[derive(Deserialize)]
pub struct ReplyMessage {
    pub content: Option<Content>,
    /// Reasoning as vLLM, DeepSeek and SGLang return it.
    pub reasoning_content: Option<String>,
    /// Reasoning as OpenRouter returns it.
    pub reasoning: Option<String>,
    pub refusal: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Bounded<ReplyToolCall, MAX_CALLS_PER_TURN>>,
}

#[derive(Deserialize)]
pub struct ReplyToolCall {
    pub id: Option<String>,
    pub function: ReplyFunction,
    /// Gemini's thought signature, on the first call of a reply.
    pub extra_content: Option<ExtraContent>,
}

/// A vendor's additions to a tool call: Gemini puts its thought signature in
/// `extra_content.google.thought_signature`, on the call it came with, and wants it back there.
#[derive(Deserialize)]
pub struct ExtraContent {
    pub google: Option<Google>,
}

#[derive(Deserialize)]
pub struct Google {
    pub thought_signature: Option<String>,
}

impl ExtraContent {
    /// The thought signature it holds, refused past [`MAX_SIGNATURE_BYTES`] (it is opaque text
    /// the next request carries back whole, so it is never cut).
    pub fn signature(self) -> Result<Option<String>, WireError> {
        let signature = self.google.and_then(|g| g.thought_signature);
        let signature = signature.filter(|s| !s.is_empty());
        let bytes = signature.as_ref().map_or(0, String::len);
        fits("thought signature", bytes, MAX_SIGNATURE_BYTES)?;
        Ok(signature)
    }
}

/// The text that stands in for a thought signature on a call Gemini did not make (another
/// provider's turns, a client's own, or a state another model made), as Google documents it.
pub const SKIP_SIGNATURE: &str = "skip_thought_signature_validator";

#[derive(Deserialize)]
pub struct ReplyFunction {
    pub name: String,
    /// The arguments' JSON text (a string holding an object), unread until its size is checked.
    #[serde(default)]
    pub arguments: Option<Box<serde_json::value::RawValue>>,
}

#[derive(Deserialize)]
pub struct ReplyUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub prompt_tokens_details: Option<PromptDetails>,
    pub completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
pub struct PromptDetails {
    pub cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
pub struct CompletionDetails {
    pub reasoning_tokens: Option<u64>,
}

impl From<ReplyUsage> for Usage {
    fn from(u: ReplyUsage) -> Self {
        Self {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            approximate: false,
            cached_prompt_tokens: nonzero(u.prompt_tokens_details.and_then(|d| d.cached_tokens)),
            cache_creation_prompt_tokens: None,
            reasoning_tokens: nonzero(u.completion_tokens_details.and_then(|d| d.reasoning_tokens)),
        }
    }
}

/// One `chat.completion.chunk` of a stream (or an `error` object sent inside it).
#[derive(Deserialize)]
pub struct Chunk {
    #[serde(default)]
    pub choices: Bounded<ChunkChoice, 1>,
    pub usage: Option<ReplyUsage>,
    pub error: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
pub struct ChunkChoice {
    pub delta: Option<Delta>,
    pub finish_reason: Option<String>,
}

#[derive(Deserialize)]
pub struct Delta {
    pub content: Option<Content>,
    /// The model declining, streamed in place of the content.
    pub refusal: Option<String>,
    /// Reasoning as vLLM, DeepSeek and SGLang stream it.
    pub reasoning_content: Option<String>,
    /// Reasoning as OpenRouter streams it.
    pub reasoning: Option<String>,
    pub tool_calls: Option<Bounded<DeltaCall, MAX_CALLS_PER_TURN>>,
}

#[derive(Deserialize)]
pub struct DeltaCall {
    /// Which call the piece belongs to; servers that send each call whole leave it out.
    pub index: Option<u64>,
    /// Sent with a call's first piece.
    pub id: Option<String>,
    pub function: Option<DeltaFunction>,
    /// Gemini's thought signature, with the first piece of the reply's first call.
    pub extra_content: Option<ExtraContent>,
}

impl DeltaCall {
    /// Whether the piece, without an index, carries nothing of a call but a signature: no
    /// name, no arguments.
    pub fn signature_only(&self) -> bool {
        let argued = self
            .function
            .as_ref()
            .and_then(|f| f.arguments.as_ref())
            .is_some_and(|a| !a.0.is_empty());
        self.index.is_none() && !self.named() && !argued && self.extra_content.is_some()
    }

    /// Whether the piece names a tool.
    pub fn named(&self) -> bool {
        self.function
            .as_ref()
            .and_then(|f| f.name.as_deref())
            .is_some_and(|n| !n.is_empty())
    }
}

#[derive(Deserialize)]
pub struct DeltaFunction {
    pub name: Option<String>,
    pub arguments: Option<ArgumentsText>,
}

/// The finish reason as the service reads it.
pub fn finish(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("stop" | "tool_calls" | "function_call") | None => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some(other) => FinishReason::Other(other.to_string()),
    }
}
