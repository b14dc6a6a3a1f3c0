//! What a loop run reports: each call it ran, each failure on the way, the tokens, how it
//! ended, and with `--plan` and `--reflect` the plan and the evaluations.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

/// Why the loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Termination {
    Success,
    MaxIterations,
    Failure,
    Stalled,
    TokenBudget,
    Timeout,
    Cancelled,
    Custom,
    /// `--approve-plan`: the plan was not approved, so nothing ran.
    PlanRejected,
}

/// One call the loop ran.
#[derive(Debug, Clone, Serialize)]
pub struct StepRecord {
    pub iteration: u32,
    pub thought: String,
    pub action: String,
    pub args: Value,
    pub observation: String,
    pub timestamp: String,
    pub token_usage: Value,
    /// `approved`, `denied` or `edited`, when the call was asked about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<&'static str>,
    /// The model's arguments, when the person edited them into `args`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proposed_args: Option<Value>,
}

/// A failure on the way: the service's error, or a tool's.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorRecord {
    /// `service`, or the tool's name.
    pub source: String,
    pub error: String,
    /// Tries after the first.
    pub retries: u32,
    /// A later try passed.
    pub recovered: bool,
    pub timestamp: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct TokenTotals {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// What the loop did and how it ended.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub answer: String,
    pub success: bool,
    pub termination_reason: Termination,
    pub iterations: u32,
    pub tool_usage: BTreeMap<String, u32>,
    pub steps: Vec<StepRecord>,
    pub error_history: Vec<ErrorRecord>,
    pub token_usage: TokenTotals,
    /// Seconds.
    pub execution_time: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    /// With a final answer schema: the answer as the JSON value that matched it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer_json: Option<Value>,
    /// With `--plan`: the plan the loop began with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<Value>,
    /// The plan as adjusted after each failed call, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub plan_adjustments: Vec<Value>,
    /// With `--reflect`: the evaluation of each final answer, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub evaluations: Vec<Value>,
    /// The `conversation_summary` the loop holds: the one it was given, or the latest the
    /// service returned (`history_strategy: summarize`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversation_summary: Option<Value>,
}

pub fn record_error(report: &mut RunReport, source: &str, error: &str) {
    record_tool_error(report, source, error, 0, false);
}

pub fn record_tool_error(
    report: &mut RunReport,
    source: &str,
    error: &str,
    retries: u32,
    recovered: bool,
) {
    report.error_history.push(ErrorRecord {
        source: source.to_string(),
        error: error.to_string(),
        retries,
        recovered,
        timestamp: chrono::Utc::now().to_rfc3339(),
    });
}

pub fn add_usage(totals: &mut TokenTotals, usage: &Value) {
    totals.prompt_tokens += usage["prompt_tokens"].as_u64().unwrap_or(0);
    totals.completion_tokens += usage["completion_tokens"].as_u64().unwrap_or(0);
}
