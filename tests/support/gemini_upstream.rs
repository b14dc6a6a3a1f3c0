//! Gemini 3 behind its OpenAI-compatible endpoint, as strict as Google's: each reply's first
//! call carries a thought signature (`extra_content.google.thought_signature`), and a request
//! whose current turn (everything after the last `user` message) holds an assistant message
//! whose first call lacks the signature Gemini issued for it, for this model, is refused with
//! Google's 400. `skip_thought_signature_validator` passes, as Google documents.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use wiremock::{Request, Respond, ResponseTemplate};

use super::provider_rules::pairing_refusal;

/// Where the tests' Gemini answers (`MOCK_BASES`).
pub const GEMINI_PATH: &str = "/gemini/v1beta/openai/chat/completions";
/// The documented stand-in for a signature Gemini did not issue.
pub const SKIP: &str = "skip_thought_signature_validator";
/// The start of Google's refusal of a call without its signature.
pub const MISSING: &str = "Function call is missing a thought_signature in functionCall parts.";
/// Google's refusal of a signature it did not issue, or issued for another model.
pub const CORRUPTED: &str = "Corrupted thought signature.";

/// The signature the mock issues for `call_id` made by `model`: the hex of what it signs, and a
/// checksum of it, so that any change to either is seen.
pub fn signature(model: &str, call_id: &str) -> String {
    let signed = format!("sig:{model}:{call_id}");
    let hex: String = signed.bytes().map(|b| format!("{b:02x}")).collect();
    format!("{hex}.{}", checksum(&signed))
}

fn checksum(text: &str) -> String {
    let digest = Sha256::digest(format!("gemini-mock-key:{text}").as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Whether `signature` is one the mock issued for `call_id` made by `model`, unaltered.
pub fn valid(signature: &str, model: &str, call_id: &str) -> bool {
    signature == self::signature(model, call_id)
}

/// Google's error body for a 400, as the OpenAI-compatible endpoint sends it: wrapped in an array.
pub fn google_error(message: &str) -> Value {
    json!([{"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}])
}

/// The refusal Gemini 3 answers a request whose current turn holds a call without its
/// signature, or with one it did not issue for this model; `None` when every signature holds.
pub fn signature_refusal(body: &Value) -> Option<ResponseTemplate> {
    let model = body["model"].as_str().unwrap_or_default();
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let turn_starts = messages
        .iter()
        .rposition(|m| m["role"] == "user")
        .map_or(0, |i| i + 1);
    for (position, m) in messages.iter().enumerate().skip(turn_starts) {
        let Some(first) = m["tool_calls"].as_array().and_then(|c| c.first()) else {
            continue;
        };
        let name = first["function"]["name"].as_str().unwrap_or_default();
        let message = match first["extra_content"]["google"]["thought_signature"].as_str() {
            None => format!(
                "{MISSING} This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:{name}` , position {}. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.",
                position + 1
            ),
            Some(SKIP) => continue,
            Some(s) if valid(s, model, first["id"].as_str().unwrap_or_default()) => continue,
            // A call Gemini sent without an id was signed without one; it goes back by the id
            // the service gave it.
            Some(s) if valid(s, model, "") => continue,
            Some(_) => CORRUPTED.to_string(),
        };
        return Some(ResponseTemplate::new(400).set_body_json(google_error(&message)));
    }
    None
}

/// A call the model makes: its id (empty: the call comes without one) and the file it reads.
pub type Call = (&'static str, &'static str);

/// A Gemini 3 model that answers each step of a native loop by `script` (the calls at step `n`,
/// counted from 1 by the assistant messages the request holds; none: the final answer), signing
/// the first call of each reply, streamed or not as the request asks.
pub struct GeminiModel {
    pub script: fn(usize) -> Vec<Call>,
}

impl Respond for GeminiModel {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        if let Some(refusal) = pairing_refusal(false, &body) {
            return refusal;
        }
        if let Some(refusal) = signature_refusal(&body) {
            return refusal;
        }
        let model = body["model"].as_str().unwrap_or_default();
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let step = 1 + messages.iter().filter(|m| m["role"] == "assistant").count();
        let calls = (self.script)(step);
        match body["stream"] == true {
            true => ResponseTemplate::new(200)
                .set_body_raw(stream(model, step, &calls), "text/event-stream"),
            false => ResponseTemplate::new(200).set_body_json(reply(model, step, &calls)),
        }
    }
}

fn tool_call(model: &str, index: usize, (id, path): Call) -> Value {
    let mut call = json!({"id": id, "type": "function",
        "function": {"name": "read_file", "arguments": json!({"path": path}).to_string()}});
    if id.is_empty() {
        call.as_object_mut().map(|c| c.remove("id"));
    }
    if index == 0 {
        call["extra_content"] = json!({"google": {"thought_signature": signature(model, id)}});
    }
    call
}

/// A whole chat.completion as Gemini's OpenAI-compatible endpoint sends it.
pub fn reply(model: &str, step: usize, calls: &[Call]) -> Value {
    let (content, finish) = match calls.is_empty() {
        true => (
            format!("Thought: step {step}\nFinal Answer: all read"),
            "stop",
        ),
        false => (format!("Thought: step {step}"), "tool_calls"),
    };
    let mut message = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        let calls: Vec<Value> = (0..calls.len())
            .map(|i| tool_call(model, i, calls[i]))
            .collect();
        message["tool_calls"] = json!(calls);
    }
    json!({"id": "6Q0xacGhNoXx-8YP1M2n4Ao", "object": "chat.completion", "created": 1764000000,
        "model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 420, "completion_tokens": 31, "total_tokens": 451}})
}

/// The same reply streamed: the text, then each call whole in one delta (as Gemini sends them),
/// the signature with the first call's delta.
pub fn stream(model: &str, step: usize, calls: &[Call]) -> String {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "6Q0xacGhNoXx-8YP1M2n4Ao", "object": "chat.completion.chunk", "created": 1764000000,
            "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let whole = reply(model, step, calls);
    let message = &whole["choices"][0]["message"];
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": message["content"]}),
        Value::Null,
    )];
    for (i, call) in message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let mut call = call.clone();
        call["index"] = json!(i);
        events.push(chunk(json!({"tool_calls": [call]}), Value::Null));
    }
    events.push(chunk(
        json!({}),
        whole["choices"][0]["finish_reason"].clone(),
    ));
    let mut last = chunk(json!({}), Value::Null);
    last["choices"] = json!([]);
    last["usage"] = whole["usage"].clone();
    events.push(last);
    let data: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    format!("{data}data: [DONE]\n\n")
}
