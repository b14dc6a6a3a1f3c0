//! Declared tools, the action check, the repair round and commands, end to end.

use serde_json::{json, Value};

use crate::support::app::{spawn_app, spawn_app_answering, spawn_app_answering_in_turn};
use crate::support::requests::request;
use crate::support::upstream::{openai_reply, OPENAI_PATH};

fn tools() -> Value {
    json!([
        {"name": "read_file", "description": "Read a file of the project.",
         "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "start_line": {"type": "integer"}}, "required": ["path"]}},
        {"name": "code_search", "description": "Search the code.",
         "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}
    ])
}

fn with_tools(query: &str) -> Value {
    let mut body = request("gpt-4o", query);
    body["tools"] = tools();
    body["available_tools_prompt_segment"] = Value::Null;
    body
}

fn last_user_message(upstream: &Value) -> &str {
    upstream["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
}

#[tokio::test]
async fn declared_tools_are_listed_and_positional_arguments_named() {
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_reply("Thought: Open the handler.\nAction: read_file(\"src/auth.js\", 10)"),
    )
    .await;
    let reply = app.post_react_step(&with_tools("Where is login?")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.body["action_details"]["tool_args"],
        json!({"path": "src/auth.js", "start_line": 10})
    );
    let system = app.upstream_bodies().await[0]["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        system.contains(
            "- read_file(path: string, start_line?: integer) — Read a file of the project."
        ),
        "{system}"
    );
    assert!(system.contains("- code_search(query: string) — Search the code."));
}

#[tokio::test]
async fn an_unknown_tool_gets_a_repair_round() {
    let app = spawn_app_answering_in_turn(
        OPENAI_PATH,
        vec![
            openai_reply("Thought: Delete it.\nAction: delete_file(path=\"a.js\")"),
            openai_reply("Thought: Read it instead.\nAction: read_file(path=\"a.js\")"),
        ],
    )
    .await;
    let reply = app.post_react_step(&with_tools("Clean up a.js")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["action_details"]["tool_name"], "read_file");
    assert_eq!(reply.body["thought"], "Read it instead.");
    let warnings = reply.body["warnings"].to_string();
    assert!(
        warnings.contains("no tool named 'delete_file'"),
        "{warnings}"
    );
    // Both calls are billed.
    assert_eq!(reply.body["usage"]["prompt_tokens"], 2 * 412);

    let upstream = app.upstream_bodies().await;
    assert_eq!(upstream.len(), 2);
    let second = &upstream[1]["messages"];
    let n = second.as_array().map_or(0, Vec::len);
    assert_eq!(second[n - 2]["role"], "assistant");
    assert!(second[n - 2]["content"]
        .as_str()
        .unwrap_or_default()
        .contains("delete_file"));
    let feedback = last_user_message(&upstream[1]);
    assert!(
        feedback.starts_with("Observation: Error: there is no tool named 'delete_file'"),
        "{feedback}"
    );
}

#[tokio::test]
async fn an_action_still_invalid_after_repair_is_a_502_with_the_raw_output() {
    let bad = "Thought: Search.\nAction: code_search(query=[3])";
    let app = spawn_app_answering(OPENAI_PATH, 200, openai_reply(bad)).await;
    let reply = app.post_react_step(&with_tools("Find login")).await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["status"], "error");
    assert_eq!(reply.body["error"]["type"], "invalid_model_output");
    assert_eq!(reply.body["error"]["retryable"], true);
    assert_eq!(reply.body["error"]["raw_output"], bad);
    let message = reply.body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("/query: [3] is not of type \"string\""),
        "{message}"
    );
    assert_eq!(
        app.upstream_bodies().await.len(),
        2,
        "one call and one repair"
    );
}

#[tokio::test]
async fn max_repair_attempts_zero_fails_at_once() {
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_reply("Thought: t\nAction: read_file(path=4.2)"),
    )
    .await;
    let mut body = with_tools("Open it");
    body["max_repair_attempts"] = json!(0);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    assert!(reply.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("/path"));
    assert_eq!(app.upstream_bodies().await.len(), 1);
}

#[tokio::test]
async fn an_unreadable_call_is_repaired_too() {
    let app = spawn_app_answering_in_turn(
        OPENAI_PATH,
        vec![
            openai_reply("Thought: t\nAction: read_file(path=\"a.js\""),
            openai_reply("Thought: t\nAction: read_file(path=\"a.js\")"),
        ],
    )
    .await;
    let reply = app.post_react_step(&with_tools("Open a.js")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(last_user_message(&app.upstream_bodies().await[1]).contains("not closed"));
}

#[tokio::test]
async fn a_mock_response_gets_no_repair_round() {
    let app = spawn_app().await;
    let mut body = with_tools("Open a.js");
    body["mock_response"] = json!("Thought: t\nAction: rm(path=\"/\")");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "invalid_model_output");
}

