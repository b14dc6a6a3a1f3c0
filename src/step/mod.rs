//! One ReAct step, knowing nothing of HTTP: fit the prompt into the budget, call the model once
//! (or take the client's `mock_response`), parse the output, apply the iteration limit and
//! return the thought, the decision and the updated conversation.

pub mod budget;
pub mod context;
pub mod history;
mod limits;
pub mod parse;
pub mod prompt;
mod summary;
pub mod tokens;
pub mod truncate;
pub mod workspace;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::llm::{
    ApiKey, ChatMessage, ChatRequest, Completion, FinishReason, LlmClients, LlmError, Provider,
    Usage,
};
use budget::{Candidates, Overflow};
use context::{ContextItem, ContextReport, ContextSource, Excluded};
use history::{timestamp_now, Role, ToolCall, Turn};
use parse::Decision;
pub use summary::ConversationSummary;
use tokens::{Encoding, TokenCounter};

#[derive(Debug, Clone)]
pub struct LlmConfig {
    pub provider: Provider,
    pub model: String,
    pub token_limit: u32,
    pub reserved_output_tokens: u32,
    pub temperature: Option<f64>,
    pub tokenizer: Option<Encoding>,
}

impl LlmConfig {
    /// What the prompt may use: the window less what the answer needs.
    pub fn prompt_budget(&self) -> u32 {
        self.token_limit.saturating_sub(self.reserved_output_tokens)
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
    /// Where context named without content may be read from, when the operator allows it.
    pub workspace: Option<std::sync::Arc<workspace::Workspace>>,
    /// The operator's margin for models whose tokenizer is not public.
    pub approximation_margin_percent: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    Success,
    MaxIterations,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Action {
        tool_name: String,
        tool_args: Map<String, Value>,
        raw_action_string: String,
    },
    Answer {
        text: String,
        termination: Termination,
    },
    /// `dry_run`: the prompt that would have been sent.
    DryRun(PromptPreview),
}

/// The exact prompt of a dry run, with the token count of each part.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptPreview {
    pub system: String,
    pub system_tokens: u32,
    pub messages: Vec<(ChatMessage, u32)>,
}

#[derive(Debug)]
pub struct StepOutput {
    pub session_id: String,
    pub thought: String,
    pub outcome: Outcome,
    pub updated_history: Vec<Turn>,
    pub iterations_remaining: u32,
    pub usage: Option<Usage>,
    pub warnings: Vec<String>,
    pub context_report: ContextReport,
    pub conversation_summary: Option<ConversationSummary>,
}

#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("the mandatory parts of the prompt (instructions, tools, query and latest observation) need {} tokens but the budget (tokenLimit - reservedOutputTokens) is {}", .0.required, .0.budget)]
    ContextOverflow(Overflow),
    #[error(transparent)]
    Llm(#[from] LlmError),
    #[error("the model returned no usable text (finish reason: {0})")]
    EmptyOutput(String),
    #[error("internal error: {0}")]
    Internal(String),
}

