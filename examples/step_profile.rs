//! The CPU cost of steps, without HTTP and without an upstream (`mock_response`), for
//! instruction counts under callgrind, which stay the same however busy the machine is:
//!
//!   cargo build --release --example step_profile
//!   valgrind --tool=callgrind target/release/examples/step_profile typical 20
//!   valgrind --tool=callgrind target/release/examples/step_profile loop 1
//!
//! `typical` runs the typical IDE request (10 turns, three source files of about 5 KB,
//! free-text tools, gpt-4o with a 16k limit) N times; `loop` runs a recorded 10-step loop whose
//! history grows by a call and its observation at every step, N times over.
//!
//! `context K N` is the context phase alone of step K of the loop in `benches/context.rs` (group
//! "10-step loop, context phase"), N times: each time the count cache is emptied and steps
//! 1..K-1 run first, as a session sees them. Only `measured_context_phase` is the step K, so
//!
//!   valgrind --tool=callgrind --toggle-collect='*measured_context_phase*' \
//!       target/release/examples/step_profile context 2 20
//!
//! counts step K's instructions and nothing else (divide by N).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use reactstep::llm::{LlmClients, LlmSettings, RetryPolicy};
use serde_json::{json, Value};

/// Source text of about `bytes` bytes, different for each `seed`.
fn source(bytes: usize, seed: usize) -> String {
    let mut out = String::new();
    let mut i = seed;
    while out.len() < bytes {
        out.push_str(&format!(
            "export async function handler{i}(request, response) {{\n  const user = await db.users.find({{ id: request.params.id{i} }});\n  if (!user) return response.status(404).json({{ error: 'not found' }});\n  return response.json(user);\n}}\n\n"
        ));
        i += 1;
    }
    out
}

fn turn(role: &str, content: String) -> Value {
    json!({"role": role, "content": content, "timestamp": "2026-11-23T06:00:00.000Z"})
}

/// The typical request with `history` as its conversation.
fn body(history: Vec<Value>) -> Vec<u8> {
    let files: Vec<Value> = (0..3)
        .map(|n| json!({"path": format!("src/module{n}.js"), "content": source(5_000, n * 100)}))
        .collect();
    serde_json::to_vec(&json!({
        "project_id": "4b1e6f0e-0000-4000-8000-000000000001",
        "session_id": "5c2f7a1f-0000-4000-8000-000000000002",
        "user_query": "Why does the login handler return 404 for existing users?",
        "conversation_history": history,
        "explicit_context_paths": ["src/module0.js", "src/module1.js", "src/module2.js"],
        "explicit_context": files,
        "pinned_item_ids_to_include": [],
        "implicit_context": {"last_focused_file_path": "src/module0.js"},
        "vector_search_results_to_include": [],
        "available_tools_prompt_segment": "You have access to: code_search(query) — search the code base; read_file(path) — read a file; list_dir(path) — list a folder",
        "llm_config": {"modelName": "gpt-4o", "tokenLimit": 16000, "reservedOutputTokens": 1000, "temperature": 0.2},
        "user_api_keys": {"llmKey": "sk-profile"},
        "max_iterations_left": 20,
        "mock_response": "Thought: The handler looks the user up by the wrong parameter.\nAction: read_file(path=\"src/module1.js\")"
    }))
    .unwrap()
}

/// Ten turns of an earlier conversation.
fn earlier() -> Vec<Value> {
    (0..10)
        .map(|i| match i % 3 {
            0 => turn("user", format!("Question {i}: what does handler{i} do with the request?")),
            1 => turn("assistant", format!("Thought: I should look at handler{i}.\nAction: read_file(path=\"src/module{i}.js\")")),
            _ => turn("tool_observation", source(600, i * 7)),
        })
        .collect()
}

/// The loop of `benches/context.rs`: the same files, tools and head at every step, the history
/// growing by a call and a 1.5 KB observation.
mod context {
    use reactstep::llm::Provider;
    use reactstep::step::context::budget::{
        fit, marker_reserve, Candidates, Prompt, DEFAULT_ORDER,
    };
    use reactstep::step::context::prompt::system_head;
    use reactstep::step::context::tokens::TokenCounter;
    use reactstep::step::context::{ContextItem, ContextSource};
    use reactstep::step::history::{Role, Turn};

    /// The benchmark's source text.
    fn code(bytes: usize, seed: usize) -> String {
        let mut out = String::with_capacity(bytes + 100);
        let mut i = seed;
        while out.len() < bytes {
            out.push_str(&format!(
                "export function handler{i}(request, response) {{\n  const user = await db.users.find({{ id: request.params.id{i} }});\n  if (!user) return response.status(404).json({{ error: 'not found' }});\n  return response.json(user);\n}}\n\n"
            ));
            i += 1;
        }
        out
    }

