//! The Responses API on the wire: the request body and its `input` items, the reply and its
//! `output` items, as the API documents them. Output items are kept as the API wrote them (they go
//! back verbatim); only what the service reads of them is typed, with every list bounded.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::llm::bounded::{Bounded, MAX_BLOCKS, MAX_TURN_JSON_BYTES};
use crate::llm::{nonzero, FinishReason, Usage, WireError};

#[derive(Serialize)]
pub struct Body<'a> {
    pub model: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub instructions: &'a str,
    pub input: Vec<Input<'a>>,
    pub max_output_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Always `false`: nothing the user sends is kept by the provider.
    pub store: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<Reasoning>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<&'static str>,
    /// Sent only as `false`, and only with tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_cache_key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_cache_retention: Option<&'static str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
}

#[derive(Serialize)]
pub struct Reasoning {
    pub effort: &'static str,
}

/// A function tool, in the Responses API's flat form.
#[derive(Serialize)]
pub struct Tool<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub description: &'a str,
    pub parameters: &'a serde_json::Value,
    /// Sent only as `true`, for a schema in OpenAI's strict subset (`llm_config.strict_tools`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// The tools; with `strict`, each whose schema fits OpenAI's strict subset is marked strict.
pub fn tools(specs: &[crate::llm::ToolSpec], strict: bool) -> Vec<Tool<'_>> {
    specs
        .iter()
        .map(|t| Tool {
            kind: "function",
            name: &t.name,
            description: &t.description,
            parameters: &t.parameters,
            strict: (strict
                && crate::llm::strict_schema::openai_strict_misfit(&t.parameters).is_none())
            .then_some(true),
        })
        .collect()
}

/// One item of `input`.
#[derive(Serialize)]
#[serde(untagged)]
pub enum Input<'a> {
    /// A user's or an assistant's text.
    Message {
        role: &'static str,
        content: Cow<'a, str>,
    },
    /// An output item of an earlier reply, as it came.
    Verbatim(&'a serde_json::Value),
    /// An output item of an earlier reply, changed (see `input::kept_text`).
    Changed(serde_json::Value),
    /// An earlier call, rebuilt from the turn (no state of its own came with it).
    FunctionCall {
        #[serde(rename = "type")]
        kind: &'static str,
        call_id: &'a str,
        name: &'a str,
        /// The arguments as a JSON string, as the API returns them.
        arguments: String,
    },
    /// A tool's result.
    FunctionCallOutput {
        #[serde(rename = "type")]
        kind: &'static str,
        call_id: &'a str,
        output: Cow<'a, str>,
    },
}

#[derive(Deserialize)]
pub struct Reply {
    /// Kept as written: each goes back verbatim.
    pub output: Bounded<Box<RawValue>, MAX_BLOCKS>,
    pub status: Option<String>,
    pub incomplete_details: Option<Incomplete>,
    pub usage: Option<ReplyUsage>,
}

#[derive(Deserialize)]
pub struct Incomplete {
    pub reason: Option<String>,
}

/// What the service reads of an output item; the rest stays in the item.
#[derive(Deserialize)]
pub struct Item {
    #[serde(rename = "type")]
    pub kind: String,
    pub call_id: Option<String>,
    pub name: Option<String>,
    /// A call's arguments: JSON text in a string.
    pub arguments: Option<String>,
    /// A message's phase: `commentary` (a preamble) or `final_answer`.
    pub phase: Option<String>,
    pub content: Option<Bounded<Part, MAX_BLOCKS>>,
}

#[derive(Deserialize)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
    pub refusal: Option<String>,
}

#[derive(Deserialize)]
pub struct ReplyUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub input_tokens_details: Option<InputDetails>,
    pub output_tokens_details: Option<OutputDetails>,
}

