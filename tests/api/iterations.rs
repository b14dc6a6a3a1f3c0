use serde_json::json;

use crate::support::app::{spawn_app, spawn_app_answering};
use crate::support::requests::request;
use crate::support::upstream::{openai_reply, OPENAI_PATH};

fn last_step_request() -> serde_json::Value {
    let mut body = request("gpt-4o", "");
    body["max_iterations_left"] = json!(1);
    body["conversation_history"] = json!([
        {"role": "user", "content": "How is auth done?"},
        {"role": "assistant", "content": "Search first.", "toolCall": {"name": "code_search", "parameters": {"query": "auth"}}},
        {"role": "tool_observation", "content": "Found: auth.js with login()"}
    ]);
    body
}

#[tokio::test]
async fn an_action_on_the_last_step_becomes_a_summary_answer() {
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_reply("Thought: I should read auth.js.\nAction: read_file(path=\"auth.js\")"),
    )
    .await;

    let reply = app.post_react_step(&last_step_request()).await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    let body = &reply.body;
    assert_eq!(body["status"], "direct_response_provided");
    assert_eq!(body["termination_reason"], "max_iterations");
    assert_eq!(body["iterations_remaining"], 0);
    assert_eq!(body["action_details"], json!(null));
    let answer = body["direct_response"].as_str().unwrap();
    assert!(answer.contains("limit of steps"), "{answer}");
    assert!(
        answer.contains("code_search(query=\"auth\"): Found: auth.js with login()"),
        "{answer}"
    );
    assert!(answer.contains("I should read auth.js."), "{answer}");
    assert!(!body["warnings"].as_array().unwrap().is_empty());

    // The notice ends the prompt: what came before it is the same as at the step before.
    let sent = &app.upstream_bodies().await[0];
    let messages = sent["messages"].as_array().unwrap();
    assert!(messages.last().unwrap()["content"]
        .as_str()
        .unwrap()
        .ends_with("based on what you have found so far."));
    assert!(!messages[0]["content"]
        .as_str()
        .unwrap()
        .contains("This is the last step"));
}

#[tokio::test]
async fn earlier_steps_are_not_told_to_stop() {
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_reply("Thought: t\nAction: read_file(path=\"auth.js\")"),
    )
    .await;
    let mut body = last_step_request();
    body["max_iterations_left"] = json!(2);

    let reply = app.post_react_step(&body).await;

    assert_eq!(reply.body["status"], "action_proposed");
    assert_eq!(reply.body["iterations_remaining"], 1);
    let sent = &app.upstream_bodies().await[0];
    assert!(!sent.to_string().contains("This is the last step"));
}

#[tokio::test]
async fn max_iterations_defaults_to_ten_and_must_be_at_least_one() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "hi");
    body.as_object_mut().unwrap().remove("max_iterations_left");
    body["mock_response"] = json!("Final Answer: hello");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.body["iterations_remaining"], 9);

    body["max_iterations_left"] = json!(0);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.body["error"]["fields"][0]["field"],
        "max_iterations_left"
    );
}
