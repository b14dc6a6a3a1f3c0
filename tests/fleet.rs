//! reactstep as a fleet, on loopback, with the real parts an operator runs: replicas of the real
//! binary, a real Redis holding the shared rate limits, and real HAProxy in front with health
//! checks on `/readyz` (both from the system's packages, installed when missing).
//!
//! - A session's limit holds across three replicas behind HAProxy, whichever served it, where
//!   per-process limits would let each replica admit the whole limit.
//! - Redis stopped mid-run: fail open answers 200 and counts it, fail closed answers 503; Redis
//!   back: the limits work again without a restart.
//! - A replica killed (SIGKILL) under load: HAProxy takes it out, clients see only retryable
//!   errors or none, and a retry loses no step. A replica stopped (SIGTERM) under load: no errors.
//! - Ready means ready, failing closed: ready only once Redis has answered (a replica started
//!   with Redis down answers 503 until it comes up), no 503 once it says so, and none for a
//!   step admitted before SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use support::binary::RunningBinary;

/// Where the replicas would send LLM calls when a test needs none (steps use `mock_response`).
const NO_UPSTREAM: &str = "http://127.0.0.1:9";

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Polls `condition` until it holds, for at most `patience`: waiting on another process's state,
/// never a fixed sleep in its place.
async fn eventually<F, Fut>(what: &str, patience: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + patience;
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {patience:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A real `redis-server` on a loopback port, without persistence.
struct Redis {
    port: u16,
    child: Child,
}

impl Redis {
    async fn start(port: u16) -> Self {
        support::system_packages::require("redis-server", "redis-server");
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("Ready to accept connections") {
                    return true;
                }
            }
            false
        };
        let ready = tokio::time::timeout(Duration::from_secs(30), ready).await;
        assert!(ready == Ok(true), "redis-server on {port} never got ready");
        // Its later lines are read and dropped, so that a full pipe never blocks it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self { port, child }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Gone at once, as a crashed server is.
    async fn kill(mut self) -> u16 {
        self.child.kill().await.unwrap();
        self.port
    }
}

/// A real HAProxy in front of the replicas: round robin, health checks on `/readyz`, and a
/// failed connection or an empty answer retried on another replica.
struct Haproxy {
    port: u16,
    stats_port: u16,
    _child: Child,
}

#[derive(Debug)]
struct Backend {
    name: String,
    status: String,
    check: String,
    sessions: u64,
    /// Requests sent again, to the same replica or to another one.
    retried: u64,
}

impl Haproxy {
    /// HAProxy as `deploy/haproxy/haproxy.cfg` configures it, in front of three replicas.
    async fn start(replicas: &[u16; 3]) -> Self {
        support::system_packages::require("haproxy", "haproxy");
        let (port, stats_port) = (free_port(), free_port());
        let config = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/haproxy/haproxy.cfg");
        let address = |port: u16| format!("127.0.0.1:{port}");
        let child = Command::new("haproxy")
            .args(["-f", config, "-db"])
            .env("FRONT", address(port))
            .env("STATS", address(stats_port))
            .env("REPLICA1", address(replicas[0]))
            .env("REPLICA2", address(replicas[1]))
            .env("REPLICA3", address(replicas[2]))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("haproxy starts");
        let haproxy = Self {
            port,
            stats_port,
            _child: child,
        };
        haproxy
            .until("every replica passes its health check", |backends| {
                backends.len() == replicas.len()
                    && backends
                        .iter()
                        .all(|b| b.status == "UP" && b.check == "L7OK")
            })
            .await;
        haproxy
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/api/agent/react_step", self.port)
    }

    /// The replicas as HAProxy sees them, from its statistics page (CSV).
    async fn backends(&self) -> Vec<Backend> {
        let url = format!("http://127.0.0.1:{}/;csv", self.stats_port);
        let Ok(reply) = reqwest::get(url).await else {
            return Vec::new();
        };
        let text = reply.text().await.unwrap_or_default();
        let mut lines = text.lines();
        let header: Vec<&str> = lines
            .next()
            .unwrap_or_default()
            .trim_start_matches("# ")
            .split(',')
            .collect();
        let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
        let (px, sv, status, check, stot) = (
            column("pxname"),
            column("svname"),
            column("status"),
            column("check_status"),
            column("stot"),
        );
        let (wretr, wredis) = (column("wretr"), column("wredis"));
        lines
            .map(|l| l.split(',').collect::<Vec<_>>())
            .filter(|f| f[px] == "replicas" && f[sv].starts_with("replica"))
            .map(|f| Backend {
                name: f[sv].to_string(),
                status: f[status].to_string(),
                check: f[check].to_string(),
                sessions: f[stot].parse().unwrap(),
                retried: f[wretr].parse::<u64>().unwrap() + f[wredis].parse::<u64>().unwrap(),
            })
            .collect()
    }

    async fn until(&self, what: &str, condition: impl Fn(&[Backend]) -> bool) {
        eventually(what, Duration::from_secs(30), || async {
            condition(&self.backends().await)
        })
        .await;
    }
}

/// A step the service answers without a model, for `session`.
fn offline_step(session: &str) -> Value {
    let mut body = step(session);
    body["mock_response"] = json!("Thought: done\nFinal Answer: 42");
    body
}

fn step(session: &str) -> Value {
    json!({
        "session_id": session,
        "user_query": "What is the answer?",
        "conversation_history": [],
        "available_tools_prompt_segment": "You have access to: read_file(path)",
        "llm_config": {"modelName": "gpt-4o", "tokenLimit": 8192, "reservedOutputTokens": 500},
        "user_api_keys": {"llmKey": "sk-fleet-test-key-0123456789"},
        "max_iterations_left": 3
    })
}

/// The status and body, or `None` when no HTTP answer came at all.
async fn post(client: &reqwest::Client, url: &str, body: &Value) -> Option<(u16, Value)> {
    let reply = client.post(url).json(body).send().await.ok()?;
    let status = reply.status().as_u16();
    let body = reply.json().await.unwrap_or(Value::Null);
    Some((status, body))
}

async fn replicas(llm: &str, env: &[(&str, &str)]) -> Vec<RunningBinary> {
    let mut started = Vec::new();
    for _ in 0..3 {
        started.push(RunningBinary::start_with(llm, "info", env).await);
    }
    started
}

fn ports(replicas: &[RunningBinary]) -> [u16; 3] {
    [replicas[0].port, replicas[1].port, replicas[2].port]
}

/// Steps admitted (200) out of `n` sent one after another for one session.
async fn admitted(client: &reqwest::Client, url: &str, session: &str, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        match post(client, url, &offline_step(session)).await {
            Some((200, _)) => admitted += 1,
            Some((429, body)) => assert_eq!(body["error"]["type"], "rate_limited"),
            other => panic!("neither admitted nor limited: {other:?}"),
        }
    }
    admitted
}

