//! What a loop continues: the turns of an earlier conversation sent before the question, the
//! `conversation_summary` that stands for the oldest of them, and what stands for turns that do
//! not fit (`history_strategy`: a session asks for `summarize`, so a summary comes back to keep).

use serde_json::{json, Value};

/// Empty by default: the loop starts a new conversation.
#[derive(Debug, Clone, Default)]
pub struct PriorConversation {
    /// `conversation_history` turns, oldest first.
    pub history: Vec<Value>,
    /// A `conversation_summary` an earlier response returned.
    pub summary: Option<Value>,
    /// `omit` or `summarize`; the service's default when absent.
    pub history_strategy: Option<String>,
}

impl PriorConversation {
    /// Puts the strategy and `summary` (the latest the loop holds) in a step's `body`.
    pub fn add_to(&self, body: &mut Value, summary: Option<&Value>) {
        if let Some(strategy) = &self.history_strategy {
            body["history_strategy"] = json!(strategy);
        }
        if let Some(summary) = summary {
            body["conversation_summary"] = summary.clone();
        }
    }
}
