//! Anthropic Messages on the wire: the request body, the reply and the stream's events, as the
//! API documents them. Block and event types added later are skipped (Anthropic says new ones
//! will appear); a field the service uses that is missing or of another type fails the decode.

use serde::{Deserialize, Serialize};

use crate::llm::{FinishReason, ThinkingBlock, Usage, WireError};

#[derive(Serialize)]
pub struct Body<'a> {
    pub model: &'a str,
    pub max_tokens: u32,
    pub system: System<'a>,
    pub messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Thinking>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_config: Option<OutputConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_management: Option<ContextManagement>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
}

/// Context editing: the API clears old tool results itself (beta `context-management-2025-06-27`).
#[derive(Serialize)]
pub struct ContextManagement {
    pub edits: [ClearToolUses; 1],
}

/// `clear_tool_uses_20250919`: keep the latest `keep.value` tool uses' results.
#[derive(Serialize)]
pub struct ClearToolUses {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub keep: KeepToolUses,
}

#[derive(Serialize)]
pub struct KeepToolUses {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub value: u32,
}

impl ContextManagement {
    pub fn keeping(value: u32) -> Self {
        Self {
            edits: [ClearToolUses {
                kind: "clear_tool_uses_20250919",
                keep: KeepToolUses {
                    kind: "tool_uses",
                    value,
                },
            }],
        }
    }
}

/// The beta header context editing needs.
pub const CONTEXT_MANAGEMENT_BETA: &str = "context-management-2025-06-27";

/// Thinking: `enabled` with the `budget_tokens` of the reply's `max_tokens` that may go to it,
/// or `adaptive` (the model decides, guided by `output_config.effort`).
#[derive(Serialize, Clone, Copy, Debug)]
pub struct Thinking {
    #[serde(rename = "type")]
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_tokens: Option<u32>,
}

/// `output_config`: the effort adaptive thinking is guided by.
#[derive(Serialize, Clone, Copy, Debug)]
pub struct OutputConfig {
    pub effort: &'static str,
}

/// `POST /v1/messages/count_tokens`: the prompt's parts, without the output settings.
#[derive(Serialize)]
pub struct CountBody<'a> {
    pub model: &'a str,
    pub system: System<'a>,
    pub messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Thinking>,
}

/// The system prompt: text, or one text block when a cache breakpoint follows it.
#[derive(Serialize)]
#[serde(untagged)]
pub enum System<'a> {
    Text(&'a str),
    Blocks([SystemBlock<'a>; 1]),
}

#[derive(Serialize)]
pub struct SystemBlock<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: &'a str,
    pub cache_control: CacheControl,
}

/// A cache breakpoint: what comes before it, tools first, is cached, for `ttl` (`5m`, the
/// API's default, when it is left out; or `1h`).
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheControl {
    #[serde(rename = "type")]
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<&'static str>,
}

pub const EPHEMERAL: CacheControl = CacheControl {
    kind: "ephemeral",
    ttl: None,
};

#[derive(Deserialize)]
pub struct Counted {
    pub input_tokens: u64,
}

#[derive(Serialize)]
pub struct ToolChoice {
    #[serde(rename = "type")]
    pub kind: &'static str,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub disable_parallel_tool_use: bool,
}

#[derive(Serialize)]
pub struct Tool<'a> {
    pub name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub description: &'a str,
    pub input_schema: &'a serde_json::Value,
    /// The call's input is constrained to the schema (`llm_config.strict_tools`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub strict: bool,
}

#[derive(Serialize)]
pub struct Message<'a> {
    pub role: &'static str,
    pub content: Content<'a>,
}

