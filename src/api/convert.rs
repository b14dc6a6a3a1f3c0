//! Parse, don't validate: the wire request becomes the step's domain input once, here. Shape and
//! ranges come from `validator`; the rules that span fields (a provider that can be inferred, an
//! output reserve below the limit, a key where the provider needs one) follow; every failure is
//! collected so that one 400 names all the fields at fault.

use std::collections::HashSet;

use validator::{Validate, ValidationError, ValidationErrors, ValidationErrorsKind};

use super::request::{
    wire_name, ReactDto, ReactStepRequest, ToolDto, MAX_CONTEXT_ITEMS, MAX_TOOLS,
};
use super::response::FieldError;
use crate::llm::bounded::{is_call_id, MAX_CALLS_PER_TURN};
use crate::llm::{ApiKey, Provider};
use crate::step::context::{dedupe, ContextItem, ContextSource, Excluded, Fate};
use crate::step::decide::ReactSettings;
use crate::step::history::{self, Turn};
use crate::step::parse::Tags;
use crate::step::tools::{Catalog, ToolSpec};
use crate::step::{ConversationSummary, LlmConfig, StepInput, ToolMode};

/// `max_iterations_left` when the client does not send it.
pub const DEFAULT_MAX_ITERATIONS: u32 = 10;
/// `max_observation_tokens` when the client does not send it (the ReAct requirements' figure).
const DEFAULT_MAX_OBSERVATION_TOKENS: u32 = 2000;

pub struct Conversion {
    pub workspace: Option<std::sync::Arc<crate::step::workspace::Workspace>>,
    pub allow_mock_response: bool,
    pub approximation_margin_percent: Option<u32>,
    pub allowed_base_urls: std::sync::Arc<super::base_urls::AllowedBaseUrls>,
    /// Providers that need the request's base URL: the operator set none.
    pub unplaced_providers: std::sync::Arc<[Provider]>,
    /// How long the whole step may take.
    pub step_timeout: std::time::Duration,
    pub session_id: String,
    pub received_at: String,
    /// The body's top-level fields the contract does not name.
    pub unknown: super::unknown_fields::Unknown,
}

