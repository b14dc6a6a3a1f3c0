//! `POST /api/agent/react_step/stream` end to end: a scripted upstream streams in each
//! provider's framing, cut at awkward places; the client reads the events with the service's
//! own SSE decoder and checks each against openapi.yaml.

use reactstep::llm::sse::SseDecoder;
use serde_json::{json, Value};

use crate::support::app::{spawn_app, spawn_app_with, TestApp};
use crate::support::requests::request;
use crate::support::stream::{post_stream, STREAM_PATH};
use crate::support::stream_upstream::{cut_at, openai_stream, serve, Ending, StreamingUpstream};

async fn app_for(upstream: &StreamingUpstream, timeout_secs: u64) -> TestApp {
    let uri = upstream.uri.clone();
    spawn_app_with(move |c| {
        c.openai_base_url = format!("{uri}/v1");
        c.anthropic_base_url = uri.clone();
        c.llm_timeout_secs = timeout_secs;
        c.stream_heartbeat_secs = 1;
    })
    .await
}

/// Without fields that differ between two runs of the same step.
fn comparable(mut body: Value) -> Value {
    body["request_id"] = Value::Null;
    // Timings differ from run to run; a stream tells them in its terminal event only, since
    // its headers leave before the step runs (a plain answer tells them in its headers).
    if let Some(fields) = body.as_object_mut() {
        fields.remove("server_timing");
    }
    if body["action_details"].is_object() {
        body["action_details"]["tool_call_id"] = Value::Null;
    }
    for turn in body["updated_conversation_history"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        turn["timestamp"] = Value::Null;
        if turn["toolCall"].is_object() {
            turn["toolCall"]["id"] = Value::Null;
        }
    }
    body
}

