//! Hostile streams in each wire format (OpenAI's SSE, Ollama's JSON lines, Anthropic's events):
//! absurd tool-call indexes, text after the end, lines split inside a character or never ended,
//! error events carrying the key, unknown events and usage of u64::MAX. Each ends in a step or a
//! bad-response error, never a crash, a partial answer or the key.
//!
//! Written by a red team (issue 16): a test that exposes a defect asserts the correct behaviour,
//! so it fails until the defect is fixed; the others show a defence holding against something
//! the other suites do not try.

use serde_json::{json, Value};

use crate::support::app::{spawn_app_with, try_post, TestApp};
use crate::support::requests::{request, KEY};
use crate::support::stream_upstream::{serve, Ending};

/// The data of the terminal event of a streamed step (`step` or `error`).
async fn stream_terminal(app: &TestApp, body: &Value) -> Result<(String, Value), String> {
    let (status, raw) = try_post(app, "/api/agent/react_step/stream", body).await?;
    let text = match raw {
        Value::String(s) => s,
        other => return Err(format!("HTTP {status}, not a stream: {other}")),
    };
    let mut decoder = reactstep::llm::sse::SseDecoder::default();
    let events = decoder.push(text.as_bytes()).map_err(|_| "not UTF-8")?;
    let last = events
        .into_iter()
        .rfind(|e| matches!(e.event.as_deref(), Some("step" | "error")))
        .ok_or_else(|| format!("the stream ended without a terminal event: {text}"))?;
    Ok((
        last.event.unwrap_or_default(),
        serde_json::from_str(&last.data).unwrap_or(Value::Null),
    ))
}

fn sse(data: &Value) -> String {
    format!("data: {data}\n\n")
}

fn openai_chunk(delta: Value) -> Value {
    json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
           "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
}

/// An upstream on loopback for the `openai` provider that streams `pieces`.
async fn openai_streaming(pieces: Vec<Vec<u8>>) -> TestApp {
    let uri = serve(200, pieces, Ending::Complete).await.uri;
    spawn_app_with(move |c| c.openai_base_url = format!("{uri}/v1")).await
}

