//! The attacker's battery, all at once against one server process (the real binary, one HTTP
//! worker): every request that once crashed, exhausted or stalled the service, or carried the
//! key away, gets its documented answer within the step deadline; meanwhile `/healthz` keeps
//! answering: while each group of attacks is in flight, at least one `/healthz` is answered (a
//! worker held by an attack would leave it unanswered for the attack's whole length). That is
//! an order of events, not a time: a slow machine slows both alike. The process's peak memory
//! stays bounded. The focused tests of
//! each row live beside their code and in `tests/api/` (`hostile_schemas`, `redirects`,
//! `scrubbing`, `disconnect`, `workspace`); this one shows they hold together, under load.
//!
//! Rows are numbered as in the hardening issue's table. Row 11 (an API token list that holds no
//! token) stops start-up, so it is `tests/api/operator.rs`'s, not this running server's.
//!
//! A test binary of its own, so that no other test's server competes for the cores.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wiremock::matchers::{body_partial_json, method};
use wiremock::{Mock, MockServer, ResponseTemplate};

use support::binary::{peak_rss_mib, RunningBinary};
use support::requests::{request, KEY};
use support::schema_bombs::{fan_out, ref_chain, ref_cycle};

/// The server's step deadline in this test, and the guard on every answer.
const STEP_TIMEOUT_SECS: u64 = 30;
const PROJECT: &str = "p";

struct Battery {
    base: String,
    client: reqwest::Client,
    /// Where the redirecting upstream points: it must never be called.
    redirect_target: MockServer,
    held_upstream: String,
    held_calls: tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<bool>>,
    secret: &'static str,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attack_at_once_gets_its_answer_while_the_server_stays_responsive() {
    let upstream = MockServer::start().await;
    let redirect_target = MockServer::start().await;
    mount_upstream(&upstream, &redirect_target).await;
    let (held_upstream, held_calls) = held_upstream().await;
    let workspace = workspace();
    let root = workspace.path().to_str().unwrap().to_string();
    let server = RunningBinary::start_with(
        &upstream.uri(),
        "info",
        &[
            (
                "REACTSTEP_STEP_TIMEOUT_SECS",
                &STEP_TIMEOUT_SECS.to_string(),
            ),
            ("REACTSTEP_WORKSPACE_ROOT", &root),
            // A trickled body is cut off after 2 s, not the default 30.
            ("REACTSTEP_CLIENT_TIMEOUT_SECS", "2"),
            (
                "REACTSTEP_ALLOWED_BASE_URLS",
                &format!("{held_upstream}/v1"),
            ),
        ],
    )
    .await;
    let battery = Battery {
        base: format!("http://127.0.0.1:{}", server.port),
        client: reqwest::Client::new(),
        redirect_target,
        held_upstream,
        held_calls: tokio::sync::Mutex::new(held_calls),
        secret: "TOP-SECRET-OUTSIDE-THE-PROJECT",
    };
    let probe = HealthProbe::start(&battery.base);
    let attacks = async {
        tokio::join!(
            window("schema", battery.schema_attacks()),
            window("pattern", battery.pattern_attacks()),
            window("pathological output", battery.pathological_output()),
            window("upstream", battery.upstream_attacks()),
            window("client leaves", battery.client_leaves()),
            window("workspace", battery.workspace_escapes()),
            window("slow and malformed", battery.slow_and_malformed()),
            window("red team", battery.red_team_rows()),
        )
    };
    let windows: [Window; 8] =
        tokio::time::timeout(Duration::from_secs(STEP_TIMEOUT_SECS + 30), attacks)
            .await
            .expect("every attack is answered within the step deadline")
            .into();
    let answered = probe.stop().await;
    let peak = peak_rss_mib(server.child.id().unwrap());
    let log = server.stop().await;

    // Liveness, not speed (benchmarks measure speed): each group of attacks, from its first
    // request sent to its last answer read, saw /healthz answered, by the one HTTP worker.
    for (name, sent, done) in windows {
        let meanwhile = answered.iter().filter(|a| (sent..done).contains(a)).count();
        eprintln!("{name}: {meanwhile} /healthz answered meanwhile");
        assert!(
            meanwhile > 0,
            "no /healthz was answered while the {name} attacks ran: a worker was held"
        );
    }
    assert!(peak < 384, "the server's peak RSS reached {peak} MiB");
    assert_no_key_piece("the server's log", &log);
    assert!(!log.contains("panicked"), "{log}");
    assert!(battery
        .redirect_target
        .received_requests()
        .await
        .unwrap()
        .is_empty());
}

