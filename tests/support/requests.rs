//! The request bodies the tests send, and the key they carry.

use serde_json::{json, Value};

pub const KEY: &str = "sk-test-SECRET-key-0123456789";

/// A minimal valid request for a model; tests change what they examine.
pub fn request(model: &str, query: &str) -> Value {
    serde_json::json!({
        "project_id": "4b1e6f0e-0000-4000-8000-000000000001",
        "session_id": "5c2f7a1f-0000-4000-8000-000000000002",
        "user_query": query,
        "conversation_history": [],
        "explicit_context_paths": [],
        "pinned_item_ids_to_include": [],
        "implicit_context": {"last_focused_file_path": null},
        "vector_search_results_to_include": [],
        "available_tools_prompt_segment": "You have access to: code_search(query), read_file(path)",
        "llm_config": {"modelName": model, "tokenLimit": 8192, "reservedOutputTokens": 1000, "temperature": 0.2},
        "user_api_keys": {"llmKey": KEY},
        "max_iterations_left": 3
    })
}

/// `body` with one tool, `read_file(path)`, called through the provider's tool calling.
pub fn with_native_read_file(mut body: Value) -> Value {
    body["llm_config"]["tool_mode"] = json!("native");
    body["tools"] = json!([{"name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]);
    body
}

/// A native-mode request with one tool and the given reasoning effort.
pub fn native_reasoning(model: &str, effort: &str) -> Value {
    let mut body = request(model, "Why does a.js throw?");
    body["llm_config"]["tool_mode"] = json!("native");
    body["llm_config"]["reasoning_effort"] = json!(effort);
    body["llm_config"]["tokenLimit"] = json!(200_000);
    body["tools"] = json!([{"name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]);
    body
}

/// A Claude request whose context fits the budget by a raw count but not with Claude's margin.
pub fn near_the_limit() -> Value {
    let mut body = request("claude-sonnet-4-5", "What does Login do?");
    body["llm_config"]["tokenLimit"] = json!(3000);
    body["llm_config"]["reservedOutputTokens"] = json!(500);
    let file = |name: &str| {
        json!({"path": format!("src/{name}.rs"),
               "content": format!("pub fn {name}(user: &User) -> Session {{\n    Session::start(user)\n}}\n").repeat(24)})
    };
    body["explicit_context"] = json!([
        file("login"),
        file("logout"),
        file("refresh"),
        file("revoke")
    ]);
    body
}

/// Turns as a client keeps them: escapes and characters beyond ASCII, a call and its result,
/// fields of the client's own. `padding` more bytes in the first turn.
pub fn kept_history(padding: usize) -> Value {
    json!([
        {"role": "user", "content": format!("find \"login\" — é 😀\n\ttab {}", "x".repeat(padding)),
         "timestamp": "2026-11-24T01:02:03.456Z", "client_id": "c-1"},
        {"role": "assistant", "content": "I will search.",
         "toolCall": {"id": "call_1", "name": "code_search", "parameters": {"query": "login", "limit": 3}},
         "meta": {"a": [1, 2, {"b": null}], "s": "\u{1}\\"}},
        {"role": "tool_observation", "content": "src/auth.js:1", "tool_call_id": "call_1",
         "toolResult": {"success": true, "result": ["src/auth.js", 1.5]}}
    ])
}
