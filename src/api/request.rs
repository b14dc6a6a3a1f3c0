//! The request body of `POST /api/agent/react_step`, field for field as the original service
//! description has it (camelCase inside `llm_config` and `user_api_keys`, snake_case elsewhere),
//! plus the additive optional fields. Shape and ranges are checked here; rules that span fields
//! are checked in `convert`.

use serde::Deserialize;
use validator::Validate;

use crate::llm::{Provider, RawApiKey};
use crate::step::{ContextSource, Encoding, Turn};
use crate::step::{HistoryStrategy, ToolMode, MAX_SUMMARY_CHARS};

/// Upper bounds that keep one request's work bounded whatever the body limit is. File contents
/// are bounded by the body limit (`REACTSTEP_MAX_BODY_BYTES`) alone.
const MAX_TEXT_CHARS: u64 = 1_000_000;
const MAX_HISTORY_TURNS: u64 = 10_000;
pub const MAX_CONTEXT_ITEMS: u64 = 1_000;

#[derive(Debug, Deserialize, Validate)]
#[serde(remote = "Self")]
pub struct ReactStepRequest {
    #[validate(length(min = 1, max = 256))]
    pub project_id: Option<String>,
    #[validate(length(min = 1, max = 256))]
    pub session_id: Option<String>,
    #[validate(length(max = "MAX_TEXT_CHARS"))]
    pub user_query: String,
    #[serde(default)]
    #[validate(length(max = "MAX_HISTORY_TURNS"))]
    pub conversation_history: Vec<Turn>,
    #[serde(default)]
    #[validate(length(max = "MAX_CONTEXT_ITEMS"))]
    pub explicit_context_paths: Vec<String>,
    #[serde(default)]
    #[validate(length(max = "MAX_CONTEXT_ITEMS"))]
    pub pinned_item_ids_to_include: Vec<String>,
    #[serde(default)]
    #[validate(nested)]
    pub implicit_context: Option<ImplicitContext>,
    #[serde(default)]
    #[validate(nested)]
    pub vector_search_results_to_include: Vec<VectorResult>,
    #[serde(default)]
    #[validate(length(max = "MAX_TEXT_CHARS"))]
    pub available_tools_prompt_segment: Option<String>,
    #[validate(nested)]
    pub llm_config: LlmConfigDto,
    #[serde(default, deserialize_with = "keys_object")]
    pub user_api_keys: Option<UserApiKeys>,
    #[validate(range(min = 1, max = 1000))]
    pub max_iterations_left: Option<u32>,
    #[serde(default)]
    #[validate(nested)]
    pub explicit_context: Vec<InlineFile>,
    #[serde(default)]
    #[validate(nested)]
    pub pinned_items: Vec<PinnedItem>,
    #[validate(length(max = "MAX_TEXT_CHARS"))]
    pub mock_response: Option<String>,
    /// Tokens the latest observation may take at most (default 2000).
    #[validate(range(min = 16, max = 1_000_000))]
    pub max_observation_tokens: Option<u32>,
    pub history_strategy: Option<HistoryStrategy>,
    #[validate(nested)]
    pub conversation_summary: Option<ConversationSummaryDto>,
    pub context_priority: Option<Vec<ContextSource>>,
    #[serde(default)]
    pub dry_run: bool,
    /// ReAct tags and thought rules.
    #[validate(nested)]
    pub react: Option<ReactDto>,
    /// Structured tools; the MCP shape (`inputSchema`) is accepted too.
    #[validate(nested)]
    pub tools: Option<Vec<ToolDto>>,
    /// Repair rounds after an invalid action (default 1).
    #[validate(range(max = 3))]
    pub max_repair_attempts: Option<u32>,
}

pub const MAX_TOOLS: u64 = 128;
const MAX_TOOL_NAME_CHARS: u64 = 64;
pub const MAX_TOOL_DESCRIPTION_CHARS: u64 = 10_000;

#[derive(Debug, Deserialize, Validate)]
#[serde(remote = "Self")]
pub struct ReactDto {
    #[validate(length(min = 1, max = 40), custom(function = "is_tag"))]
    pub thought_tag: Option<String>,
    #[validate(length(min = 1, max = 40), custom(function = "is_tag"))]
    pub action_tag: Option<String>,
    #[validate(length(min = 1, max = 40), custom(function = "is_tag"))]
    pub observation_tag: Option<String>,
    #[validate(length(min = 1, max = 40), custom(function = "is_tag"))]
    pub final_answer_tag: Option<String>,
    pub require_thought: Option<bool>,
    #[validate(range(max = 10_000))]
    pub min_thought_chars: Option<u32>,
    /// The step must end in a tool call: a direct answer is invalid.
    pub require_action: Option<bool>,
    /// A JSON Schema the final answer must match.
    pub final_answer_schema: Option<serde_json::Value>,
    /// Old tool results sent as placeholders.
    #[validate(nested)]
    pub clear_tool_results: Option<ClearToolResultsDto>,
    /// `false`, `true` or `{"warn_after", "stop_after"}`: read by `convert`, which names the
    /// field at fault.
    pub loop_guard: Option<serde_json::Value>,
    /// The tool whose call is the loop's answer: on the last step it is proposed.
    #[validate(length(min = 1, max = MAX_TOOL_NAME_CHARS))]
    pub answer_tool: Option<String>,
}

