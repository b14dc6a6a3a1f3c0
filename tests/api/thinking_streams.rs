//! Anthropic streams whose thinking events drift from the documented order: a thinking block
//! whose signature never comes, thinking deltas for a block never started, a signature with no
//! thinking block. None is kept unsigned, streamed as the thought, or a crash.
//!
//! Written by a red team (issue 17): a test that exposes a defect asserts the promised behaviour,
//! so it fails until the defect is fixed; the others show a defence holding.

use serde_json::{json, Value};
use wiremock::matchers::path;
use wiremock::{Mock, ResponseTemplate};

use crate::support::app::{spawn_app, TestApp};
use crate::support::requests::native_reasoning;
use crate::support::stream::post_stream;
use crate::support::upstream::{ANTHROPIC_PATH, SIGNATURE};

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

/// Interleaved thinking (thinking, text, thinking, a call): the step's thought put the second
/// thinking before the text while the stream told it after; both now have it where it came,
/// streamed and whole alike.
#[tokio::test]
async fn thinking_after_the_text_is_told_where_it_came() {
    let thinking = |index: u64, text: &str| {
        [
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": ""}}),
            json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": text}}),
            json!({"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": SIGNATURE}}),
            json!({"type": "content_block_stop", "index": index}),
        ]
    };
    let mut events = vec![start()];
    // White space around a block's thinking: the step trims each part, and so does the stream.
    events.extend(thinking(0, "\n I should read a.js.\n\n"));
    events.extend([
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Thought: Reading a.js first."}}),
        json!({"type": "content_block_stop", "index": 1}),
    ]);
    events.extend(thinking(2, "Then its test."));
    events.extend([
        json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "toolu_02", "name": "read_file", "input": {}}}),
        json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"a.js\"}"}}),
        json!({"type": "content_block_stop", "index": 3}),
    ]);
    events.extend(stop("tool_use"));
    let app = spawn_app().await;
    mount_sse(&app, &events).await;
    let streamed = post_stream(&app, &native_reasoning("claude-sonnet-4-5", "minimal")).await;
    let (name, step) = streamed.terminal().clone();
    assert_eq!(name, "step", "{step}");
    let thought = "I should read a.js.\n\nReading a.js first.\n\nThen its test.";
    assert_eq!(step["thought"], thought);
    assert_eq!(streamed.joined("thought"), thought);
    assert_eq!(
        step["updated_conversation_history"][1]["reasoning_state"]["layout"],
        json!(["thinking", "text", "thinking", "tool_use"]),
        "{step}"
    );
}
