//! A reply that called tools through the provider's tool calling, read as the text formats'
//! output is: the thought, the first call and the others of the turn.

use serde_json::Value;

use crate::llm::bounded::Unread;
use crate::llm::NativeCall;
use crate::step::parse::{self, Decision, Parsed, Tags};

/// A reply that called a tool through the provider's tool calling: the thought is the text
/// written before the call, the action the first call.
pub fn native_parsed(text: &str, calls: &[NativeCall], tags: &Tags) -> Option<Parsed> {
    calls.first()?;
    let warnings = Vec::new();
    let thought = parse::parse(text, tags)
        .map(|p| p.thought)
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| text.trim().to_string());
    let mut decisions = calls.iter().map(native_decision);
    Some(Parsed {
        thought,
        decision: decisions.next()?,
        also: decisions.collect(),
        warnings,
        structured: true,
        open_ended: false,
        answer_left_out: false,
        call_ids: calls.iter().map(|c| c.id.clone()).collect(),
    })
}

fn native_decision(call: &NativeCall) -> Decision {
    match &call.arguments {
        Ok(args) => Decision::Action {
            tool_name: call.name.clone(),
            tool_args: args.clone(),
            raw_action_string: render_native(call),
        },
        Err(Unread::PastBound(note)) => Decision::Unreadable {
            why: format!(
                "the arguments of the call to '{}' are past a bound: {note}",
                call.name
            ),
            raw_action_string: render_native(call),
        },
        Err(Unread::NotAnObject(_)) => Decision::Unreadable {
            why: format!(
                "the arguments of the call to '{}' are not a JSON object",
                call.name
            ),
            raw_action_string: render_native(call),
        },
    }
}

/// A native call as text: `name({"arg": …})`, or with the arguments as the model wrote them.
pub fn render_native(call: &NativeCall) -> String {
    match &call.arguments {
        Ok(args) => format!("{}({})", call.name, Value::Object(args.clone())),
        Err(unread) => format!("{}({})", call.name, unread.shown()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A native call whose arguments the reply's reader left unread (past its bounds) is told
    /// as such, not as "not a JSON object".
    #[test]
    fn a_native_call_past_the_readers_bounds_says_which() {
        let text = format!("{{\"q\": {}1{}}}", "[".repeat(40), "]".repeat(40));
        let call = crate::llm::NativeCall {
            id: None,
            name: "read_file".into(),
            arguments: crate::llm::bounded::arguments(&text),
        };
        let Decision::Unreadable { why, .. } = native_decision(&call) else {
            panic!("no call is read");
        };
        assert!(
            why.contains("past a bound") && why.contains("nested more than 32"),
            "{why}"
        );
        // Past the bytes a call may hold: told as such, and the text is never written back.
        let huge = format!(
            "{{\"q\": \"{}\"}}",
            "x".repeat(crate::llm::bounded::MAX_ARGUMENT_BYTES)
        );
        let call = crate::llm::NativeCall {
            arguments: crate::llm::bounded::arguments(&huge),
            ..call
        };
        let Decision::Unreadable {
            why,
            raw_action_string,
        } = native_decision(&call)
        else {
            panic!("no call is read");
        };
        assert!(
            why.contains("past a bound")
                && why.contains("bytes of arguments, more than the 1048576"),
            "{why}"
        );
        assert!(raw_action_string.len() < 200, "{raw_action_string}");
        let call = crate::llm::NativeCall {
            arguments: Err(crate::llm::bounded::Unread::NotAnObject("[1, 2]".into())),
            ..call
        };
        let Decision::Unreadable { why, .. } = native_decision(&call) else {
            panic!("no call is read");
        };
        assert!(why.contains("not a JSON object"), "{why}");
    }
}