/// `react.clear_tool_results`.
#[derive(Debug, Deserialize, Validate)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct ClearToolResultsDto {
    #[validate(range(min = 1, max = 1000))]
    pub keep_last_steps: u32,
    #[validate(range(max = 1_000_000))]
    pub min_tokens: Option<u32>,
    pub server_side: Option<bool>,
}

/// A tag is words: letters, digits, spaces, `_` and `-`, starting with a letter.
fn is_tag(tag: &str) -> Result<(), validator::ValidationError> {
    let ok = tag.starts_with(|c: char| c.is_ascii_alphabetic())
        && tag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, ' ' | '_' | '-'))
        && !tag.ends_with(' ');
    if ok {
        Ok(())
    } else {
        Err(validator::ValidationError::new("tag").with_message(
            "must be words of letters, digits, spaces, '_' or '-', starting with a letter".into(),
        ))
    }
}

#[derive(Debug, Deserialize, Validate)]
#[serde(remote = "Self")]
pub struct ToolDto {
    #[validate(
        length(min = 1, max = "MAX_TOOL_NAME_CHARS"),
        custom(function = "is_tool_name")
    )]
    pub name: String,
    #[validate(length(max = "MAX_TOOL_DESCRIPTION_CHARS"))]
    pub description: Option<String>,
    pub parameters: Option<serde_json::Value>,
    #[serde(rename = "inputSchema")]
    pub input_schema: Option<serde_json::Value>,
}

/// Letters of any script (tools are named in Chinese too), digits, `_`, `-` and `.` (for
/// MCP-style names), starting with a letter or `_`. Native tool calling asks for less; see
/// `step::tools::is_native_tool_name`.
fn is_tool_name(name: &str) -> Result<(), validator::ValidationError> {
    if name.starts_with(|c: char| c.is_alphabetic() || c == '_')
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        Ok(())
    } else {
        Err(validator::ValidationError::new("name").with_message(
            "must start with a letter or '_' and hold only letters, digits, '_', '-' and '.'"
                .into(),
        ))
    }
}

/// Why a tool of this name would be refused, as `ToolDto` checks it; `None` when it passes. The
/// loop driver asks before it declares an MCP server's tools.
pub fn tool_name_refusal(name: &str) -> Option<String> {
    let chars = name.chars().count() as u64;
    if !(1..=MAX_TOOL_NAME_CHARS).contains(&chars) {
        return Some(format!(
            "a tool name is 1 to {MAX_TOOL_NAME_CHARS} characters"
        ));
    }
    is_tool_name(name)
        .err()
        .map(|e| format!("a tool name {}", e.message.unwrap_or_default()))
}

/// The validator's lengths are u64.
const SUMMARY_CHARS: u64 = MAX_SUMMARY_CHARS as u64;

#[derive(Debug, Deserialize, Validate)]
#[serde(remote = "Self")]
pub struct ConversationSummaryDto {
    /// Never shorter or longer than a summary the service returns.
    #[validate(length(min = 1, max = SUMMARY_CHARS))]
    pub text: String,
    pub turns: u32,
}

#[derive(Debug, Deserialize, Validate)]
#[serde(remote = "Self")]
pub struct ImplicitContext {
    #[validate(length(min = 1, max = 4096))]
    pub last_focused_file_path: Option<String>,
    pub last_focused_file_content: Option<String>,
    #[validate(range(min = 1))]
    pub cursor_line: Option<u32>,
}

#[derive(Debug, Deserialize, Validate)]
#[serde(remote = "Self")]
pub struct InlineFile {
    #[validate(length(min = 1, max = 4096))]
    pub path: String,
    pub content: String,
}

#[derive(Debug, Deserialize, Validate)]
#[serde(remote = "Self")]
pub struct PinnedItem {
    #[validate(length(min = 1, max = 4096))]
    pub id: String,
    pub content: String,
    #[validate(length(min = 1, max = 4096))]
    pub path: Option<String>,
}

#[derive(Debug, Deserialize, Validate)]
#[serde(remote = "Self")]
#[validate(schema(function = "line_range_is_ordered"))]
pub struct VectorResult {
    #[validate(length(min = 1, max = 4096))]
    pub path: Option<String>,
    pub content: String,
    pub score: Option<f64>,
    #[validate(range(min = 1))]
    pub start_line: Option<u32>,
    #[validate(range(min = 1))]
    pub end_line: Option<u32>,
}

fn line_range_is_ordered(v: &VectorResult) -> Result<(), validator::ValidationError> {
    let refused = |why: &str| {
        Err(validator::ValidationError::new("range").with_message(why.to_string().into()))
    };
    match (v.start_line, v.end_line) {
        (Some(s), Some(e)) if e < s => refused("end_line must not be before start_line"),
        // The heading numbers the content's lines from start_line: none past the last number.
        (Some(s), _) if lines_after_first(&v.content) > u32::MAX - s => {
            refused("the content's lines, counted from start_line, run past line 4294967295")
        }
        (None, Some(e)) if lines_after_first(&v.content) >= e => refused(
            "the content holds more lines than end_line leaves room for, counted back from it",
        ),
        _ => Ok(()),
    }
}

