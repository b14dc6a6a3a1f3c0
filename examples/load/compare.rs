//! `compare [SECONDS] [CONCURRENCY]`: steady load on the release service beside what any proxy
//! pays, in one run (see `scripts/load.sh compare` and docs/benchmarks.md).
//!
//! Three processes are started, each on an ephemeral loopback port: a fast mock of OpenAI's chat
//! completions (hyper), a bare actix-web + reqwest pass-through that forwards a small fixed chat
//! request to it (the floor any proxy pays), and the release service pointed at the mock. `oha`
//! then drives each target in turn with the same body at a fixed concurrency, after a one-second
//! warm-up, and the figures are printed as a markdown table with the ratios to the pass-through
//! and what each request cost in CPU time: the serving process's (from `/proc/PID/stat`) and the
//! whole machine's (`/proc/stat`, oha and the mock included). On a machine the load saturates,
//! the rate is the inverse of the machine's time per request, so the CPU columns say where a
//! difference in rate comes from.
//!
//! The bodies are built here: the typical IDE step (10 turns of history, three source files of
//! about 5 KB in `explicit_context`, free-text tools, `gpt-4o`, a 16,000-token limit) and a
//! recorded 10-step loop whose history grows by one assistant turn and one tool observation per
//! step, as a client sends it back (docs/contract.md, "How a client drives the loop").
//!
//! The mock upstream and the pass-through are this same binary run with a hidden subcommand
//! (`mock-upstream`, `pass-through URL`). Every child asks the kernel to kill it when this
//! process ends (`PR_SET_PDEATHSIG`), so none outlives the run, whether it ends, fails or is
//! stopped with Ctrl-C.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

/// The model's answer, from the mock upstream or as `mock_response`: a proposed tool call.
pub const MODEL_OUTPUT: &str =
    "Thought: The lockout threshold is hard-coded in the rate limiter; I should read it.\nAction: read_file(path=\"src/auth/rateLimit.js\")";

/// The whole HTTP body of the mock's chat completion.
fn completion() -> String {
    json!({
        "id": "chatcmpl-compare",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o-2024-08-06",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": MODEL_OUTPUT, "refusal": null},
            "logprobs": null,
            "finish_reason": "stop"
        }],
        "usage": {"prompt_tokens": 4700, "completion_tokens": 32, "total_tokens": 4732},
        "system_fingerprint": "fp_compare"
    })
    .to_string()
}

// ---------------------------------------------------------------------------------------------
// The bodies

/// Realistic JavaScript of at most `bytes` bytes, cut at a line end; `seed` makes each file's text its own.
pub fn source(bytes: usize, seed: usize) -> String {
    let nouns = [
        "user", "session", "attempt", "token", "account", "device", "policy",
    ];
    let mut out = String::with_capacity(bytes + 400);
    out.push_str(
        "'use strict';\n\nconst db = require('../db');\nconst log = require('../log');\n\n",
    );
    let mut i = seed;
    while out.len() < bytes {
        let noun = nouns[i % nouns.len()];
        out.push_str(&format!(
            "/**\n * Loads the {noun} for a request and checks it is still valid ({i}).\n */\nasync function load_{noun}_{i}(request, response) {{\n  const id = request.params.{noun}Id;\n  const {noun} = await db.{noun}s.findOne({{ id, tenant: request.tenant }});\n  if (!{noun}) {{\n    log.warn('no {noun}', {{ id }});\n    return response.status(404).json({{ error: '{noun} not found' }});\n  }}\n  if ({noun}.expiresAt < Date.now() - {}) {{\n    return response.status(410).json({{ error: '{noun} expired' }});\n  }}\n  return response.json({noun});\n}}\n\n",
            (i * 7919) % 100_000
        ));
        i += 1;
    }
    // Cut at the last whole line that fits, so the size is what was asked for.
    out.truncate(out[..bytes].rfind('\n').map_or(bytes, |n| n + 1));
    out
}

