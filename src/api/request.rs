//! The request body of `POST /api/agent/react_step`, field for field as the original service
//! description has it (camelCase inside `llm_config` and `user_api_keys`, snake_case elsewhere),
//! plus the additive optional fields. Shape and ranges are checked here; rules that span fields
//! are checked in `convert`.

use serde::Deserialize;
use validator::Validate;

use crate::llm::{Provider, RawApiKey};
use crate::step::context::ContextSource;
use crate::step::history::Turn;
use crate::step::tokens::Encoding;
use crate::step::HistoryStrategy;

/// Upper bounds that keep one request's work bounded whatever the body limit is.
pub const MAX_HISTORY_TURNS: u64 = 10_000;
pub const MAX_CONTEXT_ITEMS: u64 = 1_000;

#[derive(Debug, Deserialize, Validate)]
pub struct ReactStepRequest {
    #[validate(length(min = 1, max = 256))]
    pub project_id: Option<String>,
    #[validate(length(min = 1, max = 256))]
    pub session_id: Option<String>,
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
    pub available_tools_prompt_segment: Option<String>,
    #[validate(nested)]
    pub llm_config: LlmConfigDto,
    #[serde(default)]
    pub user_api_keys: Option<UserApiKeys>,
    #[validate(range(min = 1, max = 1000))]
    pub max_iterations_left: Option<u32>,
    #[serde(default)]
    #[validate(nested)]
    pub explicit_context: Vec<InlineFile>,
    #[serde(default)]
    #[validate(nested)]
    pub pinned_items: Vec<PinnedItem>,
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
}

#[derive(Debug, Deserialize, Validate)]
pub struct ConversationSummaryDto {
    #[validate(length(min = 1, max = 100_000))]
    pub text: String,
    pub turns: u32,
}

#[derive(Debug, Deserialize, Validate)]
pub struct ImplicitContext {
    #[validate(length(min = 1, max = 4096))]
    pub last_focused_file_path: Option<String>,
    pub last_focused_file_content: Option<String>,
    #[validate(range(min = 1))]
    pub cursor_line: Option<u32>,
}

#[derive(Debug, Deserialize, Validate)]
pub struct InlineFile {
    #[validate(length(min = 1, max = 4096))]
    pub path: String,
    pub content: String,
}

#[derive(Debug, Deserialize, Validate)]
pub struct PinnedItem {
    #[validate(length(min = 1, max = 4096))]
    pub id: String,
    pub content: String,
    #[validate(length(min = 1, max = 4096))]
    pub path: Option<String>,
}

#[derive(Debug, Deserialize, Validate)]
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
    match (v.start_line, v.end_line) {
        (Some(s), Some(e)) if e < s => Err(validator::ValidationError::new("range")
            .with_message("end_line must not be before start_line".into())),
        _ => Ok(()),
    }
}

#[derive(Debug, Deserialize, Validate)]
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
}

#[derive(Debug, Deserialize)]
pub struct UserApiKeys {
    #[serde(rename = "llmKey")]
    pub llm_key: Option<RawApiKey>,
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
