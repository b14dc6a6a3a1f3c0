//! Time to the first thought byte that the service adds over its upstream: a loopback upstream
//! streams an OpenAI reply, noting the instant its first thought chunk is flushed; the client
//! notes the instant the service's first `thought` event has arrived. The difference is what the
//! service adds (request handling, prompt building, SSE decoding, parsing, framing), measured
//! over the real server and real sockets. Run with `cargo bench --bench first_thought`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use reactstep::config::Config;
use reactstep::llm::sse::SseDecoder;
use reactstep::startup::Application;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

const FIRST: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Thought: The handler\"},\"finish_reason\":null}]}\n\n";
const REST: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" is in auth.js.\\nAction: read_file(path=\\\"auth.js\\\")\"},\"finish_reason\":null}]}\n\ndata: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

/// Serves every connection: reads the request, flushes the first thought chunk (reporting when),
/// then the rest.
async fn upstream(listener: TcpListener, flushed: mpsc::UnboundedSender<Instant>) {
    loop {
        let (mut socket, _) = listener.accept().await.unwrap();
        let flushed = flushed.clone();
        tokio::spawn(async move {
            let mut data = Vec::new();
            let mut buf = [0u8; 16384];
            loop {
                let n = socket.read(&mut buf).await.unwrap();
                if n == 0 {
                    return;
                }
                data.extend_from_slice(&buf[..n]);
                if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map(|v| v.trim().parse().unwrap())
                        .unwrap_or(0);
                    if data.len() >= end + 4 + length {
                        break;
                    }
                }
            }
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n";
            let first = format!("{head}{:x}\r\n{FIRST}\r\n", FIRST.len());
            socket.write_all(first.as_bytes()).await.unwrap();
            socket.flush().await.unwrap();
            flushed.send(Instant::now()).unwrap();
            let rest = format!("{:x}\r\n{REST}\r\n0\r\n\r\n", REST.len());
            socket.write_all(rest.as_bytes()).await.unwrap();
            let _ = socket.read(&mut buf).await;
        });
    }
}

fn first_thought(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (address, mut flushed) = rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(upstream(listener, tx));
        let mut config = Config::defaults();
        config.bind = "127.0.0.1:0".parse().unwrap();
        config.openai_base_url = format!("{uri}/v1");
        config.workers = 1;
        let app = Application::build(&config).unwrap();
        let address = format!(
            "http://127.0.0.1:{}/api/agent/react_step/stream",
            app.port()
        );
        tokio::spawn(app.run_until_stopped());
        (address, rx)
    });
    let client = reqwest::Client::new();
    let body = serde_json::json!({
        "user_query": "Where is login handled?",
        "available_tools_prompt_segment": "- read_file(path) - read a file",
        "explicit_context": [{"path": "src/auth.js", "content": "export function login(user) {\n  return session.start(user);\n}\n".repeat(40)}],
        "llm_config": {"modelName": "gpt-4o", "tokenLimit": 8192, "reservedOutputTokens": 512},
        "user_api_keys": {"llmKey": "sk-bench"}
    });

    let mut group = c.benchmark_group("streaming");
    group.bench_function("added to the first thought byte", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut added = Duration::ZERO;
                for _ in 0..iters {
                    let mut response = client.post(&address).json(&body).send().await.unwrap();
                    assert_eq!(response.status(), 200, "{:?}", response.text().await);
                    let mut decoder = SseDecoder::default();
                    let arrived = 'read: loop {
                        let chunk = response.chunk().await.unwrap().expect("a thought event");
                        for event in decoder.push(&chunk).unwrap() {
                            if event.event.as_deref() == Some("thought") {
                                break 'read Instant::now();
                            }
                        }
                    };
                    let sent = flushed.recv().await.unwrap();
                    added += arrived.saturating_duration_since(sent);
                    while response.chunk().await.unwrap().is_some() {}
                }
                added
            })
        })
    });
    group.finish();
}

criterion_group!(benches, first_thought);
criterion_main!(benches);
