//! The conversation as the client stores it and sends it back on every step. Unknown fields of a
//! turn are kept and returned untouched, so a client's own bookkeeping survives the round trip.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
    ToolObservation,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(remote = "Self")]
pub struct ToolCall {
    /// The call's id, which the `tool_observation` answering it names in `tool_call_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub name: String,
    #[serde(default)]
    pub parameters: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(remote = "Self")]
pub struct ToolResult {
    pub success: bool,
    #[serde(default)]
    pub result: Value,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(remote = "Self")]
pub struct Turn {
    pub role: Role,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    #[serde(rename = "toolCall", default, skip_serializing_if = "Option::is_none")]
    pub tool_call: Option<ToolCall>,
    /// Every call of a turn that made several (`toolCall` is the first).
    #[serde(rename = "toolCalls", default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(
        rename = "toolResult",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub tool_result: Option<ToolResult>,
    /// On an assistant turn that gave the final answer: the thought behind it (`content` holds
    /// the answer the user reads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thought: Option<String>,
    /// On a `tool_observation`: the id of the call it answers (`toolCall.id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// On a `tool_observation`: the tool failed (its content says how).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// On an assistant turn: the model's reasoning as the provider returned it, opaque to the
    /// client, sent back with the turn on the next step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_state: Option<crate::llm::ReasoningState>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Turn {
    /// The calls the turn made: all of them when it made several, else its one.
    pub fn calls(&self) -> impl Iterator<Item = &ToolCall> {
        let one = self.tool_call.iter().filter(|_| self.tool_calls.is_empty());
        one.chain(&self.tool_calls)
    }

    /// Whether the turn says nothing: blank text, and no call, result or reasoning.
    pub fn is_blank(&self) -> bool {
        self.content.trim().is_empty()
            && self.tool_call.is_none()
            && self.tool_calls.is_empty()
            && self.tool_result.is_none()
            && self.tool_call_id.is_none()
            && self.reasoning_state.is_none()
    }

    /// An observation of a tool that failed, said either way a client may say it.
    pub fn failed(&self) -> bool {
        self.is_error == Some(true) || self.tool_result.as_ref().is_some_and(|r| !r.success)
    }

    /// The JSON the turn carries besides its text: the tool call's parameters, the tool's
    /// result, and any other fields the client keeps on it.
    pub fn json_fields(&self) -> impl Iterator<Item = &Value> {
        let call = self
            .tool_call
            .iter()
            .chain(&self.tool_calls)
            .flat_map(|c| c.parameters.values());
        let result = self.tool_result.iter().map(|r| &r.result);
        call.chain(result).chain(self.extra.values())
    }

    pub fn new(role: Role, content: String, timestamp: String) -> Self {
        Self {
            role,
            content,
            timestamp: Some(timestamp),
            tool_call: None,
            tool_calls: Vec::new(),
            tool_result: None,
            thought: None,
            tool_call_id: None,
            is_error: None,
            reasoning_state: None,
            extra: Map::new(),
        }
    }
}

/// Timestamps in the form the seed uses: `2024-01-01T00:00:00.000Z`.
/// How many JSON values the turns carry in their tool calls, results and other fields, counted
/// up to `stop` (past it, the exact figure does not matter).
pub fn json_values(turns: &[Turn], stop: usize) -> usize {
    let mut count = 0;
    walk_json(turns.iter().flat_map(Turn::json_fields), |_| {
        count += 1;
        count <= stop
    });
    count
}

