use serde_json::json;

use crate::helpers::{request, spawn_app};
use crate::upstream::{mount, openai_reply, OPENAI_PATH};

#[tokio::test]
async fn inline_context_reaches_the_prompt_fenced_and_in_priority_order() {
    let app = spawn_app().await;
    mount(
        &app.llm,
        OPENAI_PATH,
        200,
        openai_reply("Thought: t\nFinal Answer: a"),
    )
    .await;
    let mut body = request("gpt-4o", "Explain login.");
    body["explicit_context_paths"] = json!(["src/auth.js", "src/missing.js"]);
    body["explicit_context"] =
        json!([{"path": "src/auth.js", "content": "export function login() {}"}]);
    body["pinned_item_ids_to_include"] = json!(["pin-1"]);
    body["pinned_items"] =
        json!([{"id": "pin-1", "content": "TODO: rate-limit login", "path": "NOTES.md"}]);
    body["implicit_context"] = json!({"last_focused_file_path": "src/Login.tsx", "last_focused_file_content": "<Login />"});
    body["vector_search_results_to_include"] = json!([
        {"path": "src/low.js", "content": "low()", "score": 0.1},
        {"path": "src/high.js", "content": "high()", "score": 0.9, "start_line": 3, "end_line": 4}
    ]);

    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);

    let system = app.upstream_bodies().await[0]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let order: Vec<usize> = [
        "export function login",
        "TODO: rate-limit",
        "<Login />",
        "high()",
        "low()",
    ]
    .iter()
    .map(|needle| {
        system
            .find(needle)
            .unwrap_or_else(|| panic!("{needle} missing from the prompt"))
    })
    .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "priority order broken: {order:?}"
    );
    assert!(system.contains("### explicit context: src/auth.js\n```javascript\n"));
    assert!(system.contains("### search result: src/high.js, lines 3-4"));

    let items = reply.body["context_report"]["items"].as_array().unwrap();
    let missing = items.iter().find(|i| i["id"] == "src/missing.js").unwrap();
    assert_eq!(missing["fate"], "unresolved");
    assert_eq!(missing["tokens"], json!(null));
    assert!(reply.body["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().contains("without content")));
}

#[tokio::test]
async fn a_tight_budget_drops_oldest_history_first_and_says_so() {
    let app = spawn_app().await;
    mount(
        &app.llm,
        OPENAI_PATH,
        200,
        openai_reply("Thought: t\nFinal Answer: a"),
    )
    .await;
    let long = "lorem ipsum dolor sit amet ".repeat(150);
    let mut body = request("gpt-4o", "Now what?");
    body["conversation_history"] = json!([
        {"role": "user", "content": format!("OLDEST {long}")},
        {"role": "assistant", "content": format!("MIDDLE {long}")},
        {"role": "user", "content": "NEWEST short turn"}
    ]);
    body["explicit_context"] = json!([{"path": "a.rs", "content": "fn keep_me() {}"}]);
    body["llm_config"]["tokenLimit"] = json!(1300);
    body["llm_config"]["reservedOutputTokens"] = json!(300);

    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);

    let report = &reply.body["context_report"];
    assert_eq!(report["budget"], 1000);
    assert!(report["used"].as_u64().unwrap() <= 1000);
    let fate = |id: &str| {
        report["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["id"] == id)
            .unwrap()["fate"]
            .clone()
    };
    assert_eq!(fate("conversation_history[0]"), "dropped");
    assert_eq!(fate("conversation_history[2]"), "included");
    assert_eq!(fate("a.rs"), "included");
    let sent = serde_json::to_string(&app.upstream_bodies().await[0]).unwrap();
    assert!(!sent.contains("OLDEST") && sent.contains("NEWEST") && sent.contains("keep_me"));
    assert!(reply.body["warnings"][0]
        .as_str()
        .unwrap()
        .contains("did not fit"));
    // The client's history is returned whole, whatever the prompt had to leave out.
    assert_eq!(
        reply.body["updated_conversation_history"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
}

#[tokio::test]
async fn a_prompt_whose_mandatory_part_cannot_fit_is_a_422_without_an_upstream_call() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", &"explain this ".repeat(400));
    body["llm_config"]["tokenLimit"] = json!(600);
    body["llm_config"]["reservedOutputTokens"] = json!(100);

    let reply = app.post_react_step(&body).await;

    assert_eq!(reply.status, 422);
    assert_eq!(reply.body["error"]["type"], "context_overflow");
    assert!(reply.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("500"));
    assert!(app.llm.received_requests().await.unwrap().is_empty());
}