#[tokio::test]
async fn a_session_limit_holds_across_three_replicas_behind_haproxy() {
    const LIMIT: usize = 10;
    let redis = Redis::start(free_port()).await;
    let url = redis.url();
    let shared = replicas(
        NO_UPSTREAM,
        &[
            ("REACTSTEP_REDIS_URL", &url),
            ("REACTSTEP_RATE_LIMIT_PER_SESSION", "10"),
        ],
    )
    .await;
    let haproxy = Haproxy::start(&ports(&shared)).await;
    let client = reqwest::Client::new();

    let passed = admitted(&client, &haproxy.url(), "fleet-session", 4 * LIMIT).await;
    // The burst, plus what refills (one every 6 s) while the test runs.
    assert!(
        (LIMIT..=2 * LIMIT).contains(&passed),
        "{passed} admitted of a limit of {LIMIT} shared by 3 replicas"
    );
    let backends = haproxy.backends().await;
    assert!(
        backends.iter().all(|b| b.sessions >= LIMIT as u64),
        "round robin gave each replica a share: {backends:?}"
    );
    assert_eq!(
        admitted(&client, &haproxy.url(), "another-session", 1).await,
        1,
        "another session has its own bucket"
    );

    // The same fleet with limits per process: each replica admits the whole limit.
    let alone = replicas(NO_UPSTREAM, &[("REACTSTEP_RATE_LIMIT_PER_SESSION", "10")]).await;
    let unshared = Haproxy::start(&ports(&alone)).await;
    let passed_alone = admitted(&client, &unshared.url(), "fleet-session", 4 * LIMIT).await;
    assert!(
        passed_alone > 2 * LIMIT,
        "without Redis each replica keeps its own bucket: {passed_alone}"
    );
}

