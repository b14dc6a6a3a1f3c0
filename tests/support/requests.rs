//! The request bodies the tests send, and the key they carry.

use serde_json::Value;

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
