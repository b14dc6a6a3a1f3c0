//! How a step fails, with what it spent and the prompt it failed with.

use super::budget::Overflow;
use super::context::ContextReport;
use crate::llm::{LlmError, Usage};

#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("the mandatory parts of the prompt (instructions, tools, query and latest observation) need {} tokens but the budget (tokenLimit - reservedOutputTokens) is {}", .0.required, .0.budget)]
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
    /// The streaming client disconnected; nobody is left to answer.
    #[error("the client disconnected")]
    ClientGone,
    /// A failure after the provider billed for calls: the error response reports what they
    /// spent, as a success would.
    #[error("{error}")]
    Spent { error: Box<StepError>, usage: Usage },
    /// A failure after the prompt was fitted: the error response carries its context report.
    #[error("{error}")]
    Reported {
        error: Box<StepError>,
        report: Box<ContextReport>,
    },
}

impl StepError {
    /// The same failure, carrying `usage` when calls were billed. Nobody reads a disconnected
    /// client's answer, so that one stays as it is.
    pub(super) fn spent(self, usage: Option<Usage>) -> Self {
        match (self, usage) {
            (Self::Spent { error, .. }, Some(usage)) => Self::Spent { error, usage },
            (error, Some(usage)) if !matches!(error, Self::ClientGone) => Self::Spent {
                error: Box::new(error),
                usage,
            },
            (error, _) => error,
        }
    }

    /// The same failure, carrying the report of the prompt it happened with.
    pub(super) fn reported(self, report: &ContextReport) -> Self {
        match self {
            Self::ClientGone | Self::Reported { .. } => self,
            Self::Spent { error, usage } => Self::Spent {
                error: Box::new(error.reported(report)),
                usage,
            },
            error => Self::Reported {
                error: Box::new(error),
                report: Box::new(report.clone()),
            },
        }
    }

    /// The failure itself, whatever was spent before it.
    pub fn cause(&self) -> &StepError {
        match self {
            Self::Spent { error, .. } | Self::Reported { error, .. } => error.cause(),
            other => other,
        }
    }

    /// What the step's model calls spent before it failed; `None` when none was billed.
    pub fn usage(&self) -> Option<Usage> {
        match self {
            Self::Spent { usage, .. } => Some(*usage),
            Self::Reported { error, .. } => error.usage(),
            _ => None,
        }
    }

    /// The report of the prompt the failure happened with, once one was fitted.
    pub fn report(&self) -> Option<&ContextReport> {
        match self {
            Self::Reported { report, .. } => Some(report),
            Self::Spent { error, .. } => error.report(),
            _ => None,
        }
    }
}
