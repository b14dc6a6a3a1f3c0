//! What a step answers: the thought, the outcome (a tool call, an answer or a dry run's prompt)
//! and the updated conversation.

use serde_json::{Map, Value};

use super::context::ContextReport;
use super::decide::{self, Valid};
use super::error::FailedAttempt;
use super::history::Turn;
use super::input::ConversationSummary;
use crate::llm::call_ids::fresh;
use crate::llm::{ChatMessage, Provider, Usage};

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
        /// The call's id: the provider's for a native call, `call_…` of the service's otherwise.
        tool_call_id: String,
        /// The turn's further calls, each with its id.
        parallel: Vec<decide::Call>,
    },
    Answer {
        text: String,
        termination: Termination,
    },
    /// `dry_run`: the prompt that would have been sent.
    DryRun(PromptPreview),
}

impl From<Valid> for Outcome {
    fn from(valid: Valid) -> Self {
        match valid {
            Valid::Action { call, parallel } => Self::Action {
                tool_name: call.tool_name,
                tool_args: call.tool_args,
                raw_action_string: call.raw_action_string,
                tool_call_id: call.tool_call_id.unwrap_or_else(fresh),
                parallel: parallel
                    .into_iter()
                    .map(|call| decide::Call {
                        tool_call_id: Some(call.tool_call_id.unwrap_or_else(fresh)),
                        ..call
                    })
                    .collect(),
            },
            Valid::Answer(text) => Self::Answer {
                text,
                termination: Termination::Success,
            },
        }
    }
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
    /// The final answer as the JSON value `react.final_answer_schema` asked for.
    pub answer_json: Option<Value>,
    /// The answer was asked for on the loop's last step (told not to call a tool): it may be a
    /// guess made to obey, not a finding.
    pub forced_final: bool,
    /// The output held a final answer after the call that was taken: the answer was left out
    /// (the model had not seen the tool's result), and a warning says so.
    pub answer_left_out: bool,
    pub updated_history: Vec<Turn>,
    pub iterations_remaining: u32,
    pub usage: Option<Usage>,
    pub warnings: Vec<String>,
    pub context_report: ContextReport,
    pub conversation_summary: Option<ConversationSummary>,
    /// What the loop guard found, when it warned.
    pub loop_guard: Option<super::loop_guard::LoopReport>,
    /// The model that answered; `None` when none was asked (a dry run, a `/tool` command).
    pub model_used: Option<ModelUsed>,
    /// The models of `llm_config.fallbacks`' chain that failed before it, in order.
    pub fallback_attempts: Vec<FailedAttempt>,
    /// The plan or the evaluation a plan or evaluation step answered (`task.rs`).
    pub structured: Option<super::structured::Structured>,
}

/// The model that answered a step, and what its own calls billed (`usage` is the step's sum,
/// the failed models' calls included).
#[derive(Debug, Clone)]
pub struct ModelUsed {
    pub provider: Provider,
    pub model: String,
    pub usage: Option<Usage>,
}
