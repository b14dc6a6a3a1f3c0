//! A client that leaves stops its step at once, in every phase and on both endpoints: the
//! upstream request is dropped (its connection closes), no further attempt is made, and the
//! step is no longer in flight. Each case runs its own server process so that the in-flight
//! gauge and the log are its own.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::support::binary::RunningBinary;
use crate::support::requests::request;
use crate::support::upstream::read_request_or_close;

/// What the mock upstream does with each call once its request has arrived.
#[derive(Clone, Copy)]
pub(crate) enum Upstream {
    /// Never answers: the client leaves before the first byte.
    Hold,
    /// Answers 429 with `Retry-After: 25`, so the service waits that long to try again.
    RateLimited,
    /// Starts an OpenAI stream with one delta, then goes quiet (a model thinking).
    StreamThenHold,
}

#[derive(Debug, PartialEq)]
pub(crate) enum Seen {
    Arrived,
    Closed,
}

/// An OpenAI upstream on plain HTTP/1.1 that reports each call's arrival and the closing of
/// its connection by the service.
pub(crate) async fn upstream(mode: Upstream) -> (String, mpsc::UnboundedReceiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            tokio::spawn(serve(socket, mode, tx.clone()));
        }
    });
    (uri, rx)
}

async fn serve(mut socket: TcpStream, mode: Upstream, seen: mpsc::UnboundedSender<Seen>) {
    let whole = read_request_or_close(&mut socket).await;
    let _ = seen.send(Seen::Arrived);
    if !whole {
        // The service noticed the client leave while it was still sending this call: the call
        // arrived and was dropped, which is what every case waits for.
        let _ = seen.send(Seen::Closed);
        return;
    }
    let reply: &[u8] = match mode {
        Upstream::Hold => b"",
        Upstream::RateLimited => b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 25\r\ncontent-type: application/json\r\ncontent-length: 51\r\nconnection: close\r\n\r\n{\"error\":{\"message\":\"slow down\",\"type\":\"requests\"}}",
        Upstream::StreamThenHold => b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
    };
    socket.write_all(reply).await.unwrap();
    if let Upstream::StreamThenHold = mode {
        let event = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Thought: I am thinking\"},\"finish_reason\":null}]}\n\n";
        let chunk = format!("{:x}\r\n{event}\r\n", event.len());
        socket.write_all(chunk.as_bytes()).await.unwrap();
    }
    // Whatever comes now, the call is over for this test once the service closes it.
    let mut buf = [0u8; 1024];
    while let Ok(n) = socket.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
    let _ = seen.send(Seen::Closed);
}

/// A client on a raw socket, so that the test decides when the connection closes.
async fn post_raw(port: u16, path: &str) -> TcpStream {
    let body = request("gpt-4o", "q").to_string();
    let mut socket = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    socket.write_all(body.as_bytes()).await.unwrap();
    socket
}

/// Waits for a log line; a guard, like `next`, so that a step that never stops fails the test.
async fn logged(server: &mut RunningBinary, text: &str) {
    tokio::time::timeout(Duration::from_secs(20), server.logged(text))
        .await
        .unwrap_or_else(|_| panic!("the server did not log {text:?}"));
}

pub(crate) async fn next(seen: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    // A guard, not a wait: without the fix the call would run to the 60 s LLM timeout.
    tokio::time::timeout(Duration::from_secs(20), seen.recv())
        .await
        .expect("the upstream hears from the service well before the LLM timeout")
        .unwrap()
}

async fn in_flight(port: u16) -> f64 {
    let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("reactstep_steps_in_flight "))
        .unwrap_or_else(|| panic!("no in-flight gauge:\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// Sends a step, lets it reach `phase`, leaves, and checks the step ended with one call only.
async fn leave_during(mode: Upstream, path: &str, env: &[(&str, &str)]) {
    let (uri, mut seen) = upstream(mode).await;
    let env: Vec<(&str, &str)> = [("REACTSTEP_LLM_TIMEOUT_SECS", "60")]
        .into_iter()
        .chain(env.iter().copied())
        .collect();
    let mut server = RunningBinary::start_with(&uri, "info", &env).await;
    let mut client = post_raw(server.port, path).await;
    assert_eq!(next(&mut seen).await, Seen::Arrived);
    if let Upstream::RateLimited = mode {
        // The first attempt failed; the service is now waiting to try again.
        assert_eq!(next(&mut seen).await, Seen::Closed);
        logged(&mut server, "retrying").await;
    }
    if let Upstream::StreamThenHold = mode {
        // The thought has reached the client: the stream is under way.
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&got).contains("event: thought") {
            let n = client.read(&mut buf).await.unwrap();
            assert!(
                n > 0,
                "the stream ended early: {}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
        }
    }
    assert_eq!(in_flight(server.port).await, 1.0);
    drop(client);
    logged(&mut server, "the client disconnected").await;
    if !matches!(mode, Upstream::RateLimited) {
        assert_eq!(
            next(&mut seen).await,
            Seen::Closed,
            "the upstream call was dropped"
        );
    }
    ended(server, seen).await;
}

/// The step is no longer in flight, no further attempt was made, and nothing panicked.
async fn ended(server: RunningBinary, mut seen: mpsc::UnboundedReceiver<Seen>) {
    assert_eq!(in_flight(server.port).await, 0.0, "the step ended");
    let log = server.stop().await;
    assert!(seen.try_recv().is_err(), "no further attempt was made");
    assert!(!log.contains("\"panic"), "{log}");
}

#[tokio::test]
async fn leaving_before_the_first_byte_stops_the_step() {
    leave_during(Upstream::Hold, "/api/agent/react_step", &[]).await;
}

#[tokio::test]
async fn leaving_a_stream_before_the_first_byte_stops_the_step() {
    leave_during(Upstream::Hold, "/api/agent/react_step/stream", &[]).await;
}

/// The upstream's 25 s wait is honoured (not cut to the test default's 5 ms cap), so the
/// client can leave during it.
const SLOW_RETRIES: [(&str, &str); 1] = [("REACTSTEP_RETRY_CAP_MS", "30000")];

#[tokio::test]
async fn leaving_between_retries_stops_the_step() {
    leave_during(
        Upstream::RateLimited,
        "/api/agent/react_step",
        &SLOW_RETRIES,
    )
    .await;
}

#[tokio::test]
async fn leaving_a_stream_between_retries_stops_the_step() {
    leave_during(
        Upstream::RateLimited,
        "/api/agent/react_step/stream",
        &SLOW_RETRIES,
    )
    .await;
}

#[tokio::test]
async fn leaving_while_the_model_is_quiet_mid_stream_stops_the_step() {
    leave_during(
        Upstream::StreamThenHold,
        "/api/agent/react_step/stream",
        &[],
    )
    .await;
}

/// The watch starts `WATCH_AFTER` (50 ms) into a step: a client that leaves at once, before
/// the upstream call has even arrived, is noticed when it starts, and the call is dropped.
#[tokio::test]
async fn leaving_before_the_watch_starts_stops_the_step() {
    for path in ["/api/agent/react_step", "/api/agent/react_step/stream"] {
        let (uri, mut seen) = upstream(Upstream::Hold).await;
        let env = [("REACTSTEP_LLM_TIMEOUT_SECS", "60")];
        let mut server = RunningBinary::start_with(&uri, "info", &env).await;
        drop(post_raw(server.port, path).await);
        assert_eq!(next(&mut seen).await, Seen::Arrived);
        logged(&mut server, "the client disconnected").await;
        assert_eq!(
            next(&mut seen).await,
            Seen::Closed,
            "{path}: the call was dropped"
        );
        ended(server, seen).await;
    }
}