pub fn step_input(req: ReactStepRequest, how: Conversion) -> Result<StepInput, Vec<FieldError>> {
    let mut fields = Vec::new();
    if let Err(errors) = req.validate() {
        flatten("", &errors, &mut fields);
    }
    list_bounds(&req, &mut fields);
    // A list over its bound is a certain 400: stop here, before the work below that grows with
    // the lists (de-duplicating context, cataloguing tools) is done on 100 times the bound.
    if fields.iter().any(|f| is_list_bound(&f.field, &f.message)) {
        return Err(fields);
    }
    let mut fail = |field: &str, message: String| {
        fields.push(FieldError {
            field: field.into(),
            message,
        })
    };

    let cfg = &req.llm_config;
    if cfg.reserved_output_tokens >= cfg.token_limit {
        fail(
            "llm_config.reservedOutputTokens",
            format!(
                "must be less than tokenLimit ({}), or no token is left for the prompt",
                cfg.token_limit
            ),
        );
    }
    let provider = cfg.provider.or_else(|| {
        let key = req.user_api_keys.as_ref().and_then(|k| k.llm_key.as_ref());
        Provider::infer(&cfg.model_name, key.map(|k| k.0.as_str()))
    });
    if provider.is_none() {
        fail(
            "llm_config.provider",
            "is required: the provider cannot be inferred from modelName; set it to one of GET /api/providers (openai, anthropic, ollama …)".into(),
        );
    }
    if provider.is_some_and(|p| p.name() == "azure") && !is_deployment_name(&cfg.model_name) {
        fail(
            "llm_config.modelName",
            "is an Azure deployment name here: 1 to 64 ASCII letters, digits, '-', '_' and '.', not only dots".into(),
        );
    }
    if let Some(p) = provider {
        let most = p.capabilities().max_temperature.value();
        // Beyond 2 the field's own range check has said so already.
        if cfg.temperature.is_some_and(|t| t > most && t <= 2.0) {
            fail(
                "llm_config.temperature",
                format!("must be between 0 and {most} for provider {p}"),
            );
        }
    }
    if req.mock_response.is_some() && !how.allow_mock_response {
        fail(
            "mock_response",
            "is disabled on this server (REACTSTEP_ALLOW_MOCK_RESPONSE=false)".into(),
        );
    }
    if req
        .mock_response
        .as_deref()
        .is_some_and(|m| m.trim().is_empty())
    {
        fail("mock_response", "must not be empty".into());
    }
    let raw_key = req.user_api_keys.and_then(|k| k.llm_key).map(|k| k.0);
    let key = match raw_key.map(ApiKey::parse) {
        Some(Ok(key)) => Some(key),
        Some(Err(why)) => {
            fail("user_api_keys.llmKey", why.into());
            None
        }
        None => {
            let needs_key =
                provider.is_some_and(Provider::requires_key) && req.mock_response.is_none();
            if needs_key {
                fail(
                    "user_api_keys.llmKey",
                    format!(
                        "is required for provider {}",
                        provider.map_or(String::new(), |p| p.to_string())
                    ),
                );
            }
            None
        }
    };
    if req.user_query.trim().is_empty() && req.conversation_history.is_empty() {
        fail(
            "user_query",
            "must not be empty when conversation_history is empty".into(),
        );
    }
    for (i, turn) in req.conversation_history.iter().enumerate() {
        check_turn(i, turn, &mut fail);
    }
    if history::json_values(&req.conversation_history, MAX_HISTORY_JSON_VALUES)
        > MAX_HISTORY_JSON_VALUES
    {
        fail(
            "conversation_history",
            format!("holds more than {MAX_HISTORY_JSON_VALUES} JSON values in its tool calls, results and other fields"),
        );
    }
    let order = req.context_priority.unwrap_or_default();
    if order
        .iter()
        .enumerate()
        .any(|(i, s)| order[..i].contains(s))
    {
        fail(
            "context_priority",
            "must name each source at most once".into(),
        );
    }

    let (context, unresolved) = context_items(
        req.explicit_context_paths,
        req.explicit_context
            .into_iter()
            .map(|f| (f.path, f.content)),
        req.pinned_item_ids_to_include,
        req.pinned_items
            .into_iter()
            .map(|p| (p.id, p.content, p.path)),
        req.implicit_context.map(|c| {
            (
                c.last_focused_file_path,
                c.last_focused_file_content,
                c.cursor_line,
            )
        }),
        req.vector_search_results_to_include
            .into_iter()
            .map(|v| SearchHit {
                path: v.path,
                content: v.content,
                score: v.score,
                lines: v.start_line.zip(v.end_line),
            }),
    );
    let mut react = react_settings(req.react, req.max_repair_attempts, &mut fail);
    react.parallel_tool_calls = req.llm_config.parallel_tool_calls.unwrap_or(true);
    let tools = catalog(
        req.tools.unwrap_or_default(),
        req.available_tools_prompt_segment.as_deref().unwrap_or(""),
        &mut fail,
    );
    let base_url = req
        .llm_config
        .base_url
        .as_deref()
        .map(|u| u.trim().trim_end_matches('/').to_string());
    let unplaced = provider.filter(|p| how.unplaced_providers.contains(p));
    if let (Some(p), None) = (unplaced, &base_url) {
        fail(
            "llm_config.base_url",
            format!(
                "is required for provider {p}: this server has no {} for it",
                p.base_url_variable()
            ),
        );
    }
    if let Some(url) = &base_url {
        if !how.allowed_base_urls.allows(url) {
            fail(
                "llm_config.base_url",
                "is not one of this server's allowed base URLs (REACTSTEP_ALLOWED_BASE_URLS)"
                    .into(),
            );
        }
    }
    if let Some(why) = key_goes_elsewhere(key.as_ref(), provider, base_url.as_deref()) {
        fail("user_api_keys.llmKey", why);
    }
    if req.llm_config.tool_mode == Some(ToolMode::Native) {
        if !tools.has_declared() {
            fail(
                "llm_config.tool_mode",
                "native tool calling needs the tools declared in `tools`".into(),
            );
        }
        if let Some(i) = tools
            .declared_names()
            .position(|name| !super::request::is_native_tool_name(name))
        {
            fail(
                &format!("tools[{i}].name"),
                "native tool calling accepts only ASCII letters, digits, '_', '-' and '.' in a tool name; use tool_mode text".into(),
            );
        }
    }
    let (Some(provider), true) = (provider, fields.is_empty()) else {
        fields.sort_by(|a, b| a.field.cmp(&b.field));
        return Err(scrub_messages(fields, key.as_ref()));
    };
    Ok(StepInput {
        session_id: how.session_id,
        user_query: req.user_query,
        history: req.conversation_history,
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
        workspace: how.workspace,
        approximation_margin_percent: how.approximation_margin_percent,
        react,
        tools,
        deadline: tokio::time::Instant::now() + how.step_timeout,
        notices: unknown_fields_warning(&how.unknown, key.as_ref())
            .into_iter()
            .collect(),
        key,
        iterations_left: req.max_iterations_left.unwrap_or(DEFAULT_MAX_ITERATIONS),
        mock_response: req.mock_response,
        received_at: how.received_at,
    })
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

/// A key whose prefix names its vendor goes to that vendor only: why this call would send it
/// elsewhere (the key's vendor and the destination, never the key).
fn key_goes_elsewhere(
    key: Option<&ApiKey>,
    provider: Option<Provider>,
    base_url: Option<&str>,
) -> Option<String> {
    let owner = key?.vendor()?;
    let goes_to = crate::llm::key_vendor::mismatch(owner, provider?, base_url)?;
    Some(format!(
        "is a key of {owner} (its prefix says so) and is sent only to {owner}, but this call goes to {goes_to}: send a key of {goes_to}, or send this one to {owner} (llm_config.provider)"
    ))
}

/// Messages say which field and why, not what was sent; some are not ours to word (a tool's
/// schema error quotes the schema), so the request's own key and anything shaped like a key are
/// scrubbed from every one.
fn scrub_messages(mut fields: Vec<FieldError>, key: Option<&ApiKey>) -> Vec<FieldError> {
    for field in &mut fields {
        field.message = crate::llm::redact_secrets(&field.message, key);
    }
    fields
}

/// The `react` object with its defaults; tags must differ from each other.
fn react_settings(
    dto: Option<ReactDto>,
    max_repair_attempts: Option<u32>,
    fail: &mut impl FnMut(&str, String),
) -> ReactSettings {
    let defaults = ReactSettings::default();
    let mut settings = ReactSettings {
        max_repair_attempts: max_repair_attempts.unwrap_or(defaults.max_repair_attempts),
        ..defaults
    };
    let Some(dto) = dto else {
        return settings;
    };
    let d = Tags::default();
    settings.tags = Tags {
        thought: dto.thought_tag.unwrap_or(d.thought),
        action: dto.action_tag.unwrap_or(d.action),
        observation: dto.observation_tag.unwrap_or(d.observation),
        final_answer: dto.final_answer_tag.unwrap_or(d.final_answer),
    };
    let t = &settings.tags;
    let names = [&t.thought, &t.action, &t.observation, &t.final_answer];
    let clash = names.iter().enumerate().any(|(i, a)| {
        names[..i].iter().any(|b| a.eq_ignore_ascii_case(b))
            || (i != 1 && a.eq_ignore_ascii_case(&format!("{} Input", t.action)))
    });
    if clash {
        fail(
            "react",
            "the four tags (and the action tag followed by ' Input') must differ from each other"
                .into(),
        );
    }
    settings.require_thought = dto.require_thought.unwrap_or(settings.require_thought);
    settings.min_thought_chars = dto.min_thought_chars.map_or(0, |n| n as usize);
    settings.require_action = dto.require_action.unwrap_or(false);
    settings
}

/// The declared tools (each schema compiled once), or the names in the free-text segment.
fn catalog(tools: Vec<ToolDto>, segment: &str, fail: &mut impl FnMut(&str, String)) -> Catalog {
    let mut specs = Vec::with_capacity(tools.len());
    let mut bad = false;
    for (i, tool) in tools.into_iter().enumerate() {
        if specs.iter().any(|s: &ToolSpec| s.name == tool.name) {
            fail(&format!("tools[{i}].name"), "is declared twice".into());
            bad = true;
        }
        let parameters = match (tool.parameters, tool.input_schema) {
            (Some(_), Some(_)) => {
                fail(
                    &format!("tools[{i}]"),
                    "give parameters or inputSchema, not both".into(),
                );
                bad = true;
                continue;
            }
            (Some(schema), None) | (None, Some(schema)) => schema,
            (None, None) => serde_json::json!({"type": "object", "properties": {}}),
        };
        specs.push(ToolSpec {
            name: tool.name,
            description: tool.description.unwrap_or_default(),
            parameters,
        });
    }
    if bad {
        return Catalog::default();
    }
    match Catalog::new(specs, segment) {
        Ok(catalog) => catalog,
        Err((i, why)) => {
            fail(&format!("tools[{i}].parameters"), why);
            Catalog::default()
        }
    }
}

/// The most JSON values a history's tool calls, results and other fields may hold in all. Each
/// value costs 100 to 200 bytes once decoded and is held several times while a step runs (the
/// request, the history it returns, its echo on an error): 2 MB of nested objects would
/// otherwise cost hundreds of MiB. A real history's results are text, or JSON far smaller.
const MAX_HISTORY_JSON_VALUES: usize = 100_000;

/// Whether a session id passes validation (1 to 256 characters): only then is it echoed, since
/// a value that failed validation is never repeated (a key pasted there would be).
pub fn session_id_is_valid(id: &str) -> bool {
    (1..=256).contains(&id.chars().count())
}

/// Whether every turn is valid: only then is the history echoed in an error response, which
/// must itself conform to the contract.
pub fn history_is_valid(turns: &[Turn]) -> bool {
    if history::json_values(turns, MAX_HISTORY_JSON_VALUES) > MAX_HISTORY_JSON_VALUES {
        return false;
    }
    let mut valid = true;
    for (i, turn) in turns.iter().enumerate() {
        check_turn(i, turn, &mut |_, _| valid = false);
    }
    valid
}

fn check_turn(i: usize, turn: &Turn, fail: &mut impl FnMut(&str, String)) {
    let at = |field: &str| format!("conversation_history[{i}].{field}");
    if let Some(ts) = &turn.timestamp {
        if chrono::DateTime::parse_from_rfc3339(ts).is_err() {
            fail(
                &at("timestamp"),
                "must be an RFC 3339 date-time such as 2024-01-01T00:00:00.000Z".into(),
            );
        }
    }
    let calls = turn.tool_call.iter().map(|c| ("toolCall".to_string(), c));
    let more = turn
        .tool_calls
        .iter()
        .enumerate()
        .map(|(n, c)| (format!("toolCalls[{n}]"), c));
    for (name, call) in calls.chain(more) {
        if call.name.trim().is_empty() || call.name.len() > 256 {
            fail(
                &at(&format!("{name}.name")),
                "must be 1 to 256 characters".into(),
            );
        }
        if call.id.as_deref().is_some_and(|id| !is_call_id(id)) {
            fail(&at(&format!("{name}.id")), CALL_ID_RULE.into());
        }
    }
    if turn.tool_calls.len() > MAX_CALLS_PER_TURN {
        fail(
            &at("toolCalls"),
            format!("holds at most {MAX_CALLS_PER_TURN} calls"),
        );
    }
    if turn
        .tool_call_id
        .as_deref()
        .is_some_and(|id| !is_call_id(id))
    {
        fail(&at("tool_call_id"), CALL_ID_RULE.into());
    }
}

const CALL_ID_RULE: &str = "must be 1 to 256 printable ASCII characters without spaces";

struct SearchHit {
    path: Option<String>,
    content: String,
    score: Option<f64>,
    lines: Option<(u32, u32)>,
}

/// The candidate items in priority order (explicit, pinned, implicit, search hits by score), and
/// the ones named without content.
fn context_items(
    explicit_paths: Vec<String>,
    explicit: impl Iterator<Item = (String, String)>,
    pinned_ids: Vec<String>,
    pinned: impl Iterator<Item = (String, String, Option<String>)>,
    implicit: Option<(Option<String>, Option<String>, Option<u32>)>,
    hits: impl Iterator<Item = SearchHit>,
) -> (Vec<ContextItem>, Vec<Excluded>) {
    let mut items = Vec::new();
    let mut unresolved = Vec::new();
    let item = |source, id: String, path: Option<String>, content| ContextItem {
        source,
        id,
        path,
        content,
        score: None,
        lines: None,
        cursor_line: None,
    };

    let explicit = explicit.map(|(p, c)| item(ContextSource::Explicit, p.clone(), Some(p), c));
    named_items(
        ContextSource::Explicit,
        explicit_paths,
        explicit.collect(),
        &mut items,
        &mut unresolved,
    );
    let pinned = pinned.map(|(i, c, p)| item(ContextSource::Pinned, i, p, c));
    named_items(
        ContextSource::Pinned,
        pinned_ids,
        pinned.collect(),
        &mut items,
        &mut unresolved,
    );

    match implicit {
        Some((path, Some(content), cursor_line)) => {
            let id = path.clone().unwrap_or_else(|| "(last focused file)".into());
            items.push(ContextItem {
                cursor_line,
                ..item(ContextSource::Implicit, id, path, content)
            });
        }
        Some((Some(path), None, cursor_line)) => unresolved.push(Excluded {
            cursor_line,
            ..missing(ContextSource::Implicit, path)
        }),
        _ => {}
    }

    let mut hits: Vec<SearchHit> = hits.collect();
    hits.sort_by(|a, b| {
        b.score
            .unwrap_or(f64::MIN)
            .total_cmp(&a.score.unwrap_or(f64::MIN))
    });
    for (i, hit) in hits.into_iter().enumerate() {
        let id = hit
            .path
            .clone()
            .unwrap_or_else(|| format!("search result {}", i + 1));
        items.push(ContextItem {
            source: ContextSource::VectorSearch,
            id,
            path: hit.path,
            content: hit.content,
            score: hit.score,
            lines: hit.lines,
            cursor_line: None,
        });
    }
    let (items, duplicates) = dedupe(items);
    unresolved.extend(duplicates);
    (items, unresolved)
}

/// One source's items: a name sent without content is unresolved, and an id sent twice is kept
/// once (the first).
fn named_items(
    source: ContextSource,
    names: Vec<String>,
    given: Vec<ContextItem>,
    items: &mut Vec<ContextItem>,
    unresolved: &mut Vec<Excluded>,
) {
    for name in names {
        if !given.iter().any(|g| g.id == name) {
            unresolved.push(missing(source, name));
        }
    }
    let mut seen = HashSet::new();
    items.extend(given.into_iter().filter(|g| seen.insert(g.id.clone())));
}

fn missing(source: ContextSource, id: String) -> Excluded {
    Excluded {
        source,
        id,
        fate: Fate::Unresolved,
        cursor_line: None,
        reason: "named without content; this server has no workspace to read it from, so send its content inline".into(),
    }
}

/// Validator's nested errors as `a.b[2].c` paths with the client's field names.
/// The bounds on lists that validator's length rule cannot check (it needs Serialize items).
fn list_bounds(req: &ReactStepRequest, fields: &mut Vec<FieldError>) {
    let counted = [
        (
            "vector_search_results_to_include",
            req.vector_search_results_to_include.len(),
            MAX_CONTEXT_ITEMS,
        ),
        (
            "explicit_context",
            req.explicit_context.len(),
            MAX_CONTEXT_ITEMS,
        ),
        ("pinned_items", req.pinned_items.len(), MAX_CONTEXT_ITEMS),
        ("tools", req.tools.as_ref().map_or(0, Vec::len), MAX_TOOLS),
    ];
    for (field, len, max) in counted {
        if len as u64 > max {
            fields.push(FieldError {
                field: field.into(),
                message: format!("length must be at most {max}"),
            });
        }
    }
}

/// Whether a field error is a top-level list over its length bound.
fn is_list_bound(field: &str, message: &str) -> bool {
    const LISTS: [&str; 8] = [
        "conversation_history",
        "explicit_context_paths",
        "pinned_item_ids_to_include",
        "vector_search_results_to_include",
        "explicit_context",
        "pinned_items",
        "context_priority",
        "tools",
    ];
    LISTS.contains(&field) && message.starts_with("length must be at most")
}

fn flatten(prefix: &str, errors: &ValidationErrors, out: &mut Vec<FieldError>) {
    for (field, kind) in errors.errors() {
        let path = match (prefix.is_empty(), field.as_ref()) {
            (_, "__all__") => prefix.to_string(),
            (true, f) => wire_name(f).to_string(),
            (false, f) => format!("{prefix}.{}", wire_name(f)),
        };
        match kind {
            ValidationErrorsKind::Field(list) => out.extend(list.iter().map(|e| FieldError {
                field: path.clone(),
                message: describe(e),
            })),
            ValidationErrorsKind::Struct(inner) => flatten(&path, inner, out),
            ValidationErrorsKind::List(map) => {
                for (i, inner) in map {
                    flatten(&format!("{path}[{i}]"), inner, out);
                }
            }
        }
    }
}

fn describe(e: &ValidationError) -> String {
    if let Some(message) = &e.message {
        return message.to_string();
    }
    let param = |name: &str| e.params.get(name).map(|v| v.to_string());
    match (e.code.as_ref(), param("min"), param("max")) {
        ("length", Some(min), Some(max)) => format!("length must be between {min} and {max}"),
        ("length", None, Some(max)) => format!("length must be at most {max}"),
        ("length", Some(min), None) => format!("length must be at least {min}"),
        ("range", Some(min), Some(max)) => format!("must be between {min} and {max}"),
        ("range", Some(min), None) => format!("must be at least {min}"),
        ("range", None, Some(max)) => format!("must be at most {max}"),
        (code, _, _) => format!("is invalid ({code})"),
    }
}

/// An Azure deployment name: it becomes a path segment of the deployments URL form, so `..`
/// (which a URL parser would resolve) and anything needing escapes are refused.
fn is_deployment_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !name.bytes().all(|b| b == b'.')
}
