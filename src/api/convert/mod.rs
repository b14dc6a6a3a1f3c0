//! Parse, don't validate: the wire request becomes the step's domain input once, here. Shape and
//! ranges come from `validator` (`shape`); then each part of the request has its validator for
//! the rules that span its fields: the model call (`llm`: a provider that can be inferred, an
//! output reserve below the limit, a key where the provider needs one), the conversation, the
//! context, the ReAct settings and the tools. Every failure is collected in one list, so that
//! one 400 names all the fields at fault.

mod context;
mod conversation;
mod fallbacks;
mod llm;
mod shape;
mod tools;

use super::request::ReactStepRequest;
use super::response::FieldError;
use crate::config::Settings;
use crate::llm::{ApiKey, Provider};
use crate::step::{Catalog, ContextItem, ContextSource, Excluded, ReactSettings};
use crate::step::{ConversationSummary, Fallback, LlmConfig, StepInput};

pub use conversation::{history_is_valid, session_id_is_valid};

/// `max_iterations_left` when the client does not send it.
pub const DEFAULT_MAX_ITERATIONS: u32 = 10;
/// `max_observation_tokens` when the client does not send it (the ReAct requirements' figure).
const DEFAULT_MAX_OBSERVATION_TOKENS: u32 = 2000;

/// What a request is converted with: the server's settings and destinations, shared by every
/// request, and what is the request's own.
pub struct Conversion {
    pub settings: std::sync::Arc<Settings>,
    pub destinations: std::sync::Arc<super::base_urls::Destinations>,
    pub session_id: String,
    pub received_at: String,
    /// The body's top-level fields the contract does not name.
    pub unknown: super::unknown_fields::Unknown,
}

/// One validator per part of the request, each adding what is wrong to one list, in this order;
/// the list is sorted by field (stably: a field's errors keep their order) before it is answered.
pub fn step_input(
    mut req: ReactStepRequest,
    how: Conversion,
) -> Result<StepInput, Vec<FieldError>> {
    let mut fields = shape::check(&req);
    // A list over its bound is a certain 400: stop here, before the work below that grows with
    // the lists (de-duplicating context, cataloguing tools) is done on 100 times the bound.
    if shape::has_list_over_bound(&fields) {
        return Err(fields);
    }
    let mut fail = |field: &str, message: String| {
        fields.push(FieldError {
            field: field.into(),
            message,
        })
    };
    let provider = llm::model(&req, &mut fail);
    llm::mock_response(
        req.mock_response.as_deref(),
        how.settings.allow_mock_response,
        &mut fail,
    );
    let mocked = req.mock_response.is_some();
    let provider_keys = req
        .user_api_keys
        .as_mut()
        .and_then(|k| k.provider_keys.take());
    let key = llm::key(req.user_api_keys.take(), provider, mocked, &mut fail);
    conversation::check(&req.user_query, &req.conversation_history, &mut fail);
    let order = context::priority(req.context_priority.take(), &mut fail);
    let (context, unresolved) = context::items(&mut req);
    let mut react = tools::react_settings(req.react.take(), req.max_repair_attempts, &mut fail);
    react.parallel_tool_calls = req.llm_config.parallel_tool_calls.unwrap_or(true);
    let tools = tools::catalog(
        req.tools.take().unwrap_or_default(),
        req.available_tools_prompt_segment.as_deref().unwrap_or(""),
        &mut fail,
    );
    let base_url = llm::destination(
        &req.llm_config,
        provider,
        key.as_ref(),
        &how.destinations,
        &mut fail,
    );
    tools::tool_mode(req.llm_config.tool_mode, &tools, &mut fail);
    let listed = req.llm_config.fallbacks.take();
    let chain = fallbacks::Chain {
        first: &req.llm_config,
        mocked,
        destinations: &how.destinations,
    };
    let fallbacks = fallbacks::check(listed, provider_keys, &chain, &mut fail);
    let (Some(provider), true) = (provider, fields.is_empty()) else {
        fields.sort_by(|a, b| a.field.cmp(&b.field));
        return Err(scrub_messages(fields, key.as_ref()));
    };
    let checked = Checked {
        provider,
        key,
        base_url,
        context,
        unresolved,
        order,
        react,
        tools,
        fallbacks,
    };
    Ok(assemble(req, how, checked))
}