#[tokio::test]
async fn the_thought_streams_through_awkward_cuts_and_the_step_ends_it() {
    let output = [
        "Tho",
        "ught: The lo",
        "gin code is in caf\u{e9}.js",
        "\nAct",
        "ion: read_file(path=\"caf\u{e9}.js\")",
    ];
    let bytes = openai_stream(&output, "stop");
    // Cut inside the `é` of the SSE bytes, inside `data:` and inside `[DONE]` too.
    let e_acute = bytes
        .windows(2)
        .position(|w| w == "\u{e9}".as_bytes())
        .unwrap();
    let pieces = cut_at(&bytes, &[3, 40, e_acute + 1, bytes.len() - 5]);
    let mut upstream = serve(200, pieces, Ending::Complete).await;
    let app = app_for(&upstream, 10).await;

    let streamed = post_stream(&app, &request("gpt-4o", "Where is login?")).await;
    assert_eq!(streamed.status, 200);
    assert!(streamed.content_type.starts_with("text/event-stream"));
    assert_eq!(
        streamed.joined("thought"),
        "The login code is in caf\u{e9}.js"
    );
    assert_eq!(streamed.joined("answer"), "");
    let (name, step) = streamed.terminal();
    assert_eq!(name, "step");
    assert_eq!(step["status"], "action_proposed");
    assert_eq!(step["thought"], "The login code is in caf\u{e9}.js");
    assert_eq!(
        step["action_details"]["tool_args"],
        json!({"path": "caf\u{e9}.js"})
    );
    assert_eq!(
        step["usage"],
        json!({"prompt_tokens": 512, "completion_tokens": 31})
    );

    let sent = upstream.request.try_recv().unwrap();
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn anthropic_events_with_a_native_tool_call() {
    let events = [
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 472, "output_tokens": 2}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "I'll open the "}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "auth module."}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_01", "name": "read_file", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"src/a"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "uth.js\"}"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 89}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    let pieces: Vec<Vec<u8>> = events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n").into_bytes())
        .collect();
    let upstream = serve(200, pieces, Ending::Complete).await;
    let app = app_for(&upstream, 10).await;
    let mut body = request("claude-sonnet-4-5", "Where is login?");
    body["llm_config"]["tool_mode"] = json!("native");
    body["tools"] = json!([{"name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]);
    body["available_tools_prompt_segment"] = Value::Null;

    let streamed = post_stream(&app, &body).await;
    assert_eq!(streamed.status, 200);
    // Untagged text is not streamed (it may be a tagless answer); the step carries it.
    let (name, step) = streamed.terminal();
    assert_eq!(name, "step", "{step}");
    assert_eq!(step["thought"], "I'll open the auth module.");
    assert_eq!(
        step["action_details"]["tool_args"],
        json!({"path": "src/auth.js"})
    );
    assert_eq!(
        step["usage"],
        json!({"prompt_tokens": 472, "completion_tokens": 89})
    );
}

#[tokio::test]
async fn a_stream_without_its_end_is_an_error_event() {
    let bytes = openai_stream(&["Thought: partial"], "stop");
    let done = bytes
        .windows(12)
        .position(|w| w == b"data: [DONE]")
        .unwrap();
    let upstream = serve(200, vec![bytes[..done].to_vec()], Ending::Complete).await;
    let app = app_for(&upstream, 10).await;
    let streamed = post_stream(&app, &request("gpt-4o", "q")).await;
    let (name, error) = streamed.terminal();
    assert_eq!(name, "error");
    assert_eq!(error["error"]["type"], "llm_bad_response");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("truncated"));
}

#[tokio::test]
async fn a_connection_cut_mid_stream_is_an_error_event() {
    let bytes = openai_stream(&["Thought: partial"], "stop");
    let upstream = serve(200, vec![bytes[..200].to_vec()], Ending::CutShort).await;
    let app = app_for(&upstream, 10).await;
    let streamed = post_stream(&app, &request("gpt-4o", "q")).await;
    let (name, error) = streamed.terminal();
    assert_eq!(name, "error");
    assert_eq!(error["error"]["type"], "llm_unavailable");
    assert_eq!(error["error"]["retryable"], true);
}

#[tokio::test]
async fn an_error_event_echoes_the_history_exactly_as_it_was_sent() {
    let bytes = openai_stream(&["Thought: partial"], "stop");
    for padding in [0, 100_000] {
        // The scripted upstream answers one call.
        let upstream = serve(200, vec![bytes[..200].to_vec()], Ending::CutShort).await;
        let app = app_for(&upstream, 10).await;
        let mut body = request("gpt-4o", "q");
        body["conversation_history"] = crate::support::requests::kept_history(padding);
        let streamed = post_stream(&app, &body).await;
        let (name, error) = streamed.terminal();
        assert_eq!(name, "error");
        assert_eq!(
            error["updated_conversation_history"], body["conversation_history"],
            "padding {padding}"
        );
    }
}

#[tokio::test]
async fn a_stalled_stream_times_out_with_heartbeats_meanwhile() {
    let bytes = openai_stream(&["Thought: thinking"], "stop");
    let upstream = serve(200, vec![bytes[..250].to_vec()], Ending::Stall).await;
    let app = app_for(&upstream, 3).await;
    let streamed = post_stream(&app, &request("gpt-4o", "q")).await;
    let (name, error) = streamed.terminal();
    assert_eq!(name, "error");
    assert_eq!(error["error"]["type"], "llm_timeout");
    assert!(
        streamed.heartbeats >= 1,
        "no heartbeat while the model stalled"
    );
}

/// A small model that writes the same line over and over, and never ends (issue 34): the step
/// cuts it short as degenerate output and hangs up, long before any timeout would.
#[tokio::test]
async fn a_stream_that_repeats_one_line_is_cut_short_as_degenerate() {
    let line = "{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.rs\"}}\n";
    let deltas: Vec<&str> = std::iter::repeat_n(line, 100).collect();
    let whole = String::from_utf8(openai_stream(&deltas, "stop")).unwrap();
    // Everything before the chunk that would finish the reply: the model never stops.
    let finish = whole.rfind("\"finish_reason\":\"stop\"").unwrap();
    let cut = whole[..finish].rfind("data: ").unwrap();
    let upstream = serve(200, vec![whole.as_bytes()[..cut].to_vec()], Ending::Stall).await;
    let closed = upstream.closed;
    let uri = upstream.uri.clone();
    let app = spawn_app_with(move |c| {
        c.openai_base_url = format!("{uri}/v1");
        c.llm_timeout_secs = 600;
    })
    .await;
    let streamed = post_stream(&app, &request("gpt-4o", "q")).await;
    let (name, error) = streamed.terminal();
    assert_eq!(name, "error");
    // Not `llm_timeout`: the reply was judged, not waited out.
    assert_eq!(error["error"]["type"], "llm_bad_response", "{error}");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("same line 32 times in a row"), "{message}");
    closed
        .await
        .expect("the service hung up on the degenerate stream");
}