#[tokio::test]
async fn names_in_the_free_text_segment_are_checked() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "Where is login?");
    body["mock_response"] = json!("Thought: t\nAction: shell(cmd=\"ls\")");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    let message = reply.body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the tools are: code_search, read_file"),
        "{message}"
    );
}

#[tokio::test]
async fn a_command_for_a_declared_tool_needs_no_model() {
    let app = spawn_app().await;
    let reply = app
        .post_react_step(&with_tools("/read_file src/auth.js"))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "action_proposed");
    assert_eq!(reply.body["action_details"]["tool_name"], "read_file");
    assert_eq!(
        reply.body["action_details"]["tool_args"],
        json!({"path": "src/auth.js"})
    );
    assert_eq!(
        reply.body["action_details"]["raw_action_string"],
        "/read_file src/auth.js"
    );
    assert_eq!(reply.body["iterations_remaining"], 2);
    assert!(app.upstream_bodies().await.is_empty());
}

#[tokio::test]
async fn other_slash_queries_go_to_the_model() {
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_reply("Thought: t\nFinal Answer: Help text."),
    )
    .await;
    let reply = app.post_react_step(&with_tools("/help me")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["direct_response"], "Help text.");
    assert_eq!(app.upstream_bodies().await.len(), 1);
}

#[tokio::test]
async fn custom_tags_shape_the_prompt_the_stop_and_the_parse() {
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_reply("Reasoning: Look at auth.\nTool: read_file(path=\"auth.js\")"),
    )
    .await;
    let mut body = with_tools("Where is login?");
    body["react"] = json!({"thought_tag": "Reasoning", "action_tag": "Tool", "observation_tag": "Result", "final_answer_tag": "Reply"});
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["thought"], "Look at auth.");
    let upstream = &app.upstream_bodies().await[0];
    let system = upstream["messages"][0]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(
        system.contains("Reasoning: <your reasoning")
            && system.contains("Reply: <your complete answer"),
        "{system}"
    );
    assert_eq!(upstream["stop"], json!(["\nResult:"]));
}

#[tokio::test]
async fn require_action_refuses_a_direct_answer() {
    let app = spawn_app().await;
    let mut body = with_tools("Where is login?");
    body["react"] = json!({"require_action": true});
    body["mock_response"] = json!("Thought: I know.\nFinal Answer: auth.js");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    assert!(reply.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("a tool call is required"));
}

#[tokio::test]
async fn degenerate_and_short_thoughts_are_warned_about() {
    let app = spawn_app().await;
    let mut body = with_tools("Where is login?");
    body["react"] = json!({"min_thought_chars": 40});
    body["mock_response"] =
        json!("Thought: I will use the tool.\nAction: code_search(query=\"login\")");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let warnings = reply.body["warnings"].to_string();
    assert!(
        warnings.contains("under react.min_thought_chars (40)"),
        "{warnings}"
    );
    assert!(warnings.contains("gives no reason"), "{warnings}");
}

#[tokio::test]
async fn bad_tools_and_tags_are_refused_naming_the_field() {
    let app = spawn_app().await;
    let cases = [
        (
            json!({"tools": [{"name": "x", "parameters": {"type": "object", "properties": {"a": {"type": 12}}}}]}),
            "tools[0].parameters",
        ),
        (
            json!({"tools": [{"name": "x"}, {"name": "x"}]}),
            "tools[1].name",
        ),
        (
            json!({"tools": [{"name": "x", "parameters": {}, "inputSchema": {}}]}),
            "tools[0]",
        ),
        (json!({"tools": [{"name": "has space"}]}), "tools[0].name"),
        (
            json!({"react": {"thought_tag": "Thought:"}}),
            "react.thought_tag",
        ),
        (json!({"react": {"thought_tag": "Action"}}), "react"),
        (json!({"max_repair_attempts": 9}), "max_repair_attempts"),
    ];
    for (extra, field) in cases {
        let mut body = request("gpt-4o", "q");
        for (k, v) in extra.as_object().into_iter().flatten() {
            body[k] = v.clone();
        }
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 400, "{extra}: {}", reply.text);
        let fields: Vec<&str> = reply.body["error"]["fields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["field"].as_str())
            .collect();
        assert!(fields.contains(&field), "{extra}: {fields:?}");
    }
}