#[tokio::test]
async fn a_client_limit_counts_the_address_haproxy_forwards_not_one_the_client_wrote() {
    let redis = Redis::start(free_port()).await;
    let url = redis.url();
    let fleet = replicas(
        NO_UPSTREAM,
        &[
            ("REACTSTEP_REDIS_URL", &url),
            ("REACTSTEP_RATE_LIMIT_PER_CLIENT", "5"),
            // HAProxy connects from 127.0.0.1; the clients below come from 127.0.0.2 and .3.
            ("REACTSTEP_TRUSTED_PROXIES", "127.0.0.1"),
        ],
    )
    .await;
    let haproxy = Haproxy::start(&ports(&fleet)).await;
    let from = |address: [u8; 4]| {
        reqwest::Client::builder()
            .local_address(std::net::IpAddr::from(address))
            .build()
            .unwrap()
    };
    let (first, second) = (from([127, 0, 0, 2]), from([127, 0, 0, 3]));
    let passed = admitted(&first, &haproxy.url(), "client-a", 12).await;
    assert!((5..=6).contains(&passed), "{passed} of 5 for one client");
    // The second client claims to be the first one's proxy chain: HAProxy appends the address
    // it saw, and that is what counts.
    let spoofed = second
        .post(haproxy.url())
        .header("x-forwarded-for", "127.0.0.2")
        .json(&offline_step("client-b"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        spoofed.status(),
        200,
        "the second client has its own bucket"
    );
}

/// The count of checks Redis did not answer, of `kind`, in a replica's metrics.
async fn unanswered(client: &reqwest::Client, replica: &RunningBinary, kind: &str) -> u64 {
    let url = format!("http://127.0.0.1:{}/metrics", replica.port);
    let text = client.get(url).send().await.unwrap().text().await.unwrap();
    let prefix = format!("reactstep_rate_limiter_unanswered_total{{kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map_or(0, |n| n.parse().unwrap())
}

/// Three steps a minute per session, kept in the Redis at `url`.
fn limits<'a>(url: &'a str, fail_open: &'a str) -> [(&'a str, &'a str); 3] {
    [
        ("REACTSTEP_REDIS_URL", url),
        ("REACTSTEP_RATE_LIMIT_PER_SESSION", "3"),
        ("REACTSTEP_REDIS_FAIL_OPEN", fail_open),
    ]
}

fn step_url(replica: &RunningBinary) -> String {
    format!("http://127.0.0.1:{}/api/agent/react_step", replica.port)
}

#[tokio::test]
async fn redis_stopped_then_back_fail_open_fail_closed_and_recovery() {
    let redis = Redis::start(free_port()).await;
    let url = redis.url();
    let mut open = RunningBinary::start_with(NO_UPSTREAM, "info", &limits(&url, "true")).await;
    let mut closed = RunningBinary::start_with(NO_UPSTREAM, "info", &limits(&url, "false")).await;
    let client = reqwest::Client::new();

    // Shared: the session's three are spent on one replica, and the other refuses the fourth.
    assert_eq!(admitted(&client, &step_url(&open), "spent", 3).await, 3);
    let (status, body) = post(&client, &step_url(&closed), &offline_step("spent"))
        .await
        .unwrap();
    assert_eq!(
        (status, &body["error"]["type"]),
        (429, &json!("rate_limited"))
    );
    let wait = body["error"]["retry_after_seconds"].as_u64().unwrap();
    assert!(
        (1..=20).contains(&wait),
        "one step refills every 20 s: {wait}"
    );

    let port = redis.kill().await;
    for _ in 0..5 {
        let reply = post(&client, &step_url(&open), &offline_step("spent")).await;
        assert_eq!(reply.map(|r| r.0), Some(200), "fail open lets it through");
    }
    assert_eq!(unanswered(&client, &open, "admitted").await, 5);
    let (status, body) = post(&client, &step_url(&closed), &offline_step("spent"))
        .await
        .unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["type"], "rate_limiter_unavailable");
    assert_eq!(body["error"]["retryable"], true);
    assert!(unanswered(&client, &closed, "refused").await >= 1);

    // Back on the same port, empty: no restart of either replica.
    let _redis = Redis::start(port).await;
    eventually(
        "fail closed admits again",
        Duration::from_secs(15),
        || async {
            let reply = post(&client, &step_url(&closed), &offline_step("probe")).await;
            reply.is_some_and(|(status, _)| status == 200)
        },
    )
    .await;
    closed.logged("answers again").await;
    eventually(
        "fail open checks again",
        Duration::from_secs(15),
        || async {
            let before = unanswered(&client, &open, "admitted").await;
            let reply = post(&client, &step_url(&open), &offline_step("probe-open")).await;
            reply.is_some() && unanswered(&client, &open, "admitted").await == before
        },
    )
    .await;
    open.logged("answers again").await;
    assert_eq!(admitted(&client, &step_url(&open), "fresh", 5).await, 3);
    assert_eq!(admitted(&client, &step_url(&closed), "fresh", 1).await, 0);
}

