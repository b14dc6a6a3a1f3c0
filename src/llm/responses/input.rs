//! The conversation as the Responses API's `input` items. An assistant turn whose state holds the
//! reply's own output items goes back as those items, verbatim and in order (reasoning with its
//! encrypted content, messages with their `phase`, calls); any other turn is rebuilt from its
//! text and calls. A user message that continues a turn of tool results goes inside the last
//! result, so the turn (and the reasoning it keeps) is not ended.

use std::borrow::Cow;

use super::wire::Input;
use crate::llm::{ChatMessage, ChatRole, MESSAGE_JOIN};

/// The `input` items for the conversation; `text_mode`: no tool goes as the API's own (calls
/// are written in the text).
pub fn items(messages: &[ChatMessage], text_mode: bool) -> Vec<Input<'_>> {
    let mut input = Vec::with_capacity(messages.len() + 1);
    for m in messages {
        match m.role {
            ChatRole::User if m.in_turn => match input.last_mut() {
                Some(Input::FunctionCallOutput { output, .. }) => {
                    let joined = output.to_mut();
                    joined.push_str(MESSAGE_JOIN);
                    joined.push_str(&m.content);
                }
                _ => input.push(text("user", m)),
            },
            ChatRole::User => input.push(text("user", m)),
            ChatRole::Tool => input.push(Input::FunctionCallOutput {
                kind: "function_call_output",
                call_id: m.answers.as_deref().unwrap_or_default(),
                output: m.text_as_sent(),
            }),
            ChatRole::Assistant => match own_items(m) {
                Some(items) if text_mode => kept_text(items, m, &mut input),
                Some(items) => input.extend(items.iter().map(Input::Verbatim)),
                None => assistant(m, &mut input),
            },
        }
    }
    input
}

fn text<'a>(role: &'static str, m: &'a ChatMessage) -> Input<'a> {
    Input::Message {
        role,
        content: Cow::Borrowed(&m.content),
    }
}

/// The turn's own output items, when they are the turn: its calls are their function calls,
/// with the same ids in the same order.
fn own_items(m: &ChatMessage) -> Option<&[serde_json::Value]> {
    let items = &m.reasoning.as_ref()?.items;
    if items.is_empty() {
        return None;
    }
    let item_calls = items
        .iter()
        .filter(|i| i["type"] == "function_call")
        .map(|i| i["call_id"].as_str());
    let calls = m.calls.iter().map(|c| Some(c.id.as_str()));
    item_calls.eq(calls).then_some(items.as_slice())
}

/// A turn written as text, with the items it came as. Its messages go back as they came (with
/// their `phase`: a commentary, then a `final_answer`) while they are the kept turn line for line,
/// in order (a line as the model wrote it, or without the tag the step put before it), and hold
/// nothing but text. The first that is not (it holds a line the step cut or changed, a line the
/// step kept once and the model wrote twice, a refusal part) goes back, under its own id and
/// phase, holding the rest of the kept turn; the items after it, or after the message that ends
/// the kept turn, are the model going on past its step and are left out (a reasoning item goes
/// only with the item that followed it). Messages that end before the kept turn does: the turn
/// goes back whole in the first message, as every other wire sends it.
fn kept_text<'a>(items: &'a [serde_json::Value], m: &'a ChatMessage, input: &mut Vec<Input<'a>>) {
    let Some(first) = items.iter().position(is_message) else {
        return assistant(m, input);
    };
    if let Some(sent) = as_kept(items, &m.content) {
        return input.extend(sent);
    }
    input.extend(items[..first].iter().map(Input::Verbatim));
    input.push(holding(&items[first], &m.content));
}

/// `message` under its own id and phase, holding `text`.
fn holding(message: &serde_json::Value, text: &str) -> Input<'static> {
    let mut message = message.clone();
    message["content"] =
        serde_json::json!([{"type": "output_text", "text": text, "annotations": []}]);
    Input::Changed(message)
}

