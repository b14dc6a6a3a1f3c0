//! Red-team tests of issue 17 (reasoning, reasoning_state, prompt caching, the cache-friendly
//! prompt layout): hostile upstream streams, odd histories and odd states sent back. A test that
//! exposes a defect asserts the promised behaviour, so it fails until the defect is fixed; the
//! others show a defence holding.

use serde_json::{json, Value};
use wiremock::matchers::path;
use wiremock::{Mock, ResponseTemplate};

use crate::support::app::{spawn_app, spawn_app_answering, TestApp};
use crate::support::requests::{native_reasoning, near_the_limit, request};
use crate::support::stream::post_stream;
use crate::support::upstream::{
    anthropic_reply, openai_reply, ANTHROPIC_PATH, COUNT_PATH, OPENAI_PATH,
};

const SIGNATURE: &str = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds";

/// Anthropic's structural rules on a Messages body (what the real API refuses with a 400):
/// non-empty content in every message, no empty or whitespace-only text block, at most four
/// `cache_control` markers, none on a thinking block or an empty text block.
fn anthropic_structure(body: &Value) -> Result<(), String> {
    let text = body.to_string();
    let markers = text.matches("cache_control").count();
    if markers > 4 {
        return Err(format!("{markers} cache_control markers (at most 4)"));
    }
    for (i, m) in body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
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

fn sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

async fn mount_sse(app: &TestApp, events: &[Value]) {
    Mock::given(path(ANTHROPIC_PATH))
        .respond_with(ResponseTemplate::new(200).set_body_raw(sse(events), "text/event-stream"))
        .mount(&app.llm)
        .await;
}

fn start() -> Value {
    json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5", "usage": {"input_tokens": 50, "output_tokens": 1}}})
}

fn stop(reason: &str) -> [Value; 2] {
    [
        json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null}, "usage": {"output_tokens": 80}}),
        json!({"type": "message_stop"}),
    ]
}

/// A long opening user turn, so that the cached prefix passes Claude's 1,024-token minimum.
fn long_user_turn() -> Value {
    let words =
        "the login handler reads the session cookie and checks the token against the store "
            .repeat(120);
    json!({"role": "user", "content": words})
}

// ---------------------------------------------------------------------------------------------
// Cache markers
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn red_team_17_an_empty_assistant_turn_gets_no_cache_marker_and_no_empty_block() {
    // The step's tail is a user message whose new part starts at 0; the breakpoint goes on the
    // block before it: here an assistant turn whose content is empty. `Content::blocks_mut`
    // turns `Text("")` into an empty text block and marks it.
    for empty in ["", " \n"] {
        let app =
            spawn_app_answering(ANTHROPIC_PATH, 200, anthropic_reply("Final Answer: ok")).await;
        let mut body = request("claude-sonnet-4-5", "And the logout handler?");
        body["llm_config"]["tokenLimit"] = json!(200_000);
        body["conversation_history"] =
            json!([long_user_turn(), {"role": "assistant", "content": empty}]);
        let reply = app.post_react_step(&body).await;
        let sent = app.upstream_bodies().await;
        if reply.status == 400 {
            assert!(sent.is_empty(), "refused, yet sent upstream");
            continue;
        }
        assert_eq!(reply.status, 200, "{:?}: {}", empty, reply.body);
        let sent = sent.last().unwrap();
        assert!(
            sent.to_string().contains("cache_control"),
            "the prefix is long enough to be cached: {sent}"
        );
        if let Err(why) = anthropic_structure(sent) {
            panic!(
                "{empty:?}: Anthropic would refuse this body: {why}\n{}",
                sent["messages"]
            );
        }
    }
}