pub const TOOLS: &str = "You can use these tools. Call one per step, with named arguments.\n\
- code_search(query): search the repository for code matching the query; returns paths, line numbers and the matching lines.\n\
- read_file(path): read a file of the repository; returns its text with line numbers.\n\
- list_dir(path): list the files and folders in a directory of the repository.\n\
- find_references(symbol): find where a function, class or variable is used.\n\
- run_tests(pattern): run the test files matching the pattern and return the failures.\n\
- edit_file(path, old_text, new_text): replace one exact occurrence of old_text in the file with new_text.\n\
- git_diff(): show the changes made so far in this session.\n";

const QUESTION: &str = "Make the login lockout threshold configurable and add a test for it.";
const STAMP: &str = "2024-01-01T00:00:00.000Z";

fn user(content: &str) -> Value {
    json!({"role": "user", "content": content, "timestamp": STAMP})
}

fn call(thought: &str, tool: &str, parameters: Value) -> Value {
    json!({"role": "assistant", "content": thought, "timestamp": STAMP,
           "toolCall": {"name": tool, "parameters": parameters}})
}

fn observation(content: &str) -> Value {
    json!({"role": "tool_observation", "content": content, "timestamp": STAMP,
           "toolResult": {"success": true}})
}

fn answer(thought: &str, content: &str) -> Value {
    json!({"role": "assistant", "content": content, "thought": thought, "timestamp": STAMP})
}

/// The 10 turns before the question: two earlier exchanges with tool calls.
pub fn earlier_turns() -> Vec<Value> {
    vec![
        user("Users say the login form hangs after two wrong passwords. Where is login handled?"),
        call("I should search for the login handler.", "code_search", json!({"query": "login handler"})),
        observation("3 matches:\nsrc/auth/login.js:12: async function login(request, response) {\nsrc/auth/session.js:40: function startSession(user, request) {\nsrc/routes/auth.js:8: router.post('/login', rateLimit, login);"),
        call("The route goes through rateLimit before login; I should read the handler first.", "read_file", json!({"path": "src/auth/login.js"})),
        observation("src/auth/login.js (84 lines): login() looks the user up by email, compares the password hash with bcrypt, counts a failure with recordFailure(user) and answers 401, or starts a session and answers 200. On the third failure in 15 minutes it awaits lock(user) without a timeout."),
        answer("The handler awaits lock(user) with no timeout, which hangs when the lock table is busy.", "Login is handled in src/auth/login.js (login, line 12), behind the rateLimit middleware of src/routes/auth.js. The hang comes from awaiting lock(user) without a timeout on the third failure."),
        user("How are failed attempts counted?"),
        call("I should find where recordFailure is defined.", "find_references", json!({"symbol": "recordFailure"})),
        observation("2 references:\nsrc/auth/rateLimit.js:21: function recordFailure(user) { // definition\nsrc/auth/login.js:47: await recordFailure(user);"),
        answer("recordFailure is defined in src/auth/rateLimit.js and called once per wrong password.", "Failed attempts are counted by recordFailure in src/auth/rateLimit.js, once per wrong password; the count is kept for 15 minutes and the account is locked at 3."),
    ]
}

/// One body of the loop: step `step` (1-based) of 10. The loop may take 20 steps, so that none
/// of the ten is its last (which would summarise instead of proposing the model's tool call).
pub fn step_body(step: usize, history: Vec<Value>, query: &str) -> Value {
    let files: Vec<Value> = [
        "src/auth/login.js",
        "src/auth/session.js",
        "src/auth/rateLimit.js",
    ]
    .iter()
    .enumerate()
    .map(|(n, path)| json!({"path": path, "content": source(5_120, n * 100)}))
    .collect();
    json!({
        "project_id": "4b1e6f0e-0000-4000-8000-000000000001",
        "session_id": "5c2f7a1f-0000-4000-8000-000000000002",
        "user_query": query,
        "conversation_history": history,
        "explicit_context": files,
        "available_tools_prompt_segment": TOOLS,
        "llm_config": {"modelName": "gpt-4o", "tokenLimit": 16000, "reservedOutputTokens": 1000, "temperature": 0.2},
        "user_api_keys": {"llmKey": "sk-compare-0000000000000000"},
        "max_iterations_left": 21 - step
    })
}

/// The typical IDE step: step 1 of the loop.
pub fn typical_body() -> Value {
    step_body(1, earlier_turns(), QUESTION)
}

