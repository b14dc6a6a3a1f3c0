//! Load against the real release binary, from one process that is both the load generator and
//! a slow mock upstream on loopback. Run through `scripts/load.sh`:
//!
//! - `burst [N] [http|https|https:S|stream]`: N steps (default 5,000) at once, the upstream answering each after
//!   2 s. Every step must come back 200 with the model's answer, or 503 `at_capacity` past the
//!   steps the descriptor limit leaves room for (counted apart); reports the service's peak RSS
//!   and the latency it added over the 2 s, at p50 and p99. `http` (the default) is a plain
//!   HTTP/1.1 upstream, like a local model server: one upstream connection per step. `https` is
//!   TLS with ALPN, like the hosted providers: HTTP/2, the steps sharing the service's few
//!   connections. `https:S` allows S streams per connection, as a provider's server does.
//!   `stream` is `https` with every step on `react_step/stream` and the upstream streaming its
//!   answer: each step must end with its `step` event holding the answer.
//! - `soak [SECONDS] [RATE]`: steady load (default 600 s at 100 steps/s) with 10 % of upstream
//!   replies failing (500, 503, 429); every answer must be a documented outcome, and the
//!   service's RSS is sampled every 10 s to show it stays flat.
//! - `compare [SECONDS] [CONCURRENCY]`: steady load with `oha` on a fast mock upstream, a bare
//!   actix-web + reqwest pass-through and the service, with the typical IDE body and a 10-step
//!   loop; a markdown table of req/s, p50/p90/p99 and the ratios to the pass-through
//!   (`load/compare.rs`).
//! - `mixed [SECONDS] [RATE] [BIG]`: the typical body at a fixed rate, alone and while BIG
//!   128k-token requests are in flight; the small requests' latencies in both
//!   (`load/mixed.rs`).
//! - `sweep [SECONDS]`: the service and the pass-through of `compare` on 1, 2, 4 and 8 cores,
//!   each process pinned with `taskset`, a warm and a cold body, at concurrency 1, 16 and 64;
//!   one markdown table (`load/sweep.rs`).
//! - `startup [RUNS]`: start to `/readyz`, the first steps of each encoder and the RSS of a
//!   fresh service, medians over RUNS (`load/startup.rs`).
//! - `bodies`: writes the bodies `compare` sends to `target/release/load-compare/` and prints
//!   that folder (for `scripts/callgrind_service.sh`).
//! - `cold-bodies N`: writes N cold bodies of the sweep there (`cold-0.json` …), each carrying
//!   text the service has not seen (for `scripts/callgrind_service.sh cold`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::io::Write;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[path = "load/compare.rs"]
mod compare;
#[path = "../tests/support/https_upstream.rs"]
#[expect(
    dead_code,
    reason = "the tests' upstream can drop connections; no load run does"
)]
mod https_upstream;
#[path = "load/mixed.rs"]
mod mixed;
#[path = "load/startup.rs"]
mod startup;
#[path = "../tests/support/stream_upstream.rs"]
#[expect(
    dead_code,
    reason = "the burst takes only the OpenAI stream's frames; the tests script the rest"
)]
mod stream_upstream;
#[path = "load/sweep.rs"]
mod sweep;

const UPSTREAM_DELAY: Duration = Duration::from_secs(2);
const ANSWER: &str = "The handler is in src/auth.js.";

/// A chat completion, or an injected fault for every tenth reply when `faults` is on.
fn answer(n: u64, faults: bool) -> (u16, String) {
    match (faults, n % 30) {
        (true, 0) => (500, "{\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}".to_string()),
        (true, 10) => (503, "{\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}".to_string()),
        (true, 20) => (429, "{\"error\":{\"message\":\"slow down\",\"type\":\"requests\",\"code\":\"rate_limit_exceeded\"}}".to_string()),
        _ => (200, format!(
            "{{\"id\":\"chatcmpl-load\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\"content\":\"Thought: Known.\\nFinal Answer: {ANSWER}\"}},\"finish_reason\":\"stop\"}}],\"usage\":{{\"prompt_tokens\":300,\"completion_tokens\":20,\"total_tokens\":320}}}}"
        )),
    }
}

