//! What a judged step decides, as the client may act on it.

use serde_json::{Map, Value};

/// A decision the client may act on.
#[derive(Debug, Clone, PartialEq)]
pub enum Valid {
    Action {
        /// The turn's first call. Its id is the provider's for a native call; a text call gets
        /// one of the service's.
        call: Call,
        /// The turn's further calls, each checked as the first was.
        parallel: Vec<Call>,
    },
    Answer(String),
}

/// One call of a turn with several.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub tool_name: String,
    pub tool_args: Map<String, Value>,
    pub raw_action_string: String,
    pub tool_call_id: Option<String>,
}
