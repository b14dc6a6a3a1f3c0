//! Graceful shutdown: on SIGTERM the server stops accepting, lets the step in flight finish, and
//! exits cleanly.

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::helpers::{request, RunningBinary};
use crate::upstream::openai_reply;

/// An upstream that reports when the request has arrived and answers only when told to.
async fn held_upstream() -> (String, oneshot::Receiver<()>, oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}", listener.local_addr().unwrap());
    let (arrived_tx, arrived) = oneshot::channel();
    let (go, go_rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut data = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = socket.read(&mut buf).await.unwrap();
            data.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&data).to_ascii_lowercase();
            if let Some(end) = text.find("\r\n\r\n") {
                let length: usize = text[..end]
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                if data.len() >= end + 4 + length {
                    break;
                }
            }
        }
        arrived_tx.send(()).unwrap();
        go_rx.await.unwrap();
        let body = openai_reply("Thought: t\nFinal Answer: finished during shutdown").to_string();
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        socket.write_all(reply.as_bytes()).await.unwrap();
    });
    (uri, arrived, go)
}

#[tokio::test]
async fn sigterm_lets_the_step_in_flight_finish_then_exits() {
    let (uri, arrived, go) = held_upstream().await;
    let mut server = RunningBinary::start(&uri, "info").await;
    let url = format!("http://127.0.0.1:{}/api/agent/react_step", server.port);
    let in_flight = tokio::spawn(async move {
        let reply = reqwest::Client::new()
            .post(url)
            .json(&request("gpt-4o", "q"))
            .send()
            .await
            .unwrap();
        (
            reply.status().as_u16(),
            reply.json::<Value>().await.unwrap(),
        )
    });
    arrived.await.unwrap();
    server.terminate().await;
    // Only once the server is shutting down does the upstream answer the step in flight.
    server.logged("graceful shutdown").await;
    go.send(()).unwrap();

    let (status, body) = in_flight.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["direct_response"], "finished during shutdown");
    let (exit, log) = server.exited().await;
    assert!(exit.success(), "{exit:?}\n{log}");
}