/// A message's content: text, or blocks when it carries tool calls or their results.
#[derive(Serialize)]
#[serde(untagged)]
pub enum Content<'a> {
    Text(&'a str),
    Blocks(Vec<OutBlock<'a>>),
}

impl<'a> Content<'a> {
    /// The content as blocks (text becomes one text block).
    pub fn blocks_mut(&mut self) -> &mut Vec<OutBlock<'a>> {
        if let Self::Text(text) = *self {
            *self = Self::Blocks(vec![OutBlock::Text {
                text,
                cache_control: None,
            }]);
        }
        match self {
            Self::Blocks(blocks) => blocks,
            Self::Text(_) => unreachable!("made blocks above"),
        }
    }

    pub fn push(&mut self, block: OutBlock<'a>) {
        self.blocks_mut().push(block);
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutBlock<'a> {
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
    Text {
        text: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a serde_json::Map<String, serde_json::Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
}

impl OutBlock<'_> {
    /// Puts a cache breakpoint after the block; thinking blocks take none (the API refuses it).
    pub fn mark(&mut self, control: CacheControl) -> bool {
        match self {
            // Nor does an empty text block (the API refuses the marker there).
            Self::Text { text, .. } if text.trim().is_empty() => false,
            Self::Text { cache_control, .. }
            | Self::ToolUse { cache_control, .. }
            | Self::ToolResult { cache_control, .. } => {
                *cache_control = Some(control);
                true
            }
            Self::Thinking { .. } | Self::RedactedThinking { .. } => false,
        }
    }
}

#[derive(Deserialize)]
pub struct Reply {
    pub content: crate::llm::bounded::Bounded<Block, { crate::llm::bounded::MAX_BLOCKS }>,
    pub stop_reason: Option<String>,
    pub usage: Option<ReplyUsage>,
}

/// A content block of a reply. Read through [`BlockFields`], a plain struct: an internally
/// tagged enum would first copy the whole block into a tree of its own, a tool call's `input` of
/// millions of values included.
#[derive(Deserialize)]
#[serde(try_from = "BlockFields")]
pub enum Block {
    Text {
        text: String,
    },
    Thinking {
        thinking: String,
        signature: String,
    },
    RedactedThinking {
        data: String,
    },
    ToolUse {
        id: Option<String>,
        name: String,
        /// The arguments' JSON text, unread until its size is checked.
        input: Option<Box<serde_json::value::RawValue>>,
    },
    /// Block types added later carry nothing for a step.
    Other,
}

/// Every field any block has; the block's `type` says which it must have.
#[derive(Deserialize)]
pub struct BlockFields {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    thinking: Option<String>,
    signature: Option<String>,
    data: Option<String>,
    id: Option<String>,
    name: Option<String>,
    input: Option<Box<serde_json::value::RawValue>>,
}

impl TryFrom<BlockFields> for Block {
    type Error = String;

    fn try_from(b: BlockFields) -> Result<Self, String> {
        let missing = |field: &str| format!("a {} block without its `{field}`", b.kind);
        Ok(match b.kind.as_str() {
            "text" => Self::Text {
                text: b.text.ok_or_else(|| missing("text"))?,
            },
            "thinking" => Self::Thinking {
                thinking: b.thinking.ok_or_else(|| missing("thinking"))?,
                signature: b.signature.ok_or_else(|| missing("signature"))?,
            },
            "redacted_thinking" => Self::RedactedThinking {
                data: b.data.ok_or_else(|| missing("data"))?,
            },
            "tool_use" => Self::ToolUse {
                id: b.id,
                name: b.name.ok_or_else(|| missing("name"))?,
                input: b.input,
            },
            _ => Self::Other,
        })
    }
}

#[derive(Deserialize)]
pub struct ReplyUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    pub cache_read_input_tokens: Option<u64>,
}

impl From<ReplyUsage> for Usage {
    /// Every prompt token the call was billed for, cached or not.
    fn from(u: ReplyUsage) -> Self {
        Self {
            prompt_tokens: u
                .input_tokens
                .saturating_add(u.cache_creation_input_tokens.unwrap_or(0))
                .saturating_add(u.cache_read_input_tokens.unwrap_or(0)),
            completion_tokens: u.output_tokens,
            approximate: false,
            cached_prompt_tokens: crate::llm::nonzero(u.cache_read_input_tokens),
            cache_creation_prompt_tokens: crate::llm::nonzero(u.cache_creation_input_tokens),
            reasoning_tokens: None,
        }
    }
}

/// One event of a stream, by its `type`.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: u64,
        content_block: StartBlock,
    },
    ContentBlockDelta {
        index: u64,
        delta: BlockDelta,
    },
    MessageDelta {
        delta: MessageDeltaBody,
        usage: Option<DeltaUsage>,
    },
    MessageStop,
    Error,
    /// ping, content_block_stop, and event types added later.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
pub struct StartMessage {
    pub usage: ReplyUsage,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StartBlock {
    ToolUse {
        id: Option<String>,
        name: String,
        /// `{}` from Anthropic itself, its arguments following in pieces; some servers that
        /// speak its wire send them whole here instead.
        /// (A `Value`: raw JSON cannot be read inside an enum tagged by a field.)
        input: Option<serde_json::Value>,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
    },
    RedactedThinking {
        data: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    /// Citation deltas and later kinds carry nothing for a step.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
pub struct MessageDeltaBody {
    pub stop_reason: Option<String>,
}

#[derive(Deserialize)]
pub struct DeltaUsage {
    pub output_tokens: u64,
}

/// A thinking block goes back to Anthropic with its signature, or is refused there: one that
/// came without it is a drifted reply, not something to hand the client.
pub fn signed<'a>(blocks: impl IntoIterator<Item = &'a ThinkingBlock>) -> Result<(), WireError> {
    let unsigned = blocks.into_iter().any(
        |b| matches!(b, ThinkingBlock::Thinking { signature, .. } if signature.trim().is_empty()),
    );
    if unsigned {
        return Err(WireError::Shape(
            "a thinking block came without its signature".into(),
        ));
    }
    Ok(())
}

/// The stop reason as the service reads it.
pub fn finish(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("end_turn" | "stop_sequence" | "tool_use") | None => FinishReason::Stop,
        Some("max_tokens") => FinishReason::Length,
        Some(other) => FinishReason::Other(other.to_string()),
    }
}
