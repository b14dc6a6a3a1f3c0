//! The response body: the original service's fields plus the additive ones. Success and error
//! share this one shape, so a client reads every answer the same way.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::llm::Usage;
use crate::prices::Price;
use crate::step::{ContextReport, LoopReport, Turn};
use crate::step::{
    ConversationSummary, Outcome, PromptPreview, StepOutput, Structured, Termination,
};

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

#[derive(Debug, Clone, Serialize)]
pub struct ActionDetails {
    pub tool_name: String,
    pub tool_args: Map<String, Value>,
    pub raw_action_string: String,
    pub tool_call_id: String,
}

impl From<crate::step::Call> for ActionDetails {
    fn from(call: crate::step::Call) -> Self {
        Self {
            tool_name: call.tool_name,
            tool_args: call.tool_args,
            raw_action_string: call.raw_action_string,
            tool_call_id: call.tool_call_id.unwrap_or_default(),
        }
    }
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

/// `usage` as answered: the step's token counts, and what they cost at the operator's prices.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct UsageDto {
    #[serde(flatten)]
    pub counts: Usage,
    /// Absent without a price for the model; as approximate as the counts (`approximate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl UsageDto {
    pub fn new(counts: Usage, price: Option<Price>) -> Self {
        Self {
            counts,
            cost_usd: price.map(|p| p.cost(&counts)),
        }
    }
}

/// `model_used`: the model that answered.
#[derive(Debug, Clone, Serialize)]
pub struct ModelUsedDto {
    pub provider: crate::llm::Provider,
    #[serde(rename = "modelName")]
    pub model_name: String,
}

/// An entry of `fallback_attempts`: a model that failed, how (its error as the step's own
/// would be answered) and what its calls billed.
#[derive(Debug, Serialize)]
pub struct FallbackAttemptDto {
    pub provider: crate::llm::Provider,
    #[serde(rename = "modelName")]
    pub model_name: String,
    pub error_type: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageDto>,
}

#[derive(Debug, Serialize)]
pub struct ReactStepResponse {
    pub session_id: Option<String>,
    pub request_id: String,
    pub thought: Option<String>,
    pub action_details: Option<ActionDetails>,
    /// Every call of a turn with several, the first (`action_details`) included.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parallel_actions: Vec<ActionDetails>,
    pub direct_response: Option<String>,
    /// The final answer as the JSON value `react.final_answer_schema` asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direct_response_json: Option<serde_json::Value>,
    /// The answer was asked for on the loop's last step: present (true) only then.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub forced_final: bool,
    /// The output held a final answer after the call proposed: present (true) only then.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub answer_left_out: bool,
    /// On a stream's terminal event: what the step's phases took (the headers left before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_timing: Option<crate::telemetry::timing::Summary>,
    pub updated_conversation_history: Vec<Turn>,
    pub iterations_remaining: Option<u32>,
    pub status: Status,
    pub termination_reason: Option<TerminationReason>,
    pub usage: Option<UsageDto>,
    pub warnings: Vec<String>,
    pub context_report: Option<ContextReport>,
    pub conversation_summary: Option<ConversationSummary>,
    pub prompt: Option<PromptDto>,
    /// What the loop guard found: on a success when it warned, on `loop_detected` the loop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_guard: Option<LoopReport>,
    pub error: Option<ErrorBody>,
    /// The model that answered, when one was asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_used: Option<ModelUsedDto>,
    /// With `llm_config.fallbacks`: the models that failed (on an error, every model tried).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fallback_attempts: Vec<FallbackAttemptDto>,
    /// `POST /api/agent/plan`: the plan, checked against the tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<serde_json::Value>,
    /// `POST /api/agent/evaluate`: the evaluation, its `needs_retry` as the rules decide.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evaluation: Option<serde_json::Value>,
}

