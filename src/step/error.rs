//! How a step fails, with what it spent and the prompt it failed with.

use super::context::budget::Overflow;
use super::context::ContextReport;
use crate::llm::{LlmError, Provider, Usage};

/// A step's failure: what went wrong, and what the error response reports beside it.
#[derive(Debug, thiserror::Error)]
#[error("{kind}")]
pub struct StepError {
    pub kind: StepErrorKind,
    /// What the step's model calls spent before it failed, reported as a success would:
    /// `None` when none was billed. Boxed, as the report is: most failures carry neither, and
    /// every `Result` that may hold this error makes room for it.
    pub usage: Option<Box<Usage>>,
    /// The report of the prompt the failure happened with, once one was fitted.
    pub context_report: Option<Box<ContextReport>>,
    /// With `llm_config.fallbacks`: every model the step tried, in order, the last one's error
    /// being this one (`fallback.rs`); empty otherwise.
    pub fallback_attempts: Vec<FailedAttempt>,
}

/// A model of the step's chain (`llm_config.fallbacks`) that failed, and what its calls billed.
#[derive(Debug)]
pub struct FailedAttempt {
    pub provider: Provider,
    pub model: String,
    pub usage: Option<Usage>,
    /// Why it failed; `None` for the last model tried, whose failure is the step's own error.
    pub error: Option<Box<StepError>>,
}

/// What went wrong in a step.
#[derive(Debug, thiserror::Error)]
pub enum StepErrorKind {
    #[error("the mandatory parts of the prompt (instructions, tools, query and latest observation) need {} tokens but the prompt's budget is {} (tokenLimit less reservedOutputTokens, and less the thinking budget the reasoning_effort adds, if any)", .0.required, .0.budget)]
    ContextOverflow(Overflow),
    #[error(transparent)]
    Llm(#[from] LlmError),
    #[error("the model returned no usable text (finish reason: {0})")]
    EmptyOutput(String),
    #[error("the model's output is not a valid step: {why}")]
    InvalidOutput { why: String, raw_output: String },
    #[error("internal error: {0}")]
    Internal(String),
    #[error("the step did not finish within its deadline (REACTSTEP_STEP_TIMEOUT_SECS, {} s)", .0.as_secs())]
    Deadline(std::time::Duration),
    /// The proposed call would go on with a loop past `react.loop_guard.stop_after`.
    #[error("{}", super::loop_guard::stopped_message(.0))]
    LoopDetected(Box<super::loop_guard::LoopReport>),
    /// The streaming client disconnected; nobody is left to answer.
    #[error("the client disconnected")]
    ClientGone,
    /// The service is stopping, and its grace period ends before the step would
    /// (`runtime::stopping`).
    #[error("the service is stopping and its grace period (REACTSTEP_SHUTDOWN_GRACE_SECS) ends before this step would: retry, on another replica")]
    ShuttingDown,
}

impl From<StepErrorKind> for StepError {
    fn from(kind: StepErrorKind) -> Self {
        Self {
            kind,
            usage: None,
            context_report: None,
            fallback_attempts: Vec::new(),
        }
    }
}

impl From<LlmError> for StepError {
    fn from(error: LlmError) -> Self {
        StepErrorKind::Llm(error).into()
    }
}

impl StepError {
    /// The same failure, carrying `usage` when calls were billed. Nobody reads a disconnected
    /// client's answer, so that one stays as it is.
    pub(super) fn spent(mut self, usage: Option<Usage>) -> Self {
        if let Some(usage) = usage.filter(|_| !matches!(self.kind, StepErrorKind::ClientGone)) {
            self.usage = Some(Box::new(usage));
        }
        self
    }

    /// The same failure, carrying the report of the prompt it happened with (the first one it
    /// was given).
    pub(super) fn reported(mut self, report: &ContextReport) -> Self {
        if self.context_report.is_none() && !matches!(self.kind, StepErrorKind::ClientGone) {
            self.context_report = Some(Box::new(report.clone()));
        }
        self
    }
}