#[tokio::test]
async fn red_team_17_a_thinking_only_assistant_turn_never_carries_the_marker() {
    // Thinking on, an assistant turn with only its thinking blocks (no text, no call) just
    // before the step's tail: the breakpoint must skip it, and there are at most 4 markers.
    let app = spawn_app_answering(ANTHROPIC_PATH, 200, anthropic_reply("Final Answer: ok")).await;
    let mut body = native_reasoning("claude-sonnet-4-5", "low");
    body["user_query"] = json!("go on");
    body["conversation_history"] = json!([
        long_user_turn(),
        {"role": "assistant", "content": "", "reasoning_state": {"blocks": [
            {"type": "thinking", "thinking": "hm", "signature": SIGNATURE},
            {"type": "redacted_thinking", "data": "EmwKAhgB"}]}}
    ]);
    let reply = app.post_react_step(&body).await;
    let sent = app.upstream_bodies().await;
    if reply.status == 400 {
        assert!(sent.is_empty());
        return;
    }
    assert_eq!(reply.status, 200, "{}", reply.body);
    let sent = sent.last().unwrap();
    if let Err(why) = anthropic_structure(sent) {
        panic!(
            "Anthropic would refuse this body: {why}\n{}",
            sent["messages"]
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Drifted Anthropic streams
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn red_team_17_a_streamed_thinking_block_without_its_signature_is_not_kept_unsigned() {
    // A thinking block whose stream never brings its signature_delta: the service keeps it with
    // `signature: ""` in reasoning_state, which Anthropic refuses on the next step (so the loop
    // breaks one step later with a 400 blamed on the client's history).
    let app = spawn_app().await;
    let mut events = vec![
        start(),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "I should read a.js."}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_02", "name": "read_file", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"a.js\"}"}}),
        json!({"type": "content_block_stop", "index": 1}),
    ];
    events.extend(stop("tool_use"));
    mount_sse(&app, &events).await;
    let streamed = post_stream(&app, &native_reasoning("claude-sonnet-4-5", "minimal")).await;
    let (name, data) = streamed.terminal();
    if name == "error" {
        assert_eq!(data["error"]["type"], "llm_bad_response", "{data}");
        return;
    }
    let turn = data["updated_conversation_history"]
        .as_array()
        .unwrap()
        .last()
        .unwrap();
    for block in turn["reasoning_state"]["blocks"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        if block["type"] == "thinking" {
            assert!(
                !block["signature"].as_str().unwrap_or_default().is_empty(),
                "an unsigned thinking block was handed to the client to send back: {block}"
            );
        }
    }
}

#[tokio::test]
async fn red_team_17_thinking_deltas_for_a_block_never_started_are_not_streamed_as_the_thought() {
    // thinking_delta at an index with no thinking block (none started, a redacted block, a
    // tool_use block): the decoder streams it as a `thought` event but keeps it nowhere, so the
    // streamed thought is not the step's thought.
    for (label, opening) in [
        ("no block", None),
        (
            "redacted block",
            Some(
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "redacted_thinking", "data": "EmwKAhgB"}}),
            ),
        ),
        (
            "text block",
            Some(
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
        ),
    ] {
        let app = spawn_app().await;
        let mut events = vec![start()];
        events.extend(opening);
        events.extend([
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "GHOST THINKING"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Thought: it is fine\nFinal Answer: nothing throws"}}),
            json!({"type": "content_block_stop", "index": 1}),
        ]);
        events.extend(stop("end_turn"));
        mount_sse(&app, &events).await;
        let streamed = post_stream(&app, &native_reasoning("claude-sonnet-4-5", "minimal")).await;
        let (name, data) = streamed.terminal().clone();
        if name == "error" {
            assert_eq!(data["error"]["type"], "llm_bad_response", "{label}: {data}");
            continue;
        }
        let streamed_thought = streamed.joined("thought");
        assert_eq!(
            data["thought"].as_str().unwrap(),
            streamed_thought,
            "{label}: the streamed thought is not the step's thought"
        );
    }
}

#[tokio::test]
async fn red_team_17_a_signature_delta_without_a_thinking_block_is_not_a_crash() {
    let app = spawn_app().await;
    let mut events = vec![
        start(),
        json!({"type": "content_block_delta", "index": 7, "delta": {"type": "signature_delta", "signature": SIGNATURE}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": SIGNATURE}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Thought: ok\nFinal Answer: done"}}),
        json!({"type": "content_block_stop", "index": 0}),
    ];
    events.extend(stop("end_turn"));
    mount_sse(&app, &events).await;
    let streamed = post_stream(&app, &native_reasoning("claude-sonnet-4-5", "minimal")).await;
    let (name, data) = streamed.terminal();
    if name == "step" {
        assert!(
            !data.to_string().contains(SIGNATURE),
            "a stray signature was kept: {data}"
        );
    } else {
        assert_eq!(data["error"]["type"], "llm_bad_response", "{data}");
    }
}

