//! What the providers' real APIs refuse in a request body, for the mocks that refuse it too.

use serde_json::{json, Value};
use wiremock::ResponseTemplate;

/// OpenAI's rule: a `tool` message answers a call of the assistant message before it, and every
/// call is answered before any other message.
fn openai_pairing(messages: &[Value]) -> Result<(), String> {
    let mut open: Vec<String> = Vec::new();
    for m in messages {
        let role = m["role"].as_str().unwrap_or_default();
        if role == "tool" {
            let id = m["tool_call_id"].as_str().unwrap_or_default();
            let Some(at) = open.iter().position(|o| o == id) else {
                return Err(format!("messages with role 'tool' must be a response to a preceding message with 'tool_calls' ({id})"));
            };
            open.remove(at);
            continue;
        }
        if !open.is_empty() {
            return Err(format!("an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id': {open:?}"));
        }
        for call in m["tool_calls"].as_array().into_iter().flatten() {
            let id = call["id"].as_str().unwrap_or_default();
            if id.len() > 40 {
                return Err(format!("Invalid 'messages.tool_calls.id': string too long. Expected a string with maximum length 40, but got a string with length {}", id.len()));
            }
            open.push(id.to_string());
            if !call["function"]["arguments"].is_string() {
                return Err("arguments must be a JSON string".into());
            }
        }
    }
    Ok(())
}

/// Anthropic's rule: roles alternate from a user message, and each `tool_use` is answered by a
/// `tool_result` at the start of the next user message.
fn anthropic_pairing(messages: &[Value]) -> Result<(), String> {
    let mut expected = "user";
    let mut open: Vec<String> = Vec::new();
    let mut used = std::collections::HashSet::new();
    for m in messages {
        let role = m["role"].as_str().unwrap_or_default();
        if role != expected {
            return Err(format!("messages: roles must alternate, got {role}"));
        }
        expected = if role == "user" { "assistant" } else { "user" };
        let blocks = m["content"].as_array().cloned().unwrap_or_default();
        if role == "user" {
            let results: Vec<&str> = blocks
                .iter()
                .take_while(|b| b["type"] == "tool_result")
                .map(|b| b["tool_use_id"].as_str().unwrap_or_default())
                .collect();
            let mut wanted = std::mem::take(&mut open);
            wanted.sort();
            let mut got: Vec<String> = results.iter().map(|s| s.to_string()).collect();
            got.sort();
            if wanted != got {
                return Err(format!("tool_use ids were found without tool_result blocks immediately after: {wanted:?} vs {got:?}"));
            }
            if blocks
                .iter()
                .skip(results.len())
                .any(|b| b["type"] == "tool_result")
            {
                return Err("tool_result blocks must come first".into());
            }
        } else {
            for b in &blocks {
                if b["type"] == "tool_use" {
                    let id = b["id"].as_str().unwrap_or_default();
                    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'-';
                    if id.is_empty() || !id.bytes().all(word) {
                        return Err(
                            "tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'".into(),
                        );
                    }
                    if !used.insert(id.to_string()) {
                        return Err(format!("tool_use ids must be unique: {id}"));
                    }
                    open.push(id.to_string());
                }
                if b["type"] == "text" && b["text"].as_str().is_some_and(str::is_empty) {
                    return Err("text content blocks must be non-empty".into());
                }
            }
        }
    }
    Ok(())
}

/// The refusal the provider's API answers a request whose calls and results do not pair, if
/// they do not.
pub fn pairing_refusal(anthropic: bool, body: &Value) -> Option<ResponseTemplate> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let checked = if anthropic {
        anthropic_pairing(&messages).and_then(|()| anthropic_structure(body))
    } else {
        openai_pairing(&messages)
    };
    checked.err().map(|why| {
        ResponseTemplate::new(400)
            .set_body_json(json!({"error": {"message": why, "type": "invalid_request_error"}}))
    })
}

/// Anthropic's structural rules on a Messages body (what the real API refuses with a 400): at
/// least one message, non-empty content in every message, no empty or whitespace-only text
/// block, no empty error result, at most four `cache_control` markers, none on a thinking block
/// or an empty text block, and no last assistant message (a prefill) ending in whitespace, or
/// at all with thinking on (and on the newest models).
pub fn anthropic_structure(body: &Value) -> Result<(), String> {
    let text = body.to_string();
    let markers = text.matches("cache_control").count();
    if markers > 4 {
        return Err(format!("{markers} cache_control markers (at most 4)"));
    }
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let Some(last) = messages.last() else {
        return Err("messages: at least one message is required".into());
    };
    if last["role"] == "assistant" {
        let thinking = body["thinking"]["type"].is_string();
        let text = last["content"].as_str().unwrap_or_default();
        if thinking || text.trim_end() != text {
            return Err(format!("final assistant content cannot end with trailing whitespace, nor be a prefill with thinking (thinking: {thinking})"));
        }
    }
    for (i, m) in messages.iter().enumerate() {
        match &m["content"] {
            Value::String(s) if s.trim().is_empty() => {
                return Err(format!(
                    "messages.{i}: all messages must have non-empty content"
                ))
            }
            Value::Array(blocks) => {
                if blocks.is_empty() {
                    return Err(format!("messages.{i}: empty content"));
                }
                for (j, b) in blocks.iter().enumerate() {
                    let marked = b.get("cache_control").is_some();
                    match b["type"].as_str() {
                        Some("text")
                            if b["text"].as_str().unwrap_or_default().trim().is_empty() =>
                        {
                            return Err(format!(
                                "messages.{i}.content.{j}: text content blocks must be non-empty (marked: {marked})"
                            ));
                        }
                        Some("tool_result")
                            if b["is_error"] == true
                                && b["content"].as_str().is_some_and(|c| c.trim().is_empty()) =>
                        {
                            return Err(format!(
                                "messages.{i}.content.{j}: content cannot be empty if is_error is true"
                            ));
                        }
                        Some("thinking" | "redacted_thinking") if marked => {
                            return Err(format!(
                                "messages.{i}.content.{j}: cache_control on a thinking block"
                            ))
                        }
                        Some("thinking")
                            if b["signature"].as_str().unwrap_or_default().is_empty() =>
                        {
                            return Err(format!(
                                "messages.{i}.content.{j}.signature: Field required / invalid"
                            ));
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}
