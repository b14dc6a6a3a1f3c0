//! Gemini 3's thought signatures on its OpenAI-compatible wire: native loops whose every request
//! is checked as Google checks it (the current turn's calls must carry the signature Gemini
//! issued, for the same model), which complete only because the service reads each signature
//! into the turn's `reasoning_state` and sends it back on the call; history Gemini did not write
//! goes with the documented stand-in.

use serde_json::{json, Value};
use wiremock::{Mock, ResponseTemplate};

use crate::support::app::{spawn_app, TestApp};
use crate::support::gemini_upstream::{
    google_error, signature, signature_refusal, Call, GeminiModel, CORRUPTED, GEMINI_PATH, MISSING,
    SKIP,
};
use crate::support::prefix::{mean, reused_shares};
use crate::support::requests::request;
use crate::support::stream::post_stream;

const MODEL: &str = "gemini-3-pro-preview";

/// Two calls in parallel, then four one at a time, then the answer: seven steps.
fn script(step: usize) -> Vec<Call> {
    match step {
        1 => vec![("function-call-1a", "a.js"), ("function-call-1b", "b.js")],
        2 => vec![("function-call-2", "c.js")],
        3 => vec![("function-call-3", "d.js")],
        4 => vec![("function-call-4", "e.js")],
        5 => vec![("function-call-5", "f.js")],
        6 => vec![("function-call-6", "g.js")],
        _ => Vec::new(),
    }
}

async fn gemini_app() -> TestApp {
    let app = spawn_app().await;
    Mock::given(wiremock::matchers::path(GEMINI_PATH))
        .respond_with(GeminiModel { script })
        .mount(&app.llm)
        .await;
    app
}