impl Battery {
    async fn post(&self, body: &Value) -> (u16, Value, String) {
        let reply = self
            .client
            .post(format!("{}/api/agent/react_step", self.base))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = reply.status().as_u16();
        let text = reply.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        support::spec::assert_conforms("post", "/api/agent/react_step", status, &body);
        (status, body, text)
    }

    async fn expect_refused(&self, what: &str, body: Value, bound: &str) {
        let (status, reply, text) = self.post(&body).await;
        assert_eq!(status, 400, "{what}: {text}");
        assert_eq!(reply["error"]["type"], "invalid_request", "{what}");
        assert!(text.contains(bound), "{what}: {text}");
    }

    /// Rows 1, 2 and 8: a `$ref` chain of 500, `$ref` cycles of 2 and 100, an `anyOf` fan-out
    /// of 2^20, and 128 tools of 500 patterns each.
    async fn schema_attacks(&self) {
        let calling = |parameters: Value| {
            let mut body = request("gpt-4o", "go");
            body["tools"] = json!([{"name": "t", "description": "", "parameters": parameters}]);
            body["mock_response"] = json!("Thought: go\nAction: t(v=\"x\")");
            body
        };
        self.expect_refused("ref chain", calling(ref_chain(500)), "'t'")
            .await;
        self.expect_refused("2-cycle", calling(ref_cycle(2)), "'t'")
            .await;
        self.expect_refused("100-cycle", calling(ref_cycle(100)), "'t'")
            .await;
        self.expect_refused("fan-out", calling(fan_out(2, 20)), "'t'")
            .await;
        let mut body = request("gpt-4o", "go");
        body["tools"] = Value::Array((0..128).map(|i| many_patterns(i, 500)).collect());
        body["mock_response"] = json!("Thought: go\nFinal Answer: done");
        self.expect_refused("128 × 500 patterns", body, "pattern")
            .await;
    }

    /// Row 9: patterns that backtrack, with a 100 KB argument.
    async fn pattern_attacks(&self) {
        for pattern in ["(?=(a+)+b)", "^(a+)\\1$"] {
            let mut body = request("gpt-4o", "go");
            body["tools"] = json!([{"name": "p", "description": "", "parameters": {
                "type": "object", "properties": {"v": {"type": "string", "pattern": pattern}}}}]);
            body["mock_response"] = json!(format!(
                "Thought: go\nAction: p(v=\"{}\")",
                "a".repeat(100_000)
            ));
            self.expect_refused(pattern, body, "pattern").await;
        }
    }

    /// Row 3: a megabyte of lines that open a `{` and never close it.
    async fn pathological_output(&self) {
        let mut body = request("gpt-4o", "go");
        let line = "{\"path\": \"src/main.rs\", \"query\": [1, 2,\n";
        body["mock_response"] = json!(format!(
            "Thought: go\n{}Action: read_file(path=\"a\")",
            line.repeat(990_000 / line.len())
        ));
        let (status, reply, text) = self.post(&body).await;
        assert!(
            status == 200 || reply["error"]["type"] == "invalid_model_output",
            "{status}: {}",
            &text[..text.len().min(500)]
        );
    }

    /// Rows 4 and 5: a redirecting upstream, and one that echoes the key split by dots after
    /// 600 characters.
    async fn upstream_attacks(&self) {
        let (status, reply, text) = self.post(&request("gpt-4o-redirect", "go")).await;
        assert_eq!(status, 502, "{text}");
        assert_eq!(reply["error"]["type"], "llm_bad_response");
        let (status, _, text) = self.post(&request("gpt-4o-echo", "go")).await;
        assert_eq!(status, 400, "{text}");
        assert_no_key_piece("the echoing upstream's answer", &text);
        let mut body = request("gpt-4o", "go");
        body["llm_config"]["provider"] = json!(KEY);
        let (status, _, text) = self.post(&body).await;
        assert_eq!(status, 400, "{text}");
        assert_no_key_piece("the answer to a key in provider", &text);
    }

