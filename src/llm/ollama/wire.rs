//! Ollama's native chat API on the wire (`POST /api/chat`): the request with its `options`, and
//! the reply, which is also the shape of every line of a stream.

use crate::llm::bounded::{Bounded, MAX_CALLS_PER_TURN};
use serde::{Deserialize, Serialize};

#[derive(Serialize)]
pub struct Body<'a> {
    pub model: &'a str,
    pub messages: Vec<Message<'a>>,
    /// Ollama streams unless told not to.
    pub stream: bool,
    /// OpenAI's function tools, which Ollama takes as they are.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<crate::llm::openai::wire::Tool<'a>>,
    /// Whether a thinking model thinks first (set only when the request says).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub think: Option<bool>,
    pub options: Options<'a>,
}

#[derive(Serialize)]
pub struct Options<'a> {
    /// The context window: without it Ollama uses its small default and silently cuts the
    /// front of a longer prompt (the instructions and the tools).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_ctx: Option<u32>,
    /// The output cap.
    pub num_predict: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub stop: &'a [String],
}

#[derive(Serialize)]
pub struct Message<'a> {
    pub role: &'static str,
    pub content: std::borrow::Cow<'a, str>,
    /// An assistant's earlier calls, their arguments as objects.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<OutCall<'a>>,
}

#[derive(Serialize)]
pub struct OutCall<'a> {
    pub function: OutFunction<'a>,
}

#[derive(Serialize)]
pub struct OutFunction<'a> {
    pub name: &'a str,
    pub arguments: &'a serde_json::Map<String, serde_json::Value>,
}

/// A reply, or one line of a stream: the last has `done: true` and the counts.
#[derive(Deserialize)]
pub struct Reply {
    pub message: Option<ReplyMessage>,
    pub done: bool,
    pub done_reason: Option<String>,
    /// Left out when the whole prompt came from Ollama's cache.
    pub prompt_eval_count: Option<u64>,
    pub eval_count: Option<u64>,
}

#[derive(Deserialize)]
pub struct ReplyMessage {
    /// What a thinking model thought, apart from its answer.
    #[serde(default)]
    pub thinking: Option<String>,
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub tool_calls: Bounded<ReplyToolCall, MAX_CALLS_PER_TURN>,
}

#[derive(Deserialize)]
pub struct ReplyToolCall {
    pub function: ReplyFunction,
}

#[derive(Deserialize)]
pub struct ReplyFunction {
    pub name: String,
    /// The arguments' JSON text (an object, or a string holding one), unread until checked.
    #[serde(default)]
    pub arguments: Option<Box<serde_json::value::RawValue>>,
}

/// A line of a stream that reports an error instead.
#[derive(Deserialize)]
pub struct ErrorLine {
    pub error: serde_json::Value,
}