/// An OpenAI-style upstream that takes `delay` per answer and tells `arrived` how many calls
/// have come.
async fn slow_upstream(delay: Duration, arrived: Arc<AtomicUsize>) -> wiremock::MockServer {
    let upstream = wiremock::MockServer::start().await;
    let reply = json!({
        "id": "chatcmpl-fleet", "object": "chat.completion", "created": 1, "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "Thought: done\nFinal Answer: 42"}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 8, "total_tokens": 58}
    });
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path("/v1/chat/completions"))
        .respond_with(move |_: &wiremock::Request| {
            arrived.fetch_add(1, Ordering::SeqCst);
            wiremock::ResponseTemplate::new(200)
                .set_body_json(reply.clone())
                .set_delay(delay)
        })
        .mount(&upstream)
        .await;
    upstream
}

/// Sends `n` steps through `url`, `concurrency` at a time, calling `midway` once `after`
/// upstream calls have arrived; the outcome of each.
async fn load_run(
    url: &str,
    n: usize,
    arrived: &AtomicUsize,
    after: usize,
    midway: impl std::future::Future<Output = ()>,
) -> Vec<Option<(u16, Value)>> {
    let client = reqwest::Client::new();
    let run = futures_util::stream::iter(0..n)
        .map(|i| {
            let client = client.clone();
            async move { post(&client, url, &step(&format!("load-{i}"))).await }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>();
    let start = arrived.load(Ordering::SeqCst);
    let trigger = async {
        eventually(
            "the load reaches the upstream",
            Duration::from_secs(60),
            || {
                let reached = arrived.load(Ordering::SeqCst) >= start + after;
                async move { reached }
            },
        )
        .await;
        midway.await;
    };
    let (outcomes, ()) = tokio::join!(run, trigger);
    outcomes
}

fn retryable(outcome: &Option<(u16, Value)>) -> bool {
    match outcome {
        None => true,
        Some((status, body)) => {
            body["error"]["retryable"] == true || (body.is_null() && (502..=504).contains(status))
        }
    }
}

#[tokio::test]
async fn a_replica_killed_or_stopped_under_load_loses_no_step() {
    let arrived = Arc::new(AtomicUsize::new(0));
    let upstream = slow_upstream(Duration::from_millis(150), arrived.clone()).await;
    let mut fleet = replicas(&upstream.uri(), &[]).await;
    let haproxy = Haproxy::start(&ports(&fleet)).await;
    let url = haproxy.url();

    let mut killed = fleet.remove(0);
    let outcomes = load_run(&url, 60, &arrived, 12, async {
        killed.child.start_kill().unwrap();
    })
    .await;
    assert!(
        outcomes.iter().all(retryable_or_ok),
        "a killed replica gives only retryable errors: {outcomes:?}"
    );
    let client = reqwest::Client::new();
    for (i, outcome) in outcomes.iter().enumerate() {
        if !matches!(outcome, Some((200, _))) {
            let retried = post(&client, &url, &step(&format!("load-{i}"))).await;
            assert_eq!(retried.map(|r| r.0), Some(200), "step {i} after a retry");
        }
    }
    haproxy
        .until("HAProxy takes the killed replica out", |backends| {
            backends
                .iter()
                .any(|b| b.name == "replica1" && b.status.starts_with("DOWN"))
        })
        .await;
    let backends = haproxy.backends().await;
    assert!(
        backends.iter().any(|b| b.retried > 0),
        "the kill cut steps in flight, which HAProxy sent again: {backends:?}"
    );

    let stopped = fleet.remove(0);
    let outcomes = load_run(&url, 60, &arrived, 12, stopped.terminate()).await;
    let failed: Vec<_> = outcomes
        .iter()
        .filter(|o| !matches!(o, Some((200, _))))
        .collect();
    assert!(
        failed.is_empty(),
        "a stopped replica drops nothing: {failed:?}"
    );
    let (status, _log) = stopped.exited().await;
    assert!(
        status.success(),
        "the stopped replica exits cleanly: {status}"
    );
}

fn retryable_or_ok(outcome: &Option<(u16, Value)>) -> bool {
    matches!(outcome, Some((200, _))) || retryable(outcome)
}

/// `/readyz` of a replica: its status and body.
async fn readyz(client: &reqwest::Client, replica: &RunningBinary) -> (u16, Value) {
    let url = format!("http://127.0.0.1:{}/readyz", replica.port);
    let reply = client.get(url).send().await.unwrap();
    (reply.status().as_u16(), reply.json().await.unwrap())
}

/// Polls `/readyz` until it says ready; the answers before that are returned.
async fn until_ready(client: &reqwest::Client, replica: &RunningBinary) -> Vec<(u16, Value)> {
    let before = std::sync::Mutex::new(Vec::new());
    eventually("/readyz says ready", Duration::from_secs(30), || async {
        let answer = readyz(client, replica).await;
        let ready = answer.0 == 200;
        if !ready {
            before.lock().unwrap().push(answer);
        }
        ready
    })
    .await;
    before.into_inner().unwrap()
}

/// A limit high enough never to refuse, so that only Redis's absence could.
fn fail_closed(url: &str) -> [(&str, &str); 3] {
    [
        ("REACTSTEP_REDIS_URL", url),
        ("REACTSTEP_RATE_LIMIT_PER_SESSION", "1000000"),
        ("REACTSTEP_REDIS_FAIL_OPEN", "false"),
    ]
}

/// `n` steps at once, each its own session; the status of each (0: no HTTP answer).
async fn burst(client: &reqwest::Client, replica: &RunningBinary, n: usize) -> Vec<(u16, Value)> {
    let url = step_url(replica);
    futures_util::future::join_all((0..n).map(|i| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            post(&client, &url, &offline_step(&format!("burst-{i}")))
                .await
                .unwrap_or((0, Value::Null))
        }
    }))
    .await
}