fn native_request(model: &str) -> Value {
    let mut body = request(model, "Read every file from a.js to g.js");
    body["llm_config"]["provider"] = json!("gemini");
    body["llm_config"]["tool_mode"] = json!("native");
    body["llm_config"]["tokenLimit"] = json!(100_000);
    body["max_iterations_left"] = json!(10);
    body["user_api_keys"]["llmKey"] = json!("AIzaSyD-test-key-0123456789abcdefghijk");
    body["tools"] = json!([{"name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]);
    body
}

/// One step, streamed or not: the `StepSuccess` (or the error) and its status.
async fn step(app: &TestApp, body: &Value, streamed: bool) -> (u16, Value) {
    if !streamed {
        let reply = app.post_react_step(body).await;
        return (reply.status, reply.body);
    }
    let streamed = post_stream(app, body).await;
    // Refused before the stream began: a JSON answer, not events.
    if let [(name, answer)] = &streamed.events[..] {
        if name == "json" {
            return (streamed.status, answer.clone());
        }
    }
    let (_, event) = streamed.terminal();
    (streamed.status, event.clone())
}

/// The history of `event` with every proposed call answered, ready for the next step.
fn answered(event: &Value) -> Value {
    let proposed: Vec<Value> = match event["parallel_actions"].as_array() {
        Some(all) => all.clone(),
        None => vec![event["action_details"].clone()],
    };
    let mut history = event["updated_conversation_history"].clone();
    let turns = history.as_array_mut().unwrap();
    for action in &proposed {
        turns.push(json!({"role": "tool_observation",
            "content": format!("contents of {}", action["tool_args"]["path"].as_str().unwrap()),
            "tool_call_id": action["tool_call_id"]}));
    }
    history
}

/// Runs the scripted loop to its answer; returns the last history sent.
async fn run_loop(app: &TestApp, streamed: bool) -> Value {
    let mut body = native_request(MODEL);
    // A file the user keeps in context, as a real loop has: the prefix measure compares what is
    // reused with what is new in each step.
    body["explicit_context"] = json!([{"path": "src/app.js",
        "content": "export function handler(request) { return route(request); }\n".repeat(60)}]);
    for n in 1..=7 {
        let (status, event) = step(app, &body, streamed).await;
        assert_eq!(status, 200, "step {n}: {event}");
        let calls = script(n);
        if calls.is_empty() {
            assert_eq!(event["status"], "direct_response_provided", "{event}");
            assert_eq!(event["direct_response"], "all read");
            return body["conversation_history"].clone();
        }
        assert_eq!(event["status"], "action_proposed", "step {n}: {event}");
        let turn = event["updated_conversation_history"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        let state = &turn["reasoning_state"];
        assert_eq!(
            state["thought_signatures"],
            json!([{"call_id": calls[0].0, "signature": signature(MODEL, calls[0].0)}]),
            "step {n}: only the first call of a set is signed: {turn}"
        );
        assert_eq!(
            state["origin"],
            json!({"provider": "gemini", "api": "chat", "model": MODEL})
        );
        body["conversation_history"] = answered(&event);
        body["user_query"] = json!("");
    }
    panic!("the loop did not end");
}

/// The first call of every assistant message the last request sent upstream, and the others.
async fn sent_signatures(app: &TestApp) -> (Vec<Value>, Vec<Value>) {
    let bodies = app.upstream_bodies().await;
    let last = bodies.last().unwrap();
    let messages = last["messages"].as_array().unwrap();
    let calls: Vec<&Vec<Value>> = messages
        .iter()
        .filter_map(|m| m["tool_calls"].as_array())
        .collect();
    let first = calls
        .iter()
        .map(|c| c[0]["extra_content"]["google"]["thought_signature"].clone())
        .collect();
    let rest = calls
        .iter()
        .flat_map(|c| c.iter().skip(1))
        .map(|c| c["extra_content"].clone())
        .collect();
    (first, rest)
}

async fn the_loop_completes_with_signatures_round_tripping(streamed: bool) {
    let app = gemini_app().await;
    run_loop(&app, streamed).await;
    let (first, rest) = sent_signatures(&app).await;
    let issued: Vec<Value> = (1..=6)
        .map(|n| json!(signature(MODEL, script(n)[0].0)))
        .collect();
    assert_eq!(first, issued, "each message's first call, signed as issued");
    assert_eq!(rest, [Value::Null], "the second call of the parallel set");
    // Without the signatures, the same request is refused as Google refuses it: the loop
    // completed because they went back.
    let mut stripped = app.upstream_bodies().await.pop().unwrap();
    for m in stripped["messages"].as_array_mut().unwrap() {
        for call in m["tool_calls"].as_array_mut().into_iter().flatten() {
            call.as_object_mut().unwrap().remove("extra_content");
        }
    }
    assert!(signature_refusal(&stripped).is_some());
    assert_prefix_kept(&app.upstream_bodies().await);
}

/// Each request repeats the one before it as its prefix, signatures included (the provider's
/// cache reuses it): on average at least 90 % of each is the previous one's.
fn assert_prefix_kept(bodies: &[Value]) {
    // In the order the provider caches it: the tools, then the messages (the system prompt first).
    let texts: Vec<String> = bodies
        .iter()
        .map(|b| format!("{}{}", b["tools"], b["messages"]))
        .collect();
    let ratios = reused_shares(&texts);
    let average = mean(&ratios);
    assert!(average >= 0.9, "prefix kept: {ratios:?}");
    // And nothing before the last result changed: only what is new in a step is new.
    for (i, w) in texts.windows(2).enumerate() {
        let last_result = w[0].rfind("\"role\":\"tool\"").unwrap_or(0);
        assert!(
            w[1].starts_with(&w[0][..last_result]),
            "step {}: the history sent changed",
            i + 2
        );
    }
}

#[tokio::test]
async fn a_gemini_3_native_loop_completes_because_its_signatures_round_trip() {
    the_loop_completes_with_signatures_round_tripping(false).await;
}

#[tokio::test]
async fn a_streamed_gemini_3_native_loop_completes_because_its_signatures_round_trip() {
    the_loop_completes_with_signatures_round_tripping(true).await;
}

/// A history of two steps of the loop, as the client holds it.
async fn two_steps(app: &TestApp, model: &str) -> Value {
    let mut body = native_request(model);
    for _ in 0..2 {
        let (status, event) = step(app, &body, false).await;
        assert_eq!(status, 200, "{event}");
        body["conversation_history"] = answered(&event);
        body["user_query"] = json!("");
    }
    body["conversation_history"].clone()
}

#[tokio::test]
async fn an_altered_signature_gets_googles_refusal_through_and_is_not_retried() {
    let app = gemini_app().await;
    let mut history = two_steps(&app, MODEL).await;
    let last = history
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .rfind(|t| t["role"] == "assistant")
        .unwrap();
    let signed = &mut last["reasoning_state"]["thought_signatures"][0]["signature"];
    *signed = json!(format!("{}0", signed.as_str().unwrap()));
    let before = app.upstream_bodies().await.len();
    let mut body = native_request(MODEL);
    body["conversation_history"] = history;
    body["user_query"] = json!("");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "llm_request_rejected");
    assert_eq!(reply.body["error"]["retryable"], false);
    assert!(
        reply.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(CORRUPTED),
        "{}",
        reply.text
    );
    assert_eq!(app.upstream_bodies().await.len(), before + 1, "not retried");
}

#[tokio::test]
async fn googles_missing_signature_refusal_comes_through_as_documented() {
    let app = spawn_app().await;
    let message = format!("{MISSING} This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:read_file` , position 3. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.");
    Mock::given(wiremock::matchers::path(GEMINI_PATH))
        .respond_with(ResponseTemplate::new(400).set_body_json(google_error(&message)))
        .mount(&app.llm)
        .await;
    for streamed in [false, true] {
        let (status, error) = step(&app, &native_request(MODEL), streamed).await;
        assert_eq!(status, 400, "{error}");
        assert_eq!(error["error"]["type"], "llm_request_rejected");
        assert_eq!(error["error"]["retryable"], false);
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .contains("missing a thought_signature in functionCall parts"),
            "{error}"
        );
    }
    assert_eq!(app.upstream_bodies().await.len(), 2, "neither was retried");
}

#[tokio::test]
async fn history_gemini_did_not_write_goes_with_the_stand_in() {
    let app = gemini_app().await;
    let mut body = native_request(MODEL);
    // Claude's turn, its thinking and origin kept, then a client's own turn with no state.
    body["conversation_history"] = json!([
        {"role": "user", "content": "Read every file from a.js to g.js"},
        {"role": "assistant", "content": "Thought: first a.js",
         "toolCall": {"id": "toolu_01A", "name": "read_file", "parameters": {"path": "a.js"}},
         "reasoning_state": {"blocks": [{"type": "thinking", "thinking": "a first", "signature": "EqQBCgIYAhIM"}],
            "origin": {"provider": "anthropic", "api": "chat", "model": "claude-sonnet-4-5"}}},
        {"role": "tool_observation", "content": "contents of a.js", "tool_call_id": "toolu_01A"},
        {"role": "assistant", "content": "Thought: then b.js",
         "toolCall": {"id": "call_own_1", "name": "read_file", "parameters": {"path": "b.js"}}},
        {"role": "tool_observation", "content": "contents of b.js", "tool_call_id": "call_own_1"}
    ]);
    body["user_query"] = json!("");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "action_proposed");
    let (first, _) = sent_signatures(&app).await;
    assert_eq!(first, [json!(SKIP), json!(SKIP)]);
    let warnings = reply.body["warnings"].to_string();
    assert!(
        warnings.contains("conversation_history[1]") && warnings.contains("anthropic"),
        "{warnings}"
    );
}

#[tokio::test]
async fn a_state_another_gemini_model_made_is_not_sent_and_the_stand_in_goes_instead() {
    let app = gemini_app().await;
    let history = two_steps(&app, "gemini-3-flash-preview").await;
    let mut body = native_request(MODEL);
    body["conversation_history"] = history;
    body["user_query"] = json!("");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let (first, _) = sent_signatures(&app).await;
    assert_eq!(first, [json!(SKIP), json!(SKIP)], "not flash's signatures");
    let warnings = reply.body["warnings"].as_array().unwrap();
    for turn in [1, 4] {
        assert!(
            warnings.iter().any(|w| {
                let w = w.as_str().unwrap();
                w.starts_with(&format!("conversation_history[{turn}]"))
                    && w.contains("gemini-3-flash-preview")
            }),
            "turn {turn}: {warnings:?}"
        );
    }
}

/// One call without an id at the first step, then the answer.
fn idless_script(step: usize) -> Vec<Call> {
    match step {
        1 => vec![("", "a.js")],
        _ => Vec::new(),
    }
}

#[tokio::test]
async fn a_signed_call_without_an_id_keeps_its_signature_by_the_id_it_is_given() {
    // Gemini's compatible endpoint has sent calls without an `id`: the signature was dropped and
    // the stand-in went back, silently.
    let app = spawn_app().await;
    Mock::given(wiremock::matchers::path(GEMINI_PATH))
        .respond_with(GeminiModel {
            script: idless_script,
        })
        .mount(&app.llm)
        .await;
    for streamed in [false, true] {
        let mut body = native_request(MODEL);
        let (status, event) = step(&app, &body, streamed).await;
        assert_eq!(status, 200, "{event}");
        let id = event["action_details"]["tool_call_id"].clone();
        let turn = event["updated_conversation_history"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(
            turn["reasoning_state"]["thought_signatures"],
            json!([{"call_id": id, "signature": signature(MODEL, "")}]),
            "streamed: {streamed}: {turn}"
        );
        body["conversation_history"] = answered(&event);
        body["user_query"] = json!("");
        let (status, event) = step(&app, &body, streamed).await;
        assert_eq!(status, 200, "{event}");
        assert_eq!(event["direct_response"], "all read");
        let (first, _) = sent_signatures(&app).await;
        assert_eq!(first, [json!(signature(MODEL, ""))], "not the stand-in");
    }
}
