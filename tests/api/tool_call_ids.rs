//! Every proposed call has an id: the provider's for a native call, the service's for a text
//! one. The assistant turn keeps it, and the observation that answers it names it.

use serde_json::{json, Value};

use crate::support::app::{spawn_app, spawn_app_answering};
use crate::support::requests::request;
use crate::support::upstream::{
    anthropic_tool_reply, mount, openai_reply, openai_tool_reply, ANTHROPIC_PATH, OPENAI_PATH,
};

fn native(model: &str) -> Value {
    let mut body = request(model, "Where is login handled?");
    body["llm_config"]["tool_mode"] = json!("native");
    body["tools"] = json!([{"name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]);
    body
}

fn is_service_id(id: &str) -> bool {
    id.len() == 29 && id.starts_with("call_") && id[5..].bytes().all(|b| b.is_ascii_alphanumeric())
}

#[tokio::test]
async fn a_text_call_gets_an_id_of_the_services_kept_in_the_history() {
    let output = "Thought: search\nAction: code_search(query=\"login\")";
    let app = spawn_app_answering(OPENAI_PATH, 200, openai_reply(output)).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let reply = app.post_react_step(&request("gpt-4o", "q")).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let id = reply.body["action_details"]["tool_call_id"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(is_service_id(&id), "{id}");
        assert_eq!(
            reply.body["updated_conversation_history"][1]["toolCall"]["id"],
            id.as_str()
        );
        ids.push(id);
    }
    assert_ne!(ids[0], ids[1], "each call its own id");
}

#[tokio::test]
async fn a_native_call_keeps_the_providers_id() {
    let app = spawn_app().await;
    mount(
        &app.llm,
        OPENAI_PATH,
        200,
        openai_tool_reply(None, "read_file", "{\"path\":\"a.js\"}"),
    )
    .await;
    mount(
        &app.llm,
        ANTHROPIC_PATH,
        200,
        anthropic_tool_reply("", "read_file", json!({"path": "a.js"})),
    )
    .await;
    for (model, id) in [
        ("gpt-4o", "call_Jh7dWJ0FqVp2Yd4yXU3tQw1k"),
        ("claude-sonnet-4-5", "toolu_01A09q90qw90lq917835lq9"),
    ] {
        let reply = app.post_react_step(&native(model)).await;
        assert_eq!(reply.status, 200, "{model}: {}", reply.text);
        assert_eq!(reply.body["action_details"]["tool_call_id"], id, "{model}");
        assert_eq!(
            reply.body["updated_conversation_history"][1]["toolCall"]["id"],
            id
        );
    }
}

#[tokio::test]
async fn an_observation_names_the_call_it_answers_and_may_say_it_failed() {
    let app = spawn_app_answering(OPENAI_PATH, 200, openai_reply("Final Answer: done")).await;
    let mut body = request("gpt-4o", "");
    body["conversation_history"] = json!([
        {"role": "user", "content": "Read a.js"},
        {"role": "assistant", "content": "I read it.",
         "toolCall": {"id": "call_abc", "name": "read_file", "parameters": {"path": "a.js"}}},
        {"role": "tool_observation", "content": "ENOENT: no such file", "tool_call_id": "call_abc", "is_error": true}
    ]);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let history = &reply.body["updated_conversation_history"];
    assert_eq!(history[1]["toolCall"]["id"], "call_abc");
    assert_eq!(history[2]["tool_call_id"], "call_abc");
    assert_eq!(history[2]["is_error"], true);

    for (at, bad) in [
        ("/1/toolCall/id", json!("call abc")),
        ("/2/tool_call_id", json!("")),
        ("/2/tool_call_id", json!("x".repeat(257))),
    ] {
        let mut broken = body.clone();
        *broken["conversation_history"].pointer_mut(at).unwrap() = bad;
        let reply = app.post_react_step(&broken).await;
        assert_eq!(reply.status, 400, "{at}: {}", reply.text);
        let field = reply.body["error"]["fields"][0]["field"].as_str().unwrap();
        assert!(field.starts_with("conversation_history["), "{field}");
    }
}