#[tokio::test]
async fn failing_closed_a_new_replica_is_ready_only_when_it_can_serve_a_burst() {
    let redis = Redis::start(free_port()).await;
    let url = redis.url();
    let mut env = fail_closed(&url).to_vec();
    // Workers of their own, as in production: each would have opened connections of its own.
    env.push(("REACTSTEP_WORKERS", "4"));
    let replica = RunningBinary::start_with(NO_UPSTREAM, "info", &env).await;
    let client = reqwest::Client::new();
    until_ready(&client, &replica).await;

    let answers = burst(&client, &replica, 400).await;
    let refused: Vec<_> = answers
        .iter()
        .filter(|(status, _)| *status != 200)
        .collect();
    assert!(
        refused.is_empty(),
        "{} of 400 steps refused by a replica that said it was ready: {:?}",
        refused.len(),
        refused.first()
    );
    assert_eq!(unanswered(&client, &replica, "refused").await, 0);
}

#[tokio::test]
async fn failing_closed_without_redis_a_replica_is_not_ready_and_says_503_until_redis_comes() {
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let replica = RunningBinary::start_with(NO_UPSTREAM, "info", &fail_closed(&url)).await;
    let client = reqwest::Client::new();

    let (status, body) = readyz(&client, &replica).await;
    assert_eq!(
        (status, body),
        (
            503,
            json!({"status": "starting", "waiting_for": "rate_limiter"})
        )
    );
    let reply = client
        .post(step_url(&replica))
        .json(&offline_step("early"))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 503);
    let retry_after: u64 = reply.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry_after >= 1, "{retry_after}");
    let body: Value = reply.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limiter_unavailable");
    assert_eq!(body["error"]["retryable"], true);
    // Still not ready after that refusal: only Redis answering makes it so.
    assert_eq!(readyz(&client, &replica).await.0, 503);

    let _redis = Redis::start(port).await;
    let before = until_ready(&client, &replica).await;
    assert!(
        before
            .iter()
            .all(|answer| answer.1["waiting_for"] == "rate_limiter"),
        "{before:?}"
    );
    let answers = burst(&client, &replica, 100).await;
    assert!(
        answers.iter().all(|(status, _)| *status == 200),
        "ready, it serves: {:?}",
        answers.iter().find(|(status, _)| *status != 200)
    );
}