/// The same as a whole HTTP/1.1 response, for the plain upstream.
fn reply(n: u64, faults: bool) -> String {
    let (status, body) = answer(n, faults);
    let (line, extra) = match status {
        500 => ("500 Internal Server Error", ""),
        503 => ("503 Service Unavailable", ""),
        429 => ("429 Too Many Requests", "retry-after-ms: 20\r\n"),
        _ => ("200 OK", ""),
    };
    format!(
        "HTTP/1.1 {line}\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Serves keep-alive connections: each request answered after the delay.
async fn upstream(listener: TcpListener, delay: Duration, faults: bool) {
    let counter = Arc::new(AtomicU64::new(0));
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        let counter = counter.clone();
        tokio::spawn(async move {
            let _ = serve_connection(socket, delay, faults, &counter).await;
        });
    }
}

async fn serve_connection(
    mut socket: TcpStream,
    delay: Duration,
    faults: bool,
    counter: &AtomicU64,
) -> std::io::Result<()> {
    let mut data = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        // One whole request: headers, then Content-Length bytes.
        let end = loop {
            if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap_or(0));
                if data.len() >= end + 4 + length {
                    break end + 4 + length;
                }
            }
            let n = socket.read(&mut buf).await?;
            if n == 0 {
                return Ok(());
            }
            data.extend_from_slice(&buf[..n]);
        };
        data.drain(..end);
        tokio::time::sleep(delay).await;
        let n = counter.fetch_add(1, Ordering::Relaxed);
        socket.write_all(reply(n, faults).as_bytes()).await?;
    }
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

struct Service {
    child: tokio::process::Child,
    url: String,
}