#[tracing::instrument(name = "react step", skip_all, fields(session_id = %input.session_id, model = %input.llm.model))]
pub async fn run(input: StepInput, llm: &LlmClients) -> Result<StepOutput, StepError> {
    let counter = TokenCounter::new(input.llm.provider, &input.llm.model, input.llm.tokenizer)
        .with_approximation_margin(input.approximation_margin_percent);
    let budget = input.llm.prompt_budget();
    let omission_reserve = match input.history_strategy {
        HistoryStrategy::Omit => budget::marker_reserve(&counter),
        HistoryStrategy::Summarize => {
            summary::reserve(budget).max(budget::marker_reserve(&counter))
        }
    };
    // Tokenising megabytes of context is CPU work: keep it off the async workers.
    let (input, fitted) = tokio::task::spawn_blocking(move || {
        let mut input = input;
        if let Some(ws) = input.workspace.clone() {
            resolve_from_workspace(&ws, &mut input);
        }
        let head = prompt::system_head(&input.tools_segment, input.iterations_left == 1);
        let candidates = Candidates {
            head: &head,
            items: &input.context,
            unresolved: &input.unresolved,
            history: &input.history,
            query: &input.user_query,
            order: &input.context_order,
            max_observation_tokens: input.max_observation_tokens,
            omission_reserve,
        };
        let fitted = budget::fit(&counter, budget, &candidates);
        (input, fitted)
    })
    .await
    .map_err(|e| StepError::Internal(format!("prompt building failed: {e}")))?;
    let fitted = fitted.map_err(StepError::ContextOverflow)?;
    let mut warnings = budget_warnings(&fitted, &input.unresolved);

    let mut summary_usage = None;
    let mut conversation_summary = None;
    if fitted.omission_room() > 0 && input.history_strategy == HistoryStrategy::Summarize {
        if input.mock_response.is_some() || input.dry_run {
            warnings.push("history_strategy summarize makes a model call; with mock_response or dry_run the omitted turns are marked instead".into());
        } else {
            match summary::summarize(llm, &input, &counter, fitted.omitted_turns, omission_reserve).await {
                Ok((made, usage)) => {
                    summary_usage = usage;
                    conversation_summary = Some(made);
                }
                Err(e) => warnings.push(format!("the earlier conversation could not be summarised ({e}); the omitted turns are marked instead")),
            }
        }
    }
    let prompt = fitted.finish(
        &counter,
        conversation_summary.as_ref().map(|s| s.text.as_str()),
        counter.encoding(),
    );
    let context_report = prompt.report.clone();

    if input.dry_run {
        let preview = PromptPreview {
            system_tokens: prompt.system_tokens,
            messages: prompt
                .messages
                .iter()
                .map(|m| (m.clone(), counter.count_message(&m.content)))
                .collect(),
            system: prompt.system,
        };
        return Ok(StepOutput {
            session_id: input.session_id,
            thought: String::new(),
            outcome: Outcome::DryRun(preview),
            updated_history: input.history,
            iterations_remaining: input.iterations_left,
            usage: None,
            warnings,
            context_report,
            conversation_summary,
        });
    }

    let request = ChatRequest {
        model: input.llm.model.clone(),
        system: prompt.system,
        messages: prompt.messages,
        max_output_tokens: input.llm.reserved_output_tokens,
        temperature: input.llm.temperature,
        stop: vec![prompt::OBSERVATION_STOP.to_string()],
    };
    let completion = match &input.mock_response {
        Some(text) => Completion {
            text: text.clone(),
            finish: FinishReason::Stop,
            usage: None,
        },
        None => {
            llm.complete(input.llm.provider, &request, input.key.as_ref())
                .await?
        }
    };
    let finish = match &completion.finish {
        FinishReason::Stop => "stop".to_string(),
        FinishReason::Length => {
            warnings.push("the output reached reservedOutputTokens and may be cut short".into());
            "length".to_string()
        }
        FinishReason::Other(other) => {
            warnings.push(format!("the provider ended the output early: {other}"));
            other.clone()
        }
    };
    if let Some(warning) = margin_check(&counter, &context_report, completion.usage.as_ref()) {
        warnings.push(warning);
    }
    let parsed = parse::parse(&completion.text).ok_or(StepError::EmptyOutput(finish))?;
    warnings.extend(parsed.warnings);

    let outcome = match parsed.decision {
        Decision::Action { .. } if input.iterations_left == 1 => {
            warnings.push(
                "the model proposed a tool call on its last step; a summary was returned instead"
                    .into(),
            );
            Outcome::Answer {
                text: limits::summary(&input.history, &parsed.thought),
                termination: Termination::MaxIterations,
            }
        }
        Decision::Action {
            tool_name,
            tool_args,
            raw_action_string,
        } => Outcome::Action {
            tool_name,
            tool_args,
            raw_action_string,
        },
        Decision::Answer(text) => Outcome::Answer {
            text,
            termination: Termination::Success,
        },
    };
    let updated_history = updated_history(&input, &parsed.thought, &outcome);
    Ok(StepOutput {
        session_id: input.session_id,
        thought: parsed.thought,
        outcome,
        updated_history,
        iterations_remaining: input.iterations_left - 1,
        usage: add_usage(completion.usage, summary_usage),
        warnings,
        context_report,
        conversation_summary,
    })
}

