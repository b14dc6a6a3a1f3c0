//! Issue 17, parts 5 and 6: a prompt laid out for caching, and the providers' caching switched on.
//!
//! Part 5 is measured as a provider's prefix cache sees it. A recorded 10-step ReAct loop is
//! driven like a real client (the history grows, the tagged files persist, the focused file and
//! the search hits change every step). From what the mock upstream received, each request is
//! serialised in the order the provider caches it (OpenAI: `tools`, then each message; Anthropic:
//! `tools`, `system`, then each message, without `cache_control` markers, which do not change the
//! cached text), and each step's prompt is compared with the previous step's.
//!
//! The loop's sizes are chosen so that a correct layout can reach the target: each step
//! must add something new (the latest tool output of 1 to 6 KB, the focused file, the search
//! hits), and that is under a tenth of the prompt only when the stable part is large, as it is
//! for IDE agents (a dozen tools with long descriptions, three tagged files of 12 to 16 KB).
//! `the_loop_leaves_a_correct_layout_room_for_the_target` checks that.
//!
//! Part 6: Anthropic `cache_control` breakpoints, checked by a mock that refuses what the real API
//! refuses, and OpenAI's `prompt_cache_key`.

use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{json, Value};
use wiremock::{Mock, Request, Respond, ResponseTemplate};

use crate::support::app::{spawn_app, TestApp};
use crate::support::requests::request;
use crate::support::upstream::{
    anthropic_reply, anthropic_tool_reply, openai_reply, openai_tool_reply, ANTHROPIC_PATH,
    OPENAI_PATH,
};

const STEPS: usize = 10;
const QUERY: &str = "Why does login fail after the session token is refreshed?";
/// The size of each tool's output, in bytes: observation k answers the call of step k.
const OBSERVATION_BYTES: [usize; STEPS - 1] =
    [1000, 3400, 1800, 5800, 1200, 2500, 4300, 1000, 2100];

// ---------------------------------------------------------------------------------------------
// The mock upstream

/// Anthropic's rules for `cache_control`, as the API enforces them: at most 4 breakpoints in the
/// whole request, each `{"type": "ephemeral"}` (with an optional `ttl` of 5m or 1h), and none on
/// an empty text block.
fn cache_control_rules(body: &Value) -> Result<(), String> {
    let found = marked(body);
    if found.len() > 4 {
        return Err(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {}.",
            found.len()
        ));
    }
    for (at, holder) in &found {
        let marker = &holder["cache_control"];
        let known_keys = marker
            .as_object()
            .is_some_and(|m| m.keys().all(|k| k == "type" || k == "ttl"));
        let ttl = marker.get("ttl").is_none_or(|t| t == "5m" || t == "1h");
        if marker["type"] != "ephemeral" || !known_keys || !ttl {
            return Err(format!("{at}.cache_control: invalid marker {marker}"));
        }
        if holder["type"] == "text" && holder["text"].as_str().is_some_and(str::is_empty) {
            return Err(format!(
                "{at}: cache_control cannot be set for empty text blocks"
            ));
        }
    }
    Ok(())
}

