//! The HTTP layer under attack, on raw sockets: bodies and heads that trickle in, hundreds of
//! them at once, requests that are not valid HTTP. Each answer must be the documented status with
//! the documented JSON body, the connection must close, and the server must go on serving.
//! Timeouts here are guards (a failure would hang), never assertions about how long things take.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::app::{spawn_app_with, TestApp};
use crate::support::requests::request;
use crate::support::spec::assert_conforms;

const STEP: &str = "/api/agent/react_step";
const GUARD: Duration = Duration::from_secs(20);

/// A response as it came off the wire.
struct Raw {
    status: u16,
    head: String,
    body: Value,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then_some(v.trim())
        })
    }

    /// A JSON error of this status and type, conforming to the spec for `POST path`.
    fn assert_error(&self, path: &str, status: u16, kind: &str) {
        assert_eq!(self.status, status, "{}\n{}", self.head, self.body);
        assert_eq!(self.header("content-type"), Some("application/json"));
        assert_eq!(self.body["error"]["type"], kind, "{}", self.body);
        assert_conforms("POST", path, status, &self.body);
    }
}

/// Parses one complete response from the front of `data`, if it is all there.
fn parse(data: &[u8]) -> Option<(Raw, usize)> {
    let end = data.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&data[..end]).to_string();
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().to_string())
        })
        .map_or(0, |v| v.parse().unwrap());
    if data.len() < end + length {
        return None;
    }
    let body = serde_json::from_slice(&data[end..end + length]).unwrap_or(Value::Null);
    Some((Raw { status, head, body }, end + length))
}

