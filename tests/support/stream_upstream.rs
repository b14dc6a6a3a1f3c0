//! An upstream on loopback that streams as a test scripts it, at the level wiremock cannot
//! reach: each piece is written and flushed as its own HTTP chunk (so splits fall where the
//! test puts them: inside a tag, inside a multi-byte character), and the stream can end
//! properly, be cut short, or stall until the other side hangs up, which is reported.

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// How the scripted stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The last chunk of the HTTP body, as a finished stream has.
    Complete,
    /// The connection is closed in the middle of the body.
    CutShort,
    /// Nothing more is sent, and the connection stays open until the service closes it.
    Stall,
}

pub struct StreamingUpstream {
    pub uri: String,
    /// The JSON body of the request the service sent.
    pub request: oneshot::Receiver<Value>,
    /// Fires when the service closed the connection.
    pub closed: oneshot::Receiver<()>,
}

/// Serves one streamed reply: `status`, then each piece as its own chunk, then `ending`.
pub async fn serve(status: u16, pieces: Vec<Vec<u8>>, ending: Ending) -> StreamingUpstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}", listener.local_addr().unwrap());
    let (request_tx, request) = oneshot::channel();
    let (closed_tx, closed) = oneshot::channel();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let body = read_request(&mut socket).await;
        let _ = request_tx.send(body);
        let head = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        socket.write_all(head.as_bytes()).await.unwrap();
        for piece in pieces {
            if write_chunk(&mut socket, &piece).await.is_err() {
                let _ = closed_tx.send(());
                return;
            }
        }
        match ending {
            Ending::Complete => {
                let _ = socket.write_all(b"0\r\n\r\n").await;
                let _ = socket.flush().await;
                wait_for_close(&mut socket).await;
            }
            Ending::CutShort => {
                let _ = socket.write_all(b"5\r\nda").await;
                let _ = socket.flush().await;
                drop(socket);
            }
            Ending::Stall => wait_for_close(&mut socket).await,
        }
        let _ = closed_tx.send(());
    });
    StreamingUpstream {
        uri,
        request,
        closed,
    }
}

async fn write_chunk(
    socket: &mut (impl tokio::io::AsyncWrite + Unpin),
    piece: &[u8],
) -> std::io::Result<()> {
    socket
        .write_all(format!("{:x}\r\n", piece.len()).as_bytes())
        .await?;
    socket.write_all(piece).await?;
    socket.write_all(b"\r\n").await?;
    socket.flush().await
}

/// Reads until the peer closes the connection (or it fails).
async fn wait_for_close(socket: &mut TcpStream) {
    let mut buf = [0u8; 64];
    while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {}
}

/// The request's JSON body (headers up to the blank line, then Content-Length bytes).
async fn read_request(socket: &mut TcpStream) -> Value {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let (head_end, length) = loop {
        let n = socket.read(&mut buf).await.unwrap();
        assert!(n > 0, "the service closed before sending its request");
        data.extend_from_slice(&buf[..n]);
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (end + 4, length);
        }
    };
    while data.len() < head_end + length {
        let n = socket.read(&mut buf).await.unwrap();
        assert!(n > 0, "the request body was cut short");
        data.extend_from_slice(&buf[..n]);
    }
    serde_json::from_slice(&data[head_end..head_end + length]).unwrap()
}

/// OpenAI chunks for `text` cut at the given byte offsets (not necessarily character
/// boundaries: the cuts fall inside the SSE frames' bytes), then usage and `[DONE]`.
pub fn openai_stream(deltas: &[&str], finish: &str) -> Vec<u8> {
    let mut out = String::new();
    let chunk = |delta: Value, finish: Value| {
        serde_json::json!({
            "id": "chatcmpl-AzX1", "object": "chat.completion.chunk", "created": 1741569952,
            "model": "gpt-4o-2024-08-06", "system_fingerprint": "fp_f9f4fb6dbf",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
            "usage": null
        })
    };
    out.push_str(&format!(
        "data: {}\n\n",
        chunk(
            serde_json::json!({"role": "assistant", "content": "", "refusal": null}),
            Value::Null
        )
    ));
    for delta in deltas {
        out.push_str(&format!(
            "data: {}\n\n",
            chunk(serde_json::json!({"content": delta}), Value::Null)
        ));
    }
    out.push_str(&format!(
        "data: {}\n\n",
        chunk(serde_json::json!({}), Value::String(finish.into()))
    ));
    out.push_str("data: {\"id\":\"chatcmpl-AzX1\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"choices\":[],\"usage\":{\"prompt_tokens\":512,\"completion_tokens\":31,\"total_tokens\":543}}\n\n");
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

/// Anthropic events for a reply of one text block holding `deltas` in turn, as
/// api.anthropic.com streams it.
pub fn anthropic_stream(deltas: &[&str]) -> Vec<u8> {
    let mut events = vec![
        serde_json::json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "content": [], "model": "claude-sonnet-4-5", "stop_reason": null,
            "stop_sequence": null, "usage": {"input_tokens": 300, "output_tokens": 1}}}),
        serde_json::json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ];
    for delta in deltas {
        events.push(
            serde_json::json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": delta}}),
        );
    }
    events.push(serde_json::json!({"type": "content_block_stop", "index": 0}));
    events.push(serde_json::json!({"type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 20}}));
    events.push(serde_json::json!({"type": "message_stop"}));
    events
        .iter()
        .map(|e| {
            format!(
                "event: {}\ndata: {e}\n\n",
                e["type"].as_str().unwrap_or_default()
            )
        })
        .collect::<String>()
        .into_bytes()
}

/// Cuts bytes into pieces at the given offsets.
pub fn cut_at(bytes: &[u8], offsets: &[usize]) -> Vec<Vec<u8>> {
    let mut pieces = Vec::new();
    let mut last = 0;
    for &at in offsets {
        if at > last && at < bytes.len() {
            pieces.push(bytes[last..at].to_vec());
            last = at;
        }
    }
    pieces.push(bytes[last..].to_vec());
    pieces
}
