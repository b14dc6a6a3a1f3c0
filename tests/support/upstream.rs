//! Replies in each provider's exact wire format, and mocks that serve them.

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

pub const OPENAI_PATH: &str = "/v1/chat/completions";
pub const ANTHROPIC_PATH: &str = "/v1/messages";
/// Anthropic's token count of a prompt, beside its messages.
pub const COUNT_PATH: &str = "/v1/messages/count_tokens";
pub const OLLAMA_PATH: &str = "/ollama/api/chat";
/// The signature on the thinking blocks of the tests' Anthropic replies.
pub const SIGNATURE: &str = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds";
/// Where the tests' `openai_compatible` server (vLLM, llama.cpp) answers.
pub const COMPATIBLE_PATH: &str = "/compat/v1/chat/completions";

/// A chat.completion as api.openai.com sends it.
pub fn openai_reply(content: &str) -> Value {
    json!({
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion",
        "created": 1741569952,
        "model": "gpt-4o-2024-08-06",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content, "refusal": null, "annotations": []},
            "logprobs": null,
            "finish_reason": "stop"
        }],
        "usage": {
            "prompt_tokens": 412, "completion_tokens": 37, "total_tokens": 449,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
        },
        "service_tier": "default",
        "system_fingerprint": "fp_fc9f1d7035"
    })
}

/// A message as api.anthropic.com sends it, stopped at the Observation stop sequence.
pub fn anthropic_reply(text: &str) -> Value {
    json!({
        "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "stop_sequence",
        "stop_sequence": "\nObservation:",
        "usage": {"input_tokens": 388, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                  "output_tokens": 29, "service_tier": "standard"}
    })
}

/// A chat.completion that calls a tool, as api.openai.com sends it: `content` may be null or
/// hold the text written before the call; `arguments` is a JSON string.
pub fn openai_tool_reply(content: Option<&str>, name: &str, arguments: &str) -> Value {
    let mut reply = openai_reply("");
    reply["choices"][0]["message"] = json!({
        "role": "assistant",
        "content": content,
        "tool_calls": [{
            "id": "call_Jh7dWJ0FqVp2Yd4yXU3tQw1k",
            "type": "function",
            "function": {"name": name, "arguments": arguments}
        }],
        "refusal": null,
        "annotations": []
    });
    reply["choices"][0]["finish_reason"] = json!("tool_calls");
    reply
}

/// A message that calls a tool, as api.anthropic.com sends it: text, then a `tool_use` block.
pub fn anthropic_tool_reply(text: &str, name: &str, input: Value) -> Value {
    let mut reply = anthropic_reply(text);
    reply["content"] = json!([
        {"type": "text", "text": text},
        {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": name, "input": input}
    ]);
    reply["stop_reason"] = json!("tool_use");
    reply["stop_sequence"] = Value::Null;
    reply
}

/// A chat.completion as Ollama's OpenAI-compatible endpoint sends it.
/// A chat.completion as an OpenAI-compatible local server (llama.cpp, vLLM) sends it.
pub fn compatible_reply(content: &str) -> Value {
    json!({
        "id": "chatcmpl-622",
        "object": "chat.completion",
        "created": 1741569952,
        "model": "llama3.1:8b",
        "system_fingerprint": "fp_ollama",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 301, "completion_tokens": 24, "total_tokens": 325}
    })
}

/// A reply of Ollama's native `/api/chat` with `stream: false`.
pub fn ollama_reply(content: &str) -> Value {
    json!({
        "model": "llama3.1:8b",
        "created_at": "2025-03-10T01:25:52.123456Z",
        "message": {"role": "assistant", "content": content},
        "done_reason": "stop",
        "done": true,
        "total_duration": 4883583458u64,
        "load_duration": 1334875,
        "prompt_eval_count": 301,
        "prompt_eval_duration": 342546000,
        "eval_count": 24,
        "eval_duration": 4535599000u64
    })
}

pub async fn mount(server: &MockServer, at: &str, status: u16, body: Value) {
    Mock::given(method("POST"))
        .and(path(at))
        .respond_with(ResponseTemplate::new(status).set_body_json(body))
        .mount(server)
        .await;
}

/// Serves the given replies in order, one per call.
pub async fn mount_sequence(server: &MockServer, at: &str, replies: Vec<Value>) {
    for reply in replies {
        Mock::given(method("POST"))
            .and(path(at))
            .respond_with(ResponseTemplate::new(200).set_body_json(reply))
            .up_to_n_times(1)
            .mount(server)
            .await;
    }
}

/// An OpenAI upstream on plain HTTP/1.1 that reports when the request has arrived and answers
/// `answer` only when told to.
pub async fn held_upstream(
    answer: &'static str,
) -> (String, oneshot::Receiver<()>, oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}", listener.local_addr().unwrap());
    let (arrived_tx, arrived) = oneshot::channel();
    let (go, go_rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        read_request(&mut socket).await;
        arrived_tx.send(()).unwrap();
        go_rx.await.unwrap();
        write_openai_reply(&mut socket, answer).await.unwrap();
    });
    (uri, arrived, go)
}

/// Answers on a plain HTTP/1.1 connection with OpenAI's reply of `answer`, then closes it.
pub async fn write_openai_reply(
    socket: &mut tokio::net::TcpStream,
    answer: &str,
) -> std::io::Result<()> {
    let body = openai_reply(answer).to_string();
    let reply = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(reply.as_bytes()).await
}

/// Reads one request with a Content-Length body from a plain HTTP/1.1 connection.
pub async fn read_request(socket: &mut tokio::net::TcpStream) {
    assert!(
        read_request_or_close(socket).await,
        "the service closed before its request was complete"
    );
}

/// Reads one request as `read_request` does; false when the service closes the connection
/// before the request is complete (a step stopped while its call was being sent).
pub async fn read_request_or_close(socket: &mut tokio::net::TcpStream) -> bool {
    let (length, body) = read_request_upto(socket, usize::MAX).await;
    length != usize::MAX && body.len() >= length
}

/// Reads one request from a plain HTTP/1.1 connection until `stop_after` bytes of its body (or
/// all of it) are in, or the connection closes: its declared `Content-Length` and the body bytes
/// that came (`usize::MAX` as the length when the head never came whole).
pub async fn read_request_upto(
    socket: &mut tokio::net::TcpStream,
    stop_after: usize,
) -> (usize, Vec<u8>) {
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = socket.read(&mut buf).await.unwrap_or(0);
        data.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&data).to_ascii_lowercase();
        let Some(end) = text.find("\r\n\r\n") else {
            if n == 0 {
                return (usize::MAX, Vec::new());
            }
            continue;
        };
        let length: usize = text[..end]
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        let body = &data[end + 4..];
        if n == 0 || body.len() >= length.min(stop_after) {
            return (length, body.to_vec());
        }
    }
}

/// The binary in a process of its own (its log at `info`), its model a mock OpenAI upstream
/// that always answers `output`. The mock is returned too: it must outlive the server's calls.
pub async fn binary_answering(output: &str) -> (MockServer, super::binary::RunningBinary) {
    let llm = MockServer::start().await;
    mount(&llm, OPENAI_PATH, 200, openai_reply(output)).await;
    let server = super::binary::RunningBinary::start(&llm.uri(), "info").await;
    (llm, server)
}
