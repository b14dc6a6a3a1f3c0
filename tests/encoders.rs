//! The legacy encoder (`cl100k_base`, GPT-4 and GPT-3.5 only) is built by the first request
//! that needs it, not at start. Its own test binary: which encoders are built is per process.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use reactstep::step::context::tokens::Encoding;
use serde_json::{json, Value};

use support::app::spawn_app;

/// An offline step (`mock_response`) whose prompt counts differently in the two encodings:
/// the digit runs and the Cyrillic and CJK text are split differently by them.
fn dry_step(model: &str) -> Value {
    json!({
        "project_id": "4b1e6f0e-0000-4000-8000-000000000001",
        "session_id": "5c2f7a1f-0000-4000-8000-000000000002",
        "user_query": "Почему 12345678901234 в 日本語のテキスト doesn't parse? ".repeat(40),
        "conversation_history": [],
        "explicit_context_paths": [],
        "pinned_item_ids_to_include": [],
        "implicit_context": {"last_focused_file_path": null},
        "vector_search_results_to_include": [],
        "available_tools_prompt_segment": "You have access to: code_search(query)",
        "llm_config": {"modelName": model, "tokenLimit": 8192, "reservedOutputTokens": 1000},
        "max_iterations_left": 3,
        "mock_response": "Thought: t\nFinal Answer: done"
    })
}

async fn used_tokens(client: &reqwest::Client, address: &str, model: &str) -> (u64, String) {
    let reply = client
        .post(format!("{address}/api/agent/react_step"))
        .json(&dry_step(model))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let body: Value = reply.json().await.unwrap();
    let report = &body["context_report"];
    (
        report["used"].as_u64().unwrap(),
        report["tokenizer"].as_str().unwrap().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_legacy_encoder_is_built_by_its_first_requests_and_counts_the_same_for_all() {
    let app = spawn_app().await;
    let address = app.address.clone();
    let client = reqwest::Client::new();
    let ready = client
        .get(format!("{address}/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        ready.status(),
        200,
        "ready with the current models' encoder"
    );
    assert!(Encoding::O200kBase.is_loaded());
    assert!(
        !Encoding::Cl100kBase.is_loaded(),
        "nothing asked for cl100k_base yet"
    );

    // A current model's step does not build it either.
    let (current, tokenizer) = used_tokens(&client, &address, "gpt-4o").await;
    assert_eq!(tokenizer, "o200k_base");
    assert!(!Encoding::Cl100kBase.is_loaded());

    // Eight first requests at once: one builds it, all count with it.
    let firsts = (0..8).map(|_| used_tokens(&client, &address, "gpt-4"));
    let counts = futures_util::future::join_all(firsts).await;
    assert!(Encoding::Cl100kBase.is_loaded());
    let (later, _) = used_tokens(&client, &address, "gpt-4").await;
    for (used, tokenizer) in counts {
        assert_eq!(tokenizer, "cl100k_base");
        assert_eq!(
            used, later,
            "a count made while building equals one made after"
        );
    }
    assert_ne!(
        later, current,
        "the two encodings count this text differently"
    );
}