/// An approximate count that came out below the provider's own count of the same prompt means
/// the margin is too small for this model: the client is told, and the operator too.
fn margin_check(
    counter: &TokenCounter,
    report: &ContextReport,
    usage: Option<&Usage>,
) -> Option<String> {
    let upstream = usage?.prompt_tokens;
    if !counter.is_approximate() || upstream <= u64::from(report.used) {
        return None;
    }
    tracing::warn!(
        counted = report.used,
        upstream,
        "the provider counted more prompt tokens than the approximate count; raise REACTSTEP_APPROXIMATION_MARGIN_PERCENT"
    );
    Some(format!(
        "the provider counted {upstream} prompt tokens where the approximate count was {}: this model's prompts may need a larger margin",
        report.used
    ))
}

/// Reads the items that arrived without content from the workspace; what cannot be read stays
/// unresolved with the reason.
fn resolve_from_workspace(ws: &workspace::Workspace, input: &mut StepInput) {
    let project = input.project_id.clone();
    let mut still = Vec::new();
    for mut ex in std::mem::take(&mut input.unresolved) {
        let read = match (ex.fate, ex.source) {
            (context::Fate::Unresolved, ContextSource::Pinned) => {
                ws.read_pinned(project.as_deref(), &ex.id)
            }
            (context::Fate::Unresolved, ContextSource::Explicit | ContextSource::Implicit) => {
                ws.read(project.as_deref(), &ex.id)
            }
            _ => {
                still.push(ex);
                continue;
            }
        };
        match read {
            Ok(content) => input.context.push(ContextItem {
                source: ex.source,
                path: (ex.source != ContextSource::Pinned).then(|| ex.id.clone()),
                id: ex.id,
                content,
                score: None,
                lines: None,
                cursor_line: ex.cursor_line,
            }),
            Err(why) => {
                ex.reason = format!("not read from the workspace: {why}");
                still.push(ex);
            }
        }
    }
    let (items, duplicates) = context::dedupe(std::mem::take(&mut input.context));
    input.context = items;
    still.extend(duplicates);
    input.unresolved = still;
}

/// Both calls of a step are billed to the user: report their sum.
fn add_usage(a: Option<Usage>, b: Option<Usage>) -> Option<Usage> {
    match (a, b) {
        (Some(a), Some(b)) => Some(Usage {
            prompt_tokens: a.prompt_tokens + b.prompt_tokens,
            completion_tokens: a.completion_tokens + b.completion_tokens,
        }),
        (a, b) => a.or(b),
    }
}

fn budget_warnings(fitted: &budget::Fitted, excluded: &[Excluded]) -> Vec<String> {
    let mut warnings = Vec::new();
    if fitted.omitted_turns > 0 {
        warnings.push(format!(
            "{} oldest conversation turn(s) did not fit in the token budget and were left out of the prompt (see context_report)",
            fitted.omitted_turns
        ));
    }
    if fitted.truncated_items > 0 {
        warnings.push(format!(
            "{} item(s) were cut to fit the token budget (see context_report)",
            fitted.truncated_items
        ));
    }
    if fitted.dropped_items > 0 {
        warnings.push(format!(
            "{} context item(s) did not fit in the token budget and were left out of the prompt (see context_report)",
            fitted.dropped_items
        ));
    }
    let unresolved = excluded
        .iter()
        .filter(|e| e.fate == context::Fate::Unresolved)
        .count();
    if unresolved > 0 {
        warnings.push(format!(
            "{unresolved} context item(s) could not be resolved and were not used (see context_report)"
        ));
    }
    warnings
}

/// The input history, the user's turn (when there was a query) and the assistant's turn.
fn updated_history(input: &StepInput, thought: &str, outcome: &Outcome) -> Vec<Turn> {
    let mut turns = input.history.clone();
    if !input.user_query.trim().is_empty() {
        turns.push(Turn::new(
            Role::User,
            input.user_query.clone(),
            input.received_at.clone(),
        ));
    }
    let mut assistant = Turn::new(Role::Assistant, thought.to_string(), timestamp_now());
    match outcome {
        Outcome::Action {
            tool_name,
            tool_args,
            ..
        } => {
            assistant.tool_call = Some(ToolCall {
                name: tool_name.clone(),
                parameters: tool_args.clone(),
            });
        }
        Outcome::DryRun(_) => {}
        Outcome::Answer { text, .. } => {
            assistant.content = text.clone();
            assistant.thought = Some(thought.to_string()).filter(|t| !t.is_empty());
        }
    }
    turns.push(assistant);
    turns
}