/// Visits every value under `roots`, depth first, until `visit` says stop (false). It keeps a
/// stack of its own: the nesting is the client's.
pub fn walk_json<'a>(
    roots: impl Iterator<Item = &'a Value>,
    mut visit: impl FnMut(&'a Value) -> bool,
) {
    let mut stack: Vec<&Value> = roots.collect();
    while let Some(value) = stack.pop() {
        if !visit(value) {
            return;
        }
        match value {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
}

/// How deep a call's arguments (or a planned step's parameters) may nest, their object the
/// first level. They go back to the service inside the conversation (or the plan), four levels
/// down a body that may nest 128 in all: what is answered must be what can be sent back.
pub const MAX_ARGUMENT_DEPTH: usize = 64;

/// Why `arguments` cannot be sent back, when they nest deeper than [`MAX_ARGUMENT_DEPTH`].
pub fn too_deep(arguments: &Map<String, Value>) -> Option<String> {
    // Each value with its depth, on a stack of its own.
    let mut stack: Vec<(&Value, usize)> = arguments.values().map(|v| (v, 2)).collect();
    while let Some((value, depth)) = stack.pop() {
        let inner = match value {
            Value::Array(items) => items.iter().collect::<Vec<_>>(),
            Value::Object(map) => map.values().collect(),
            _ => continue,
        };
        if depth > MAX_ARGUMENT_DEPTH {
            return Some(format!(
                "the arguments nest more than {MAX_ARGUMENT_DEPTH} levels deep, more than a call can be sent back with in the conversation: flatten them"
            ));
        }
        stack.extend(inner.into_iter().map(|v| (v, depth + 1)));
    }
    None
}

pub fn timestamp_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// `name(key="value", n=2)`: how a tool call is written in the prompt and in
/// `raw_action_string`. Strings use JSON escapes, which the parser reads back.
pub fn render_call(name: &str, parameters: &Map<String, Value>) -> String {
    let mut out = String::new();
    write_call(&mut out, name, parameters);
    out
}

/// [`render_call`] appended to `out`. Values are written by serde_json straight into the text,
/// not through `Display` (which goes through `fmt` a piece at a time).
pub fn write_call(out: &mut String, name: &str, parameters: &Map<String, Value>) {
    let mut bytes = std::mem::take(out).into_bytes();
    bytes.extend_from_slice(name.as_bytes());
    bytes.push(b'(');
    for (i, (key, value)) in parameters.iter().enumerate() {
        if i > 0 {
            bytes.extend_from_slice(b", ");
        }
        bytes.extend_from_slice(key.as_bytes());
        bytes.push(b'=');
        // Writing a `Value` into a `Vec` does not fail: its keys are strings, the Vec grows.
        let _ = serde_json::to_writer(&mut bytes, value);
    }
    bytes.push(b')');
    // serde_json writes UTF-8, and the rest was `str`.
    *out = String::from_utf8(bytes)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
}

crate::json::objects_only!(; both: ToolCall, ToolResult, Turn);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_values_count_calls_results_and_extra_fields_and_stop_past_the_limit() {
        let turn: Turn = serde_json::from_value(serde_json::json!({
            "role": "assistant", "content": "t", "meta": {"a": [1, 2]},
            "toolCall": {"name": "f", "parameters": {"p": {"q": "x"}}},
            "toolResult": {"success": true, "result": [true, null]}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        // meta, [1, 2], 1, 2; {"q": …}, "x"; [true, null], true, null
        assert_eq!(json_values(std::slice::from_ref(&turn), 100), 9);
        let turns = vec![turn; 1000];
        assert_eq!(
            json_values(&turns, 50),
            51,
            "counting stops just past the limit"
        );
        // Deeper than serde lets a request nest (128): the walk keeps its own stack. (Not
        // deeper still: dropping a serde_json value recurses.)
        let mut deep = serde_json::json!(0);
        for _ in 0..1_000 {
            deep = serde_json::json!([deep]);
        }
        let mut deep_turn = turns[0].clone();
        (deep_turn.tool_call, deep_turn.tool_result) = (None, None);
        deep_turn.extra = Map::from_iter([("d".to_string(), deep)]);
        assert_eq!(json_values(&[deep_turn], usize::MAX), 1_001);
    }

    #[test]
    fn unknown_turn_fields_survive_a_round_trip() {
        let json = r#"{"role":"user","content":"hi","client_id":"c-7","meta":{"a":1}}"#;
        let turn: Turn = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}"));
        let back = serde_json::to_value(&turn).unwrap_or_default();
        assert_eq!(back["client_id"], "c-7");
        assert_eq!(back["meta"]["a"], 1);
        assert!(back.get("toolCall").is_none());
    }

    #[test]
    fn calls_render_with_json_quoted_strings() {
        let mut p = Map::new();
        p.insert("query".into(), Value::from("say \"hi\""));
        p.insert("limit".into(), Value::from(3));
        assert_eq!(
            render_call("code_search", &p),
            r#"code_search(query="say \"hi\"", limit=3)"#
        );
    }

    proptest::proptest! {
        /// Written straight by serde_json, a call reads as `Display` of each value would write
        /// it, appended after whatever the text held.
        #[test]
        fn a_call_is_written_as_display_writes_its_values(
            name in "[a-z_]{1,12}",
            pairs in proptest::collection::vec(
                (proptest::prelude::any::<String>(), crate::json::tests::value()),
                0..6,
            ),
            before in proptest::prelude::any::<String>(),
        ) {
            let parameters: Map<String, Value> = pairs.into_iter().collect();
            let shown: Vec<String> =
                parameters.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let mut text = before.clone();
            write_call(&mut text, &name, &parameters);
            proptest::prop_assert_eq!(text, format!("{before}{name}({})", shown.join(", ")));
        }
    }

    #[test]
    fn timestamps_have_milliseconds_and_z() {
        let ts = timestamp_now();
        assert!(ts.ends_with('Z') && ts.len() == 24, "{ts}");
    }
}
