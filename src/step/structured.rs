//! What a plan or evaluation step answers, and how a step knows to read its answer so
//! (`task.rs` sets and reads them).

use serde_json::Value;

/// How the step's answer is read once the model has given it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reading {
    #[default]
    React,
    Plan,
    /// The steps the loop has taken, and the most its plan allows.
    Evaluation {
        steps: u64,
        limit: Option<u64>,
    },
}

/// A plan or an evaluation read from a step's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Structured {
    Plan(Value),
    Evaluation(Value),
}
