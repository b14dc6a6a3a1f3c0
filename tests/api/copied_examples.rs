//! Issue 14, items 8–10, through the real server: the prompt's example is one of the request's
//! tools, and a copied example, a copied signature or an undeclared argument is never proposed.

use serde_json::{json, Value};

use crate::support::app::{spawn_app, spawn_app_answering};
use crate::support::requests::request;
use crate::support::upstream::{openai_reply, OPENAI_PATH};

fn tools() -> Value {
    json!([
        {"name": "read_file", "description": "Read a file.",
         "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
        {"name": "code_search", "description": "Search the code.",
         "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["query"]}}
    ])
}

fn with_tools(tools: Value, output: &str) -> Value {
    let mut body = request("gpt-4o", "Where is login?");
    body["tools"] = tools;
    body["available_tools_prompt_segment"] = Value::Null;
    body["mock_response"] = json!(output);
    body
}

/// The reply to a mock output, which must be refused: its message and raw output.
async fn refused(body: &Value) -> (String, String) {
    let app = spawn_app().await;
    let reply = app.post_react_step(body).await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "invalid_model_output");
    let text = |k: &str| {
        reply.body["error"][k]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    (text("message"), text("raw_output"))
}

async fn proposed(body: &Value) -> Value {
    let app = spawn_app().await;
    let reply = app.post_react_step(body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "action_proposed");
    reply.body["action_details"].clone()
}

#[tokio::test]
async fn the_prompt_example_is_a_tool_of_the_request() {
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_reply("Thought: t\nFinal Answer: a"),
    )
    .await;
    let mut body = with_tools(tools(), "");
    body["mock_response"] = Value::Null;
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let system = app.upstream_bodies().await[0]["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        system.contains("Action: read_file(path=\"<value>\")"),
        "{system}"
    );
    assert!(
        !system.contains("tool_name") && !system.contains("other_param"),
        "{system}"
    );
}

#[tokio::test]
async fn the_copied_example_is_refused() {
    let output = "Thought: t\nAction: tool_name(param=\"value\", other_param=2)";
    let (message, raw) = refused(&with_tools(tools(), output)).await;
    assert!(
        message.contains("'tool_name' is the answer format's placeholder"),
        "{message}"
    );
    assert_eq!(raw, output);
    // With only the free-text segment (no schema to name arguments), the added placeholder.
    let mut body = request("gpt-4o", "Where is login?");
    body["mock_response"] = json!("Thought: t\nAction: code_search(query=\"x\", other_param=2)");
    let (message, _) = refused(&body).await;
    assert!(
        message.contains("'other_param' is the answer format's placeholder"),
        "{message}"
    );
}

#[tokio::test]
async fn a_tool_truly_named_tool_name_with_other_param_works() {
    let own = json!([{"name": "tool_name", "parameters": {"type": "object",
        "properties": {"param": {"type": "string"}, "other_param": {"type": "integer"}}}}]);
    let output = "Thought: t\nAction: tool_name(param=\"value\", other_param=2)";
    let action = proposed(&with_tools(own, output)).await;
    assert_eq!(action["tool_name"], "tool_name");
    assert_eq!(
        action["tool_args"],
        json!({"param": "value", "other_param": 2})
    );
}

#[tokio::test]
async fn a_copied_signature_is_refused() {
    let output = "Thought: t\nAction: read_file(path: string) — Read a file.";
    let (message, raw) = refused(&with_tools(tools(), output)).await;
    assert!(message.contains("signature of 'read_file'"), "{message}");
    assert_eq!(raw, output);
    let json_output = "{\"action\": \"read_file\", \"action_input\": {\"path\": \"string\"}}";
    let (message, _) = refused(&with_tools(tools(), json_output)).await;
    assert!(message.contains("signature of 'read_file'"), "{message}");
}

#[tokio::test]
async fn a_real_value_spelled_like_a_type_is_proposed() {
    let output = "Thought: t\nAction: code_search(query=\"string\")";
    let action = proposed(&with_tools(tools(), output)).await;
    assert_eq!(action["tool_args"], json!({"query": "string"}));
    // A parameter whose schema type is not string takes "string" as a value like any other.
    let kinds = json!([{"name": "convert", "parameters": {"type": "object",
        "properties": {"to": {"enum": ["string", "number"]}}}}]);
    let action = proposed(&with_tools(
        kinds,
        "{\"name\": \"convert\", \"arguments\": {\"to\": \"string\"}}",
    ))
    .await;
    assert_eq!(action["tool_args"], json!({"to": "string"}));
}

#[tokio::test]
async fn an_undeclared_argument_is_refused_naming_it() {
    let output = "Thought: t\nAction: code_search(query=\"x\", depth=2)";
    let (message, _) = refused(&with_tools(tools(), output)).await;
    assert!(
        message.contains("'code_search' has no argument 'depth'; its arguments are: query, limit"),
        "{message}"
    );
}

#[tokio::test]
async fn positional_arguments_and_open_schemas_still_pass() {
    let action = proposed(&with_tools(
        tools(),
        "Thought: t\nAction: code_search(\"login\", 5)",
    ))
    .await;
    assert_eq!(action["tool_args"], json!({"query": "login", "limit": 5}));
    let open = json!([{"name": "code_search", "parameters": {"type": "object",
        "properties": {"query": {"type": "string"}}, "additionalProperties": true}}]);
    let output = "Thought: t\nAction: code_search(query=\"x\", depth=2)";
    let action = proposed(&with_tools(open, output)).await;
    assert_eq!(action["tool_args"], json!({"query": "x", "depth": 2}));
}
