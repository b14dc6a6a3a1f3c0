//! What a step is asked: the request, already validated, and the model it is put to.

use serde::{Deserialize, Serialize};

use super::context::tokens::Encoding;
use super::context::workspace;
use super::context::{ContextItem, ContextSource, Excluded};
use super::decide::ReactSettings;
use super::history::Turn;
use super::tools;
use crate::llm::{ApiKey, Provider};

#[derive(Debug, Clone)]
pub struct LlmConfig {
    pub provider: Provider,
    pub model: String,
    pub token_limit: u32,
    pub reserved_output_tokens: u32,
    pub temperature: Option<f64>,
    pub tokenizer: Option<Encoding>,
    pub tool_mode: ToolMode,
    /// The operator-allowed base URL the request named, if any.
    pub base_url: Option<String>,
    pub reasoning_effort: Option<crate::llm::ReasoningEffort>,
    /// The provider's prompt cache is asked for (`llm_config.prompt_cache`, default true).
    pub prompt_cache: bool,
    /// How long the provider keeps it (`llm_config.prompt_cache_ttl`).
    pub prompt_cache_ttl: Option<crate::llm::CacheTtl>,
    /// Tools are sent strict where the provider has it (`llm_config.strict_tools`).
    pub strict_tools: bool,
}

/// A model the step falls back to (`llm_config.fallbacks`), with its own key: never another
/// provider's.
#[derive(Debug)]
pub struct Fallback {
    pub llm: LlmConfig,
    pub key: Option<ApiKey>,
}

/// How the model is asked to call a tool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolMode {
    /// ReAct text: `Action: tool(args)`.
    #[default]
    Text,
    /// The provider's own tool calling (OpenAI `tools`, Anthropic `tool_use`).
    Native,
    /// Native when the provider's hosted models call tools reliably and the tools are declared.
    Auto,
}

impl ToolMode {
    pub fn is_native(self, provider: Provider, callable_tools: bool) -> bool {
        match self {
            Self::Text => false,
            Self::Native => true,
            Self::Auto => callable_tools && provider.capabilities().native_by_default,
        }
    }
}

impl LlmConfig {
    /// What a state made by this call records as its origin.
    pub fn state_origin(&self) -> crate::llm::StateOrigin {
        crate::llm::StateOrigin {
            provider: self.provider.name().to_string(),
            api: self.provider.wire_api().as_str().to_string(),
            model: self.model.clone(),
        }
    }

    /// What the prompt may use: the window less what the answer needs, and less the thinking
    /// budget a provider adds to it.
    pub fn prompt_budget(&self) -> u32 {
        let thinking = self.provider.api().output_reserve(self.reasoning_effort);
        self.token_limit
            .saturating_sub(self.reserved_output_tokens)
            .saturating_sub(thinking)
    }
}

/// What stands for conversation turns that do not fit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryStrategy {
    /// One line: `[k earlier turns omitted]`.
    #[default]
    Omit,
    /// A summary made with one extra model call (or the client's, while it still covers them).
    Summarize,
}

/// Everything a step needs, already validated.
#[derive(Debug)]
pub struct StepInput {
    pub session_id: String,
    pub user_query: String,
    pub history: Vec<Turn>,
    /// Within each source in the client's order; search hits by score.
    pub context: Vec<ContextItem>,
    pub unresolved: Vec<Excluded>,
    pub tools_segment: String,
    pub llm: LlmConfig,
    pub key: Option<ApiKey>,
    pub iterations_left: u32,
    pub mock_response: Option<String>,
    /// When the request arrived: the timestamp of the user's turn.
    pub received_at: String,
    /// Sources in the order they are served; the rest follow in the default order.
    pub context_order: Vec<ContextSource>,
    pub max_observation_tokens: u32,
    pub history_strategy: HistoryStrategy,
    pub conversation_summary: Option<ConversationSummary>,
    pub dry_run: bool,
    pub project_id: Option<String>,
    /// What the operator set for every step, shared by every step's input.
    pub settings: std::sync::Arc<StepSettings>,
    /// Whether the workspace's files were read into the context: a second fit of the prompt
    /// does not read them again.
    pub workspace_read: bool,
    pub react: ReactSettings,
    /// The tools an action is checked against.
    pub tools: tools::Catalog,
    /// When the whole step must be answered (REACTSTEP_STEP_TIMEOUT_SECS after it arrived).
    pub deadline: tokio::time::Instant,
    /// What each phase of the step took, for the response's `Server-Timing`.
    pub timings: std::sync::Arc<crate::telemetry::timing::PhaseTimes>,
    /// What the request itself calls for saying (fields it sent that mean nothing here): the
    /// first of the answer's warnings.
    pub notices: Vec<String>,
    /// What the loop guard tells the model at the end of the prompt (set by the step).
    pub loop_notice: Option<String>,
    /// The models tried in turn when this one fails in a way another can fix (`fallback.rs`).
    pub fallbacks: Vec<Fallback>,
    /// Whether a model is left to fall back to while this one is asked: a refusal (a content
    /// filter) is then a failure, not the step's answer.
    pub falls_back: bool,
    /// How the answer is read: a ReAct step's, or a plan's or an evaluation's (`task.rs`).
    pub reading: super::structured::Reading,
}

impl StepInput {
    /// `text` without any piece of a key the request holds (its model's, its fallbacks'): what
    /// quotes the request (a schema a call failed, the tools' names) may hold one the client
    /// put there by mistake.
    pub fn without_keys(&self, text: &str) -> String {
        let fallbacks = self.fallbacks.iter().filter_map(|f| f.key.as_ref());
        let keys = self.key.iter().chain(fallbacks);
        keys.fold(text.to_string(), |text, key| key.redact_from(&text))
    }
}

/// What the operator set for every step, made once at start-up.
#[derive(Debug, Default)]
pub struct StepSettings {
    /// Where context named without content may be read from, when the operator allows it.
    pub workspace: Option<workspace::Workspace>,
    /// The operator's margin for models whose tokenizer is not public; `None` keeps the margin
    /// calibrated for the model's family.
    pub approximation_margin_percent: Option<u32>,
}

/// A summary of the oldest turns (`history_strategy: "summarize"`) and the number of them it
/// stands for: made by the step, sent back by the client with its next request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConversationSummary {
    pub text: String,
    pub turns: usize,
}