    /// Row 6: the client leaves before the upstream's first byte; the upstream call must end.
    async fn client_leaves(&self) {
        let mut body = request("gpt-4o", "go");
        body["llm_config"]["base_url"] = json!(format!("{}/v1", self.held_upstream));
        let body = body.to_string();
        let mut socket = TcpStream::connect(self.base.trim_start_matches("http://"))
            .await
            .unwrap();
        let head = format!(
            "POST /api/agent/react_step HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        socket.write_all(head.as_bytes()).await.unwrap();
        socket.write_all(body.as_bytes()).await.unwrap();
        let mut calls = self.held_calls.lock().await;
        assert_eq!(
            calls.recv().await,
            Some(true),
            "the call reached the upstream"
        );
        drop(socket);
        assert_eq!(
            calls.recv().await,
            Some(false),
            "the upstream call was dropped"
        );
    }

    /// Row 7: a FIFO and a link out of the project are refused, without blocking.
    async fn workspace_escapes(&self) {
        for _ in 0..3 {
            let mut body = request("gpt-4o", "go");
            body["project_id"] = json!(PROJECT);
            body["explicit_context_paths"] = json!(["pipe", "escape", "ok.rs"]);
            body["mock_response"] = json!("Thought: go\nFinal Answer: done");
            let (status, reply, text) = self.post(&body).await;
            assert_eq!(status, 200, "{text}");
            assert!(!text.contains(self.secret), "{text}");
            let fates: Vec<(&str, &str)> = reply["context_report"]["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| (i["id"].as_str().unwrap(), i["fate"].as_str().unwrap()))
                .collect();
            assert_eq!(
                fates,
                [
                    ("ok.rs", "included"),
                    ("pipe", "unresolved"),
                    ("escape", "unresolved")
                ]
            );
        }
    }
}

impl Battery {
    /// Rows 10 and 12: a body trickled 2 bytes at a time, and a control character in a header.
    async fn slow_and_malformed(&self) {
        let address = self.base.trim_start_matches("http://");
        let head = b"POST /api/agent/react_step HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 5000\r\n\r\n";
        let answer = trickle(address, head).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("\"request_timeout\""), "{answer}");
        let mut socket = TcpStream::connect(address).await.unwrap();
        socket
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-bad: a\x01b\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        socket.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(answer.contains("\"invalid_request\""), "{answer}");
    }
}

impl Battery {
    /// Found after the table, by a red-team pass: history turns whose tool-call parameters nest
    /// 120 deep (2,000 of them: 240,000 JSON values in 1.9 MB, once hundreds of MiB), a call with
    /// 400,000 positional arguments, and 100,000 context items (once quadratic work).
    async fn red_team_rows(&self) {
        let mut nested = json!("x");
        for _ in 0..120 {
            nested = json!({ "a": nested });
        }
        let turn = json!({"role": "assistant", "content": "t",
            "toolCall": {"name": "read_file", "parameters": {"p": nested}}});
        let mut body = request("gpt-4o", "go");
        body["conversation_history"] = Value::Array(vec![turn; 2000]);
        body["mock_response"] = json!("Thought: go\nFinal Answer: done");
        self.expect_refused("nested history", body, "conversation_history")
            .await;

        let mut body = request("gpt-4o", "go");
        body["mock_response"] = json!(format!("Action: f({})", vec!["1"; 400_000].join(",")));
        let (status, reply, text) = self.post(&body).await;
        assert_eq!(status, 502, "{}", &text[..text.len().min(300)]);
        assert_eq!(reply["error"]["type"], "invalid_model_output");

        let mut body = request("gpt-4o", "go");
        body["explicit_context"] = Value::Array(
            (0..100_000)
                .map(|i| json!({"path": format!("f{i}.rs"), "content": "x"}))
                .collect(),
        );
        self.expect_refused("100,000 context items", body, "explicit_context")
            .await;
    }
}

/// Sends `head`, then the body 2 bytes every 50 ms (an attacker's pace) until the server
/// answers and closes; the answer.
async fn trickle(address: &str, head: &[u8]) -> String {
    let mut socket = TcpStream::connect(address).await.unwrap();
    socket.write_all(head).await.unwrap();
    let (mut reader, mut writer) = socket.split();
    let mut pace = tokio::time::interval(Duration::from_millis(50));
    let (mut answer, mut buf, mut writing) = (Vec::new(), [0u8; 4096], true);
    loop {
        tokio::select! {
            read = reader.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            },
            _ = pace.tick(), if writing => writing = writer.write_all(b"{ ").await.is_ok(),
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// The upstream: a redirect for one model, the key echoed in pieces for another.
async fn mount_upstream(upstream: &MockServer, target: &MockServer) {
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"model": "gpt-4o-redirect"})))
        .respond_with(
            ResponseTemplate::new(307)
                .insert_header("location", format!("{}/v1/chat/completions", target.uri())),
        )
        .mount(upstream)
        .await;
    let dotted: String = KEY.chars().flat_map(|c| [c, '.']).collect();
    let message = format!("{} your key {dotted} is wrong", "x".repeat(600));
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"model": "gpt-4o-echo"})))
        .respond_with(ResponseTemplate::new(400).set_body_json(
            json!({"error": {"message": message, "type": "invalid_request_error", "code": KEY}}),
        ))
        .mount(upstream)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"unexpected": true})))
        .mount(target)
        .await;
}