#[tokio::test]
async fn failing_closed_every_step_admitted_before_sigterm_is_answered_200() {
    let redis = Redis::start(free_port()).await;
    let url = redis.url();
    let arrived = Arc::new(AtomicUsize::new(0));
    let upstream = slow_upstream(Duration::from_millis(100), arrived.clone()).await;
    let mut env = fail_closed(&url).to_vec();
    // Several workers: one that has finished its steps stops before the others have.
    env.push(("REACTSTEP_WORKERS", "4"));
    let replica = RunningBinary::start_with(&upstream.uri(), "info", &env).await;
    until_ready(&reqwest::Client::new(), &replica).await;
    // Every worker checks steps at first, each on connections of its own.
    let warm = burst(&reqwest::Client::new(), &replica, 64).await;
    assert!(warm.iter().all(|(status, _)| *status == 200), "{warm:?}");

    // Then two clients: steps that wait on the upstream, and offline steps checked one after
    // another, so that a check is always in flight while workers stop one by one.
    let answered = Arc::new(AtomicUsize::new(0));
    let url = step_url(&replica);
    let client = |kind: &'static str| {
        let (url, answered) = (url.clone(), answered.clone());
        tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .build()
                .unwrap();
            let mut outcomes = Vec::new();
            for i in 0.. {
                let session = format!("{kind}-{i}");
                let body = match kind {
                    "slow" => step(&session),
                    _ => offline_step(&session),
                };
                let Some(outcome) = post(&client, &url, &body).await else {
                    // Refused or closed: the server no longer takes steps.
                    break;
                };
                answered.fetch_add(1, Ordering::SeqCst);
                outcomes.push(outcome);
            }
            outcomes
        })
    };
    let loads: Vec<_> = ["slow", "slow", "slow", "fast", "fast"]
        .into_iter()
        .map(client)
        .collect();
    eventually("the load is under way", Duration::from_secs(60), || {
        let going = answered.load(Ordering::SeqCst) >= 100 && arrived.load(Ordering::SeqCst) >= 70;
        async move { going }
    })
    .await;
    replica.terminate().await;
    let mut outcomes = Vec::new();
    for load in loads {
        outcomes.extend(load.await.unwrap());
    }
    let failed: Vec<_> = outcomes
        .iter()
        .filter(|(status, _)| *status != 200)
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} steps answered other than 200: {:?}",
        failed.len(),
        outcomes.len(),
        failed.first()
    );
    let (status, log) = replica.exited().await;
    assert!(status.success(), "{status}\n{log}");
    assert!(
        !log.contains("did not answer"),
        "the limiter lost Redis during the shutdown:\n{log}"
    );
}