/// The recorded loop: step 1 is the typical body; each later step sends back the history with
/// the question, the model's tool call and the tool's observation appended, and an empty query.
pub fn loop_bodies() -> Vec<Value> {
    let calls = [
        (
            "I should read the rate limiter.",
            "read_file",
            json!({"path": "src/auth/rateLimit.js"}),
        ),
        (
            "I should see where the threshold constant is used.",
            "code_search",
            json!({"query": "MAX_FAILURES"}),
        ),
        (
            "The config module should hold the setting; I should read it.",
            "read_file",
            json!({"path": "src/config.js"}),
        ),
        (
            "I should make the threshold a setting.",
            "edit_file",
            json!({"path": "src/config.js", "old_text": "lockout: {", "new_text": "lockout: {\n    maxFailures: Number(process.env.LOCKOUT_MAX_FAILURES || 3),"}),
        ),
        (
            "Now the rate limiter should read it.",
            "edit_file",
            json!({"path": "src/auth/rateLimit.js", "old_text": "const MAX_FAILURES = 3;", "new_text": "const MAX_FAILURES = config.lockout.maxFailures;"}),
        ),
        (
            "I should look at the existing tests of the rate limiter.",
            "list_dir",
            json!({"path": "test/auth"}),
        ),
        (
            "I should read the rate limiter's tests.",
            "read_file",
            json!({"path": "test/auth/rateLimit.test.js"}),
        ),
        (
            "I should add a test with a threshold of 5.",
            "edit_file",
            json!({"path": "test/auth/rateLimit.test.js", "old_text": "describe('rateLimit', () => {", "new_text": "describe('rateLimit', () => {\n  it('locks after the configured number of failures', async () => {\n    config.lockout.maxFailures = 5;\n    for (let i = 0; i < 4; i++) await recordFailure(user);\n    expect(await isLocked(user)).toBe(false);\n    await recordFailure(user);\n    expect(await isLocked(user)).toBe(true);\n  });"}),
        ),
        (
            "I should run the tests.",
            "run_tests",
            json!({"pattern": "test/auth"}),
        ),
    ];
    let mut history = earlier_turns();
    let mut bodies = vec![step_body(1, history.clone(), QUESTION)];
    history.push(user(QUESTION));
    for (n, (thought, tool, parameters)) in calls.into_iter().enumerate() {
        history.push(call(thought, tool, parameters));
        // What a tool returns: a slice of a file, a listing or a test report, 0.5–1.5 KB.
        let found = source(500 + (n % 3) * 500, 1000 + n * 10);
        history.push(observation(&format!("{tool} returned:\n{found}")));
        bodies.push(step_body(n + 2, history.clone(), ""));
    }
    bodies
}

// ---------------------------------------------------------------------------------------------
// The targets' servers

/// `mock-upstream`: OpenAI's chat completions on an ephemeral loopback port (printed first on
/// stdout), the same fixed completion for every request, after reading its whole body. A `GET`
/// answers the size in bytes of the last body it read, so that a run can say what each target
/// sends upstream.
pub async fn mock_upstream() {
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::TokioIo;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("{}", listener.local_addr().unwrap().port());
    let reply = bytes::Bytes::from(completion());
    let last_size = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        let _ = socket.set_nodelay(true);
        let reply = reply.clone();
        let last_size = last_size.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(
                move |request: hyper::Request<hyper::body::Incoming>| {
                    let reply = reply.clone();
                    let last_size = last_size.clone();
                    async move {
                        use std::sync::atomic::Ordering::Relaxed;
                        if request.method() == hyper::Method::GET {
                            let size = last_size.load(Relaxed).to_string();
                            return hyper::Response::builder().body(Full::new(size.into()));
                        }
                        if let Ok(body) = request.into_body().collect().await {
                            last_size.store(body.to_bytes().len(), Relaxed);
                        }
                        hyper::Response::builder()
                            .header("content-type", "application/json")
                            .body(Full::new(reply))
                    }
                },
            );
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(socket), service)
                .await;
        });
    }
}

struct Forward {
    client: reqwest::Client,
    url: String,
}

