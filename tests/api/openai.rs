use serde_json::json;

use crate::support::app::{sorted_keys, spawn_app_answering};
use crate::support::requests::{request, KEY};
use crate::support::upstream::{openai_reply, OPENAI_PATH};

#[tokio::test]
async fn an_action_step_proposes_the_tool_call() {
    let output = "Thought: I need to search for authentication code to understand the implementation.\nAction: code_search(query=\"authentication login\")";
    let app = spawn_app_answering(OPENAI_PATH, 200, openai_reply(output)).await;

    let reply = app
        .post_react_step(&request("gpt-4o", "How do I implement authentication?"))
        .await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    let body = &reply.body;
    assert_eq!(body["status"], "action_proposed");
    assert_eq!(body["session_id"], "5c2f7a1f-0000-4000-8000-000000000002");
    assert_eq!(
        body["thought"],
        "I need to search for authentication code to understand the implementation."
    );
    assert_eq!(body["action_details"]["tool_name"], "code_search");
    assert_eq!(
        body["action_details"]["tool_args"],
        json!({"query": "authentication login"})
    );
    assert_eq!(
        body["action_details"]["raw_action_string"],
        "Action: code_search(query=\"authentication login\")"
    );
    assert_eq!(body["direct_response"], json!(null));
    assert_eq!(body["iterations_remaining"], 2);
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 412, "completion_tokens": 37})
    );
    assert_eq!(body["warnings"], json!([]));
    assert_eq!(
        body["request_id"],
        reply.headers["x-request-id"].to_str().unwrap()
    );

    let history = body["updated_conversation_history"].as_array().unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[0]["role"], "user");
    assert_eq!(history[0]["content"], "How do I implement authentication?");
    assert_eq!(history[1]["role"], "assistant");
    assert_eq!(history[1]["content"], body["thought"]);
    assert_eq!(
        history[1]["toolCall"],
        json!({"id": body["action_details"]["tool_call_id"], "name": "code_search",
               "parameters": {"query": "authentication login"}})
    );
    for turn in history {
        let ts = turn["timestamp"].as_str().unwrap();
        assert!(
            chrono::DateTime::parse_from_rfc3339(ts).is_ok() && ts.ends_with('Z'),
            "{ts}"
        );
    }
}

#[tokio::test]
async fn the_upstream_call_carries_model_messages_key_cap_temperature_and_stop() {
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_reply("Thought: t\nFinal Answer: a"),
    )
    .await;

    let reply = app
        .post_react_step(&request("gpt-4o", "Where is login?"))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);

    let received = app.llm.received_requests().await.unwrap();
    assert_eq!(received.len(), 1);
    let sent = &received[0];
    assert_eq!(
        sent.headers["authorization"],
        format!("Bearer {KEY}").as_str()
    );
    let body: serde_json::Value = serde_json::from_slice(&sent.body).unwrap();
    assert_eq!(body["model"], "gpt-4o");
    assert_eq!(body["max_tokens"], 1000);
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(body["stop"], json!(["\nObservation:"]));
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    let system = messages[0]["content"].as_str().unwrap();
    assert!(system.contains("You have access to: code_search(query), read_file(path)"));
    assert!(
        system.contains("Final Answer:")
            && system.contains("Action: code_search(query=\"<value>\")")
    );
    assert_eq!(
        messages.last().unwrap(),
        &json!({"role": "user", "content": "Where is login?"})
    );
    // Nothing but the documented fields: OpenAI answers 400 to unknown ones.
    assert_eq!(
        sorted_keys(&body),
        [
            "max_tokens",
            "messages",
            "model",
            "prompt_cache_key",
            "stop",
            "temperature"
        ]
    );
}

#[tokio::test]
async fn a_final_answer_step_is_a_direct_response() {
    let output = "Thought: The context shows it.\nFinal Answer: Authentication is implemented in auth.js with login().";
    let app = spawn_app_answering(OPENAI_PATH, 200, openai_reply(output)).await;

    let reply = app
        .post_react_step(&request("gpt-4.1", "How is authentication implemented?"))
        .await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    let body = &reply.body;
    assert_eq!(body["status"], "direct_response_provided");
    assert_eq!(
        body["direct_response"],
        "Authentication is implemented in auth.js with login()."
    );
    assert_eq!(body["thought"], "The context shows it.");
    assert_eq!(body["action_details"], json!(null));
    assert_eq!(body["termination_reason"], "success");
    let last = body["updated_conversation_history"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["content"], body["direct_response"]);
    assert_eq!(last["thought"], "The context shows it.");
    assert!(last.get("toolCall").is_none());
}

#[tokio::test]
async fn reasoning_models_get_their_own_parameters() {
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_reply("Thought: t\nFinal Answer: a"),
    )
    .await;

    let reply = app
        .post_react_step(&request("o3-mini", "Explain the module."))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);

    let body = &app.upstream_bodies().await[0];
    assert_eq!(body["max_completion_tokens"], 1000);
    assert_eq!(body["messages"][0]["role"], "developer");
    for absent in ["max_tokens", "temperature", "stop"] {
        assert!(
            body.get(absent).is_none(),
            "o3-mini must not get {absent}: {body}"
        );
    }
}

#[tokio::test]
async fn an_answer_cut_at_the_cap_is_asked_again_never_returned_half() {
    let mut reply = openai_reply("Thought: I will answer.\nFinal Answer: The first part of a long");
    reply["choices"][0]["finish_reason"] = json!("length");
    let app = spawn_app_answering(OPENAI_PATH, 200, reply).await;

    let reply = app
        .post_react_step(&request("gpt-4o", "Explain everything."))
        .await;

    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "invalid_model_output");
    let message = reply.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("cut off"), "{message}");
    assert_eq!(app.upstream_bodies().await.len(), 2, "one repair round");
}

#[tokio::test]
async fn a_complete_action_cut_after_it_is_proposed_with_a_warning() {
    let mut reply = openai_reply(
        "Thought: Read it.\nAction: read_file(path=\"a.rs\")\nObservation: the file sa",
    );
    reply["choices"][0]["finish_reason"] = json!("length");
    let app = spawn_app_answering(OPENAI_PATH, 200, reply).await;

    let reply = app
        .post_react_step(&request("gpt-4o", "Explain everything."))
        .await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["action_details"]["tool_args"]["path"], "a.rs");
    assert!(reply.body["warnings"].as_array().unwrap().iter().any(|w| w
        .as_str()
        .unwrap_or_default()
        .contains("reservedOutputTokens")));
}
