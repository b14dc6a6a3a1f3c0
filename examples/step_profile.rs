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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("typical", String::as_str);
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
    })
    .unwrap();
    reactstep::step::tokens::warm_up();
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