/// The pass-through's first route: read the step's body as JSON, send a small fixed chat
/// request made from it to the upstream, and answer with the upstream's status and JSON.
async fn forward(
    state: actix_web::web::Data<Forward>,
    body: actix_web::web::Json<Value>,
) -> actix_web::HttpResponse {
    let chat = json!({
        "model": body["llm_config"]["modelName"],
        "messages": [{"role": "user", "content": body["user_query"]}],
        "temperature": 0.2
    });
    send(&state, &body, &chat).await
}

/// The pass-through's second route (`/forward-text`): the same, but the chat request carries the
/// step's text (`text_chat`), as a proxy that forwards a payload of the request's size would.
async fn forward_text(
    state: actix_web::web::Data<Forward>,
    body: actix_web::web::Json<Value>,
) -> actix_web::HttpResponse {
    send(&state, &body, &text_chat(&body)).await
}

/// A chat request carrying the step's text: the tools segment and each file under its path in
/// a system message, every history turn as a message, then the question. No counting and no
/// budget: the text is sent as it came.
fn text_chat(body: &Value) -> Value {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut system = text(&body["available_tools_prompt_segment"]);
    for item in body["explicit_context"].as_array().into_iter().flatten() {
        system.push_str("\n\n");
        system.push_str(item["path"].as_str().unwrap_or_default());
        system.push_str("\n```\n");
        system.push_str(item["content"].as_str().unwrap_or_default());
        system.push_str("\n```");
    }
    let mut messages = vec![json!({"role": "system", "content": system})];
    for turn in body["conversation_history"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let role = if turn["role"] == "assistant" {
            "assistant"
        } else {
            "user"
        };
        messages.push(json!({"role": role, "content": text(&turn["content"])}));
    }
    let query = text(&body["user_query"]);
    if !query.is_empty() {
        messages.push(json!({"role": "user", "content": query}));
    }
    json!({
        "model": body["llm_config"]["modelName"],
        "messages": messages,
        "temperature": 0.2
    })
}

/// Sends `chat` upstream with the step's key and answers with the upstream's status and JSON.
async fn send(state: &Forward, body: &Value, chat: &Value) -> actix_web::HttpResponse {
    let key = body["user_api_keys"]["llmKey"].as_str().unwrap_or_default();
    let reply = state
        .client
        .post(&state.url)
        .bearer_auth(key)
        .json(chat)
        .send()
        .await;
    let Ok(reply) = reply else {
        return actix_web::HttpResponse::BadGateway().finish();
    };
    let status = actix_web::http::StatusCode::from_u16(reply.status().as_u16())
        .unwrap_or(actix_web::http::StatusCode::BAD_GATEWAY);
    match reply.bytes().await {
        Ok(json) => actix_web::HttpResponse::build(status)
            .content_type("application/json")
            .body(json),
        Err(_) => actix_web::HttpResponse::BadGateway().finish(),
    }
}

/// `pass-through URL`: the bare proxy on an ephemeral loopback port (printed first on stdout),
/// one actix-web worker per core as the service has, each with its own reqwest client.
pub fn pass_through(upstream: &str) -> std::io::Result<()> {
    use actix_web::{web, App, HttpServer};

    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    println!("{}", listener.local_addr()?.port());
    let url = format!("{upstream}/v1/chat/completions");
    actix_web::rt::System::new().block_on(
        HttpServer::new(move || {
            App::new()
                .app_data(web::Data::new(Forward {
                    client: reqwest::Client::new(),
                    url: url.clone(),
                }))
                .app_data(web::JsonConfig::default().limit(8 << 20))
                .route("/api/agent/react_step", web::post().to(forward))
                .route("/forward-text", web::post().to(forward_text))
        })
        .listen(listener)?
        .run(),
    )
}

// ---------------------------------------------------------------------------------------------
// Children

/// A child process, killed when dropped, and by the kernel when this process dies.
pub struct Process(Child);