/// Reads responses until `count` are complete.
async fn read_responses(socket: &mut TcpStream, count: usize) -> Vec<Raw> {
    let mut data = Vec::new();
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    tokio::time::timeout(GUARD, async {
        while out.len() < count {
            while let Some((raw, used)) = parse(&data) {
                data.drain(..used);
                out.push(raw);
            }
            if out.len() == count {
                break;
            }
            let n = socket.read(&mut buf).await.expect("the server answers");
            assert!(
                n > 0,
                "the connection closed before the answer: {:?}",
                String::from_utf8_lossy(&data)
            );
            data.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("the server answers");
    out
}

/// The server closes the connection: the next read sees its end (or a reset, when bytes the
/// client sent were left unread).
async fn assert_closed(socket: &mut TcpStream) {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(GUARD, async {
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("the server closes the connection");
}

fn port(app: &TestApp) -> u16 {
    app.address.rsplit(':').next().unwrap().parse().unwrap()
}

async fn connect(app: &TestApp) -> TcpStream {
    TcpStream::connect(("127.0.0.1", port(app))).await.unwrap()
}

async fn slow_server() -> TestApp {
    spawn_app_with(|c| c.client_timeout_secs = 1).await
}

/// Sends `head`, then `piece` again and again, paced like an attacker's trickle, until the
/// server answers; returns the answer.
async fn trickle(socket: &mut TcpStream, head: &[u8], piece: &[u8]) -> Raw {
    socket.write_all(head).await.unwrap();
    let (mut reader, mut writer) = socket.split();
    let mut pace = tokio::time::interval(Duration::from_millis(50));
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    let mut writing = true;
    tokio::time::timeout(GUARD, async {
        loop {
            if let Some((raw, _)) = parse(&data) {
                return raw;
            }
            tokio::select! {
                read = reader.read(&mut buf) => {
                    let n = read.expect("the server answers");
                    assert!(n > 0, "the connection closed without an answer");
                    data.extend_from_slice(&buf[..n]);
                }
                _ = pace.tick(), if writing => {
                    writing = writer.write_all(piece).await.is_ok();
                }
            }
        }
    })
    .await
    .expect("a trickle is answered, not waited on forever")
}

fn sized_head(length: usize) -> Vec<u8> {
    format!("POST {STEP} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n{{\"a").into_bytes()
}

const CHUNKED_HEAD: &[u8] = b"POST /api/agent/react_step HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";

#[tokio::test]
async fn a_body_sent_two_bytes_at_a_time_gets_a_408_and_the_connection_closes() {
    let app = slow_server().await;
    let mut socket = connect(&app).await;
    let answer = trickle(&mut socket, &sized_head(5000), b"aa").await;
    answer.assert_error(STEP, 408, "request_timeout");
    assert_eq!(answer.body["error"]["retryable"], true);
    assert_eq!(answer.header("connection"), Some("close"));
    assert_closed(&mut socket).await;
    assert_eq!(app.send("GET", "/healthz", None).await.status, 200);
}

#[tokio::test]
async fn a_chunked_trickle_gets_a_408_and_the_connection_closes() {
    let app = slow_server().await;
    let mut socket = connect(&app).await;
    let answer = trickle(&mut socket, CHUNKED_HEAD, b"1\r\na\r\n").await;
    answer.assert_error(STEP, 408, "request_timeout");
    assert_closed(&mut socket).await;
}

#[tokio::test]
async fn two_hundred_slow_bodies_at_once_are_all_closed_while_healthz_answers() {
    let app = slow_server().await;
    let mut slow = tokio::task::JoinSet::new();
    for i in 0..200 {
        let mut socket = connect(&app).await;
        slow.spawn(async move {
            let answer = if i % 2 == 0 {
                trickle(&mut socket, &sized_head(5000), b"aa").await
            } else {
                trickle(&mut socket, CHUNKED_HEAD, b"1\r\na\r\n").await
            };
            answer.assert_error(STEP, 408, "request_timeout");
            assert_closed(&mut socket).await;
        });
    }
    let health = app.send("GET", "/healthz", None).await;
    assert_eq!(health.status, 200);
    while let Some(done) = slow.join_next().await {
        done.unwrap();
    }
    assert_eq!(app.send("GET", "/healthz", None).await.status, 200);
}

#[tokio::test]
async fn an_unread_chunked_body_cannot_hold_the_connection_open() {
    // /healthz answers without reading the body; actix would drain a chunked one to its end.
    let app = slow_server().await;
    let mut socket = connect(&app).await;
    let head = b"GET /healthz HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n";
    let answer = trickle(&mut socket, head, b"1\r\na\r\n").await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("connection"), Some("close"));
    assert_closed(&mut socket).await;
}

#[tokio::test]
async fn a_slow_head_gets_a_408_with_the_json_body() {
    let app = slow_server().await;
    let mut socket = connect(&app).await;
    let head = format!("POST {STEP} HTTP/1.1\r\nhost: x\r\n");
    let answer = trickle(&mut socket, head.as_bytes(), b"x-slow: a\r\n").await;
    answer.assert_error(STEP, 408, "request_timeout");
    assert_eq!(answer.body["error"]["retryable"], true);
    assert!(answer.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("head"));
    assert_eq!(
        answer.header("x-request-id"),
        answer.body["request_id"].as_str()
    );
    assert_closed(&mut socket).await;
}

/// Sends `request` whole, expects one JSON error answer and a closed connection, then checks
/// that the server still serves.
async fn refused(app: &TestApp, request: &[u8], status: u16, kind: &str) -> Raw {
    let mut socket = connect(app).await;
    socket.write_all(request).await.unwrap();
    let answer = read_responses(&mut socket, 1).await.remove(0);
    answer.assert_error(STEP, status, kind);
    // The timing headers of every response, the HTTP layer's own answers included.
    let timing = answer.header("server-timing").unwrap_or_default();
    assert!(
        timing.starts_with("decode;dur=") && timing.contains(", total;dur="),
        "{timing:?}"
    );
    let overhead = answer.header("x-reactstep-overhead-ms").unwrap_or_default();
    assert!(overhead.parse::<f64>().is_ok(), "{overhead:?}");
    assert_closed(&mut socket).await;
    assert_eq!(app.send("GET", "/healthz", None).await.status, 200);
    answer
}

#[tokio::test]
async fn requests_that_are_not_valid_http_get_the_documented_400_body() {
    let app = slow_server().await;
    let cases: [&[u8]; 4] = [
        b"POST /api/agent/react_step HTTP/1.1\r\nhost: x\r\nx-evil: a\x01b\r\ncontent-length: 2\r\n\r\n{}",
        b"POST /api/agent/react_step HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}",
        b"POST /api/agent/react_step HTTP/1.1\r\nhost: x\r\ncontent-length: abc\r\n\r\n{}",
        b"POST /api/agent/react_step HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n{}",
    ];
    let counted = || async {
        let text = app.send("GET", "/metrics", None).await.text;
        let prefix = "reactstep_requests_total{endpoint=\"other\",status=\"400\"} ";
        let line = text.lines().find_map(|l| l.strip_prefix(prefix));
        line.map_or(0.0, |v| v.trim().parse::<f64>().unwrap())
    };
    let before = counted().await;
    for case in cases {
        let answer = refused(&app, case, 400, "invalid_request").await;
        assert_eq!(answer.header("connection"), Some("close"));
        assert_eq!(answer.body["error"]["retryable"], false);
        assert!(
            answer.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not valid HTTP"),
            "{}",
            answer.body
        );
    }
    // Counted with every other answer (they were not).
    assert!(counted().await >= before + 4.0);
}

#[tokio::test]
async fn a_bad_chunk_size_gets_the_documented_400_body() {
    let app = slow_server().await;
    let request = [CHUNKED_HEAD, b"zz\r\n{}\r\n0\r\n\r\n"].concat();
    let answer = refused(&app, &request, 400, "invalid_request").await;
    assert!(
        answer.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("chunk"),
        "{}",
        answer.body
    );
}

#[tokio::test]
async fn heads_over_the_limit_get_a_431_body_and_a_40_kb_header_is_served() {
    let app = slow_server().await;
    let too_many: String = (0..100).map(|i| format!("x-h{i}: 1\r\n")).collect();
    let request = format!("POST {STEP} HTTP/1.1\r\nhost: x\r\n{too_many}\r\n");
    let answer = refused(&app, request.as_bytes(), 431, "headers_too_large").await;
    assert_eq!(answer.header("connection"), Some("close"));
    let request = format!(
        "POST {STEP} HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
        "a".repeat(200 * 1024)
    );
    refused(&app, request.as_bytes(), 431, "headers_too_large").await;
    // Under actix's 128 KiB head buffer a large header is an ordinary request.
    let mut socket = connect(&app).await;
    let request = format!(
        "GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
        "a".repeat(40 * 1024)
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    assert_eq!(read_responses(&mut socket, 1).await[0].status, 200);
}

fn step_request() -> String {
    let mut body = request("gpt-4o", "q");
    body["mock_response"] = "Thought: t\nFinal Answer: done".into();
    let body = body.to_string();
    format!(
        "POST {STEP} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test]
async fn a_request_written_in_many_small_pieces_succeeds() {
    let app = slow_server().await;
    let mut socket = connect(&app).await;
    for piece in step_request().as_bytes().chunks(7) {
        socket.write_all(piece).await.unwrap();
        socket.flush().await.unwrap();
    }
    let answer = read_responses(&mut socket, 1).await.remove(0);
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_conforms("POST", STEP, 200, &answer.body);
}

#[tokio::test]
async fn two_pipelined_requests_on_one_connection_are_both_answered() {
    let app = slow_server().await;
    let mut socket = connect(&app).await;
    let both = step_request().repeat(2);
    socket.write_all(both.as_bytes()).await.unwrap();
    let answers = read_responses(&mut socket, 2).await;
    for answer in &answers {
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_ne!(answer.header("connection"), Some("close"));
    }
    // The connection stays open for a third.
    socket.write_all(step_request().as_bytes()).await.unwrap();
    assert_eq!(read_responses(&mut socket, 1).await[0].status, 200);
}

#[tokio::test]
async fn a_bad_request_pipelined_after_a_good_one_answers_both() {
    let app = slow_server().await;
    let mut socket = connect(&app).await;
    let request = format!(
        "{}POST {STEP} HTTP/1.1\r\nhost: x\r\nx-evil: a\x01b\r\n\r\n",
        step_request()
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let answers = read_responses(&mut socket, 2).await;
    assert_eq!(answers[0].status, 200, "{}", answers[0].body);
    answers[1].assert_error(STEP, 400, "invalid_request");
    assert_closed(&mut socket).await;
}

/// actix times only a connection's first head; a later one, trickled in on a kept-alive
/// connection, is cut off once the connection has been quiet longer than any request takes
/// (here 1 s head + 1 s body + 2 s step + 5 s). Without that it would hold the connection until
/// the 128 KiB head limit: hours at this pace, far past the guard.
#[tokio::test]
async fn a_later_head_trickled_on_a_kept_alive_connection_is_cut_off() {
    let app = spawn_app_with(|c| {
        c.client_timeout_secs = 1;
        c.step_timeout_secs = 2;
    })
    .await;
    let mut socket = connect(&app).await;
    socket
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let first = read_responses(&mut socket, 1).await;
    assert_eq!(first[0].status, 200);
    socket
        .write_all(b"GET /healthz HTTP/1.1\r\nx-slow: ")
        .await
        .unwrap();
    let (mut reader, mut writer) = socket.split();
    let mut pace = tokio::time::interval(Duration::from_millis(50));
    let mut buf = [0u8; 1024];
    let closed = tokio::time::timeout(GUARD, async {
        loop {
            tokio::select! {
                read = reader.read(&mut buf) => match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => panic!("an answer to half a head: {:?}", &buf[..n]),
                },
                _ = pace.tick() => {
                    if writer.write_all(b"a").await.is_err() {
                        return;
                    }
                }
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the trickled head held the connection");
    assert_eq!(app.send("GET", "/healthz", None).await.status, 200);
}