async fn start_service(upstream_uri: &str, ca_file: Option<&std::path::Path>) -> Service {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    // Next to this example, wherever the target folder is (`CARGO_TARGET_DIR` included).
    let binary = compare::release_binary();
    // A binary just linked is dirty in the page cache until written back, and dirty pages
    // cannot be paged out: the service's start-up release of its compiled-in tables
    // (src/resident.rs) would leave 20 MiB resident that a deployed binary never holds.
    if let Ok(file) = std::fs::File::open(&binary) {
        let _ = file.sync_all();
    }
    let mut command = tokio::process::Command::new(&binary);
    if let Some(ca_file) = ca_file {
        command.env("REACTSTEP_UPSTREAM_CA_FILE", ca_file);
    }
    let child = command
        .env("REACTSTEP_BIND", format!("127.0.0.1:{port}"))
        .env("REACTSTEP_OPENAI_BASE_URL", format!("{upstream_uri}/v1"))
        .env("REACTSTEP_RETRY_BASE_MS", "20")
        .env("RUST_LOG", "warn")
        .env(
            "MALLOC_ARENA_MAX",
            std::env::var("MALLOC_ARENA_MAX").unwrap_or_else(|_| "8".into()),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (cargo build --release first)", binary.display()));
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    for _ in 0..200 {
        if client.get(format!("{base}/readyz")).send().await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Service {
        child,
        url: format!("{base}/api/agent/react_step"),
    }
}

fn body(i: u64) -> serde_json::Value {
    serde_json::json!({
        "session_id": format!("load-{i}"),
        "user_query": "Where is the login handler?",
        "available_tools_prompt_segment": "- code_search(query) - search the code\n- read_file(path) - read a file",
        "explicit_context": [{"path": "src/auth.js", "content": "export function login(user) {\n  return session.start(user);\n}\n".repeat(20)}],
        "llm_config": {"modelName": "gpt-4o", "tokenLimit": 16000, "reservedOutputTokens": 1000},
        "user_api_keys": {"llmKey": "sk-load-test-key"}
    })
}

/// What became of one step of a burst.
enum Outcome {
    Answered,
    /// 503 `at_capacity`: more steps at once than the descriptor limit leaves room for.
    AtCapacity,
    Failed,
}

/// The service's soft limit on open files, as it raised it.
fn descriptor_limit(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .unwrap_or("unknown")
        .to_string()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// The upstream's answer to a streamed call: the whole stream of server-sent events at once.
fn streamed_answer() -> (u16, String) {
    let frames =
        stream_upstream::openai_stream(&["Thought: Known.\nFinal ", "Answer: ", ANSWER], "stop");
    (200, String::from_utf8(frames).unwrap())
}

/// How one step of a burst went: a JSON answer, or a stream that ends with its `step` event.
async fn outcome(reply: reqwest::Response, streamed: bool) -> Outcome {
    let status = reply.status();
    let text = reply.text().await.unwrap_or_default();
    // The answer, or an error: JSON, streamed or not (a stream's errors before it opens too).
    let body: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let answered = if streamed {
        let step = text.split("event: step\ndata: ").nth(1).unwrap_or("");
        let step: serde_json::Value = serde_json::from_str(step.trim_end()).unwrap_or_default();
        step["direct_response"] == ANSWER
    } else {
        body["direct_response"] == ANSWER
    };
    if status == 200 && answered {
        return Outcome::Answered;
    }
    if status == 503 && body["error"]["type"] == "at_capacity" {
        Outcome::AtCapacity
    } else {
        Outcome::Failed
    }
}

/// `https`: over TLS, with this many streams allowed per connection (`None`: any number).
/// `streamed`: every step on the stream endpoint, the upstream streaming (HTTPS only).
async fn burst(n: u64, https: Option<Option<u32>>, streamed: bool) {
    let mut ca_file = tempfile::NamedTempFile::new().unwrap();
    let (uri, seen) = if let Some(max_streams) = https {
        let upstream = https_upstream::start(max_streams, |body: bytes::Bytes| async move {
            tokio::time::sleep(UPSTREAM_DELAY).await;
            let asked_to_stream = memchr::memmem::find(&body, b"\"stream\":true").is_some();
            if asked_to_stream {
                streamed_answer()
            } else {
                answer(0, false)
            }
        })
        .await;
        ca_file.write_all(upstream.ca_pem.as_bytes()).unwrap();
        (
            upstream.uri,
            Some((upstream.versions, upstream.connections)),
        )
    } else {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(upstream(listener, UPSTREAM_DELAY, false));
        (uri, None)
    };
    let service = start_service(&uri, https.map(|_| ca_file.path())).await;
    let pid = service.child.id().unwrap();
    let idle = rss_kib(pid, "VmRSS");
    // Start-up (building the encoders) has its own peak: count the burst's alone.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(usize::MAX)
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let started = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let client = client.clone();
            let url = if streamed {
                format!("{}/stream", service.url)
            } else {
                service.url.clone()
            };
            tokio::spawn(async move {
                let t = Instant::now();
                let reply = client.post(&url).json(&body(i)).send().await;
                let outcome = match reply {
                    Ok(reply) => outcome(reply, streamed).await,
                    Err(_) => Outcome::Failed,
                };
                (outcome, t.elapsed())
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(n as usize);
    let (mut failed, mut refused) = (0, 0);
    for task in tasks {
        match task.await.unwrap() {
            (Outcome::Answered, latency) => latencies.push(latency.saturating_sub(UPSTREAM_DELAY)),
            (Outcome::AtCapacity, _) => refused += 1,
            (Outcome::Failed, _) => failed += 1,
        }
    }
    let wall = started.elapsed();
    latencies.sort();
    let shape = match &seen {
        Some((versions, connections)) => {
            let versions = versions.lock().unwrap();
            let connections = connections.load(Ordering::SeqCst);
            let h2 = versions
                .iter()
                .filter(|v| **v == hyper::Version::HTTP_2)
                .count();
            let limit = https
                .flatten()
                .map_or(String::new(), |s| format!(", {s} streams per connection"));
            format!(
                "HTTPS{limit}, {h2} of {} requests over HTTP/2 on {connections} connections",
                versions.len()
            )
        }
        None => "plain HTTP/1.1".to_string(),
    };
    let shape = if streamed {
        format!("{shape}, every step streamed")
    } else {
        shape
    };
    println!(
        "burst: {n} concurrent steps, upstream ({shape}) answering after {} s",
        UPSTREAM_DELAY.as_secs()
    );
    println!(
        "  answered correctly: {} / {n} (refused at capacity: {refused}; failed: {failed})",
        n - failed - refused
    );
    if refused > 0 {
        println!(
            "  the descriptor limit ({}) bounds the steps in flight at once: the rest get 503 at_capacity (src/descriptors.rs)",
            descriptor_limit(pid)
        );
    }
    println!("  wall time: {:.2} s", wall.as_secs_f64());
    println!(
        "  added latency over the upstream's 2 s: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        latencies.last().unwrap().as_secs_f64() * 1e3
    );
    println!(
        "  service RSS: idle {:.1} MiB, peak {:.1} MiB",
        idle as f64 / 1024.0,
        rss_kib(pid, "VmHWM") as f64 / 1024.0
    );
    // With the clients gone, what the service keeps once its heap-trim thread has run twice.
    drop(client);
    let settled = reactstep::runtime::heap_trim::PERIOD * 2 + Duration::from_secs(5);
    tokio::time::sleep(settled).await;
    println!(
        "  service RSS {} s after the burst: {:.1} MiB",
        settled.as_secs(),
        rss_kib(pid, "VmRSS") as f64 / 1024.0
    );
    assert_eq!(failed, 0, "every step must be answered correctly");
}

async fn soak(seconds: u64, rate: u64) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(upstream(listener, Duration::from_millis(50), true));
    let service = start_service(&uri, None).await;
    let pid = service.child.id().unwrap();
    let client = reqwest::Client::new();
    let counts: Arc<[AtomicU64; 4]> = Arc::new(Default::default()); // 200, 429, 502, other
    let unexpected = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut ticker = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut next_sample = Duration::ZERO;
    let mut i = 0u64;
    while started.elapsed() < Duration::from_secs(seconds) {
        ticker.tick().await;
        if started.elapsed() >= next_sample {
            samples.push((started.elapsed().as_secs(), rss_kib(pid, "VmRSS")));
            next_sample += Duration::from_secs(10);
        }
        let client = client.clone();
        let url = service.url.clone();
        let counts = counts.clone();
        let unexpected = unexpected.clone();
        i += 1;
        tokio::spawn(async move {
            let sent = Instant::now();
            let slot = match client.post(&url).json(&body(i)).send().await {
                Ok(r) if r.status() == 200 => 0,
                Ok(r) if r.status() == 429 => 1,
                Ok(r) if r.status() == 502 => 2,
                outcome => {
                    // Say what it was: a status and body from the service, or the client's error.
                    let what = match outcome {
                        Ok(r) => format!("{} {}", r.status(), r.text().await.unwrap_or_default()),
                        Err(e) => format!("client error: {e:?}"),
                    };
                    let at = started.elapsed().as_secs_f64();
                    let took = sent.elapsed().as_secs_f64();
                    unexpected
                        .lock()
                        .unwrap()
                        .push(format!("step {i} at {at:.1} s, after {took:.3} s: {what}"));
                    3
                }
            };
            counts[slot].fetch_add(1, Ordering::Relaxed);
        });
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let c: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    println!(
        "soak: {seconds} s at {rate} steps/s, 10 % of upstream replies failing (500, 503, 429)"
    );
    println!(
        "  answers: 200 {}, 429 {}, 502 {}, unexpected {}",
        c[0], c[1], c[2], c[3]
    );
    for what in unexpected.lock().unwrap().iter() {
        println!("    {what}");
    }
    println!("  service RSS every 10 s (MiB):");
    for (t, kib) in &samples {
        println!("    {t:>4} s  {:.1}", *kib as f64 / 1024.0);
    }
    assert_eq!(c[3], 0, "no unexpected status");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // The pass-through runs on actix-web's own runtime, outside tokio's.
    if args.get(1).map(String::as_str) == Some("pass-through") {
        compare::pass_through(&args[2]).unwrap();
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(run(args));
}

async fn run(args: Vec<String>) {
    match args.get(1).map(String::as_str) {
        Some("mock-upstream") => compare::mock_upstream().await,
        Some("bodies") => {
            let (typical, _, _) = compare::write_bodies();
            println!("{}", typical.parent().unwrap().display());
        }
        Some("compare") => {
            let seconds = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(6);
            let concurrency = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(16);
            compare::run(seconds, concurrency).await;
        }
        Some("sweep") => {
            let seconds = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
            sweep::run(seconds).await;
        }
        Some("drive") => {
            let seconds = args[4].parse().unwrap();
            let concurrency = args[5].parse().unwrap();
            let pid = args.get(6).and_then(|p| p.parse().ok());
            sweep::drive(&args[2], &args[3], seconds, concurrency, pid).await;
        }
        Some("tokenizer-pass") => sweep::tokenizer_pass(),
        Some("cold-bodies") => sweep::write_cold_bodies(args[2].parse().unwrap()),
        Some("startup") => {
            let runs = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
            startup::run(runs).await;
        }
        Some("mixed") => {
            let seconds = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
            let rate = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(500);
            let big = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(2);
            mixed::run(seconds, rate, big).await;
        }
        Some("soak") => {
            let seconds = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(600);
            let rate = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(100);
            soak(seconds, rate).await;
        }
        _ => {
            let n = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5_000);
            let shape = args.get(3).map(String::as_str);
            let streamed = shape == Some("stream");
            let https = match shape {
                Some("https" | "stream") => Some(None),
                Some(shape) => shape
                    .strip_prefix("https:")
                    .map(|s| Some(s.parse().expect("https:<streams per connection>"))),
                None => None,
            };
            burst(n, https, streamed).await;
        }
    }
}