/// The same degenerate output in one reply (the JSON endpoint's upstream call) ends the same way:
/// it was read as the answer, 100 lines of it, while the streamed step said 502.
#[tokio::test]
async fn a_whole_reply_that_repeats_one_line_is_degenerate_as_a_stream_is() {
    let line = "{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.rs\"}}\n";
    let app = crate::support::app::spawn_app_answering(
        crate::support::upstream::OPENAI_PATH,
        200,
        crate::support::upstream::openai_reply(&line.repeat(100)),
    )
    .await;
    let reply = app.post_react_step(&request("gpt-4o", "q")).await;
    assert_eq!(reply.status, 502, "{}", reply.body);
    assert_eq!(reply.body["error"]["type"], "llm_bad_response");
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("same line 32 times in a row"), "{message}");
}

/// Just short of the bound, twice, a different line between, and the last line without a break
/// (a stream never counts a line it has not seen end): an answer, not degenerate output.
#[tokio::test]
async fn a_whole_reply_with_runs_short_of_the_bound_is_read() {
    let line = "| the same table row |\n";
    let answer = [
        "Thought: done\nFinal Answer: rows\n",
        &line.repeat(31),
        "| another row here |\n",
        &line.repeat(31),
        line.trim_end(),
    ]
    .concat();
    let app = crate::support::app::spawn_app_answering(
        crate::support::upstream::OPENAI_PATH,
        200,
        crate::support::upstream::openai_reply(&answer),
    )
    .await;
    let reply = app.post_react_step(&request("gpt-4o", "q")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answer = reply.body["direct_response"].as_str().unwrap();
    assert!(answer.ends_with(line.trim_end()), "{answer}");
}

/// OpenAI's `refusal` beside text: the text is the reply, whole or streamed. Streamed, the
/// refusal was mixed into the text and the step ended as a refusal (with its warning).
#[tokio::test]
async fn text_beside_a_refusal_is_the_answer_on_both_endpoints() {
    let refusal = "I can't help with that.";
    let mut whole = crate::support::upstream::openai_reply("Thought: done\nFinal Answer: 42");
    whole["choices"][0]["message"]["refusal"] = json!(refusal);
    let app =
        crate::support::app::spawn_app_answering(crate::support::upstream::OPENAI_PATH, 200, whole)
            .await;
    let replied = app.post_react_step(&request("gpt-4o", "q")).await.body;

    let chunk = |delta: Value| {
        format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": delta}]})
        )
    };
    let events = [
        chunk(json!({"role": "assistant", "content": "Thought: done\n", "refusal": refusal})),
        chunk(json!({"content": "Final Answer: 42"})),
        format!(
            "data: {}\n\ndata: [DONE]\n\n",
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        ),
    ];
    let upstream = serve(200, vec![events.concat().into_bytes()], Ending::Complete).await;
    let app = app_for(&upstream, 10).await;
    let streamed = post_stream(&app, &request("gpt-4o", "q")).await;
    let (name, step) = streamed.terminal();
    assert_eq!(name, "step", "{step}");
    for reply in [&replied, step] {
        assert_eq!(reply["direct_response"], "42", "{reply}");
        assert!(!reply["warnings"].to_string().contains("refus"), "{reply}");
    }
}

/// With tools called natively, text that answers and then a call: the step proposes the call,
/// so no `answer` event may have been sent (one was, and no `retry` took it back). Without the
/// call the same answer is streamed, once the reply is over.
#[tokio::test]
async fn a_native_answer_followed_by_a_call_is_never_streamed_as_the_answer() {
    for calls in [true, false] {
        let chunk = |delta: Value, finish: Value| {
            format!(
                "data: {}\n\n",
                json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            )
        };
        let mut events = vec![chunk(
            json!({"role": "assistant", "content": "Thought: I know it.\nFinal Answer: in auth.py"}),
            Value::Null,
        )];
        if calls {
            events.push(chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "read_file", "arguments": "{\"path\":\"auth.py\"}"}}]}),
                Value::Null,
            ));
        }
        let finish = if calls { "tool_calls" } else { "stop" };
        events.push(chunk(json!({}), json!(finish)));
        events.push("data: [DONE]\n\n".into());
        let upstream = serve(200, vec![events.concat().into_bytes()], Ending::Complete).await;
        let app = app_for(&upstream, 10).await;
        let body = crate::support::requests::with_native_read_file(request(
            "gpt-4o",
            "Where is login handled?",
        ));
        let streamed = post_stream(&app, &body).await;
        let (name, step) = streamed.terminal();
        assert_eq!(name, "step", "{step}");
        assert_eq!(streamed.joined("thought"), "I know it.");
        match calls {
            true => {
                assert_eq!(step["status"], "action_proposed", "{step}");
                assert_eq!(streamed.joined("answer"), "");
            }
            false => {
                assert_eq!(step["direct_response"], "in auth.py", "{step}");
                assert_eq!(streamed.joined("answer"), "in auth.py");
            }
        }
    }
}

