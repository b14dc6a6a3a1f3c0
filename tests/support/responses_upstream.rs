//! A model behind OpenAI's Responses API, used statelessly: a wiremock [`Respond`] for
//! `POST …/responses` that checks each request as the real API does, and answers 400 with
//! OpenAI's error shape and texts when it would refuse it, or the next scripted reply (a
//! reasoning item with encrypted content, then a commentary message and calls, or a message
//! alone), streamed with the real event sequence when the request streams.
//!
//! The mock remembers every item it issued. A reasoning item's `encrypted_content` is the hex of
//! `model|rs_id|id of the item that follows|checksum`, so an altered one, one sent for another
//! model, or one not followed by its item is refused; a call it issued after a reasoning item is
//! refused without that item; a message it issued with a `phase` is refused without it; calls
//! and their outputs must pair.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde_json::{json, Value};
use wiremock::{Request, Respond, ResponseTemplate};

/// One reply of the script.
#[derive(Clone, Debug)]
pub enum Scripted {
    /// Calls `(name, arguments)`, after a commentary message when there is one.
    Calls(Option<String>, Vec<(String, Value)>),
    /// A message marked `final_answer`.
    Answer(String),
    /// A message marked `commentary`, and nothing after it.
    Preamble(String),
    /// A message marked `commentary`, then one marked `final_answer`.
    Answered(String, String),
    /// A message marked `commentary`, then one marked `final_answer` holding a refusal part.
    Refused(String, String),
    /// A message with no phase (text mode).
    Text(String),
    /// Messages `(phase, text)` in order (phase `reasoning`: a reasoning item of that summary),
    /// then calls `(name, arguments)`.
    Messages(Vec<(Option<&'static str>, String)>, Vec<(String, Value)>),
}

pub struct ResponsesModel {
    script: Vec<Scripted>,
    next: AtomicUsize,
    /// Every item issued, by id, as issued.
    issued: Mutex<HashMap<String, Value>>,
    /// The reasoning item each issued call came after.
    reasoning_of: Mutex<HashMap<String, String>>,
}

impl ResponsesModel {
    pub fn new(script: Vec<Scripted>) -> Self {
        Self {
            script,
            next: AtomicUsize::new(0),
            issued: Mutex::new(HashMap::new()),
            reasoning_of: Mutex::new(HashMap::new()),
        }
    }
}

/// OpenAI's 400.
pub fn refusal(message: &str, param: Option<&str>) -> ResponseTemplate {
    ResponseTemplate::new(400).set_body_json(json!({"error": {
        "message": message, "type": "invalid_request_error", "param": param, "code": null}}))
}

fn checksum(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn sealed(model: &str, rs: &str, follows: &str) -> String {
    let plain = format!("{model}|{rs}|{follows}");
    let text = format!("{plain}|{:016x}", checksum(&plain));
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

/// `(model, following id)` of sealed content that is intact.
fn unsealed(content: &str, rs: &str) -> Option<(String, String)> {
    let bytes: Option<Vec<u8>> = (0..content.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(content.get(i..i + 2)?, 16).ok())
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let (plain, sum) = text.rsplit_once('|')?;
    let mut parts = plain.split('|');
    let (model, id, follows) = (parts.next()?, parts.next()?, parts.next()?);
    (sum == format!("{:016x}", checksum(plain)) && id == rs)
        .then(|| (model.to_string(), follows.to_string()))
}

/// Why the real API would refuse the request, if it would.
fn check_body(body: &Value) -> Option<ResponseTemplate> {
    if body["store"] != json!(false) {
        return Some(refusal(
            "this mock stands for a stateless caller: store must be false",
            Some("store"),
        ));
    }
    for param in ["messages", "stop", "max_tokens", "max_completion_tokens"] {
        if body.get(param).is_some() {
            return Some(refusal(
                &format!("Unsupported parameter: '{param}'."),
                Some(param),
            ));
        }
    }
    let reasoning = body["model"].as_str().unwrap_or("").starts_with("gpt-5");
    if reasoning && body.get("temperature").is_some() {
        return Some(refusal(
            "Unsupported parameter: 'temperature' is not supported with this model.",
            Some("temperature"),
        ));
    }
    for (i, tool) in body["tools"].as_array().into_iter().flatten().enumerate() {
        if tool["type"] != "function" || !tool["name"].is_string() {
            return Some(refusal(
                &format!("Missing required parameter: 'tools[{i}].name'."),
                Some(&format!("tools[{i}].name")),
            ));
        }
    }
    None
}

impl ResponsesModel {
    /// Why the real API would refuse the request's `input`, if it would.
    fn check_input(&self, body: &Value) -> Option<ResponseTemplate> {
        let model = body["model"].as_str().unwrap_or("");
        let input = body["input"].as_array().cloned().unwrap_or_default();
        let issued = self.issued.lock().unwrap();
        let reasoning_of = self.reasoning_of.lock().unwrap();
        let mut seen: HashSet<String> = HashSet::new();
        let mut calls: HashSet<String> = HashSet::new();
        let mut open: Vec<String> = Vec::new();
        for (i, item) in input.iter().enumerate() {
            let kind = item["type"].as_str().unwrap_or("message");
            let id = item["id"].as_str().unwrap_or("").to_string();
            if !matches!(kind, "function_call" | "function_call_output") {
                if let Some(call) = open.first() {
                    return Some(refusal(
                        &format!("No tool output found for function call {call}."),
                        Some("input"),
                    ));
                }
            }
            match kind {
                "reasoning" => {
                    let content = item["encrypted_content"].as_str().unwrap_or("");
                    let Some((sealed_for, follows)) = unsealed(content, &id) else {
                        return Some(refusal(
                            &format!("The encrypted content for item {id} could not be verified."),
                            Some("input"),
                        ));
                    };
                    if sealed_for != model {
                        return Some(refusal(
                            &format!("The encrypted content for item {id} could not be verified."),
                            Some("input"),
                        ));
                    }
                    if input.get(i + 1).and_then(|n| n["id"].as_str()) != Some(follows.as_str()) {
                        return Some(refusal(
                            &format!("Item '{id}' of type 'reasoning' was provided without its required following item."),
                            Some("input"),
                        ));
                    }
                }
                "function_call" => {
                    if let Some(rs) = reasoning_of.get(&id).filter(|rs| !seen.contains(*rs)) {
                        return Some(refusal(
                            &format!("Item '{id}' of type 'function_call' was provided without its required 'reasoning' item: '{rs}'."),
                            Some("input"),
                        ));
                    }
                    let call_id = item["call_id"].as_str().unwrap_or("").to_string();
                    calls.insert(call_id.clone());
                    open.push(call_id);
                }
                "function_call_output" => {
                    let call_id = item["call_id"].as_str().unwrap_or("");
                    if !calls.contains(call_id) {
                        return Some(refusal(
                            &format!("No tool call found for function call output with call_id {call_id}."),
                            Some("input"),
                        ));
                    }
                    open.retain(|c| c != call_id);
                }
                _ => {
                    let phase = issued.get(&id).map(|m| &m["phase"]);
                    if phase.is_some_and(|p| !p.is_null() && *p != item["phase"]) {
                        return Some(refusal(
                            &format!("Item '{id}' of type 'message' was provided without its 'phase'; send output items back as they were returned."),
                            Some("input"),
                        ));
                    }
                }
            }
            seen.insert(id);
        }
        open.first().map(|call| {
            refusal(
                &format!("No tool output found for function call {call}."),
                Some("input"),
            )
        })
    }

    /// The output items of reply `n` (from 1), remembered as issued.
    fn issue(&self, n: usize, model: &str, scripted: &Scripted) -> Vec<Value> {
        let message = |text: &str, phase: Option<&str>| {
            let id = match phase {
                Some("final_answer") => format!("msg_{n}_final"),
                _ => format!("msg_{n}"),
            };
            let mut m = json!({"type": "message", "id": id, "status": "completed",
                "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}]});
            if let Some(phase) = phase {
                m["phase"] = json!(phase);
            }
            m
        };
        let calls = |items: &mut Vec<Value>, calls: &[(String, Value)]| {
            for (i, (name, arguments)) in calls.iter().enumerate() {
                items.push(json!({"type": "function_call", "id": format!("fc_{n}_{i}"),
                    "call_id": format!("call_{n}_{i}"), "name": name,
                    "arguments": arguments.to_string(), "status": "completed"}));
            }
        };
        let mut after: Vec<Value> = match scripted {
            Scripted::Calls(commentary, made) => {
                let mut items: Vec<Value> = commentary
                    .iter()
                    .map(|c| message(c, Some("commentary")))
                    .collect();
                calls(&mut items, made);
                items
            }
            Scripted::Messages(messages, made) => {
                let mut items: Vec<Value> = messages
                    .iter()
                    .enumerate()
                    .map(|(i, (phase, text))| {
                        if *phase == Some("reasoning") {
                            let id = format!("rs_{n}_{i}");
                            return json!({"type": "reasoning", "id": id,
                                "summary": [{"type": "summary_text", "text": text}],
                                "encrypted_content": sealed(model, &id, &id)});
                        }
                        let mut m = message(text, *phase);
                        m["id"] = json!(format!("msg_{n}_{i}"));
                        m
                    })
                    .collect();
                calls(&mut items, made);
                items
            }
            Scripted::Answer(text) => vec![message(text, Some("final_answer"))],
            Scripted::Preamble(text) => vec![message(text, Some("commentary"))],
            Scripted::Answered(preamble, text) => vec![
                message(preamble, Some("commentary")),
                message(text, Some("final_answer")),
            ],
            Scripted::Refused(preamble, refusal) => {
                let mut refused = message("", Some("final_answer"));
                refused["content"] = json!([{"type": "refusal", "refusal": refusal}]);
                vec![message(preamble, Some("commentary")), refused]
            }
            Scripted::Text(text) => vec![message(text, None)],
        };
        let rs = format!("rs_{n}");
        let follows = after[0]["id"].as_str().unwrap().to_string();
        let mut items = vec![json!({"type": "reasoning", "id": rs,
            "summary": [{"type": "summary_text", "text": format!("Reasoning {n}.")},
                        {"type": "summary_text", "text": "Then."}],
            "encrypted_content": sealed(model, &rs, &follows)})];
        items.append(&mut after);
        let mut issued = self.issued.lock().unwrap();
        let mut reasoning_of = self.reasoning_of.lock().unwrap();
        for item in &items {
            let id = item["id"].as_str().unwrap().to_string();
            if item["type"] == "function_call" {
                reasoning_of.insert(id.clone(), rs.clone());
            }
            issued.insert(id, item.clone());
        }
        items
    }
}

/// The whole response for reply `n`.
fn response(n: usize, model: &str, output: &[Value], status: &str) -> Value {
    json!({"id": format!("resp_{n}"), "object": "response", "created_at": 1_764_000_000,
        "status": status, "error": null, "incomplete_details": null, "model": model,
        "output": output, "store": false,
        "usage": {"input_tokens": 1000 + n, "input_tokens_details": {"cached_tokens": 896},
                  "output_tokens": 60, "output_tokens_details": {"reasoning_tokens": 40},
                  "total_tokens": 1060 + n}})
}

/// A reasoning item's summary streamed as the API streams it: each part added, its text, done.
fn summary_events(id: &Value, index: usize, summary: &Value) -> Vec<Value> {
    let at = |kind: &str, part: usize| json!({"type": kind, "item_id": id, "output_index": index, "summary_index": part});
    let mut events = Vec::new();
    for (part, text) in summary.as_array().unwrap().iter().enumerate() {
        let empty = json!({"type": "summary_text", "text": ""});
        events.push(with(
            at("response.reasoning_summary_part.added", part),
            "part",
            empty,
        ));
        let delta = text["text"].clone();
        events.push(with(
            at("response.reasoning_summary_text.delta", part),
            "delta",
            delta,
        ));
        let whole = text["text"].clone();
        events.push(with(
            at("response.reasoning_summary_text.done", part),
            "text",
            whole,
        ));
        let done = text.clone();
        events.push(with(
            at("response.reasoning_summary_part.done", part),
            "part",
            done,
        ));
    }
    events
}

/// `event` with `field` set to `value`.
fn with(mut event: Value, field: &str, value: Value) -> Value {
    event[field] = value;
    event
}

/// The reply streamed: created, each item added, its deltas and done, completed.
fn streamed(n: usize, model: &str, output: &[Value]) -> String {
    let mut events = vec![json!({"type": "response.created",
        "response": response(n, model, &[], "in_progress")})];
    for (index, item) in output.iter().enumerate() {
        let mut added = item.clone();
        match item["type"].as_str().unwrap() {
            "reasoning" => {
                added.as_object_mut().unwrap().remove("encrypted_content");
                added["summary"] = json!([]);
            }
            "message" => added["content"] = json!([]),
            _ => added["arguments"] = json!(""),
        }
        events.push(
            json!({"type": "response.output_item.added", "output_index": index, "item": added}),
        );
        let id = &item["id"];
        match item["type"].as_str().unwrap() {
            "reasoning" => events.extend(summary_events(id, index, &item["summary"])),
            "message" => {
                let part = &item["content"][0];
                let (kind, text) = match part["type"] == "refusal" {
                    true => ("response.refusal.delta", &part["refusal"]),
                    false => ("response.output_text.delta", &part["text"]),
                };
                let text = text.as_str().unwrap();
                let (a, b) = text.split_at(text.len() / 2);
                for piece in [a, b] {
                    events.push(json!({"type": kind, "item_id": id,
                        "output_index": index, "content_index": 0, "delta": piece}));
                }
            }
            _ => events.push(json!({"type": "response.function_call_arguments.delta",
                "item_id": id, "output_index": index, "delta": item["arguments"]})),
        }
        events.push(
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        );
    }
    events.push(
        json!({"type": "response.completed", "response": response(n, model, output, "completed")}),
    );
    events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let mut e = e.clone();
            e["sequence_number"] = json!(i);
            format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap())
        })
        .collect()
}

impl Respond for ResponsesModel {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        if let Some(refused) = check_body(&body).or_else(|| self.check_input(&body)) {
            return refused;
        }
        let n = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        let Some(scripted) = self.script.get(n - 1) else {
            return refusal("the script has no more replies", None);
        };
        let model = body["model"].as_str().unwrap();
        let output = self.issue(n, model, scripted);
        match body["stream"] == json!(true) {
            true => ResponseTemplate::new(200)
                .set_body_raw(streamed(n, model, &output), "text/event-stream"),
            false => {
                ResponseTemplate::new(200).set_body_json(response(n, model, &output, "completed"))
            }
        }
    }
}