/// How many lines `content` holds after its first, as it is shown (blank lines at its end are
/// not).
fn lines_after_first(content: &str) -> u32 {
    let shown = content.trim_end_matches('\n');
    u32::try_from(memchr::memchr_iter(b'\n', shown.as_bytes()).count()).unwrap_or(u32::MAX)
}

#[derive(Debug, Deserialize, Validate)]
#[serde(remote = "Self")]
pub struct LlmConfigDto {
    #[serde(rename = "modelName")]
    #[validate(length(min = 1, max = 256))]
    pub model_name: String,
    #[serde(rename = "tokenLimit")]
    #[validate(range(min = 1, max = 10_000_000))]
    pub token_limit: u32,
    #[serde(rename = "reservedOutputTokens")]
    #[validate(range(min = 1, max = 1_000_000))]
    pub reserved_output_tokens: u32,
    #[validate(range(min = 0.0, max = 2.0))]
    pub temperature: Option<f64>,
    pub provider: Option<Provider>,
    pub tokenizer: Option<Encoding>,
    pub tool_mode: Option<ToolMode>,
    /// Whether a turn may propose several calls (default true).
    pub parallel_tool_calls: Option<bool>,
    /// How hard a reasoning model thinks: OpenAI's `reasoning_effort`, an Anthropic thinking
    /// budget.
    pub reasoning_effort: Option<crate::llm::ReasoningEffort>,
    /// Whether the provider's prompt cache is asked for (default true).
    pub prompt_cache: Option<bool>,
    /// How long the provider keeps the cached prompt, in its own values.
    pub prompt_cache_ttl: Option<crate::llm::CacheTtl>,
    /// Which of the provider's APIs the call speaks (default `chat`).
    pub api: Option<crate::llm::WireApi>,
    /// Tools are sent strict where the provider has it (default false).
    pub strict_tools: Option<bool>,
    /// Where to send the call instead of the operator's default for the provider; only URLs the
    /// operator allows.
    #[validate(length(min = 1, max = 2048))]
    pub base_url: Option<String>,
    /// The models tried in turn when the first fails in a way another model can fix; each is
    /// checked in `convert` (not here: a list far over its bound is refused whole).
    pub fallbacks: Option<Vec<FallbackDto>>,
}

/// A model of `llm_config.fallbacks`: the other settings are the first model's. Its key is
/// `user_api_keys.providerKeys.<provider>`. A field this does not name is refused, not ignored:
/// a `temperature` set here would otherwise silently not apply.
#[derive(Debug, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct FallbackDto {
    pub provider: Option<Provider>,
    #[serde(rename = "modelName")]
    pub model_name: String,
    #[serde(rename = "tokenLimit")]
    pub token_limit: Option<u32>,
    #[serde(rename = "reservedOutputTokens")]
    pub reserved_output_tokens: Option<u32>,
    pub api: Option<crate::llm::WireApi>,
    pub base_url: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(remote = "Self")]
pub struct UserApiKeys {
    #[serde(rename = "llmKey")]
    pub llm_key: Option<RawApiKey>,
    /// The fallbacks' keys, by provider name: never the first model's (that is `llmKey`).
    #[serde(rename = "providerKeys")]
    pub provider_keys: Option<std::collections::BTreeMap<String, RawApiKey>>,
}

/// `user_api_keys` as the contract has it: an object or null. A derived struct would also take
/// an array of its fields in order (`["sk-…"]`), which the contract does not allow.
fn keys_object<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<UserApiKeys>, D::Error> {
    struct ObjectOrNull;
    impl<'de> serde::de::Visitor<'de> for ObjectOrNull {
        type Value = Option<UserApiKeys>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object or null")
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            UserApiKeys::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Some)
        }
    }
    d.deserialize_option(OptionOf(ObjectOrNull))
}

/// Hands `Some` on to the inner visitor, so that null and a missing field are both `None`.
struct OptionOf<V>(V);

impl<'de, V: serde::de::Visitor<'de, Value = Option<UserApiKeys>>> serde::de::Visitor<'de>
    for OptionOf<V>
{
    type Value = Option<UserApiKeys>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        self.0.expecting(f)
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self.0)
    }
}

/// The name a client sees for a Rust field name in a validation error.
pub fn wire_name(field: &str) -> &str {
    match field {
        "model_name" => "modelName",
        "token_limit" => "tokenLimit",
        "reserved_output_tokens" => "reservedOutputTokens",
        "llm_key" => "llmKey",
        other => other,
    }
}

crate::json::objects_only!(
    ReactStepRequest,
    ReactDto,
    ClearToolResultsDto,
    ToolDto,
    ConversationSummaryDto,
    ImplicitContext,
    InlineFile,
    PinnedItem,
    VectorResult,
    LlmConfigDto,
    FallbackDto,
    UserApiKeys
);
