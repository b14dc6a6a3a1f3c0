//! One ReAct step, knowing nothing of HTTP: fit the prompt into the budget, call the model once
//! (or take the client's `mock_response`), parse the output, apply the iteration limit and
//! return the thought, the decision and the updated conversation.

pub mod budget;
pub mod context;
pub mod history;
mod limits;
pub mod parse;
pub mod prompt;
pub mod tokens;
pub mod truncate;

use serde_json::{Map, Value};

use crate::llm::{
    ApiKey, ChatRequest, Completion, FinishReason, LlmClients, LlmError, Provider, Usage,
};
use budget::{Candidates, Overflow};
use context::{ContextItem, ContextReport, Unresolved};
use history::{timestamp_now, Role, ToolCall, Turn};
use parse::Decision;
use tokens::TokenCounter;

#[derive(Debug, Clone)]
pub struct LlmConfig {
    pub provider: Provider,
    pub model: String,
    pub token_limit: u32,
    pub reserved_output_tokens: u32,
    pub temperature: Option<f64>,
}

impl LlmConfig {
    /// What the prompt may use: the window less what the answer needs.
    pub fn prompt_budget(&self) -> u32 {
        self.token_limit.saturating_sub(self.reserved_output_tokens)
    }
}

/// Everything a step needs, already validated.
#[derive(Debug)]
pub struct StepInput {
    pub session_id: String,
    pub user_query: String,
    pub history: Vec<Turn>,
    /// In priority order: explicit, pinned, implicit, then search results by score.
    pub context: Vec<ContextItem>,
    pub unresolved: Vec<Unresolved>,
    pub tools_segment: String,
    pub llm: LlmConfig,
    pub key: Option<ApiKey>,
    pub iterations_left: u32,
    pub mock_response: Option<String>,
    /// When the request arrived: the timestamp of the user's turn.
    pub received_at: String,
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
}

#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("the mandatory parts of the prompt need {} tokens but the budget (tokenLimit - reservedOutputTokens) is {}", .0.required, .0.budget)]
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
    let counter = TokenCounter::for_model(input.llm.provider, &input.llm.model);
    // Tokenising megabytes of context is CPU work: keep it off the async workers.
    let (input, fitted) = tokio::task::spawn_blocking(move || {
        let head = prompt::system_head(&input.tools_segment, input.iterations_left == 1);
        let candidates = Candidates {
            head: &head,
            items: &input.context,
            unresolved: &input.unresolved,
            history: &input.history,
            query: &input.user_query,
        };
        let fitted = budget::fit(&counter, input.llm.prompt_budget(), &candidates);
        (input, fitted)
    })
    .await
    .map_err(|e| StepError::Internal(format!("prompt building failed: {e}")))?;
    let fitted = fitted.map_err(StepError::ContextOverflow)?;
    let mut warnings = budget_warnings(&fitted, input.unresolved.len());

    let request = ChatRequest {
        model: input.llm.model.clone(),
        system: fitted.system,
        messages: fitted.messages,
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
        usage: completion.usage,
        warnings,
        context_report: fitted.report,
    })
}

fn budget_warnings(fitted: &budget::Fitted, unresolved: usize) -> Vec<String> {
    let mut warnings = Vec::new();
    if fitted.dropped_turns > 0 {
        warnings.push(format!(
            "{} oldest conversation turn(s) did not fit in the token budget and were left out of the prompt (see context_report)",
            fitted.dropped_turns
        ));
    }
    if fitted.dropped_items > 0 {
        warnings.push(format!(
            "{} context item(s) did not fit in the token budget and were left out of the prompt (see context_report)",
            fitted.dropped_items
        ));
    }
    if unresolved > 0 {
        warnings.push(format!(
            "{unresolved} context item(s) arrived without content and could not be used (see context_report)"
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
        Outcome::Answer { text, .. } => {
            assistant.content = text.clone();
            assistant.thought = Some(thought.to_string()).filter(|t| !t.is_empty());
        }
    }
    turns.push(assistant);
    turns
}