    pub struct Loop {
        counter: TokenCounter,
        head: String,
        items: Vec<ContextItem>,
        histories: Vec<Vec<Turn>>,
        tags: reactstep::step::parse::Tags,
    }

    impl Loop {
        pub fn new() -> Self {
            let stamp = || "2024-01-01T00:00:00.000Z".to_string();
            let items = (0..3)
                .map(|n| {
                    let path = format!("src/module{n}.js");
                    ContextItem {
                        source: ContextSource::Explicit,
                        id: path.clone(),
                        path: Some(path),
                        content: code(5_000, n * 1000),
                        score: None,
                        lines: None,
                        cursor_line: None,
                    }
                })
                .collect();
            let histories = (0..10)
                .map(|step| {
                    let mut history: Vec<Turn> = (0..10)
                        .map(|i| {
                            let role = [Role::User, Role::Assistant, Role::ToolObservation][i % 3];
                            Turn::new(role, code(600, i), stamp())
                        })
                        .collect();
                    for k in 0..step {
                        history.push(Turn::new(
                            Role::Assistant,
                            format!(
                                "Thought: step {k}.\nAction: read_file(path=\"src/step{k}.js\")"
                            ),
                            stamp(),
                        ));
                        history.push(Turn::new(
                            Role::ToolObservation,
                            code(1_500, 5_000 + k),
                            stamp(),
                        ));
                    }
                    history
                })
                .collect();
            let tags = reactstep::step::parse::Tags::default();
            Self {
                counter: TokenCounter::for_model(Provider::OPENAI, "gpt-4o"),
                head: system_head(
                    "- code_search(query) - search the code\n- read_file(path) - read a file",
                    &tags,
                    false,
                ),
                items,
                histories,
                tags,
            }
        }

        /// The context phase of step `step` (0-based).
        pub fn run(&self, step: usize) -> Prompt {
            let candidates = Candidates {
                head: &self.head,
                items: &self.items,
                unresolved: &[],
                history: &self.histories[step],
                query: "Why does the login handler return 404 for existing users?",
                order: &DEFAULT_ORDER,
                max_observation_tokens: 2000,
                omission_reserve: marker_reserve(&self.counter),
                tags: &self.tags,
                native: false,
                state_origin: None,
                cleared: &[],
                notice: None,
            };
            fit(&self.counter, 16_000, &candidates).unwrap().finish(
                &self.counter,
                None,
                "o200k_base",
            )
        }
    }
}

#[inline(never)]
fn measured_context_phase(steps: &context::Loop, step: usize) -> usize {
    std::hint::black_box(steps.run(step)).report.used as usize
}

fn context_phase(step: usize, rounds: usize) {
    reactstep::step::context::tokens::warm_up();
    let steps = context::Loop::new();
    let mut used = 0;
    for _ in 0..rounds {
        if let Some(cache) = reactstep::step::context::token_cache::global() {
            cache.clear();
        }
        for k in 0..step - 1 {
            steps.run(k);
        }
        used = measured_context_phase(&steps, step - 1);
    }
    println!("{rounds} context phases of loop step {step}: {used} tokens used");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("typical", String::as_str);
    if mode == "context" {
        let step = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(1);
        let rounds = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(10);
        context_phase(step, rounds);
        return;
    }
    let rounds: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(10);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let llm = LlmClients::new(LlmSettings {
        // Nothing is called: every step carries its mock_response.
        base_urls: Default::default(),
        headers: Default::default(),
        timeout: std::time::Duration::from_secs(1),
        retry: RetryPolicy::default(),
        extra_roots: Vec::new(),
        pools: 1,
        memory: reactstep::runtime::memory_budget::MemoryBudget::unlimited(),
    })
    .unwrap();
    reactstep::step::context::tokens::warm_up();
    let bodies: Vec<Vec<u8>> = match mode {
        "loop" => {
            let mut history = earlier();
            (0..10)
                .map(|step| {
                    let body = body(history.clone());
                    history.push(turn(
                        "assistant",
                        format!(
                            "Thought: step {step}.\nAction: read_file(path=\"src/step{step}.js\")"
                        ),
                    ));
                    history.push(turn("tool_observation", source(1_500, 1_000 + step)));
                    body
                })
                .collect()
        }
        _ => vec![body(earlier())],
    };
    let mut steps = 0;
    for _ in 0..rounds {
        for body in &bodies {
            let input = reactstep::api::offline::step_input(body).unwrap();
            let output = runtime
                .block_on(reactstep::step::run(input, &llm, None))
                .unwrap();
            let rendered = reactstep::api::offline::response_body(output).unwrap();
            assert!(rendered.contains("action_proposed"));
            steps += 1;
        }
    }
    println!("{steps} steps ({mode})");
}