impl Process {
    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

impl From<Child> for Process {
    fn from(child: Child) -> Self {
        Self(child)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A command whose process the kernel kills when this one ends, however it ends. Spawn it from
/// the main thread: the signal follows the thread that forked, not the process.
pub fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        let parent = std::process::id();
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                // The parent may have died before the prctl: then nobody would kill this one.
                if libc::getppid() as u32 != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
    command
}

/// Starts this binary with a hidden subcommand and reads the port it serves on.
pub fn start_helper(args: &[&str]) -> (Process, u16) {
    let exe = std::env::current_exe().unwrap();
    let mut child = command(exe)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{args:?} did not say its port"));
    (Process(child), port)
}

/// The release service: `REACTSTEP_BIN` where it is set (a prebuilt binary), else the one next
/// to this example (`target/release/reactstep`), whatever the target folder is.
pub fn release_binary() -> PathBuf {
    if let Some(binary) = std::env::var_os("REACTSTEP_BIN") {
        return PathBuf::from(binary);
    }
    let exe = std::env::current_exe().unwrap();
    let release = exe.parent().and_then(Path::parent).unwrap();
    release.join("reactstep")
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The release service with its defaults (logging included, unless `RUST_LOG` says otherwise),
/// its OpenAI base URL pointed at the mock.
pub fn start_service(mock_port: u16) -> (Process, u16) {
    let port = free_port();
    let binary = release_binary();
    let child = command(&binary)
        .env("REACTSTEP_BIND", format!("127.0.0.1:{port}"))
        .env(
            "REACTSTEP_OPENAI_BASE_URL",
            format!("http://127.0.0.1:{mock_port}/v1"),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (cargo build --release first)", binary.display()));
    (Process(child), port)
}

pub async fn wait_ready(client: &reqwest::Client, port: u16) {
    for _ in 0..400 {
        let ready = client
            .get(format!("http://127.0.0.1:{port}/readyz"))
            .send()
            .await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the service did not become ready on port {port}");
}

// ---------------------------------------------------------------------------------------------
// Measuring

pub struct Target {
    pub name: String,
    pub url: String,
    pub body: PathBuf,
}

#[derive(Clone, Copy, Default)]
pub struct Figures {
    pub rps: f64,
    /// Seconds.
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub errors: u64,
    pub requests: u64,
    /// What the service said it added (`X-Reactstep-Overhead-Ms`), seconds, at p50 and p99
    /// (NaN: not told).
    pub own_p50: f64,
    pub own_p99: f64,
    /// CPU time of the process that served the requests, per request, in µs (0: not measured).
    pub cpu_us: f64,
    /// CPU time of the whole machine (every process and the kernel, steal excluded), per
    /// request, in µs.
    pub machine_us: f64,
}

/// CPU used so far, in clock ticks: by one process (user and system), and by the whole machine
/// (all but idle, I/O wait and steal).
#[derive(Clone, Copy)]
struct Cpu {
    process: u64,
    machine: u64,
}

/// A `stat` line's command name (in parentheses) and its CPU ticks, user and system. After the
/// name, field 3 (state) comes first: utime and stime (fields 14 and 15) are the 12th and 13th.
pub fn stat_ticks(stat: &str) -> Option<(String, u64)> {
    let (head, rest) = stat.rsplit_once(')')?;
    let name = head.split_once('(')?.1.to_string();
    let fields: Vec<u64> = rest
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    Some((name, fields.get(11)? + fields.get(12)?))
}

impl Cpu {
    fn now(pid: u32) -> Self {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let process = stat_ticks(&stat).map_or(0, |(_, ticks)| ticks);
        let all = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let ticks: Vec<u64> = all
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .map(|t| t.parse().unwrap_or(0))
            .collect();
        // user nice system idle iowait irq softirq steal: busy is all but idle and iowait, and
        // steal (time the hypervisor gave to others is not this machine's work).
        let total: u64 = ticks.iter().take(7).sum();
        let machine = total - ticks.get(3).unwrap_or(&0) - ticks.get(4).unwrap_or(&0);
        Self { process, machine }
    }

    /// Fills in the figures' CPU per request since `before`.
    fn since(self, before: Self, figures: &mut Figures) {
        // SAFETY: sysconf only reads a constant of the system.
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let per_request =
            |ticks: u64| ticks as f64 / per_second * 1e6 / figures.requests.max(1) as f64;
        figures.cpu_us = per_request(self.process - before.process);
        figures.machine_us = per_request(self.machine - before.machine);
    }
}

pub fn oha_args(url: &str, body: &Path, seconds: u64, concurrency: u64) -> Vec<String> {
    [
        "--no-tui",
        "--output-format",
        "json",
        "-z",
        &format!("{seconds}s"),
        "-w",
        "-c",
        &concurrency.to_string(),
        "-m",
        "POST",
        "-H",
        "content-type: application/json",
        "-D",
        &body.display().to_string(),
        url,
    ]
    .iter()
    .map(ToString::to_string)
    .collect()
}

/// One `oha` run; its JSON summary read into figures.
fn drive(oha: &str, target: &Target, seconds: u64, concurrency: u64) -> Figures {
    let args = oha_args(&target.url, &target.body, seconds, concurrency);
    drive_with(oha, &target.name, &args)
}

/// One `oha` run with these arguments (`oha_args` and more); its JSON summary read into figures.
pub fn drive_with(oha: &str, name: &str, args: &[String]) -> Figures {
    let output = command(oha)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{oha}: {e}"));
    assert!(output.status.success(), "{oha} failed on {name}");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{oha} did not print JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    });
    let count = |key: &str, ok: fn(&str) -> bool| -> u64 {
        report[key]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| ok(k))
                    .filter_map(|(_, v)| v.as_u64())
                    .sum()
            })
            .unwrap_or(0)
    };
    let statuses = count("statusCodeDistribution", |_| true);
    let not_ok = count("statusCodeDistribution", |k| k != "200");
    let failed = count("errorDistribution", |_| true);
    let seconds_at = |p: &str| report["latencyPercentiles"][p].as_f64().unwrap_or(f64::NAN);
    Figures {
        rps: report["summary"]["requestsPerSec"].as_f64().unwrap_or(0.0),
        p50: seconds_at("p50"),
        p90: seconds_at("p90"),
        p99: seconds_at("p99"),
        errors: not_ok + failed,
        requests: statuses + failed,
        ..Figures::default()
    }
}