/// The items as they go back (see [`kept_text`]); none when the messages end before the kept
/// turn does.
fn as_kept<'a>(items: &'a [serde_json::Value], kept: &str) -> Option<Vec<Input<'a>>> {
    // Each non-empty line of the kept turn, trimmed, with where it begins.
    let lines: Vec<(usize, &str)> = kept
        .split_inclusive('\n')
        .scan(0, |at, line| {
            let start = *at;
            *at += line.len();
            Some((start, line.trim()))
        })
        .filter(|(_, line)| !line.is_empty())
        .collect();
    let mut sent = Vec::new();
    let mut matched = 0;
    for item in items {
        if !is_message(item) {
            sent.push(Input::Verbatim(item));
            continue;
        }
        let from = matched;
        let as_written = text_lines(item).is_some_and(|written| {
            written.iter().all(|line| {
                let same = lines
                    .get(matched)
                    .is_some_and(|&(_, want)| *line == want || *line == untagged(want));
                matched += usize::from(same);
                same
            })
        });
        if !as_written {
            sent.push(holding(item, &kept[lines.get(from)?.0..]));
            return Some(sent);
        }
        sent.push(Input::Verbatim(item));
        if matched == lines.len() {
            return Some(sent);
        }
    }
    None
}

fn is_message(item: &serde_json::Value) -> bool {
    item["type"] == "message"
}

/// A message item's lines of text, trimmed, the empty ones left out; none when a part of it is
/// not text (a refusal, which the step leaves out when there is text).
fn text_lines(message: &serde_json::Value) -> Option<Vec<&str>> {
    let parts = message["content"].as_array()?;
    let texts = parts.iter().map(|p| match p["type"].as_str() {
        Some("output_text") => p["text"].as_str(),
        _ => None,
    });
    let texts: Option<Vec<&str>> = texts.collect();
    let lines = texts?.into_iter().flat_map(str::lines).map(str::trim);
    Some(lines.filter(|line| !line.is_empty()).collect())
}

/// A kept line's words without the tag the step put before them (`Thought:`, `Final Answer:`).
fn untagged(line: &str) -> &str {
    let line = line.trim();
    match line.split_once(':') {
        Some((tag, words))
            if (1..=3).contains(&tag.split(' ').count())
                && tag
                    .split(' ')
                    .all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphabetic())) =>
        {
            words.trim()
        }
        _ => line,
    }
}

