//! What the parser reads from an output: the thought and the decision (a call, an answer, or
//! an action that cannot be read), with the further calls of the same turn.

use serde_json::{Map, Value};

/// More calls than any turn makes are not read: each would be echoed back in the response.
pub const MAX_CALLS: usize = crate::llm::bounded::MAX_CALLS_PER_TURN;

#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Action {
        tool_name: String,
        tool_args: Map<String, Value>,
        raw_action_string: String,
    },
    Answer(String),
    /// An action was written but cannot be read: an unclosed call, no tool name, broken JSON.
    Unreadable {
        why: String,
        raw_action_string: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub thought: String,
    pub decision: Decision,
    /// Further calls the model wrote in the same turn, in order (a pythonic list, several
    /// markup blocks): the first is the decision.
    pub also: Vec<Decision>,
    pub warnings: Vec<String>,
    /// False when nothing in the output had the answer format (the direct-response fallback).
    pub structured: bool,
    /// Whether the decision runs to the end of the output without a mark that closes it (a
    /// plain-text input, markup whose closing tag never came): cut at the output limit, such
    /// a decision may be cut inside.
    pub open_ended: bool,
    /// The output held a final answer after the call that decides: the call is taken and the
    /// answer left out (the model had not seen the tool's result when it wrote it).
    pub answer_left_out: bool,
    /// The provider's ids of native calls: the decision's first, then `also`'s in order (empty
    /// for text, which has none).
    pub call_ids: Vec<Option<String>>,
}
