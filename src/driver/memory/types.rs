//! What a session store holds, as its callers see it: sessions and the runs saved in them.
//! Times are RFC 3339 in UTC (`2026-01-02T03:04:05.678Z`); JSON is kept as the driver wrote it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A summary of a session's oldest turns, as the service returns it (`conversation_summary`)
/// and takes it back: `text` stands for the first `turns` turns of the session's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub text: String,
    pub turns: u64,
}

/// A session, without its runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub name: String,
    pub created: String,
    /// When its last run was saved.
    pub last_active: String,
    pub summary: Option<Summary>,
    /// How many runs it holds.
    pub run_count: u64,
}

/// One run saved in a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedRun {
    /// Rises with each run saved in the store: the runs of a session in the order they ended.
    pub id: i64,
    pub question: String,
    pub started: String,
    pub ended: String,
    /// The final answer (or, when the run did not succeed, what its end said).
    pub answer: String,
    /// The report's `termination_reason` (`success`, `cancelled`, `timeout` …).
    pub termination: String,
    /// The driver's whole JSON report, which holds the steps.
    pub report: Value,
    /// The plan the run followed (`--plan`), or null.
    pub plan: Option<Value>,
    /// The evaluations of its answers (`--reflect`): a JSON array, empty without them.
    pub evaluations: Value,
}

/// A session and its runs, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    #[serde(flatten)]
    pub info: SessionInfo,
    pub runs: Vec<SavedRun>,
    /// What of the session could not be read (a run whose report is not JSON, one left out):
    /// said, and the rest shown. Empty (and not written) for a sound session.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A run to save: what [`SavedRun`] holds but its id, with the session's new summary, if the
/// run brought one. Times in milliseconds since the Unix epoch.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    pub question: String,
    pub started_ms: i64,
    pub ended_ms: i64,
    pub answer: String,
    pub termination: String,
    pub report: Value,
    pub plan: Option<Value>,
    pub evaluations: Value,
    /// Replaces the session's summary when given; the one it had is kept otherwise.
    pub summary: Option<Summary>,
}

impl NewRun {
    /// The run with every NUL character of its texts and of its JSON's strings and keys made
    /// U+FFFD: PostgreSQL's text cannot hold NUL, and both stores keep the same.
    pub fn without_nul(self) -> Self {
        Self {
            question: without_nul_text(self.question),
            answer: without_nul_text(self.answer),
            termination: without_nul_text(self.termination),
            report: without_nul(self.report),
            plan: self.plan.map(without_nul),
            evaluations: without_nul(self.evaluations),
            summary: self.summary.map(|s| Summary {
                text: without_nul_text(s.text),
                turns: s.turns,
            }),
            ..self
        }
    }
}

fn without_nul_text(text: String) -> String {
    match text.contains('\0') {
        true => text.replace('\0', "\u{FFFD}"),
        false => text,
    }
}

fn without_nul(value: Value) -> Value {
    match value {
        Value::String(text) => Value::String(without_nul_text(text)),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nul).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(k, v)| (without_nul_text(k), without_nul(v)))
                .collect(),
        ),
        other => other,
    }
}

/// `ms` since the Unix epoch as RFC 3339 in UTC, to the millisecond.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