/// The size of the last body the mock upstream read.
async fn upstream_bytes(client: &reqwest::Client, mock_url: &str) -> usize {
    let reply = client.get(mock_url).send().await.unwrap();
    reply.text().await.unwrap().parse().unwrap()
}

/// One request before the load: the target must answer 200 with what it should.
pub async fn check(client: &reqwest::Client, target: &Target, expect: fn(&Value) -> bool) -> Value {
    let body = std::fs::read(&target.body).unwrap();
    let reply = client
        .post(&target.url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = reply.status();
    let json: Value = reply.json().await.unwrap_or(Value::Null);
    assert!(
        status == 200 && expect(&json),
        "{} answered {status}: {json}",
        target.name
    );
    json
}

pub fn ms(seconds: f64) -> String {
    let ms = seconds * 1e3;
    if ms.abs() < 10.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

pub fn added(seconds: f64) -> String {
    let sign = if seconds < -5e-6 { "−" } else { "+" };
    format!("{sign}{}", ms(seconds.abs()))
}

pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A table row: the figures, then the ratio and added latency against each floor (the
/// pass-through sending a small fixed request, and the one forwarding the step's text).
fn row(name: &str, f: &Figures, floors: [&Figures; 2]) -> String {
    let mut out = format!(
        "| {name} | {:.0} | {} | {} | {} | {} / {} |",
        f.rps,
        ms(f.p50),
        ms(f.p90),
        ms(f.p99),
        f.errors,
        f.requests,
    );
    for floor in floors {
        out.push_str(&format!(
            " {:.2}× | {} | {} |",
            f.rps / floor.rps,
            added(f.p50 - floor.p50),
            added(f.p99 - floor.p99),
        ));
    }
    out.push_str(&format!(" {:.0} | {:.0} |", f.cpu_us, f.machine_us));
    out
}

fn mean(figures: &[Figures]) -> Figures {
    let n = figures.len() as f64;
    let sum = |f: fn(&Figures) -> f64| figures.iter().map(f).sum::<f64>() / n;
    Figures {
        rps: sum(|f| f.rps),
        p50: sum(|f| f.p50),
        p90: sum(|f| f.p90),
        p99: sum(|f| f.p99),
        errors: figures.iter().map(|f| f.errors).sum(),
        requests: figures.iter().map(|f| f.requests).sum(),
        own_p50: sum(|f| f.own_p50),
        own_p99: sum(|f| f.own_p99),
        cpu_us: sum(|f| f.cpu_us),
        machine_us: sum(|f| f.machine_us),
    }
}

/// The bodies, written next to the binaries so that a run can be repeated by hand (and
/// `scripts/callgrind_service.sh` can send them): the typical one, the same with
/// `mock_response`, and the loop's steps.
pub fn write_bodies() -> (PathBuf, PathBuf, Vec<PathBuf>) {
    let dir = release_binary().with_file_name("load-compare");
    std::fs::create_dir_all(&dir).unwrap();
    let typical = typical_body();
    let mut offline = typical.clone();
    offline["mock_response"] = MODEL_OUTPUT.into();
    let typical_file = write_body(&dir, "typical.json", &typical);
    let offline_file = write_body(&dir, "typical-mock-response.json", &offline);
    let step_files = loop_bodies()
        .iter()
        .enumerate()
        .map(|(n, body)| write_body(&dir, &format!("loop-step-{}.json", n + 1), body))
        .collect();
    (typical_file, offline_file, step_files)
}

pub fn write_body(dir: &Path, name: &str, body: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec(body).unwrap()).unwrap();
    path
}

pub fn is_step(json: &Value) -> bool {
    json["status"] == "action_proposed" && json["action_details"]["tool_name"] == "read_file"
}

fn is_completion(json: &Value) -> bool {
    json["choices"][0]["message"]["content"] == MODEL_OUTPUT
}

/// The whole comparison. Call from the main thread (see `command`).
pub async fn run(seconds: u64, concurrency: u64) {
    let oha = std::env::var("OHA").unwrap_or_else(|_| "oha".into());
    let oha_version = command(&oha)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| panic!("{oha}: {e} (scripts/load.sh compare installs it)"));
    let load_before = load_average();

    let (typical_file, offline_file, step_files) = write_bodies();
    let steps = loop_bodies();

    let (mock_process, mock_port) = start_helper(&["mock-upstream"]);
    let mock_url = format!("http://127.0.0.1:{mock_port}");
    let (pass_process, pass_port) = start_helper(&["pass-through", &mock_url]);
    let (service_process, service_port) = start_service(mock_port);
    let client = reqwest::Client::new();
    wait_ready(&client, service_port).await;

    let service_url = format!("http://127.0.0.1:{service_port}/api/agent/react_step");
    let target = |name: &str, url: &str, body: &Path| Target {
        name: name.to_string(),
        url: url.to_string(),
        body: body.to_path_buf(),
    };
    let mock_target = target(
        "mock upstream alone",
        &format!("{mock_url}/v1/chat/completions"),
        &typical_file,
    );
    let pass_target = target(
        "actix-web + reqwest pass-through",
        &format!("http://127.0.0.1:{pass_port}/api/agent/react_step"),
        &typical_file,
    );
    let text_pass_target = target(
        "pass-through forwarding the step's text",
        &format!("http://127.0.0.1:{pass_port}/forward-text"),
        &typical_file,
    );
    let service_target = target("reactstep, typical body", &service_url, &typical_file);
    let offline_target = target(
        "reactstep, typical body with `mock_response` (no upstream)",
        &service_url,
        &offline_file,
    );
    let step_targets: Vec<Target> = step_files
        .iter()
        .enumerate()
        .map(|(n, file)| {
            let turns = steps[n]["conversation_history"].as_array().unwrap().len();
            target(
                &format!("reactstep, loop step {} ({turns} turns)", n + 1),
                &service_url,
                file,
            )
        })
        .collect();

    // Each target answers correctly before it is loaded; the service's prompt sizes are noted.
    // What each sends upstream with the typical body is noted too.
    check(&client, &mock_target, is_completion).await;
    check(&client, &pass_target, is_completion).await;
    let pass_sends = upstream_bytes(&client, &mock_url).await;
    check(&client, &text_pass_target, is_completion).await;
    let text_pass_sends = upstream_bytes(&client, &mock_url).await;
    let mut prompt_tokens = Vec::new();
    let mut service_sends = 0;
    for t in std::iter::once(&service_target).chain(&step_targets) {
        let json = check(&client, t, is_step).await;
        prompt_tokens.push(json["context_report"]["used"].as_u64().unwrap_or(0));
        if service_sends == 0 {
            service_sends = upstream_bytes(&client, &mock_url).await;
        }
    }
    check(&client, &offline_target, is_step).await;

    // Each target with the process that serves it, whose CPU time is read around the run.
    let measure = |t: &Target, serving: &Process| {
        eprintln!("driving {} for {seconds} s", t.name);
        drive(&oha, t, 1, concurrency); // warm-up: connections, caches
        let before = Cpu::now(serving.id());
        let mut figures = drive(&oha, t, seconds, concurrency);
        Cpu::now(serving.id()).since(before, &mut figures);
        figures
    };
    let mock = measure(&mock_target, &mock_process);
    let pass = measure(&pass_target, &pass_process);
    let text_pass = measure(&text_pass_target, &pass_process);
    let service = measure(&service_target, &service_process);
    let offline = measure(&offline_target, &service_process);
    let loop_figures: Vec<Figures> = step_targets
        .iter()
        .map(|t| measure(t, &service_process))
        .collect();
    let load_after = load_average();

    let size = |file: &Path| std::fs::metadata(file).map(|m| m.len()).unwrap_or(0) as f64 / 1e3;
    let mut out = std::io::stdout().lock();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let _ = writeln!(out, "command: scripts/load.sh {}", args.join(" "));
    let _ = writeln!(
        out,
        "each target: {oha_version}, {seconds} s at concurrency {concurrency} after a 1 s warm-up, keep-alive"
    );
    let _ = writeln!(
        out,
        "  e.g. {oha} {}",
        oha_args(&service_target.url, &typical_file, seconds, concurrency)
            .iter()
            .map(|a| if a.contains(' ') {
                format!("'{a}'")
            } else {
                a.clone()
            })
            .collect::<Vec<_>>()
            .join(" ")
    );
    let _ = writeln!(
        out,
        "cores: {}; load average before: {load_before}; after: {load_after}",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let _ = writeln!(
        out,
        "typical body: {:.1} KB, {} prompt tokens; loop steps 1–10: {:.1}–{:.1} KB, {}–{} prompt tokens",
        size(&typical_file),
        prompt_tokens[0],
        size(&step_files[0]),
        size(&step_files[step_files.len() - 1]),
        prompt_tokens[1],
        prompt_tokens[prompt_tokens.len() - 1],
    );
    let _ = writeln!(
        out,
        "upstream body for the typical body: pass-through {:.1} KB, text pass-through {:.1} KB, reactstep {:.1} KB",
        pass_sends as f64 / 1e3,
        text_pass_sends as f64 / 1e3,
        service_sends as f64 / 1e3,
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| target | req/s | p50 | p90 | p99 | errors | ÷ pass-through | added p50 | added p99 | ÷ text pass-through | added p50 | added p99 | CPU µs/req, serving process | CPU µs/req, machine |"
    );
    let _ = writeln!(
        out,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let floors = [&pass, &text_pass];
    for (name, f) in [
        (&mock_target.name, &mock),
        (&pass_target.name, &pass),
        (&text_pass_target.name, &text_pass),
        (&service_target.name, &service),
        (&offline_target.name, &offline),
    ] {
        let _ = writeln!(out, "{}", row(name, f, floors));
    }
    for (t, f) in step_targets.iter().zip(&loop_figures) {
        let _ = writeln!(out, "{}", row(&t.name, f, floors));
    }
    let _ = writeln!(
        out,
        "{}",
        row(
            "reactstep, loop steps 1–10, mean",
            &mean(&loop_figures),
            floors
        )
    );
    let all_errors = [mock, pass, text_pass, service, offline]
        .iter()
        .chain(&loop_figures)
        .map(|f| f.errors)
        .sum::<u64>();
    assert_eq!(all_errors, 0, "every request must be answered 200");
}