/// An upstream that takes calls and never answers; it says when a call arrives (`true`) and
/// when the service closes it (`false`).
async fn held_upstream() -> (String, tokio::sync::mpsc::UnboundedReceiver<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}", listener.local_addr().unwrap());
    let (seen, calls) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 8192];
                let mut arrived = false;
                while let Ok(n @ 1..) = socket.read(&mut buf).await {
                    // The body ends the request: it is the last thing the service writes.
                    if !arrived && buf[..n].ends_with(b"}") {
                        arrived = true;
                        let _ = seen.send(true);
                    }
                }
                let _ = seen.send(false);
            });
        }
    });
    (uri, calls)
}

/// A workspace root whose project holds a regular file, a FIFO and a link to a secret outside.
fn workspace() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let project = root.path().join(PROJECT);
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("ok.rs"), "fn ok() {}\n").unwrap();
    let outside = root.path().join("secret.txt");
    std::fs::write(&outside, "TOP-SECRET-OUTSIDE-THE-PROJECT").unwrap();
    std::os::unix::fs::symlink(&outside, project.join("escape")).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(project.join("pipe"))
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo is needed for this test");
    root
}

/// Events in the order they happened, across the probe's thread and the attacks: each takes
/// the next number.
static EVENTS: AtomicU64 = AtomicU64::new(0);

fn event() -> u64 {
    EVENTS.fetch_add(1, Ordering::SeqCst)
}

/// A group of attacks by name, with the event before its first request and after its last
/// answer.
type Window = (&'static str, u64, u64);

async fn window(name: &'static str, attacks: impl std::future::Future<Output = ()>) -> Window {
    let sent = event();
    attacks.await;
    (name, sent, event())
}

/// Asks `/healthz` again and again while the attacks run, and notes the event of each answer.
/// It runs on a thread of its own with blocking sockets, so that the test's own work (building
/// megabytes of attack) cannot delay it and pass for the server's.
struct HealthProbe {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<Vec<u64>>,
}

impl HealthProbe {
    fn start(base: &str) -> Self {
        let address = base.trim_start_matches("http://").to_string();
        let (stop, stopped) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let mut answered = Vec::new();
            // Paced, not a wait for anything: one probe every 5 ms until told to stop.
            while stopped.recv_timeout(Duration::from_millis(5)).is_err() {
                let answer = health_check(&address);
                assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
                answered.push(event());
            }
            answered
        });
        Self { stop, thread }
    }

    /// The event of every answer.
    async fn stop(self) -> Vec<u64> {
        let _ = self.stop.send(());
        self.thread.join().unwrap()
    }
}

fn health_check(address: &str) -> String {
    use std::io::{Read, Write};
    let mut socket = std::net::TcpStream::connect(address).unwrap();
    socket
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    socket.read_to_string(&mut answer).unwrap();
    answer
}

/// No 8 consecutive characters of the key, also once everything but letters and digits is
/// removed from both.
fn assert_no_key_piece(what: &str, text: &str) {
    let alnum = |s: &str| -> String { s.chars().filter(char::is_ascii_alphanumeric).collect() };
    let (key, plain) = (alnum(KEY), alnum(text));
    for start in 0..=key.len() - 8 {
        let piece = &key[start..start + 8];
        assert!(!plain.contains(piece), "{what} holds {piece:?}");
    }
}

fn many_patterns(tool: usize, n: usize) -> Value {
    let properties: Map<String, Value> = (0..n)
        .map(|i| {
            (
                format!("p{i}"),
                json!({"type": "string", "pattern": format!("^[a-z]{{{i}}}x+$")}),
            )
        })
        .collect();
    json!({"name": format!("t{tool}"), "description": "", "parameters": {"type": "object", "properties": properties}})
}