impl ReactStepResponse {
    /// The answer to a step; `price` is that of the step's model, if the operator priced it.
    pub fn success(output: StepOutput, request_id: String, price: Option<Price>) -> Self {
        let mut prompt = None;
        let mut parallel_actions = Vec::new();
        let (status, action_details, direct_response, termination_reason) = match output.outcome {
            Outcome::DryRun(preview) => {
                prompt = Some(PromptDto::new(preview, output.context_report.used));
                (Status::DryRun, None, None, None)
            }
            Outcome::Action {
                tool_name,
                tool_args,
                raw_action_string,
                tool_call_id,
                parallel,
            } => {
                let first = ActionDetails {
                    tool_name,
                    tool_args,
                    raw_action_string,
                    tool_call_id,
                };
                if !parallel.is_empty() {
                    parallel_actions.push(first.clone());
                    parallel_actions.extend(parallel.into_iter().map(ActionDetails::from));
                }
                (Status::ActionProposed, Some(first), None, None)
            }
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
        let (plan, evaluation) = match output.structured {
            Some(Structured::Plan(plan)) => (Some(plan), None),
            Some(Structured::Evaluation(evaluation)) => (None, Some(evaluation)),
            None => (None, None),
        };
        Self {
            plan,
            evaluation,
            session_id: Some(output.session_id),
            request_id,
            thought: (status != Status::DryRun).then_some(output.thought),
            action_details,
            parallel_actions,
            direct_response,
            direct_response_json: output.answer_json,
            forced_final: output.forced_final,
            answer_left_out: output.answer_left_out,
            server_timing: None,
            updated_conversation_history: output.updated_history,
            iterations_remaining: Some(output.iterations_remaining),
            status,
            termination_reason,
            usage: output.usage.map(|usage| UsageDto::new(usage, price)),
            warnings: output.warnings,
            context_report: Some(output.context_report),
            conversation_summary: output.conversation_summary,
            prompt,
            loop_guard: output.loop_guard,
            error: None,
            model_used: output.model_used.map(|m| ModelUsedDto {
                provider: m.provider,
                model_name: m.model,
            }),
            fallback_attempts: Vec::new(),
        }
    }
}

impl ReactStepResponse {
    /// About how many bytes of text the body holds: enough to tell kilobytes from megabytes
    /// without writing it.
    pub fn text_bytes(&self) -> usize {
        let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        let action = self.action_details.as_ref().map_or(0, |a| {
            a.raw_action_string.len() + value_bytes(a.tool_args.values())
        });
        let history: usize = self
            .updated_conversation_history
            .iter()
            .map(turn_bytes)
            .sum();
        let prompt = self.prompt.as_ref().map_or(0, |p| {
            p.messages.iter().map(|m| m.content.len()).sum::<usize>()
        });
        let error = self.error.as_ref().map_or(0, |e| {
            e.message.len() + text(&e.raw_output) + e.fields.len() * 64
        });
        text(&self.thought) + text(&self.direct_response) + action + history + prompt + error
    }

    /// The body as JSON. Megabytes of it take a worker milliseconds to write, so a large body is
    /// written on the CPU pool. Not an `async fn`: a small body is written at once, and the
    /// future of a large one is boxed, so that the handler's future keeps no room for either.
    pub fn into_json(self) -> impl std::future::Future<Output = bytes::Bytes> {
        use futures_util::future::Either;
        let text_bytes = self.text_bytes();
        let small = text_bytes <= crate::runtime::cpu::INLINE_BYTES;
        let write = move || {
            let json = crate::json::to_vec_for(&self, text_bytes);
            // Exactly its size: thousands of answers may wait at once to be written.
            bytes::Bytes::from(json.unwrap_or_else(|_| b"{}".to_vec()).into_boxed_slice())
        };
        if small {
            return Either::Left(std::future::ready(write()));
        }
        Either::Right(Box::pin(async move {
            crate::runtime::cpu::run(write)
                .await
                .unwrap_or_else(|_| bytes::Bytes::from_static(b"{}"))
        }))
    }
}

fn turn_bytes(turn: &Turn) -> usize {
    turn.content.len()
        + turn.thought.as_ref().map_or(0, String::len)
        + turn.tool_call.as_ref().map_or(0, |c| c.name.len())
        + value_bytes(turn.json_fields())
}

/// What JSON values take to write: their text, and a few bytes of punctuation and work for
/// every node, so that a million empty objects nested in a history count as the megabytes they
/// are to write.
fn value_bytes<'a>(values: impl Iterator<Item = &'a Value>) -> usize {
    const PER_NODE: usize = 8;
    let mut bytes = 0;
    crate::step::walk_json(values, |value| {
        bytes += PER_NODE
            + match value {
                Value::String(s) => s.len(),
                Value::Object(map) => map.keys().map(String::len).sum(),
                _ => 0,
            };
        true
    });
    bytes
}