#[tokio::test]
async fn a_tool_call_index_of_u64_max_followed_by_one_without_an_index_does_not_crash() {
    let stream = [
        sse(&openai_chunk(json!({"tool_calls": [
            {"index": u64::MAX, "id": "a", "type": "function",
             "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}}]}))),
        sse(&openai_chunk(json!({"tool_calls": [
            {"id": "b", "type": "function",
             "function": {"name": "read_file", "arguments": "{\"path\":\"b\"}"}}]}))),
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n".to_string(),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    let app = openai_streaming(vec![stream.into_bytes()]).await;
    let mut body = request("gpt-4o", "Read a.");
    body["tools"] = json!([{"name": "read_file", "description": "Reads a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]);
    body["llm_config"]["tool_mode"] = json!("native");
    let (name, data) = stream_terminal(&app, &body)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Today the decoder's `last + 1` overflows: the step task panics and the client gets
    // internal_error (the whole worker, on a route that does not run the step in a task).
    assert!(
        name == "step" || data["error"]["type"] == "llm_bad_response",
        "{name}: {data}"
    );
}

#[tokio::test]
async fn text_after_done_in_the_same_read_is_not_part_of_the_answer() {
    // OpenAI: `[DONE]` then more chunks, all in one network read.
    let stream = [
        sse(&openai_chunk(
            json!({"content": "Thought: t\nFinal Answer: ok"}),
        )),
        "data: [DONE]\n\n".to_string(),
        sse(&openai_chunk(json!({"content": " INJECTED-AFTER-DONE"}))),
    ]
    .concat();
    let app = openai_streaming(vec![stream.into_bytes()]).await;
    let (name, data) = stream_terminal(&app, &request("gpt-4o", "q"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(name, "step", "{data}");
    assert_eq!(data["direct_response"], "ok", "{data}");
}

/// The standard lets a line end at a bare `\r`: such a stream is read whole, also where a read
/// ends between a `\r` and a `\n` (which is then one line end, not two).
#[tokio::test]
async fn lines_ended_by_a_bare_cr_or_a_split_crlf_are_read_as_the_standard_says() {
    let chunk = |text: &str| openai_chunk(json!({"content": text})).to_string();
    let stream = format!(
        "data: {}\r\r: keep-alive\r\rdata: {}\r\n\r\ndata: [DONE]\r\r",
        chunk("Thought: t\nFinal Answer: o"),
        chunk("k"),
    );
    // A read ends after every `\r`.
    let pieces = stream
        .split_inclusive('\r')
        .map(|piece| piece.as_bytes().to_vec())
        .collect();
    let app = openai_streaming(pieces).await;
    let (name, data) = stream_terminal(&app, &request("gpt-4o", "q"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(name, "step", "{data}");
    assert_eq!(data["direct_response"], "ok", "{data}");
}

#[tokio::test]
async fn ollama_text_after_done_true_in_the_same_read_is_not_part_of_the_answer() {
    let lines = [
        json!({"model": "m", "message": {"role": "assistant", "content": "Thought: t\nFinal Answer: ok"}, "done": false}),
        json!({"model": "m", "message": {"role": "assistant", "content": ""}, "done": true,
               "done_reason": "stop", "prompt_eval_count": 10, "eval_count": 5}),
        json!({"model": "m", "message": {"role": "assistant", "content": " INJECTED-AFTER-DONE"}, "done": false}),
    ]
    .iter()
    .map(|l| format!("{l}\n"))
    .collect::<String>();
    let uri = serve(200, vec![lines.into_bytes()], Ending::Complete)
        .await
        .uri;
    let app = spawn_app_with(move |c| c.ollama_base_url = uri).await;
    let mut body = request("llama3.1:8b", "q");
    body["llm_config"]["provider"] = json!("ollama");
    let (name, data) = stream_terminal(&app, &body)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(name, "step", "{data}");
    assert_eq!(data["direct_response"], "ok", "{data}");
}

#[tokio::test]
async fn ollama_lines_split_mid_character_and_error_lines_with_the_key() {
    // A line split inside a multi-byte character decodes whole.
    let text = "Thought: t\nFinal Answer: h\u{e9}llo \u{1F600}";
    let first = format!(
        "{}\n",
        json!({"model": "m", "message": {"role": "assistant", "content": text}, "done": false})
    );
    let last = format!(
        "{}\n",
        json!({"model": "m", "message": {"role": "assistant", "content": ""}, "done": true, "done_reason": "stop"})
    );
    let bytes = [first, last].concat().into_bytes();
    let emoji = bytes
        .windows(4)
        .position(|w| w == "\u{1F600}".as_bytes())
        .unwrap();
    let pieces =
        crate::support::stream_upstream::cut_at(&bytes, &[emoji + 1, emoji + 2, emoji + 3]);
    let uri = serve(200, pieces, Ending::Complete).await.uri;
    let app = spawn_app_with(move |c| c.ollama_base_url = uri).await;
    let mut body = request("llama3.1:8b", "q");
    body["llm_config"]["provider"] = json!("ollama");
    let (name, data) = stream_terminal(&app, &body).await.unwrap();
    assert_eq!(name, "step", "{data}");
    assert_eq!(data["direct_response"], "h\u{e9}llo \u{1F600}");

    // An error line that echoes the key: a 502-class error, the key scrubbed.
    let lines = format!(
        "{}\n{}\n",
        json!({"model": "m", "message": {"role": "assistant", "content": "Thought: "}, "done": false}),
        json!({"error": format!("unauthorized: Bearer {KEY}")})
    );
    let uri = serve(200, vec![lines.into_bytes()], Ending::Complete)
        .await
        .uri;
    let app = spawn_app_with(move |c| c.ollama_base_url = uri).await;
    let (status, raw) = try_post(&app, "/api/agent/react_step/stream", &body)
        .await
        .unwrap();
    assert_eq!(status, 200);
    let raw = raw.as_str().unwrap_or_default().to_string();
    assert!(!raw.contains("SECRET-key"), "{raw}");
    assert!(raw.contains("event: error"), "{raw}");

    // Not UTF-8 inside a line: a bad response, not a panic.
    let uri = serve(
        200,
        vec![b"{\"message\":{\"content\":\"\xff\xfe\"},\"done\":false}\n".to_vec()],
        Ending::Complete,
    )
    .await
    .uri;
    let app = spawn_app_with(move |c| c.ollama_base_url = uri).await;
    let (name, data) = stream_terminal(&app, &body).await.unwrap();
    assert_eq!(name, "error");
    assert_eq!(data["error"]["type"], "llm_bad_response", "{data}");
}

/// A stream that never ends a line, `total` bytes in pieces of `piece` bytes, against Ollama
/// (JSON lines) or OpenAI (SSE); the stream's last event.
async fn endless_line(ollama: bool, total: usize, piece: usize) -> (String, Value) {
    let head = if ollama {
        b"{\"message\":{\"role\":\"assistant\",\"content\":\"".to_vec()
    } else {
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"".to_vec()
    };
    let mut bytes = head;
    bytes.resize(total, b'a');
    let pieces: Vec<Vec<u8>> = bytes.chunks(piece).map(<[u8]>::to_vec).collect();
    let uri = serve(200, pieces, Ending::Complete).await.uri;
    let app = spawn_app_with(move |c| {
        if ollama {
            c.ollama_base_url = uri;
        } else {
            c.openai_base_url = format!("{uri}/v1");
        }
        c.llm_timeout_secs = 300;
        c.step_timeout_secs = 300;
    })
    .await;
    let mut body = request(if ollama { "llama3.1:8b" } else { "gpt-4o" }, "q");
    if ollama {
        body["llm_config"]["provider"] = json!("ollama");
    }
    stream_terminal(&app, &body)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_line_that_never_ends_in_small_reads_is_refused_at_the_cap() {
    // Each read used to re-scan everything buffered since the last line break (quadratic in
    // the line's length): the framers now search only the new bytes. How long it takes is the
    // benchmarks' business, not a test's; what a test can hold is that the line is refused.
    for ollama in [true, false] {
        let (name, data) = endless_line(ollama, 2 << 20, 1024).await;
        assert_eq!(name, "error", "{data}");
        assert_eq!(data["error"]["type"], "llm_bad_response");
    }
}

/// An upstream on loopback for the `anthropic` provider that streams `events` (type, data).
async fn anthropic_streaming(events: &[Value]) -> TestApp {
    let stream: String = events
        .iter()
        .map(|e| {
            format!(
                "event: {}\ndata: {e}\n\n",
                e["type"].as_str().unwrap_or("x")
            )
        })
        .collect();
    let uri = serve(200, vec![stream.into_bytes()], Ending::Complete)
        .await
        .uri;
    spawn_app_with(move |c| c.anthropic_base_url = uri).await
}

fn text_delta(text: &str) -> Value {
    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})
}

#[tokio::test]
async fn anthropic_streams_of_odd_shapes() {
    let start = json!({"type": "message_start", "message": {"id": "m", "type": "message",
        "role": "assistant", "content": [], "model": "claude",
        "usage": {"input_tokens": 10, "output_tokens": 1}}});
    let stop = json!({"type": "message_stop"});
    let body = request("claude-sonnet-4-5", "q");

    // Unknown event types and block types are skipped; no message_start means no usage: the
    // service counts it and says so.
    let app = anthropic_streaming(&[
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "server_tool_use", "id": "x", "name": "web"}}),
        json!({"type": "brand_new_event", "payload": [1, 2, 3]}),
        text_delta("Thought: t\nFinal Answer: ok"),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": {}}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
        stop.clone(),
    ])
    .await;
    let (name, data) = stream_terminal(&app, &body).await.unwrap();
    assert_eq!(name, "step", "{data}");
    assert_eq!(data["direct_response"], "ok");
    assert_eq!(data["usage"]["approximate"], true, "{data}");

    // No message_stop: truncated, never a silently partial answer.
    let app = anthropic_streaming(&[
        start.clone(),
        text_delta("Thought: t\nFinal Answer: partial"),
    ])
    .await;
    let (name, data) = stream_terminal(&app, &body).await.unwrap();
    assert_eq!(name, "error", "{data}");
    assert_eq!(data["error"]["type"], "llm_bad_response");

    // An error event mid-stream, the key in it.
    let app = anthropic_streaming(&[
        start.clone(),
        text_delta("Thought: "),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": format!("Overloaded for {KEY}")}}),
    ])
    .await;
    let (name, data) = stream_terminal(&app, &body).await.unwrap();
    assert_eq!(name, "error", "{data}");
    assert!(!data.to_string().contains("SECRET-key"), "{data}");

    // Usage of u64::MAX on message_start with cache reads: the sum must not overflow.
    let app = anthropic_streaming(&[
        json!({"type": "message_start", "message": {"usage": {"input_tokens": u64::MAX,
            "cache_read_input_tokens": 1, "output_tokens": 1}}}),
        text_delta("Thought: t\nFinal Answer: ok"),
        stop,
    ])
    .await;
    let (name, data) = stream_terminal(&app, &body).await.unwrap();
    assert_ne!(data["error"]["type"], "internal_error", "{name}: {data}");
}
