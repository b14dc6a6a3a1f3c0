//! A native loop driven through the streaming endpoint, as a plugin runs it: each step's `step`
//! event gives the history, the client runs every proposed call (two in parallel at the first
//! step) and answers each by its id. The mocks stream tool calls in each provider's own events
//! and refuse, as the real APIs do, a request whose calls and results do not pair.

use serde_json::{json, Value};
use wiremock::{Mock, Request, Respond, ResponseTemplate};

use crate::support::app::spawn_app;
use crate::support::provider_rules::pairing_refusal;
use crate::support::requests::request;
use crate::support::stream::post_stream;
use crate::support::upstream::{ANTHROPIC_PATH, OPENAI_PATH};

/// The calls the model makes at each step (none at the last: it answers).
fn calls_at(step: usize) -> Vec<(String, String)> {
    match step {
        1 => vec![("c1a".into(), "a.js".into()), ("c1b".into(), "b.js".into())],
        2 => vec![("c2".into(), "c.js".into())],
        _ => Vec::new(),
    }
}

fn sse(events: &[Value], named: bool) -> String {
    events
        .iter()
        .map(|e| match named {
            true => format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()),
            false => format!("data: {e}\n\n"),
        })
        .collect()
}

fn openai_stream(step: usize) -> String {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": format!("Thought: step {step}")}),
        Value::Null,
    )];
    let calls = calls_at(step);
    if calls.is_empty() {
        events.push(chunk(
            json!({"content": "\nFinal Answer: all three read"}),
            Value::Null,
        ));
    }
    for (i, (id, path)) in calls.iter().enumerate() {
        let id = format!("call_{id}");
        events.push(chunk(
            json!({"tool_calls": [{"index": i, "id": id, "type": "function",
            "function": {"name": "read_file", "arguments": ""}}]}),
            Value::Null,
        ));
        events.push(chunk(
            json!({"tool_calls": [{"index": i,
            "function": {"arguments": format!("{{\"path\":\"{path}\"}}")}}]}),
            Value::Null,
        ));
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    events.push(chunk(json!({}), json!(finish)));
    events.push(
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
        "usage": {"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320}}),
    );
    format!("{}data: [DONE]\n\n", sse(&events, false))
}

fn anthropic_stream(step: usize) -> String {
    let mut events = vec![
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
            "content": [], "model": "claude-sonnet-4-5", "usage": {"input_tokens": 300, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": format!("Thought: step {step}")}}),
    ];
    let calls = calls_at(step);
    if calls.is_empty() {
        events.push(json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "\nFinal Answer: all three read"}}));
    }
    events.push(json!({"type": "content_block_stop", "index": 0}));
    for (i, (id, path)) in calls.iter().enumerate() {
        let index = i + 1;
        events.push(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": format!("toolu_{id}"), "name": "read_file", "input": {}}}));
        events.push(json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "input_json_delta", "partial_json": format!("{{\"path\": \"{path}\"}}")}}));
        events.push(json!({"type": "content_block_stop", "index": index}));
    }
    let stop = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    events.push(
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
        "usage": {"output_tokens": 20}}),
    );
    events.push(json!({"type": "message_stop"}));
    sse(&events, true)
}

/// Streams the reply for the step the request is at (one more than the assistant turns it
/// holds), after checking the pairing the real API checks.
struct StreamingModel {
    anthropic: bool,
}

impl Respond for StreamingModel {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        if let Some(refusal) = pairing_refusal(self.anthropic, &body) {
            return refusal;
        }
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        assert_eq!(
            body["stream"], true,
            "the streaming endpoint streams upstream"
        );
        let step = 1 + messages.iter().filter(|m| m["role"] == "assistant").count();
        let stream = if self.anthropic {
            anthropic_stream(step)
        } else {
            openai_stream(step)
        };
        ResponseTemplate::new(200).set_body_raw(stream, "text/event-stream")
    }
}

async fn run_loop(model: &str, anthropic: bool) {
    let app = spawn_app().await;
    let path = if anthropic {
        ANTHROPIC_PATH
    } else {
        OPENAI_PATH
    };
    Mock::given(wiremock::matchers::path(path))
        .respond_with(StreamingModel { anthropic })
        .mount(&app.llm)
        .await;
    let mut body = request(model, "Read a.js, b.js and c.js");
    body["llm_config"]["tool_mode"] = json!("native");
    body["tools"] = json!([{"name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]);
    let prefix = if anthropic { "toolu_" } else { "call_" };
    for step in 1..=3 {
        let streamed = post_stream(&app, &body).await;
        assert_eq!(streamed.status, 200, "{model} step {step}");
        assert_eq!(
            streamed.joined("thought"),
            format!("step {step}"),
            "{model} step {step}"
        );
        let (name, event) = streamed.terminal();
        assert_eq!(name, "step", "{model} step {step}: {event}");
        let expected = calls_at(step);
        if expected.is_empty() {
            assert_eq!(event["status"], "direct_response_provided", "{event}");
            assert_eq!(event["direct_response"], "all three read");
            return;
        }
        assert_eq!(event["status"], "action_proposed", "{event}");
        let proposed: Vec<Value> = match event["parallel_actions"].as_array() {
            Some(all) => all.clone(),
            None => vec![event["action_details"].clone()],
        };
        let ids: Vec<&str> = proposed
            .iter()
            .map(|a| a["tool_call_id"].as_str().unwrap())
            .collect();
        let wanted: Vec<String> = expected
            .iter()
            .map(|(id, _)| format!("{prefix}{id}"))
            .collect();
        assert_eq!(ids, wanted, "{model} step {step}: the provider's ids");
        let mut history = event["updated_conversation_history"].clone();
        let turns = history.as_array_mut().unwrap();
        let assistant = turns.last().unwrap().clone();
        assert_eq!(assistant["toolCall"]["id"], wanted[0].as_str());
        // Answered in reverse order: the ids, not the order, pair them.
        for action in proposed.iter().rev() {
            turns.push(json!({"role": "tool_observation",
                "content": format!("contents of {}", action["tool_args"]["path"].as_str().unwrap()),
                "tool_call_id": action["tool_call_id"]}));
        }
        body["conversation_history"] = history;
        body["user_query"] = json!("");
    }
    panic!("{model}: the loop did not end");
}

#[tokio::test]
async fn an_openai_native_loop_streams_with_ids_round_tripping() {
    run_loop("gpt-4o", false).await;
}

#[tokio::test]
async fn an_anthropic_native_loop_streams_with_ids_round_tripping() {
    run_loop("claude-sonnet-4-5", true).await;
}