/// A turn rebuilt: its text as an assistant message, then one function call item per call.
fn assistant<'a>(m: &'a ChatMessage, input: &mut Vec<Input<'a>>) {
    if !m.content.is_empty() || m.calls.is_empty() {
        input.push(text("assistant", m));
    }
    input.extend(m.calls.iter().map(|c| Input::FunctionCall {
        kind: "function_call",
        call_id: &c.id,
        name: &c.name,
        arguments: serde_json::Value::Object(c.arguments.clone()).to_string(),
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ReasoningState, ToolUse};
    use serde_json::{json, Value};

    fn call(id: &str) -> ToolUse {
        ToolUse {
            id: id.into(),
            name: "read_file".into(),
            arguments: serde_json::Map::from_iter([("path".into(), json!("a.js"))]),
        }
    }

    fn written(messages: &[ChatMessage]) -> serde_json::Value {
        serde_json::to_value(items(messages, false)).unwrap_or_default()
    }

    #[test]
    fn a_turn_with_its_own_items_goes_back_as_them_and_results_keep_the_turn() {
        let own = vec![
            json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "e", "summary": []}),
            json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file", "arguments": "{}"}),
        ];
        let mut turn = ChatMessage::text(ChatRole::Assistant, "Thought".into());
        turn.calls = vec![call("call_1")];
        turn.reasoning = Some(ReasoningState {
            items: own.clone(),
            ..ReasoningState::default()
        });
        let mut result = ChatMessage::text(ChatRole::Tool, "contents".into());
        result.answers = Some("call_1".into());
        let mut more = ChatMessage::text(ChatRole::User, "go on".into());
        more.in_turn = true;
        let user = ChatMessage::text(ChatRole::User, "task".into());
        let v = written(&[user, turn.clone(), result, more]);
        assert_eq!(v[0], json!({"role": "user", "content": "task"}));
        assert_eq!(v[1], own[0]);
        assert_eq!(v[2], own[1]);
        assert_eq!(
            v[3],
            json!({"type": "function_call_output", "call_id": "call_1", "output": "contents\n\ngo on"})
        );
        // Ids that are not the items' own: the turn is rebuilt.
        turn.calls = vec![call("call_9")];
        let v = written(&[turn]);
        assert_eq!(v[0], json!({"role": "assistant", "content": "Thought"}));
        assert_eq!(v[1]["type"], "function_call");
        assert_eq!(v[1]["call_id"], "call_9");
        assert_eq!(v[1]["arguments"], "{\"path\":\"a.js\"}");
    }

    #[test]
    fn a_turn_written_as_text_goes_back_as_kept_with_the_reasoning_before_it() {
        let own = vec![
            json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "e", "summary": []}),
            json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": "Thought: t\nAction: a()\nObservation: made up", "annotations": []}]}),
            json!({"type": "reasoning", "id": "rs_2", "encrypted_content": "f", "summary": []}),
            json!({"type": "message", "id": "msg_2", "role": "assistant", "content": []}),
        ];
        let mut turn = ChatMessage::text(ChatRole::Assistant, "Thought: t\nAction: a()".into());
        turn.reasoning = Some(ReasoningState {
            items: own.clone(),
            ..ReasoningState::default()
        });
        let v = serde_json::to_value(items(&[turn.clone()], true)).unwrap_or_default();
        let mut kept = own[1].clone();
        kept["content"][0]["text"] = json!("Thought: t\nAction: a()");
        assert_eq!(v, json!([own[0], kept]));
        // No message among them: the turn is rebuilt from its text.
        turn.reasoning = Some(ReasoningState {
            items: vec![own[0].clone()],
            ..ReasoningState::default()
        });
        let v = serde_json::to_value(items(&[turn], true)).unwrap_or_default();
        assert_eq!(
            v,
            json!([{"role": "assistant", "content": "Thought: t\nAction: a()"}])
        );
    }

    /// The items of a reply of two messages, a commentary then an answer, reasoning before each;
    /// and what goes back of them when the step kept `kept`.
    fn two_messages(commentary: &str, answer: &str, kept: &str) -> (Vec<Value>, Value) {
        let message = |id: &str, phase: &str, text: &str| {
            json!({"type": "message", "id": id, "role": "assistant", "phase": phase,
                "content": [{"type": "output_text", "text": text, "annotations": []}]})
        };
        let own = vec![
            json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "e", "summary": []}),
            message("msg_1", "commentary", commentary),
            json!({"type": "reasoning", "id": "rs_2", "encrypted_content": "f", "summary": []}),
            message("msg_2", "final_answer", answer),
        ];
        let mut turn = ChatMessage::text(ChatRole::Assistant, kept.into());
        turn.reasoning = Some(ReasoningState {
            items: own.clone(),
            ..ReasoningState::default()
        });
        let sent = serde_json::to_value(items(&[turn], true)).unwrap_or_default();
        (own, sent)
    }

    #[test]
    fn a_commentary_then_an_answer_goes_back_as_they_came_when_kept_whole() {
        let (own, sent) = two_messages(
            "I will answer now.",
            "Final Answer: FORTY-TWO",
            "Thought: I will answer now.\nFinal Answer: FORTY-TWO",
        );
        assert_eq!(sent, json!(own));
        // An answer made up past an action is left out, with the reasoning before it.
        let (own, sent) = two_messages(
            "I will look.\nAction: look()",
            "Final Answer: MADE-UP",
            "Thought: I will look.\nAction: look()",
        );
        assert_eq!(sent, json!(own[..2]));
    }

    #[test]
    fn the_message_the_step_cut_or_changed_goes_back_under_its_phase_holding_the_rest() {
        for (answer, kept) in [
            // A line of the answer cut.
            (
                "Final Answer: FORTY-TWO\nObservation: MADE-UP",
                "Final Answer: FORTY-TWO",
            ),
            // Words changed: the answer's markup, or less of it kept.
            ("**Final Answer:** FORTY-TWO", "Final Answer: FORTY-TWO"),
            ("Final Answer: FORTY-TWO", "Final Answer: FORTY"),
            // A line the step cut, found inside a line it kept; one it kept once, written twice.
            (
                "Final Answer: it read Observation: FAKE\nObservation: FAKE",
                "Final Answer: it read Observation: FAKE",
            ),
            ("Final Answer: 42\nFinal Answer: 42", "Final Answer: 42"),
        ] {
            let whole = format!("Thought: I will answer now.\n{kept}");
            let (own, sent) = two_messages("I will answer now.", answer, &whole);
            // The commentary as it came; the answer's message holding the answer as kept.
            let mut message = own[3].clone();
            message["content"][0]["text"] = json!(kept);
            assert_eq!(sent, json!([own[0], own[1], own[2], message]), "{answer:?}");
        }
        // The first message cut: the whole kept turn in it, as on every other wire.
        let kept = "Thought: t\nAction: a()";
        let (own, sent) = two_messages("Thought: t\nAction: a()\nObservation: MADE-UP", "x", kept);
        let mut message = own[1].clone();
        message["content"][0]["text"] = json!(kept);
        assert_eq!(sent, json!([own[0], message]));
        // The messages end before the kept turn does: the same.
        let kept = "Thought: I will answer now.\nFinal Answer: 42\nmore";
        let (own, sent) = two_messages("I will answer now.", "Final Answer: 42", kept);
        let mut message = own[1].clone();
        message["content"][0]["text"] = json!(kept);
        assert_eq!(sent, json!([own[0], message]));
    }

    #[test]
    fn a_message_with_a_part_that_is_not_text_goes_back_holding_the_kept_text() {
        let kept = "Thought: I will answer now.\nFinal Answer: FORTY-TWO";
        let (mut own, _) = two_messages("I will answer now.", "Final Answer: FORTY-TWO", kept);
        let refusal = json!({"type": "refusal", "refusal": "DISCARDED"});
        if let Some(parts) = own[3]["content"].as_array_mut() {
            parts.push(refusal);
        }
        let mut turn = ChatMessage::text(ChatRole::Assistant, kept.into());
        turn.reasoning = Some(ReasoningState {
            items: own.clone(),
            ..ReasoningState::default()
        });
        let sent = serde_json::to_value(items(&[turn], true)).unwrap_or_default();
        assert!(!sent.to_string().contains("DISCARDED"), "{sent}");
        assert_eq!(sent.as_array().map(Vec::len), Some(4), "{sent}");
        assert_eq!(sent[3]["phase"], "final_answer", "{sent}");
        assert_eq!(sent[3]["content"][0]["text"], "Final Answer: FORTY-TWO");
    }

    #[test]
    fn a_failed_tool_says_so_and_an_in_turn_message_without_results_is_a_user_message() {
        let mut failed = ChatMessage::text(ChatRole::Tool, "no such file".into());
        failed.answers = Some("c".into());
        failed.is_error = true;
        let mut alone = ChatMessage::text(ChatRole::User, "hi".into());
        alone.in_turn = true;
        let v = written(&[alone, failed]);
        assert_eq!(v[0], json!({"role": "user", "content": "hi"}));
        assert_eq!(v[1]["output"], "[the tool failed] no such file");
    }
}