// ---------------------------------------------------------------------------------------------
// Thinking rules on every request that goes to Anthropic, count_tokens included
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn red_team_17_count_tokens_with_thinking_on_carries_no_forced_tool_choice() {
    // `adjust` (forced tool choice → auto with thinking on) runs on the message request only;
    // the count_tokens request near the limit is built before it, with `thinking` and
    // `tool_choice: any` together, which Anthropic refuses, so the exact count never works.
    let app = spawn_app().await;
    Mock::given(path(COUNT_PATH))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"input_tokens": 1500})))
        .mount(&app.llm)
        .await;
    Mock::given(path(ANTHROPIC_PATH))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "thinking", "thinking": "hm", "signature": SIGNATURE},
                        {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.js"}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 5}})))
        .mount(&app.llm)
        .await;
    let mut body = near_the_limit();
    body["llm_config"]["tool_mode"] = json!("native");
    body["llm_config"]["reasoning_effort"] = json!("minimal");
    body["llm_config"]["tokenLimit"] = json!(3000 + 1024 + 150);
    body["require_action"] = json!(true);
    body["tools"] = json!([{"name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let requests = app.llm.received_requests().await.unwrap();
    let counts: Vec<Value> = requests
        .iter()
        .filter(|r| r.url.path() == COUNT_PATH)
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert!(
        !counts.is_empty(),
        "no count was asked for: adjust the sizes"
    );
    for sent in requests
        .iter()
        .map(|r| serde_json::from_slice::<Value>(&r.body).unwrap())
    {
        if sent.get("thinking").is_none() {
            continue;
        }
        let kind = sent["tool_choice"]["type"].as_str().unwrap_or("auto");
        assert!(
            kind == "auto" || kind == "none",
            "thinking with a forced tool choice ({kind}) was sent: {}",
            json!({"thinking": sent["thinking"], "tool_choice": sent["tool_choice"]})
        );
        assert!(
            sent.get("temperature").is_none_or(|t| t == 1.0),
            "temperature with thinking"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Huge reasoning
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn red_team_17_megabytes_of_reasoning_content_do_not_break_the_loop() {
    // DeepSeek answers a tool call with 9 MB of reasoning_content (under the 16 MiB reply cap).
    // The service hands it back in reasoning_state (and again in `thought`) and tells the client
    // to send it back untouched, but its own body limit (8 MiB) refuses the next request.
    let app = spawn_app().await;
    let reasoning =
        "Need the file first; the stack trace points at line three of a.js. ".repeat(135_000);
    let mut reply = openai_reply("");
    reply["choices"][0]["message"] = json!({"role": "assistant", "content": "",
        "reasoning_content": reasoning,
        "tool_calls": [{"id": "call_00_x", "type": "function",
            "function": {"name": "read_file", "arguments": "{\"path\":\"a.js\"}"}}]});
    reply["choices"][0]["finish_reason"] = json!("tool_calls");
    Mock::given(path("/deepseek/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(reply))
        .up_to_n_times(1)
        .mount(&app.llm)
        .await;
    Mock::given(path("/deepseek/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(openai_reply("Final Answer: done")))
        .mount(&app.llm)
        .await;
    let mut body = native_reasoning("deepseek-chat", "high");
    body["llm_config"]["provider"] = json!("deepseek");
    body["llm_config"]["tokenLimit"] = json!(64_000);
    let first = app.post_react_step(&body).await;
    if first.status != 200 {
        assert_eq!(
            first.body["error"]["type"], "llm_bad_response",
            "{}",
            first.body
        );
        return;
    }
    let mut history = first.body["updated_conversation_history"].clone();
    history.as_array_mut().unwrap().push(json!({
        "role": "tool_observation", "content": "a.js:3 reads undefined.length",
        "tool_call_id": first.body["action_details"]["tool_call_id"]
    }));
    let mut next = body.clone();
    next["user_query"] = json!("");
    next["conversation_history"] = history;
    let size = next.to_string().len();
    let second = app.post_react_step(&next).await;
    assert_eq!(
        second.status,
        200,
        "the history the service returned ({size} bytes) cannot be sent back: {}",
        second.text.chars().take(400).collect::<String>()
    );
}

#[tokio::test]
async fn red_team_17_an_enormous_thinking_block_sent_back_stays_inside_the_budget() {
    // A reasoning_state of 3 MB of thinking on an early turn, thinking on: the prompt must still
    // fit (context_report.used <= budget) and what goes upstream must be of that size.
    let app = spawn_app_answering(ANTHROPIC_PATH, 200, anthropic_reply("Final Answer: ok")).await;
    let huge =
        "The session store is keyed by the token hash and expires entries lazily. ".repeat(40_000);
    let mut body = native_reasoning("claude-sonnet-4-5", "low");
    body["llm_config"]["tokenLimit"] = json!(32_000);
    body["user_query"] = json!("and now?");
    body["conversation_history"] = json!([
        {"role": "user", "content": "Why does a.js throw?"},
        {"role": "assistant", "content": "read it", "toolCall": {"id": "toolu_1", "name": "read_file", "parameters": {"path": "a.js"}},
         "reasoning_state": {"blocks": [{"type": "thinking", "thinking": huge, "signature": SIGNATURE}]}},
        {"role": "tool_observation", "content": "a.js:3 reads undefined.length", "tool_call_id": "toolu_1"},
        {"role": "assistant", "content": "read b", "toolCall": {"id": "toolu_2", "name": "read_file", "parameters": {"path": "b.js"}},
         "reasoning_state": {"blocks": [{"type": "thinking", "thinking": "b next", "signature": SIGNATURE}]}},
        {"role": "tool_observation", "content": "b.js is fine", "tool_call_id": "toolu_2"}
    ]);
    // A step past its deadline would be 504, which is none of the answers allowed here.
    let reply = app.post_react_step(&body).await;
    if reply.status != 200 {
        assert!([413, 422].contains(&reply.status), "{}", reply.body);
        return;
    }
    let report = &reply.body["context_report"];
    assert!(
        report["used"].as_u64() <= report["budget"].as_u64(),
        "{report}"
    );
    let sent = app.upstream_bodies().await.pop().unwrap();
    let bytes = sent.to_string().len();
    assert!(
        bytes < 32_000 * 8,
        "{bytes} bytes went upstream for a 32,000-token window"
    );
    if let Err(why) = anthropic_structure(&sent) {
        panic!("Anthropic would refuse this body: {why}");
    }
}

#[tokio::test]
async fn red_team_17_many_thinking_blocks_sent_back_are_answered_within_the_deadline() {
    // 150,000 redacted blocks on one turn: counted as almost nothing, sent as megabytes.
    let app = spawn_app_answering(ANTHROPIC_PATH, 200, anthropic_reply("Final Answer: ok")).await;
    let blocks: Vec<Value> = (0..150_000)
        .map(|_| json!({"type": "redacted_thinking", "data": "EmwK"}))
        .collect();
    let mut body = native_reasoning("claude-sonnet-4-5", "low");
    body["llm_config"]["tokenLimit"] = json!(32_000);
    body["user_query"] = json!("");
    body["conversation_history"] = json!([
        {"role": "user", "content": "Why does a.js throw?"},
        {"role": "assistant", "content": "read it", "toolCall": {"id": "toolu_1", "name": "read_file", "parameters": {"path": "a.js"}},
         "reasoning_state": {"blocks": blocks}},
        {"role": "tool_observation", "content": "a.js:3 reads undefined.length", "tool_call_id": "toolu_1"}
    ]);
    // A step past its deadline would be 504, which is none of the answers allowed here.
    let reply = app.post_react_step(&body).await;
    assert!(
        [200, 400, 413, 422].contains(&reply.status),
        "{}",
        reply.status
    );
    if reply.status == 200 {
        let report = &reply.body["context_report"];
        assert!(
            report["used"].as_u64() <= report["budget"].as_u64(),
            "{report}"
        );
        let sent = app.upstream_bodies().await.pop().unwrap();
        let bytes = sent.to_string().len();
        assert!(
            bytes < 32_000 * 8,
            "{bytes} bytes ({} blocks) went upstream for a 32,000-token window, counted as {}",
            sent.to_string().matches("redacted_thinking").count(),
            report["used"]
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The session id
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn red_team_17_the_session_id_never_reaches_any_upstream_raw() {
    let session = "alice@example.com-secret-session-7731";
    let app = spawn_app().await;
    Mock::given(path(OPENAI_PATH))
        .respond_with(ResponseTemplate::new(200).set_body_json(openai_reply("Final Answer: ok")))
        .mount(&app.llm)
        .await;
    Mock::given(path(ANTHROPIC_PATH))
        .respond_with(ResponseTemplate::new(200).set_body_json(anthropic_reply("Final Answer: ok")))
        .mount(&app.llm)
        .await;
    Mock::given(path("/deepseek/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(openai_reply("Final Answer: ok")))
        .mount(&app.llm)
        .await;
    for (model, provider) in [
        ("gpt-4o", None),
        ("claude-sonnet-4-5", None),
        ("deepseek-chat", Some("deepseek")),
    ] {
        let mut body = request(model, "hi");
        body["session_id"] = json!(session);
        if let Some(p) = provider {
            body["llm_config"]["provider"] = json!(p);
        }
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 200, "{model}: {}", reply.body);
    }
    for r in app.llm.received_requests().await.unwrap() {
        let all = format!(
            "{} {:?} {}",
            r.url,
            r.headers,
            String::from_utf8_lossy(&r.body)
        );
        assert!(
            !all.contains(session),
            "the raw session id went to {}",
            r.url
        );
        assert!(
            !all.contains("alice"),
            "part of the session id went to {}",
            r.url
        );
    }
}