#[derive(Deserialize)]
pub struct InputDetails {
    pub cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
pub struct OutputDetails {
    pub reasoning_tokens: Option<u64>,
}

impl From<ReplyUsage> for Usage {
    fn from(u: ReplyUsage) -> Self {
        Self {
            prompt_tokens: u.input_tokens,
            completion_tokens: u.output_tokens,
            approximate: false,
            cached_prompt_tokens: nonzero(u.input_tokens_details.and_then(|d| d.cached_tokens)),
            cache_creation_prompt_tokens: None,
            reasoning_tokens: nonzero(u.output_tokens_details.and_then(|d| d.reasoning_tokens)),
        }
    }
}

/// Why the reply ended, from its `status` and `incomplete_details`.
pub fn finish(status: Option<&str>, incomplete: Option<&Incomplete>) -> FinishReason {
    match status {
        Some("incomplete") => match incomplete.and_then(|i| i.reason.as_deref()) {
            Some("max_output_tokens") => FinishReason::Length,
            Some(other) => FinishReason::Other(other.to_string()),
            None => FinishReason::Other("incomplete".into()),
        },
        Some("failed" | "cancelled") => FinishReason::Other(status.unwrap_or_default().into()),
        _ => FinishReason::Stop,
    }
}

pub use crate::llm::completion::MESSAGES_APART;

/// The output items read: what each says, and each as it came, for the turn to carry back.
#[derive(Default)]
pub struct Output {
    /// The text of every message, in order, each a blank line ([`MESSAGES_APART`]) after the one
    /// before: two messages are two paragraphs, not one run-on sentence.
    pub text: String,
    /// The text of messages marked `commentary` (preambles the model wrote before acting), and
    /// of the others, kept apart the same way.
    pub commentary_text: String,
    pub other_text: String,
    pub refusal: String,
    /// `(call_id, name, arguments)` of each function call, in order.
    pub calls: Vec<(Option<String>, String, String)>,
    /// How many message items are marked `commentary`.
    pub commentary: usize,
    pub items: Vec<serde_json::Value>,
    /// Bytes the items take as written.
    pub bytes: usize,
}

impl Output {
    /// Adds one output item, as written. Refuses items that, together, are more than a turn can
    /// carry back, before any of them is built.
    pub fn push(&mut self, raw: &str) -> Result<(), WireError> {
        self.bytes += raw.len();
        if self.bytes > MAX_TURN_JSON_BYTES {
            return Err(WireError::Shape(format!(
                "the model's output items take more than the {MAX_TURN_JSON_BYTES} bytes a step can carry back to it"
            )));
        }
        let item: Item =
            serde_json::from_str(raw).map_err(|e| WireError::json("an output item", &e))?;
        match item.kind.as_str() {
            "message" => {
                let commentary = item.phase.as_deref() == Some("commentary");
                self.commentary += usize::from(commentary);
                let apart = match commentary {
                    true => &mut self.commentary_text,
                    false => &mut self.other_text,
                };
                let mut begun = false;
                for part in item.content.map(|c| c.kept).unwrap_or_default() {
                    match part.kind.as_str() {
                        "output_text" => {
                            let text = part.text.as_deref().unwrap_or("");
                            if !begun && !text.is_empty() {
                                begun = true;
                                for written in [&mut self.text, &mut *apart] {
                                    if !written.is_empty() {
                                        written.push_str(MESSAGES_APART);
                                    }
                                }
                            }
                            self.text.push_str(text);
                            apart.push_str(text);
                        }
                        "refusal" => self.refusal.push_str(part.refusal.as_deref().unwrap_or("")),
                        _ => {}
                    }
                }
            }
            "function_call" => self.calls.push((
                item.call_id,
                item.name.unwrap_or_default(),
                item.arguments.unwrap_or_default(),
            )),
            _ => {}
        }
        let value = serde_json::from_str(raw).map_err(|e| WireError::json("an output item", &e))?;
        self.items.push(value);
        Ok(())
    }

    /// The reply is a preamble alone: no call, and no text or refusal but that of messages
    /// marked `commentary` (a `final_answer` message left blank says nothing).
    pub fn preamble_only(&self) -> bool {
        self.calls.is_empty()
            && self.commentary > 0
            && self.other_text.trim().is_empty()
            && self.refusal.trim().is_empty()
    }

    /// The completion's text, and the preamble kept apart from it. With calls, every message
    /// is the thought before them, in order. Without, the preamble is the thought before the
    /// answer (the text, or the refusal where there is no text); a preamble alone is the text,
    /// so that the repair round shows it.
    pub fn texts(&mut self) -> (String, String) {
        if !self.calls.is_empty() || self.commentary_text.is_empty() {
            return (self.text_or_refusal(), String::new());
        }
        let commentary = std::mem::take(&mut self.commentary_text);
        self.text = std::mem::take(&mut self.other_text);
        match self.text_or_refusal() {
            text if text.trim().is_empty() => (commentary, String::new()),
            text => (text, commentary),
        }
    }

    /// The model declined: a refusal and no text.
    pub fn refused(&self) -> bool {
        self.text.trim().is_empty() && !self.refusal.trim().is_empty()
    }

    /// The text, or the refusal where there is no text.
    fn text_or_refusal(&mut self) -> String {
        match self.text.trim().is_empty() && !self.refusal.is_empty() {
            true => std::mem::take(&mut self.refusal),
            false => std::mem::take(&mut self.text),
        }
    }
}
