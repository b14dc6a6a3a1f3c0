//! Graceful shutdown: on SIGTERM or SIGINT the server stops accepting, lets the step in flight
//! finish, and exits cleanly.

use serde_json::Value;

use crate::support::binary::RunningBinary;
use crate::support::requests::request;
use crate::support::upstream::held_upstream;

#[tokio::test]
async fn sigterm_lets_the_step_in_flight_finish_then_exits() {
    stopped_gracefully_by("TERM").await;
}

/// SIGINT (Ctrl-C, `docker stop` with another signal) stops as gracefully: actix's own handling
/// dropped the step in flight at once.
#[tokio::test]
async fn sigint_lets_the_step_in_flight_finish_then_exits() {
    stopped_gracefully_by("INT").await;
}

async fn stopped_gracefully_by(signal: &str) {
    let (uri, arrived, go) =
        held_upstream("Thought: t\nFinal Answer: finished during shutdown").await;
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
    server.signal(signal).await;
    // Only once the server is shutting down does the upstream answer the step in flight.
    server.logged("graceful shutdown").await;
    go.send(()).unwrap();

    let (status, body) = in_flight.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["direct_response"], "finished during shutdown");
    let (exit, log) = server.exited().await;
    assert!(exit.success(), "{exit:?}\n{log}");
}

/// Steps still running when the grace period ends (the model never finishes): each gets an
/// answer before its connection goes, `shutting_down`, retryable, so the client tries again
/// elsewhere. Before, the plain step got no status and the stream no terminal event.
#[tokio::test]
async fn steps_the_grace_period_cannot_hold_are_answered_shutting_down() {
    use crate::disconnect::{next, upstream, Seen, Upstream};
    let (uri, mut seen) = upstream(Upstream::StreamThenHold).await;
    let grace = [("REACTSTEP_SHUTDOWN_GRACE_SECS", "2")];
    let server = RunningBinary::start_with(&uri, "info", &grace).await;
    let base = format!("http://127.0.0.1:{}/api/agent", server.port);
    let post = |path: &str| {
        reqwest::Client::new()
            .post(format!("{base}/{path}"))
            .json(&request("gpt-4o", "q"))
            .send()
    };
    let plain = tokio::spawn(post("react_step"));
    let streamed = tokio::spawn(post("react_step/stream"));
    assert_eq!(next(&mut seen).await, Seen::Arrived);
    assert_eq!(next(&mut seen).await, Seen::Arrived);
    server.terminate().await;

    let plain = plain.await.unwrap().unwrap();
    assert_eq!(plain.status(), 503);
    assert_eq!(plain.headers()["retry-after"], "1");
    let body: Value = plain.json().await.unwrap();
    assert_eq!(body["error"]["type"], "shutting_down", "{body}");
    assert_eq!(body["error"]["retryable"], true, "{body}");
    crate::support::spec::assert_conforms("POST", "/api/agent/react_step", 503, &body);

    let streamed = streamed.await.unwrap().unwrap();
    assert_eq!(streamed.status(), 200);
    let events = streamed.text().await.unwrap();
    assert!(events.contains("event: thought"), "{events}");
    let terminal = events.trim_end().rsplit("\n\n").next().unwrap();
    assert!(terminal.starts_with("event: error\ndata: "), "{events}");
    let error: Value = serde_json::from_str(&terminal["event: error\ndata: ".len()..]).unwrap();
    assert_eq!(error["error"]["type"], "shutting_down", "{error}");
    let (exit, log) = server.exited().await;
    assert!(exit.success(), "{exit:?}\n{log}");
}

/// A request still sending its body when the grace period ends is answered `shutting_down` too,
/// before its connection goes (it got no answer at all when the grace period was shorter than
/// `REACTSTEP_CLIENT_TIMEOUT_SECS`).
#[tokio::test]
async fn a_body_still_coming_when_the_grace_period_ends_is_answered_shutting_down() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let settings = [
        ("REACTSTEP_SHUTDOWN_GRACE_SECS", "2"),
        ("REACTSTEP_CLIENT_TIMEOUT_SECS", "60"),
    ];
    let server = RunningBinary::start_with("http://127.0.0.1:9", "info", &settings).await;
    let mut socket = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();
    let head =
        "POST /api/agent/react_step HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                content-length: 100\r\nexpect: 100-continue\r\n\r\n";
    socket.write_all(head.as_bytes()).await.unwrap();
    // The head is read once the server says to go on.
    let mut read = Vec::new();
    let mut buf = [0u8; 4096];
    while !read.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = socket.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before 100 Continue");
        read.extend_from_slice(&buf[..n]);
    }
    assert!(read.starts_with(b"HTTP/1.1 100"), "{read:?}");
    socket.write_all(b"{").await.unwrap();
    server.terminate().await;
    let mut answer = Vec::new();
    socket.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["error"]["type"], "shutting_down", "{body}");
    assert_eq!(body["error"]["retryable"], true, "{body}");
    let (exit, log) = server.exited().await;
    assert!(exit.success(), "{exit:?}\n{log}");
}
