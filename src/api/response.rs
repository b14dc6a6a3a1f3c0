//! The response body: the original service's fields plus the additive ones. Success and error
//! share this one shape, so a client reads every answer the same way.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::llm::Usage;
use crate::step::context::ContextReport;
use crate::step::history::Turn;
use crate::step::{Outcome, StepOutput, Termination};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    ActionProposed,
    DirectResponseProvided,
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TerminationReason {
    Success,
    MaxIterations,
}

#[derive(Debug, Serialize)]
pub struct ActionDetails {
    pub tool_name: String,
    pub tool_args: Map<String, Value>,
    pub raw_action_string: String,
}

#[derive(Debug, Serialize)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

#[derive(Debug, Serialize)]
pub struct ErrorBody {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub message: String,
    pub retryable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldError>,
}

#[derive(Debug, Serialize)]
pub struct ReactStepResponse {
    pub session_id: Option<String>,
    pub request_id: String,
    pub thought: Option<String>,
    pub action_details: Option<ActionDetails>,
    pub direct_response: Option<String>,
    pub updated_conversation_history: Vec<Turn>,
    pub iterations_remaining: Option<u32>,
    pub status: Status,
    pub termination_reason: Option<TerminationReason>,
    pub usage: Option<Usage>,
    pub warnings: Vec<String>,
    pub context_report: Option<ContextReport>,
    pub error: Option<ErrorBody>,
}

impl ReactStepResponse {
    pub fn success(output: StepOutput, request_id: String) -> Self {
        let (status, action_details, direct_response, termination_reason) = match output.outcome {
            Outcome::Action {
                tool_name,
                tool_args,
                raw_action_string,
            } => (
                Status::ActionProposed,
                Some(ActionDetails {
                    tool_name,
                    tool_args,
                    raw_action_string,
                }),
                None,
                None,
            ),
            Outcome::Answer { text, termination } => (
                Status::DirectResponseProvided,
                None,
                Some(text),
                Some(match termination {
                    Termination::Success => TerminationReason::Success,
                    Termination::MaxIterations => TerminationReason::MaxIterations,
                }),
            ),
        };
        Self {
            session_id: Some(output.session_id),
            request_id,
            thought: Some(output.thought),
            action_details,
            direct_response,
            updated_conversation_history: output.updated_history,
            iterations_remaining: Some(output.iterations_remaining),
            status,
            termination_reason,
            usage: output.usage,
            warnings: output.warnings,
            context_report: Some(output.context_report),
            error: None,
        }
    }
}
