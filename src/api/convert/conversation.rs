//! The conversation: the user's query, and the history's turns (their timestamps, tool calls
//! and call ids); also whether a session id or a history may be echoed in an error.

use crate::llm::bounded::{is_call_id, MAX_CALLS_PER_TURN};
use crate::step::{json_values, ToolCall, Turn};

/// `user_query`, unless the history carries the conversation, and every turn of the history.
pub fn check(user_query: &str, turns: &[Turn], fail: &mut impl FnMut(&str, String)) {
    if user_query.trim().is_empty() && turns.is_empty() {
        fail(
            "user_query",
            "must not be empty when conversation_history is empty".into(),
        );
    } else if user_query.trim().is_empty() && turns.iter().all(Turn::is_blank) {
        fail(
            "user_query",
            "must not be empty when every turn of conversation_history is blank".into(),
        );
    }
    for (i, turn) in turns.iter().enumerate() {
        check_turn(i, turn, fail);
    }
    if json_values(turns, MAX_HISTORY_JSON_VALUES) > MAX_HISTORY_JSON_VALUES {
        fail(
            "conversation_history",
            format!("holds more than {MAX_HISTORY_JSON_VALUES} JSON values in its tool calls, results and other fields"),
        );
    }
}

/// The history with each turn that gives only `toolCalls` given its `toolCall` (the first of
/// them) too, as the service writes such turns: everything that reads a turn's call reads it.
pub fn with_first_calls(mut turns: Vec<Turn>) -> Vec<Turn> {
    for turn in &mut turns {
        if turn.tool_call.is_none() {
            turn.tool_call = turn.tool_calls.first().cloned();
        }
    }
    turns
}

/// The most JSON values a history's tool calls, results and other fields may hold in all. Each
/// value costs 100 to 200 bytes once decoded and is held several times while a step runs (the
/// request, the history it returns, its echo on an error): 2 MB of nested objects would
/// otherwise cost hundreds of MiB. A real history's results are text, or JSON far smaller.
const MAX_HISTORY_JSON_VALUES: usize = 100_000;

/// Whether a session id passes validation (1 to 256 characters): only then is it echoed, since
/// a value that failed validation is never repeated (a key pasted there would be).
pub fn session_id_is_valid(id: &str) -> bool {
    (1..=256).contains(&id.chars().count())
}

/// Whether every turn is valid: only then is the history echoed in an error response, which
/// must itself conform to the contract.
pub fn history_is_valid(turns: &[Turn]) -> bool {
    if json_values(turns, MAX_HISTORY_JSON_VALUES) > MAX_HISTORY_JSON_VALUES {
        return false;
    }
    let mut valid = true;
    for (i, turn) in turns.iter().enumerate() {
        check_turn(i, turn, &mut |_, _| valid = false);
    }
    valid
}

fn check_turn(i: usize, turn: &Turn, fail: &mut impl FnMut(&str, String)) {
    let at = |field: &str| format!("conversation_history[{i}].{field}");
    if let Some(ts) = &turn.timestamp {
        if chrono::DateTime::parse_from_rfc3339(ts).is_err() {
            fail(
                &at("timestamp"),
                "must be an RFC 3339 date-time such as 2024-01-01T00:00:00.000Z".into(),
            );
        }
    }
    let calls = turn.tool_call.iter().map(|c| ("toolCall".to_string(), c));
    let more = turn
        .tool_calls
        .iter()
        .enumerate()
        .map(|(n, c)| (format!("toolCalls[{n}]"), c));
    for (name, call) in calls.chain(more) {
        if call.name.trim().is_empty() || call.name.len() > 256 {
            fail(
                &at(&format!("{name}.name")),
                "must be 1 to 256 characters".into(),
            );
        }
        if call.id.as_deref().is_some_and(|id| !is_call_id(id)) {
            fail(&at(&format!("{name}.id")), CALL_ID_RULE.into());
        }
    }
    // Another call, not the same written otherwise (`1.0` for `1`, an id left off).
    let other = |one: &ToolCall, first: &ToolCall| {
        let ids = one.id.as_deref().zip(first.id.as_deref());
        one.name != first.name || ids.is_some_and(|(a, b)| a != b)
    };
    let first = turn.tool_calls.first();
    if turn
        .tool_call
        .as_ref()
        .zip(first)
        .is_some_and(|(one, first)| other(one, first))
    {
        fail(
            &at("toolCall"),
            "must be the first of toolCalls when both are given".into(),
        );
    }
    let mut ids = std::collections::HashSet::new();
    if let Some(n) = turn
        .tool_calls
        .iter()
        .position(|c| c.id.as_deref().is_some_and(|id| !ids.insert(id)))
    {
        fail(
            &at(&format!("toolCalls[{n}].id")),
            "repeats the id of another call of the turn: no result could say which it answers"
                .into(),
        );
    }
    if turn.tool_calls.len() > MAX_CALLS_PER_TURN {
        fail(
            &at("toolCalls"),
            format!("holds at most {MAX_CALLS_PER_TURN} calls"),
        );
    }
    if turn
        .tool_call_id
        .as_deref()
        .is_some_and(|id| !is_call_id(id))
    {
        fail(&at("tool_call_id"), CALL_ID_RULE.into());
    }
}

const CALL_ID_RULE: &str = "must be 1 to 256 printable ASCII characters without spaces";
