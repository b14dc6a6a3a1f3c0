//! The response body: the original service's fields plus the additive ones. Success and error
//! share this one shape, so a client reads every answer the same way.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::llm::Usage;
use crate::step::context::ContextReport;
use crate::step::history::Turn;
use crate::step::{ConversationSummary, Outcome, PromptPreview, StepOutput, Termination};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    ActionProposed,
    DirectResponseProvided,
    /// `dry_run`: the prompt was built and returned; the model was not called.
    DryRun,
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

/// One message of a dry run's prompt, the system prompt first.
#[derive(Debug, Serialize)]
pub struct PromptMessage {
    pub role: &'static str,
    pub content: String,
    pub tokens: u32,
}

#[derive(Debug, Serialize)]
pub struct PromptDto {
    pub messages: Vec<PromptMessage>,
    /// The whole prompt as counted against the budget (chat framing included).
    pub tokens: u32,
}

impl PromptDto {
    fn new(preview: PromptPreview, used: u32) -> Self {
        let system = PromptMessage {
            role: "system",
            content: preview.system,
            tokens: preview.system_tokens,
        };
        let turns = preview
            .messages
            .into_iter()
            .map(|(m, tokens)| PromptMessage {
                role: m.role.as_str(),
                content: m.content,
                tokens,
            });
        Self {
            messages: std::iter::once(system).chain(turns).collect(),
            tokens: used,
        }
    }
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
    /// `invalid_model_output`: what the model wrote, for the client to show.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_output: Option<String>,
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
    pub conversation_summary: Option<ConversationSummary>,
    pub prompt: Option<PromptDto>,
    pub error: Option<ErrorBody>,
}

impl ReactStepResponse {
    pub fn success(output: StepOutput, request_id: String) -> Self {
        let mut prompt = None;
        let (status, action_details, direct_response, termination_reason) = match output.outcome {
            Outcome::DryRun(preview) => {
                prompt = Some(PromptDto::new(preview, output.context_report.used));
                (Status::DryRun, None, None, None)
            }
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
            thought: (status != Status::DryRun).then_some(output.thought),
            action_details,
            direct_response,
            updated_conversation_history: output.updated_history,
            iterations_remaining: Some(output.iterations_remaining),
            status,
            termination_reason,
            usage: output.usage,
            warnings: output.warnings,
            context_report: Some(output.context_report),
            conversation_summary: output.conversation_summary,
            prompt,
            error: None,
        }
    }
}