/// The message of the 400 that names the fields at fault.
pub fn invalid_fields(fields: &[FieldError]) -> String {
    let names: Vec<&str> = fields.iter().map(|f| f.field.as_str()).collect();
    format!("invalid fields: {}", names.join(", "))
}

/// What the validators made of the request's parts.
struct Checked {
    provider: Provider,
    key: Option<ApiKey>,
    base_url: Option<String>,
    context: Vec<ContextItem>,
    unresolved: Vec<Excluded>,
    order: Vec<ContextSource>,
    react: ReactSettings,
    tools: Catalog,
    fallbacks: Vec<Fallback>,
}

/// The step's input from a valid request, what was checked and what the server adds.
fn assemble(req: ReactStepRequest, how: Conversion, checked: Checked) -> StepInput {
    let Checked {
        provider,
        key,
        base_url,
        context,
        unresolved,
        order,
        react,
        tools,
        fallbacks,
    } = checked;
    StepInput {
        session_id: how.session_id,
        user_query: req.user_query,
        history: conversation::with_first_calls(req.conversation_history),
        context,
        unresolved,
        // The client's own words for its tools win; declared tools are listed otherwise.
        tools_segment: req
            .available_tools_prompt_segment
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| tools.render()),
        llm: LlmConfig {
            provider,
            model: req.llm_config.model_name,
            token_limit: req.llm_config.token_limit,
            reserved_output_tokens: req.llm_config.reserved_output_tokens,
            temperature: req.llm_config.temperature,
            tokenizer: req.llm_config.tokenizer,
            tool_mode: req.llm_config.tool_mode.unwrap_or_default(),
            base_url,
            reasoning_effort: req.llm_config.reasoning_effort,
            prompt_cache: req.llm_config.prompt_cache.unwrap_or(true),
            prompt_cache_ttl: req.llm_config.prompt_cache_ttl,
            strict_tools: req.llm_config.strict_tools.unwrap_or(false),
        },
        context_order: order,
        max_observation_tokens: req
            .max_observation_tokens
            .unwrap_or(DEFAULT_MAX_OBSERVATION_TOKENS),
        history_strategy: req.history_strategy.unwrap_or_default(),
        conversation_summary: req.conversation_summary.map(|s| ConversationSummary {
            text: s.text,
            turns: s.turns as usize,
        }),
        dry_run: req.dry_run,
        project_id: req.project_id,
        settings: how.settings.step.clone(),
        workspace_read: false,
        react,
        tools,
        deadline: tokio::time::Instant::now() + how.settings.step_timeout,
        timings: Default::default(),
        notices: unknown_fields_warning(&how.unknown, key.as_ref())
            .into_iter()
            .collect(),
        key,
        iterations_left: req.max_iterations_left.unwrap_or(DEFAULT_MAX_ITERATIONS),
        mock_response: req.mock_response,
        received_at: how.received_at,
        loop_notice: None,
        fallbacks,
        falls_back: false,
        reading: Default::default(),
    }
}

/// The warning naming the top-level fields the contract does not know, if any: each without
/// anything shaped like a key (a name is the client's text too), cut to [`UNKNOWN_NAME_CHARS`]
/// characters.
fn unknown_fields_warning(
    unknown: &super::unknown_fields::Unknown,
    key: Option<&ApiKey>,
) -> Option<String> {
    if unknown.count == 0 {
        return None;
    }
    let mut names: Vec<String> = unknown
        .names
        .iter()
        .map(|name| {
            // Scrubbed whole, then cut: a cut through a key leaves pieces too short to find.
            let scrubbed = crate::llm::redact_secrets(name, key);
            let cut: String = scrubbed.chars().take(UNKNOWN_NAME_CHARS).collect();
            format!("`{cut}`")
        })
        .collect();
    if unknown.count > names.len() {
        names.push(format!("and {} more", unknown.count - names.len()));
    }
    Some(format!(
        "fields this API does not know were ignored (a misspelt name?): {}",
        names.join(", ")
    ))
}

const UNKNOWN_NAME_CHARS: usize = 64;

/// Messages say which field and why, not what was sent; some are not ours to word (a tool's
/// schema error quotes the schema), so the request's own key and anything shaped like a key are
/// scrubbed from every one.
fn scrub_messages(mut fields: Vec<FieldError>, key: Option<&ApiKey>) -> Vec<FieldError> {
    for field in &mut fields {
        field.message = crate::llm::redact_secrets(&field.message, key);
    }
    fields
}