/// A tagless answer (the usual one with tools called natively, and any text mode answer with no
/// tag) is not streamed as it forms, since only the whole output tells it is no thought; once
/// read, it comes as one `answer` event before the `step` event. It came in the `step` only.
#[tokio::test]
async fn a_tagless_answer_comes_as_one_answer_event_once_read() {
    for native in [true, false] {
        let bytes = openai_stream(&["Login is ", "handled in auth.py."], "stop");
        let upstream = serve(200, vec![bytes], Ending::Complete).await;
        let app = app_for(&upstream, 10).await;
        let mut body = request("gpt-4o", "Where is login handled?");
        if native {
            body = crate::support::requests::with_native_read_file(body);
        }
        let streamed = post_stream(&app, &body).await;
        let (name, step) = streamed.terminal();
        assert_eq!(name, "step", "{step}");
        assert_eq!(step["direct_response"], "Login is handled in auth.py.");
        assert_eq!(streamed.joined("answer"), "Login is handled in auth.py.");
        let names: Vec<&str> = streamed.events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names[names.len() - 2..], ["answer", "step"], "{names:?}");
    }
}

#[tokio::test]
async fn an_error_before_the_stream_keeps_its_status() {
    let body = br#"{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#;
    let upstream = serve_json_error(401, body).await;
    let app = app_for(&upstream, 10).await;
    let streamed = post_stream(&app, &request("gpt-4o", "q")).await;
    assert_eq!(streamed.status, 401);
    assert!(streamed.content_type.starts_with("application/json"));
    assert_eq!(streamed.events[0].1["error"]["type"], "llm_auth");

    let app = spawn_app().await;
    let mut bad = request("gpt-4o", "q");
    bad["llm_config"]["tokenLimit"] = json!(0);
    let streamed = post_stream(&app, &bad).await;
    assert_eq!(streamed.status, 400);
}

/// A non-streamed error reply, as providers send before any event.
async fn serve_json_error(status: u16, body: &[u8]) -> StreamingUpstream {
    serve(status, vec![body.to_vec()], Ending::Complete).await
}

#[tokio::test]
async fn a_client_that_disconnects_stops_the_upstream_call() {
    let bytes = openai_stream(&["Thought: reading everything"], "stop");
    // Everything up to the end of the event that carries the thought, and then nothing: only
    // stopping the step can close the upstream connection, not a failed send of the next delta.
    let thought = bytes.windows(7).position(|w| w == b"Thought").unwrap();
    let first = thought
        + bytes[thought..]
            .windows(2)
            .position(|w| w == b"\n\n")
            .unwrap()
        + 2;
    let mut upstream = serve(200, vec![bytes[..first].to_vec()], Ending::Stall).await;
    let app = app_for(&upstream, 30).await;

    let mut response = reqwest::Client::new()
        .post(format!("{}{STREAM_PATH}", app.address))
        .json(&request("gpt-4o", "q"))
        .send()
        .await
        .unwrap();
    let mut decoder = SseDecoder::default();
    'read: while let Some(chunk) = response.chunk().await.unwrap() {
        for event in decoder.push(&chunk).unwrap() {
            if event.event.as_deref() == Some("thought") {
                break 'read;
            }
        }
    }
    drop(response);
    // The bound only keeps a broken build from hanging; the close itself is what is awaited.
    let closed =
        tokio::time::timeout(std::time::Duration::from_secs(20), &mut upstream.closed).await;
    assert!(
        matches!(closed, Ok(Ok(()))),
        "the upstream connection was left open"
    );
}

#[tokio::test]
async fn mock_responses_stream_too() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "q");
    body["mock_response"] = json!("Thought: Everything needed is known.\nFinal Answer: Login lives in src/auth.js; it checks the session token.");
    let streamed = post_stream(&app, &body).await;
    assert_eq!(streamed.status, 200);
    assert!(
        streamed
            .events
            .iter()
            .filter(|(n, _)| n == "answer")
            .count()
            > 3,
        "pieces"
    );
    assert_eq!(streamed.joined("thought"), "Everything needed is known.");
    assert_eq!(
        streamed.joined("answer"),
        "Login lives in src/auth.js; it checks the session token."
    );
    assert_eq!(streamed.terminal().0, "step");
}

