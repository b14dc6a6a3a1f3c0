use serde_json::json;

use crate::support::app::{spawn_app, spawn_app_with};
use crate::support::requests::request;

fn offline(output: &str) -> serde_json::Value {
    let mut body = request("gpt-4o", "Where is login handled?");
    body.as_object_mut().unwrap().remove("user_api_keys");
    body["mock_response"] = json!(output);
    body
}

#[tokio::test]
async fn mock_response_runs_the_pipeline_without_calling_upstream() {
    let app = spawn_app().await;

    let reply = app
        .post_react_step(&offline(
            "Thought: search it\nAction: code_search(query=\"login\", limit=5)",
        ))
        .await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "action_proposed");
    assert_eq!(
        reply.body["action_details"]["tool_args"],
        json!({"query": "login", "limit": 5})
    );
    assert_eq!(reply.body["usage"], json!(null));
    assert!(reply.body["context_report"]["used"].as_u64().unwrap() > 0);
    assert!(app.llm.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn untagged_mock_output_falls_back_to_a_direct_response() {
    let app = spawn_app().await;
    let reply = app
        .post_react_step(&offline("Login is handled in src/auth.js."))
        .await;
    assert_eq!(reply.body["status"], "direct_response_provided");
    assert_eq!(
        reply.body["direct_response"],
        "Login is handled in src/auth.js."
    );
    assert_eq!(reply.body["warnings"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn mock_response_can_be_disabled() {
    let app = spawn_app_with(|c| c.allow_mock_response = false).await;
    let reply = app.post_react_step(&offline("Final Answer: x")).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.body["error"]["type"], "invalid_request");
    let fields: Vec<&str> = reply.body["error"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    assert!(fields.contains(&"mock_response"), "{fields:?}");
    assert!(app.llm.received_requests().await.unwrap().is_empty());
}