/// Every object in `body` that carries a `cache_control` marker, with its JSON pointer.
fn marked(body: &Value) -> Vec<(String, Value)> {
    fn walk(value: &Value, at: String, found: &mut Vec<(String, Value)>) {
        match value {
            Value::Object(map) => {
                if map.contains_key("cache_control") {
                    found.push((at.clone(), value.clone()));
                }
                for (key, child) in map {
                    walk(child, format!("{at}/{key}"), found);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(child, format!("{at}/{i}"), found);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    walk(body, String::new(), &mut found);
    found
}

/// Answers each call with the next scripted reply; an Anthropic request that breaks the
/// `cache_control` rules gets the 400 the real API sends.
struct Upstream {
    anthropic: bool,
    replies: Vec<Value>,
    next: AtomicUsize,
}

impl Respond for Upstream {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        if self.anthropic {
            if let Err(why) = cache_control_rules(&body) {
                return ResponseTemplate::new(400).set_body_json(json!({
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": why}
                }));
            }
        }
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        ResponseTemplate::new(200)
            .set_body_json(self.replies[n.min(self.replies.len() - 1)].clone())
    }
}

fn messages_path(anthropic: bool) -> &'static str {
    if anthropic {
        ANTHROPIC_PATH
    } else {
        OPENAI_PATH
    }
}

async fn mount_upstream(app: &TestApp, anthropic: bool, replies: Vec<Value>) {
    Mock::given(wiremock::matchers::path(messages_path(anthropic)))
        .respond_with(Upstream {
            anthropic,
            replies,
            next: AtomicUsize::new(0),
        })
        .mount(&app.llm)
        .await;
}

/// The bodies sent to the provider's chat endpoint, in order. Only that path: a Claude prompt
/// near its budget is also sent to `count_tokens`, which these mocks leave unanswered (404), so
/// the prompt stays fitted with the margin.
async fn sent_to(app: &TestApp, path: &str) -> Vec<Value> {
    app.llm
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.url.path() == path)
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// What a client sends

/// About `bytes` of deterministic Rust-like source, different for every `seed`.
fn source(seed: &str, bytes: usize) -> String {
    let mut text = String::new();
    let mut n = 1usize;
    while text.len() < bytes {
        let line = match n % 4 {
            1 => format!("pub fn {seed}_{n}(input: &str) -> Result<usize, Error> {{\n"),
            2 => format!(
                "    let value = input.len().checked_mul({}).ok_or(Error::Overflow)?;\n",
                n * 37 % 101
            ),
            3 => format!("    tracing::debug!(value, \"{seed} step {n}\");\n"),
            _ => "    Ok(value)\n}\n\n".to_string(),
        };
        text.push_str(&line);
        n += 1;
    }
    text
}

/// The first `n` of an IDE agent's tools, with the long descriptions real ones have (about 1.3 KB
/// each; six of them pass 1,024 tokens, the minimum cacheable length of Claude Sonnet).
fn tools(n: usize) -> Value {
    let tool = |name: &str, what: &str, params: &[(&str, &str, &str)]| {
        let properties: serde_json::Map<String, Value> = params
            .iter()
            .map(|(p, kind, about)| (p.to_string(), json!({"type": kind, "description": about})))
            .collect();
        let required: Vec<&str> = params.iter().take(1).map(|p| p.0).collect();
        json!({
            "name": name,
            "description": format!("{what} Use it whenever the task needs it, prefer it over guessing, \
        and read its result carefully before the next step: the result is the ground truth about the \
        workspace. Paths are relative to the workspace root; never pass absolute paths or paths with '..'. \
        If the tool fails, the observation says why; fix the arguments rather than repeating the call.\n\n\
        Usage notes for {name}:\n\
        - Call {name} once per step; its output may be cut when it is long, so narrow the request \
        instead of asking again for the same thing.\n\
        - Do not call {name} to confirm something an earlier observation already showed.\n\
        - When {name} reports an error about its arguments, read the message: it names the argument \
        and the value expected.\n\
        - Prefer {name} over asking the user when the answer is in the workspace."),
            "parameters": {"type": "object", "properties": properties, "required": required}
        })
    };
    let all = [
        tool(
            "read_file",
            "Read a file of the workspace, whole or a line range.",
            &[
                (
                    "path",
                    "string",
                    "The file to read, relative to the workspace root.",
                ),
                ("start_line", "integer", "The first line to read (1-based)."),
                ("end_line", "integer", "The last line to read (inclusive)."),
            ],
        ),
        tool(
            "list_dir",
            "List the entries of a directory of the workspace.",
            &[
                (
                    "path",
                    "string",
                    "The directory, relative to the workspace root.",
                ),
                (
                    "depth",
                    "integer",
                    "How many levels to descend (default 1).",
                ),
            ],
        ),
        tool(
            "code_search",
            "Search the workspace semantically for code that matches a description.",
            &[
                ("query", "string", "What to look for, in plain words."),
                ("limit", "integer", "The most hits to return (default 10)."),
            ],
        ),
        tool(
            "grep_search",
            "Search the workspace's files for a regular expression.",
            &[
                ("pattern", "string", "A Rust regular expression."),
                ("glob", "string", "Only files whose path matches this glob."),
            ],
        ),
        tool(
            "edit_file",
            "Replace an exact span of a file with new text.",
            &[
                ("path", "string", "The file to edit."),
                (
                    "old_text",
                    "string",
                    "The exact text to replace; it must occur once.",
                ),
                ("new_text", "string", "The text to put in its place."),
            ],
        ),
        tool(
            "create_file",
            "Create a new file with the given content.",
            &[
                (
                    "path",
                    "string",
                    "The file to create; its directory must exist.",
                ),
                ("content", "string", "The whole content of the file."),
            ],
        ),
        tool(
            "run_terminal_command",
            "Run a shell command in the workspace and return its output.",
            &[
                ("command", "string", "The command line, run by /bin/sh -c."),
                (
                    "timeout_secs",
                    "integer",
                    "Stop the command after this many seconds.",
                ),
            ],
        ),
        tool(
            "run_tests",
            "Run the project's tests, or the ones whose names match a filter.",
            &[(
                "filter",
                "string",
                "Only tests whose names contain this text.",
            )],
        ),
        tool(
            "get_diagnostics",
            "The compiler's and linter's diagnostics for a file.",
            &[("path", "string", "The file whose diagnostics to return.")],
        ),
        tool(
            "git_diff",
            "The uncommitted changes of the workspace, as a unified diff.",
            &[("path", "string", "Only the changes under this path.")],
        ),
        tool(
            "web_fetch",
            "Fetch a documentation page from the web as plain text.",
            &[("url", "string", "An https URL.")],
        ),
        tool(
            "ask_user",
            "Ask the user a question when the task is ambiguous.",
            &[("question", "string", "One short, specific question.")],
        ),
    ];
    Value::Array(all.into_iter().take(n).collect())
}

/// The files the user tagged: they persist across the whole loop.
fn persistent_files() -> Value {
    json!([
        {"path": "src/auth/session.rs", "content": source("session", 16_000)},
        {"path": "src/auth/token.rs", "content": source("token", 14_000)},
        {"path": "src/auth/middleware.rs", "content": source("middleware", 12_000)},
    ])
}

/// What the model reads at `step`.
fn read_path(step: usize) -> String {
    format!("src/handlers/step_{step:02}.rs")
}

/// The file open in the editor at `step`: the one the model read last, so it moves every step.
fn focused_file(step: usize) -> Value {
    let (path, seed) = if step == 1 {
        ("src/main.rs".to_string(), "main".to_string())
    } else {
        (read_path(step - 1), format!("focused_{step}"))
    };
    json!({"last_focused_file_path": path, "last_focused_file_content": source(&seed, 800 + 50 * step)})
}

/// The search hits of `step`: new ones every step.
fn search_hits(step: usize) -> Value {
    (0..2)
        .map(|i| {
            json!({"path": format!("src/hits/h{step}_{i}.rs"), "content": source(&format!("hit{step}_{i}"), 220),
                   "score": 0.9 - 0.1 * i as f64, "start_line": 10 * i + 1, "end_line": 10 * i + 8})
        })
        .collect()
}

/// What the tool returned for the call of `step`.
fn observation(step: usize) -> String {
    source(&format!("module_{step:02}"), OBSERVATION_BYTES[step - 1])
}

// ---------------------------------------------------------------------------------------------
// The recorded loop

#[derive(Debug, Clone, Copy)]
struct Variant {
    anthropic: bool,
    native: bool,
    overflow: bool,
}

impl Variant {
    fn model(self) -> &'static str {
        if self.anthropic {
            "claude-sonnet-4-5"
        } else {
            "gpt-4o"
        }
    }

    /// Large enough for everything, or small enough that the history is cut from step 4 or 5 on:
    /// what the first step sends (about 14.8K tokens for OpenAI's count, 20.7K for Claude's,
    /// which has a 40 % margin; native tools count a little more), plus 1,000 for the answer,
    /// plus room for about 3.7K tokens of history. That room holds any three consecutive tool
    /// outputs of the loop, so a layout that drops old turns in blocks can keep to one break
    /// every three steps.
    fn token_limit(self) -> u64 {
        match (self.overflow, self.anthropic, self.native) {
            (false, _, _) => 128_000,
            (true, false, false) => 20_600,
            (true, false, true) => 21_100,
            (true, true, false) => 28_500,
            (true, true, true) => 29_100,
        }
    }

    /// The model's reply at `step`: a tool call, and at the last step the final answer.
    fn reply(self, step: usize) -> Value {
        let thought = format!(
            "Step {step}: the next clue should be in {}.",
            read_path(step)
        );
        let path = read_path(step);
        match (step == STEPS, self.anthropic, self.native) {
            (true, false, _) => openai_reply(
                "Thought: I have found it.\nFinal Answer: the refresh drops the old session.",
            ),
            (true, true, _) => anthropic_reply(
                "Thought: I have found it.\nFinal Answer: the refresh drops the old session.",
            ),
            (false, false, false) => openai_reply(&format!(
                "Thought: {thought}\nAction: read_file(path=\"{path}\")"
            )),
            (false, true, false) => anthropic_reply(&format!(
                "Thought: {thought}\nAction: read_file(path=\"{path}\")"
            )),
            (false, false, true) => {
                let args = json!({"path": path}).to_string();
                let mut reply = openai_tool_reply(Some(&thought), "read_file", &args);
                reply["choices"][0]["message"]["tool_calls"][0]["id"] =
                    json!(format!("call_{step:02}Jh7dWJ0FqVp2Yd4yXU3t"));
                reply
            }
            (false, true, true) => {
                let mut reply = anthropic_tool_reply(&thought, "read_file", json!({"path": path}));
                reply["content"][1]["id"] = json!(format!("toolu_01A09q90qw90lq9178{step:02}"));
                reply
            }
        }
    }

    fn body(self, step: usize, history: Value, iterations_left: u64) -> Value {
        let mut body = request(self.model(), if step == 1 { QUERY } else { "" });
        body["session_id"] = json!("5c2f7a1f-0000-4000-8000-0000000000aa");
        body["conversation_history"] = history;
        body["max_iterations_left"] = json!(iterations_left);
        body["explicit_context"] = persistent_files();
        body["explicit_context_paths"] = json!([
            "src/auth/session.rs",
            "src/auth/token.rs",
            "src/auth/middleware.rs"
        ]);
        body["implicit_context"] = focused_file(step);
        body["vector_search_results_to_include"] = search_hits(step);
        body["available_tools_prompt_segment"] = Value::Null;
        body["tools"] = tools(12);
        body["llm_config"]["tool_mode"] = json!(if self.native { "native" } else { "text" });
        body["llm_config"]["tokenLimit"] = json!(self.token_limit());
        // Room for the longest tool output whole even by Claude's count, so that only the
        // history's overflow cuts anything.
        body["max_observation_tokens"] = json!(4000);
        if self.overflow {
            // The files are served before the history, so that they persist (and keep the
            // prefix) while the history overflows; by default the history would come first.
            // This step's focused file and search hits are served before the history too, so
            // that what overflows is the history, and what changes every step is still sent.
            body["context_priority"] = json!([
                "explicit",
                "implicit",
                "vector_search",
                "conversation_history"
            ]);
        }
        body
    }
}

/// Runs the 10 steps as a client does; what the upstream received and each step's response.
async fn run_loop(v: Variant) -> (Vec<Value>, Vec<Value>) {
    let app = spawn_app().await;
    mount_upstream(&app, v.anthropic, (1..=STEPS).map(|s| v.reply(s)).collect()).await;
    let mut history = json!([]);
    let mut iterations_left = STEPS as u64;
    let mut responses = Vec::new();
    for step in 1..=STEPS {
        let reply = app
            .post_react_step(&v.body(step, history, iterations_left))
            .await;
        assert_eq!(reply.status, 200, "{v:?} step {step}: {}", reply.text);
        let status = if step < STEPS {
            "action_proposed"
        } else {
            "direct_response_provided"
        };
        assert_eq!(
            reply.body["status"], status,
            "{v:?} step {step}: {}",
            reply.text
        );
        history = reply.body["updated_conversation_history"].clone();
        if step < STEPS {
            let output = observation(step);
            history.as_array_mut().unwrap().push(json!({
                "role": "tool_observation",
                "content": output,
                "tool_call_id": reply.body["action_details"]["tool_call_id"],
                "toolResult": {"success": true, "result": output}
            }));
        }
        iterations_left = reply.body["iterations_remaining"].as_u64().unwrap();
        responses.push(reply.body);
    }
    let sent = sent_to(&app, messages_path(v.anthropic)).await;
    assert_eq!(sent.len(), STEPS, "{v:?}: one upstream call per step");
    (sent, responses)
}

// ---------------------------------------------------------------------------------------------
// The measure

/// `value` without its `cache_control` markers.
fn unmarked(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| *k != "cache_control")
                .map(|(k, v)| (k.clone(), unmarked(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(unmarked).collect()),
        other => other.clone(),
    }
}

/// A request's prompt in the order the provider caches it, and where its history ends: the end
/// of its last assistant message, after which only what was new at that step follows (0 when
/// there is none).
fn cached_order(body: &Value) -> (String, usize) {
    let body = unmarked(body);
    let mut text = String::new();
    for part in ["tools", "system"] {
        if let Some(value) = body.get(part) {
            text.push_str(&value.to_string());
        }
    }
    let mut history_end = 0;
    for message in body["messages"].as_array().into_iter().flatten() {
        text.push_str(&message.to_string());
        if message["role"] == "assistant" {
            history_end = text.len();
        }
    }
    (text, history_end)
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

/// For steps 2..=10: the share of the prompt that is a byte-identical prefix of the previous
/// step's, and the steps that changed what the previous step had already sent as history.
fn stability(sent: &[Value]) -> (Vec<f64>, Vec<usize>) {
    let prompts: Vec<(String, usize)> = sent.iter().map(cached_order).collect();
    let mut ratios = Vec::new();
    let mut breaks = Vec::new();
    for (i, pair) in prompts.windows(2).enumerate() {
        let ((previous, history_end), (current, _)) = (&pair[0], &pair[1]);
        let shared = common_prefix(previous, current);
        ratios.push(shared as f64 / current.len() as f64);
        if shared < *history_end {
            breaks.push(i + 2);
        }
    }
    (ratios, breaks)
}

fn assert_stable_prefix(v: Variant, sent: &[Value]) {
    let (ratios, breaks) = stability(sent);
    let average = ratios.iter().sum::<f64>() / ratios.len() as f64;
    let shown: Vec<String> = ratios.iter().map(|r| format!("{r:.3}")).collect();
    eprintln!(
        "{v:?}: prefix kept, steps 2..=10: [{}], average {average:.3}; breaks at steps {breaks:?}",
        shown.join(", ")
    );
    assert!(
        average >= 0.90,
        "{v:?}: on average {average:.3} of each step's prompt is the previous step's prefix, \
         want at least 0.90: [{}]",
        shown.join(", ")
    );
    let most = (STEPS - 1).div_ceil(3);
    assert!(
        breaks.len() <= most,
        "{v:?}: the history already sent changed at steps {breaks:?}, at most {most} allowed"
    );
    assert!(
        breaks.windows(2).all(|w| w[1] - w[0] >= 3),
        "{v:?}: the history already sent changed at steps {breaks:?}: at most once every three steps"
    );
}

/// Whether every item of `source` in a step's context report has one of `fates`.
fn all_of(response: &Value, source: &str, fates: &[&str]) -> bool {
    response["context_report"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["source"] == source)
        .all(|i| fates.iter().any(|f| i["fate"] == *f))
}

/// The loop really is what its name says: without overflow the history is never cut; with it,
/// it is cut from step 6 or 7 on (3 to 7 passes). The persistent files are whole, and the
/// focused file is there, at every step.
fn assert_scenario(v: Variant, responses: &[Value]) {
    let cut: Vec<usize> = (1..=STEPS)
        .filter(|&s| !all_of(&responses[s - 1], "conversation_history", &["included"]))
        .collect();
    let used: Vec<&Value> = responses
        .iter()
        .map(|r| &r["context_report"]["used"])
        .collect();
    let dropped: Vec<usize> = responses
        .iter()
        .map(|r| {
            r["context_report"]["items"].as_array().map_or(0, |items| {
                items.iter().filter(|i| i["fate"] == "dropped").count()
            })
        })
        .collect();
    eprintln!(
        "{v:?}: prompt tokens {used:?}, history cut at steps {cut:?}, items dropped {dropped:?}"
    );
    for (step, response) in (1..=STEPS).zip(responses) {
        assert!(
            all_of(response, "explicit", &["included"]),
            "{v:?} step {step}: a persistent file was cut: {}",
            response["context_report"]
        );
        assert!(
            all_of(response, "implicit", &["included", "truncated"]),
            "{v:?} step {step}: the focused file was dropped: {}",
            response["context_report"]
        );
    }
    if v.overflow {
        assert!(
            cut.first().is_some_and(|&s| (3..=7).contains(&s)) && cut.contains(&STEPS),
            "{v:?}: the history should be cut from about step 6 or 7 to the end, was at {cut:?}"
        );
    } else {
        assert!(
            cut.is_empty(),
            "{v:?}: the history was cut at steps {cut:?}"
        );
    }
}

async fn loop_keeps_its_prefix(anthropic: bool, native: bool, overflow: bool) {
    let v = Variant {
        anthropic,
        native,
        overflow,
    };
    let (sent, responses) = run_loop(v).await;
    assert_scenario(v, &responses);
    assert_stable_prefix(v, &sent);
}

#[tokio::test]
async fn openai_text_loop_keeps_its_prefix() {
    loop_keeps_its_prefix(false, false, false).await;
}

#[tokio::test]
async fn openai_text_loop_keeps_its_prefix_when_the_history_overflows() {
    loop_keeps_its_prefix(false, false, true).await;
}

#[tokio::test]
async fn openai_native_loop_keeps_its_prefix() {
    loop_keeps_its_prefix(false, true, false).await;
}

#[tokio::test]
async fn openai_native_loop_keeps_its_prefix_when_the_history_overflows() {
    loop_keeps_its_prefix(false, true, true).await;
}

#[tokio::test]
async fn anthropic_text_loop_keeps_its_prefix() {
    loop_keeps_its_prefix(true, false, false).await;
}

#[tokio::test]
async fn anthropic_text_loop_keeps_its_prefix_when_the_history_overflows() {
    loop_keeps_its_prefix(true, false, true).await;
}

#[tokio::test]
async fn anthropic_native_loop_keeps_its_prefix() {
    loop_keeps_its_prefix(true, true, false).await;
}

#[tokio::test]
async fn anthropic_native_loop_keeps_its_prefix_when_the_history_overflows() {
    loop_keeps_its_prefix(true, true, true).await;
}

/// The measure itself: a prompt that only grows keeps all of the previous one; one whose front
/// changes keeps none, and counts as a break when the change reaches into the history.
#[test]
fn the_measure_sees_a_changed_front_and_a_changed_history() {
    let message = |role: &str, text: &str| json!({"role": role, "content": text});
    let system = |text: &str| message("system", text);
    let first = json!({"messages": [system("S"), message("user", "q"), message("assistant", "a1"),
        message("user", "o1")]});
    let grown = json!({"messages": [system("S"), message("user", "q"), message("assistant", "a1"),
        message("user", "o1"), message("assistant", "a2"), message("user", "o2")]});
    let (ratios, breaks) = stability(&[first.clone(), grown.clone()]);
    assert_eq!(
        ratios[0],
        cached_order(&first).0.len() as f64 / cached_order(&grown).0.len() as f64
    );
    assert!(breaks.is_empty());
    let mut front_changed = grown.clone();
    front_changed["messages"][0] = system("T");
    let (ratios, breaks) = stability(&[grown.clone(), front_changed]);
    assert!(ratios[0] < 0.2, "{ratios:?}");
    assert_eq!(breaks, [2]);
    // A marker is not a change.
    let mut marked_copy = grown.clone();
    marked_copy["messages"][1]["cache_control"] = json!({"type": "ephemeral"});
    assert_eq!(stability(&[grown, marked_copy]).0, [1.0]);
}

/// The loop's data leaves a correct layout room for the target: with everything stable first,
/// the history next and only the latest observation, the focused file and the search hits after
/// it, each step's unavoidable new part is small enough (a loop whose tool outputs outweigh
/// the stable part could not reach 0.90 however the prompt was laid out). Byte sizes of the
/// data alone: the service's instructions, which only add to the stable part, are left out.
#[test]
fn the_loop_leaves_a_correct_layout_room_for_the_target() {
    let head = tools(12).to_string().len() + persistent_files().to_string().len();
    let turn = |step: usize| observation(step).len() + 150;
    let changing =
        |step: usize| focused_file(step).to_string().len() + search_hits(step).to_string().len();
    let ratios: Vec<f64> = (2..=STEPS)
        .map(|step| {
            let kept = head + (1..step - 1).map(turn).sum::<usize>();
            let size = head + (1..step).map(turn).sum::<usize>() + changing(step);
            kept as f64 / size as f64
        })
        .collect();
    let average = ratios.iter().sum::<f64>() / ratios.len() as f64;
    eprintln!("head {head}: the best layout keeps {average:.3} on average: {ratios:.3?}");
    assert!(average >= 0.93, "{average:.3}: {ratios:.3?}");
}

// ---------------------------------------------------------------------------------------------
// Part 6: Anthropic breakpoints

const FOCUS_MARK: &str = "FOCUSED-FILE-MARK";
const HIT_MARK: &str = "VECTOR-HIT-MARK";

/// A step after two tool calls: the last assistant turn calls `toolu_hist_2` (its thought says
/// THOUGHT-TWO) and the latest observation (OBSERVATION-TWO) answers it; the focused file and a
/// search hit are this step's.
fn step_after_two_calls(model: &str, native: bool, big: bool) -> Value {
    let mut body = request(model, "");
    let turn = |n: &str, path: &str| {
        json!({"role": "assistant", "content": format!("THOUGHT-{n}: {path} decides it."),
               "toolCall": {"id": format!("toolu_hist_{n}"), "name": "read_file", "parameters": {"path": path}}})
    };
    let result = |n: &str, text: String| {
        json!({"role": "tool_observation", "content": format!("OBSERVATION-{n}\n{text}"),
               "tool_call_id": format!("toolu_hist_{n}")})
    };
    body["conversation_history"] = json!([
        {"role": "user", "content": QUERY},
        turn("ONE", "src/auth/session.rs"),
        result("ONE", source("obs_one", if big { 500 } else { 60 })),
        turn("TWO", "src/auth/token.rs"),
        result("TWO", source("obs_two", if big { 400 } else { 60 })),
    ]);
    body["implicit_context"] = json!({"last_focused_file_path": "src/lib.rs",
        "last_focused_file_content": format!("// {FOCUS_MARK}\n{}", source("lib", if big { 200 } else { 60 }))});
    body["vector_search_results_to_include"] = json!([{"path": "src/hit.rs", "content": format!("// {HIT_MARK}\nfn hit() {{}}\n"), "score": 0.8}]);
    body["available_tools_prompt_segment"] = Value::Null;
    body["tools"] = tools(if big { 6 } else { 1 });
    body["llm_config"]["tool_mode"] = json!(if native { "native" } else { "text" });
    body["llm_config"]["tokenLimit"] = json!(200_000);
    body
}

/// One step through the strict Anthropic mock; the body it received.
async fn anthropic_sent(body: &Value) -> Value {
    let app = spawn_app().await;
    mount_upstream(
        &app,
        true,
        vec![anthropic_reply("Thought: done.\nFinal Answer: it expires.")],
    )
    .await;
    let reply = app.post_react_step(body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    sent_to(&app, ANTHROPIC_PATH).await.pop().unwrap()
}

/// The size of a text in o200k tokens; Claude's own count runs up to 40 % above it.
fn o200k_tokens(text: &str) -> usize {
    tiktoken_rs::o200k_base_singleton()
        .encode_ordinary(text)
        .len()
}

/// Each message's content blocks in order, as (JSON pointer, the block's JSON); a string content
/// is one block that cannot carry a marker.
fn message_blocks(body: &Value) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    for (i, message) in body["messages"].as_array().unwrap().iter().enumerate() {
        match &message["content"] {
            Value::Array(items) => {
                for (j, block) in items.iter().enumerate() {
                    blocks.push((format!("/messages/{i}/content/{j}"), block.to_string()));
                }
            }
            other => blocks.push((format!("/messages/{i}/content"), other.to_string())),
        }
    }
    blocks
}

fn assert_breakpoints(sent: &Value, what: &str) {
    let markers: Vec<String> = marked(sent).into_iter().map(|(at, _)| at).collect();
    // After the tools and the system: on the last system block, or the last tool without one.
    let head = match &sent["system"] {
        Value::Array(blocks) if !blocks.is_empty() => format!("/system/{}", blocks.len() - 1),
        Value::String(_) => {
            panic!("{what}: the system is a string, which cannot carry a breakpoint")
        }
        _ => format!("/tools/{}", sent["tools"].as_array().unwrap().len() - 1),
    };
    assert!(
        markers.contains(&head),
        "{what}: no breakpoint at {head}: {markers:?}"
    );
    // On the last history block: at or after the last assistant turn, at the latest on the
    // latest observation, and never on a block holding this step's new context.
    let blocks = message_blocks(sent);
    let find = |needle: &str| {
        blocks
            .iter()
            .rposition(|(_, b)| b.contains(needle))
            .unwrap_or_else(|| panic!("{what}: {needle} was not sent"))
    };
    let (last_turn, latest_observation) = (find("THOUGHT-TWO"), find("OBSERVATION-TWO"));
    let last_marked = blocks
        .iter()
        .rposition(|(at, _)| markers.contains(at))
        .unwrap_or_else(|| panic!("{what}: no breakpoint in the messages: {markers:?}"));
    assert!(
        (last_turn..=latest_observation).contains(&last_marked),
        "{what}: the last breakpoint is on {}, not on the last history block ({} to {})",
        blocks[last_marked].0,
        blocks[last_turn].0,
        blocks[latest_observation].0
    );
    let block = &blocks[last_marked].1;
    assert!(
        !block.contains(FOCUS_MARK) && !block.contains(HIT_MARK),
        "{what}: the breakpoint's block holds this step's context: {block}"
    );
}

/// The checks themselves: a request cached as intended passes, one whose last breakpoint covers
/// this step's new context does not, and the mock refuses what Anthropic refuses.
#[test]
fn the_breakpoint_checks_pass_the_right_layout_only() {
    let mark = json!({"type": "ephemeral"});
    let text = |t: &str| json!({"type": "text", "text": t});
    let call = |n: &str| json!({"type": "tool_use", "id": format!("toolu_hist_{n}"), "name": "read_file", "input": {}});
    let result = |n: &str| json!({"type": "tool_result", "tool_use_id": format!("toolu_hist_{n}"), "content": format!("OBSERVATION-{n}")});
    let mut good = json!({
        "system": [text("instructions"), text("files")],
        "messages": [
            {"role": "user", "content": [text(QUERY)]},
            {"role": "assistant", "content": [text("THOUGHT-ONE"), call("ONE")]},
            {"role": "user", "content": [result("ONE")]},
            {"role": "assistant", "content": [text("THOUGHT-TWO"), call("TWO")]},
            {"role": "user", "content": [result("TWO"), text(FOCUS_MARK), text(HIT_MARK)]},
        ]
    });
    good["system"][1]["cache_control"] = mark.clone();
    good["messages"][4]["content"][0]["cache_control"] = mark.clone();
    assert_eq!(cache_control_rules(&good), Ok(()));
    assert_breakpoints(&good, "good");
    let mut on_new_context = good.clone();
    on_new_context["messages"][4]["content"][1]["cache_control"] = mark.clone();
    let caught = std::panic::catch_unwind(|| assert_breakpoints(&on_new_context, "bad"));
    assert!(caught.is_err(), "a breakpoint on the focused file passed");

    let mut five = good.clone();
    for at in [0, 1] {
        five["messages"][1]["content"][at]["cache_control"] = mark.clone();
    }
    five["messages"][3]["content"][0]["cache_control"] = mark.clone();
    assert!(cache_control_rules(&five).unwrap_err().contains("Found 5"));
    let mut persistent = good.clone();
    persistent["system"][1]["cache_control"] = json!({"type": "persistent"});
    assert!(cache_control_rules(&persistent).is_err());
    let mut hour = good.clone();
    hour["system"][1]["cache_control"] = json!({"type": "ephemeral", "ttl": "1h"});
    assert_eq!(cache_control_rules(&hour), Ok(()));
    let mut empty = good;
    empty["messages"][0]["content"][0] = json!({"type": "text", "text": "", "cache_control": mark});
    assert!(cache_control_rules(&empty)
        .unwrap_err()
        .contains("empty text"));
}

#[tokio::test]
async fn a_long_anthropic_prompt_gets_breakpoints_after_the_system_and_on_the_history() {
    for native in [false, true] {
        let what = format!("claude-sonnet-4-5, native: {native}");
        let sent = anthropic_sent(&step_after_two_calls("claude-sonnet-4-5", native, true)).await;
        // The tools alone pass Sonnet's 1,024-token minimum, wherever the files go.
        let tokens = o200k_tokens(&tools(6).to_string());
        assert!(
            tokens > 1100,
            "{what}: the test's tools are too short ({tokens} tokens)"
        );
        assert_breakpoints(&sent, &what);
    }
}

#[tokio::test]
async fn a_prompt_below_the_models_minimum_cacheable_length_gets_no_breakpoint() {
    // Short for every Claude model: under 1,024 tokens even with Claude's count 40 % higher.
    let sent = anthropic_sent(&step_after_two_calls("claude-sonnet-4-5", false, false)).await;
    let tokens = o200k_tokens(&cached_order(&sent).0);
    assert!(
        tokens * 14 / 10 < 1024,
        "the test's short prompt has {tokens} tokens"
    );
    assert!(
        marked(&sent).is_empty(),
        "a short prompt is not cached: {sent}"
    );
    // Between 1,024 and 4,096 tokens: Sonnet 4.5 caches it, Opus 4.5 and Haiku 4.5 cannot.
    for model in ["claude-sonnet-4-5", "claude-opus-4-5", "claude-haiku-4-5"] {
        let sent = anthropic_sent(&step_after_two_calls(model, true, true)).await;
        let tokens = o200k_tokens(&cached_order(&sent).0);
        assert!(
            (1500..2900).contains(&tokens),
            "{model}: the test's prompt has {tokens} tokens"
        );
        if model == "claude-sonnet-4-5" {
            assert!(!marked(&sent).is_empty(), "{model}: no breakpoint");
        } else {
            assert!(
                marked(&sent).is_empty(),
                "{model}: below its 4,096-token minimum: {sent}"
            );
        }
    }
}

#[tokio::test]
async fn prompt_cache_false_turns_anthropic_breakpoints_off() {
    let mut body = step_after_two_calls("claude-sonnet-4-5", true, true);
    let on = anthropic_sent(&body).await;
    assert!(!marked(&on).is_empty(), "caching is on by default");
    body["llm_config"]["prompt_cache"] = json!(false);
    let off = anthropic_sent(&body).await;
    assert!(marked(&off).is_empty(), "prompt_cache: false: {off}");
}

/// Over the 10-step loops every request passed the strict mock (`run_loop` asserts each step's
/// 200); here the breakpoints are also checked to be there once the prompt is long enough.
#[tokio::test]
async fn every_request_of_an_anthropic_loop_passes_the_cache_control_rules_and_is_cached() {
    for native in [false, true] {
        let v = Variant {
            anthropic: true,
            native,
            overflow: true,
        };
        let (sent, _) = run_loop(v).await;
        for (step, body) in (1..=STEPS).zip(&sent) {
            assert_eq!(cache_control_rules(body), Ok(()), "{v:?} step {step}");
            assert!(
                !marked(body).is_empty(),
                "{v:?} step {step}: a prompt of {} tokens has no breakpoint",
                o200k_tokens(&cached_order(body).0)
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Part 6: OpenAI's prompt_cache_key

const SESSION_A: &str = "5c2f7a1f-0000-4000-8000-00000000a11a";
const SESSION_B: &str = "5c2f7a1f-0000-4000-8000-00000000b22b";

/// The bodies OpenAI received for one step of each session, in order.
async fn openai_sent(sessions: &[&str], prompt_cache: Option<Value>) -> Vec<Value> {
    let app = spawn_app().await;
    mount_upstream(
        &app,
        false,
        vec![openai_reply("Thought: done.\nFinal Answer: it expires.")],
    )
    .await;
    for session in sessions {
        let mut body = request("gpt-4o", QUERY);
        body["session_id"] = json!(session);
        if let Some(flag) = &prompt_cache {
            body["llm_config"]["prompt_cache"] = flag.clone();
        }
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    sent_to(&app, OPENAI_PATH).await
}

#[tokio::test]
async fn openai_gets_a_prompt_cache_key_per_session_that_hides_the_session_id() {
    let sent = openai_sent(&[SESSION_A, SESSION_A, SESSION_B], None).await;
    let keys: Vec<&str> = sent
        .iter()
        .map(|b| {
            b["prompt_cache_key"]
                .as_str()
                .filter(|k| !k.is_empty())
                .unwrap_or_else(|| panic!("no prompt_cache_key in {}", b))
        })
        .collect();
    assert_eq!(keys[0], keys[1], "one session, one key");
    assert_ne!(keys[0], keys[2], "another session, another key");
    for (body, session) in sent.iter().zip([SESSION_A, SESSION_A, SESSION_B]) {
        assert!(
            !body.to_string().contains(session),
            "the raw session id went upstream: {body}"
        );
    }
}

#[tokio::test]
async fn prompt_cache_false_sends_openai_no_prompt_cache_key() {
    let on = openai_sent(&[SESSION_A], None).await;
    assert!(on[0]["prompt_cache_key"].is_string(), "on by default");
    let off = openai_sent(&[SESSION_A], Some(json!(false))).await;
    assert_eq!(off[0].get("prompt_cache_key"), None);
}

#[tokio::test]
async fn a_prompt_cache_that_is_not_a_boolean_is_refused() {
    let app = spawn_app().await;
    mount_upstream(&app, false, vec![openai_reply("Final Answer: no")]).await;
    let mut body = request("gpt-4o", QUERY);
    body["llm_config"]["prompt_cache"] = json!("yes");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert!(
        reply.body["error"].to_string().contains("prompt_cache"),
        "the error names the field: {}",
        reply.text
    );
    assert!(sent_to(&app, OPENAI_PATH).await.is_empty());
}