#[tokio::test]
async fn the_streamed_step_equals_the_plain_response() {
    let app = spawn_app().await;
    let outputs = [
        "Thought: Search first.\nAction: code_search(query=\"login\")",
        "<think>Need the file.</think>\nAction: read_file(path=\"src/auth.js\")",
        "Thought: go\nAction: code_search\nAction Input: {\"query\": \"session\"}",
        "Thought: go\n```json\n{\"action\": \"read_file\", \"action_input\": {\"path\": \"a.rs\"}}\n```",
        "Thought 1: done\nAction 1: Finish[It is in auth.js]",
        "**Thought:** known\n**Final Answer:** auth.js\n\nwith `login()`",
        "No tags at all, just an answer.",
        "Thought: t\nAction: read_file(path=\"a\")\nObservation: invented\nFinal Answer: no",
    ];
    for output in outputs {
        let mut body = request("gpt-4o", "Where is login?");
        body["session_id"] = json!("same-session");
        body["mock_response"] = json!(output);
        let plain = app.post_react_step(&body).await;
        let streamed = post_stream(&app, &body).await;
        let (name, step) = streamed.terminal();
        assert_eq!(name, "step", "{output}");
        assert_eq!(
            comparable(step.clone()),
            comparable(plain.body.clone()),
            "{output}"
        );
        let thought = streamed.joined("thought");
        assert!(
            !thought.contains("Action") && !thought.contains("read_file("),
            "{output}: {thought}"
        );
    }
}

#[tokio::test]
async fn openai_native_tool_call_deltas_are_joined() {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
        .into_bytes()
    };
    let pieces = vec![
        chunk(
            json!({"role": "assistant", "content": "Thought: Open the "}),
            Value::Null,
        ),
        chunk(json!({"content": "handler."}), Value::Null),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": ""}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"pa"}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "th\": \"h.js\"}"}}]}),
            Value::Null,
        ),
        chunk(json!({}), json!("tool_calls")),
        b"data: [DONE]\n\n".to_vec(),
    ];
    let upstream = serve(200, pieces, Ending::Complete).await;
    let app = app_for(&upstream, 10).await;
    let mut body = request("gpt-4o", "Where is login?");
    body["llm_config"]["tool_mode"] = json!("native");
    body["tools"] = json!([{"name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]);
    let streamed = post_stream(&app, &body).await;
    assert_eq!(streamed.joined("thought"), "Open the handler.");
    let (name, step) = streamed.terminal();
    assert_eq!(name, "step", "{step}");
    assert_eq!(step["action_details"]["tool_args"], json!({"path": "h.js"}));
}

#[tokio::test]
async fn an_error_event_inside_an_anthropic_stream_ends_it() {
    let pieces = vec![
        b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n".to_vec(),
        b"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n".to_vec(),
        b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Thought: wait\"}}\n\n".to_vec(),
        b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n".to_vec(),
    ];
    let upstream = serve(200, pieces, Ending::Complete).await;
    let app = app_for(&upstream, 10).await;
    let streamed = post_stream(&app, &request("claude-sonnet-4-5", "q")).await;
    assert_eq!(streamed.joined("thought"), "wait");
    let (name, error) = streamed.terminal();
    assert_eq!(name, "error");
    assert_eq!(error["error"]["type"], "llm_unavailable");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Overloaded"));
}

#[tokio::test]
async fn a_compatible_server_stream_with_the_finish_in_its_own_chunk() {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1, "model": "llama3.1:8b",
                   "system_fingerprint": "fp_ollama", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
        .into_bytes()
    };
    let pieces = vec![
        chunk(
            json!({"role": "assistant", "content": "Thought: It is known.\nFinal"}),
            Value::Null,
        ),
        chunk(
            json!({"role": "assistant", "content": " Answer: auth.js"}),
            Value::Null,
        ),
        chunk(json!({"role": "assistant", "content": ""}), json!("stop")),
        b"data: [DONE]\n\n".to_vec(),
    ];
    let upstream = serve(200, pieces, Ending::Complete).await;
    let uri = upstream.uri.clone();
    let app = spawn_app_with(move |c| {
        c.base_urls
            .insert("openai_compatible".into(), format!("{uri}/v1"));
    })
    .await;
    let mut body = request("llama3.1:8b", "q");
    body["llm_config"]["provider"] = json!("openai_compatible");
    let streamed = post_stream(&app, &body).await;
    assert_eq!(streamed.joined("thought"), "It is known.");
    assert_eq!(streamed.joined("answer"), "auth.js");
    assert_eq!(streamed.terminal().1["direct_response"], "auth.js");
}
