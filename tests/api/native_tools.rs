//! `llm_config.tool_mode`: tools offered through each provider's own tool calling, and the
//! same response shape as in text mode.

use serde_json::{json, Value};

use crate::support::app::{spawn_app, spawn_app_answering, spawn_app_answering_in_turn};
use crate::support::requests::request;
use crate::support::upstream::{
    anthropic_tool_reply, mount, ollama_reply, openai_reply, openai_tool_reply, ANTHROPIC_PATH,
    OLLAMA_PATH, OPENAI_PATH,
};

fn native(model: &str, mode: &str) -> Value {
    let mut body = request(model, "Where is login handled?");
    body["available_tools_prompt_segment"] = Value::Null;
    body["llm_config"]["tool_mode"] = json!(mode);
    body["tools"] = json!([
        {"name": "read_file", "description": "Read a file.",
         "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}
    ]);
    body
}

#[tokio::test]
async fn openai_native_calls_give_the_same_response_shape() {
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_tool_reply(
            Some("Thought: The login code is in auth.js."),
            "read_file",
            "{\"path\":\"src/auth.js\"}",
        ),
    )
    .await;
    let reply = app.post_react_step(&native("gpt-4o", "native")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "action_proposed");
    assert_eq!(reply.body["thought"], "The login code is in auth.js.");
    assert_eq!(
        reply.body["action_details"]["tool_args"],
        json!({"path": "src/auth.js"})
    );
    assert_eq!(
        reply.body["action_details"]["raw_action_string"],
        "read_file({\"path\":\"src/auth.js\"})"
    );
    assert_eq!(
        reply.body["warnings"],
        json!([]),
        "tool_calls is a normal finish"
    );

    let sent = &app.upstream_bodies().await[0];
    assert_eq!(
        sent["tools"],
        json!([{"type": "function", "function": {"name": "read_file", "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}])
    );
    assert!(sent.get("tool_choice").is_none());
    let system = sent["messages"][0]["content"].as_str().unwrap_or_default();
    assert!(system.contains("tool-calling interface"), "{system}");
    assert!(!system.contains("Action: tool_name("), "{system}");
}

#[tokio::test]
async fn the_tool_definitions_count_against_the_budget() {
    let app = spawn_app().await;
    let mut text = native("gpt-4o", "text");
    text["dry_run"] = json!(true);
    let mut with_native = native("gpt-4o", "native");
    with_native["dry_run"] = json!(true);
    let text = app.post_react_step(&text).await;
    let with_native = app.post_react_step(&with_native).await;
    let prompt_tokens = |b: &Value| {
        b["prompt"]["messages"].as_array().map_or(0, |m| {
            m.iter()
                .map(|m| m["tokens"].as_u64().unwrap_or(0))
                .sum::<u64>()
        })
    };
    let used = |b: &Value| b["context_report"]["used"].as_u64().unwrap_or(0);
    // In native mode, `used` is more than the messages: the definitions are counted too.
    assert!(
        used(&with_native.body) > prompt_tokens(&with_native.body) + 20,
        "{}",
        with_native.text
    );
    assert!(
        used(&text.body) <= prompt_tokens(&text.body) + 10,
        "{}",
        text.text
    );
}

#[tokio::test]
async fn anthropic_tool_use_blocks_are_actions() {
    let app = spawn_app().await;
    let mut upstream = anthropic_tool_reply(
        "I'll open the auth module to see the login flow.",
        "read_file",
        json!({"path": "src/auth.js"}),
    );
    // Below the approximate count, so that no margin warning is expected.
    upstream["usage"]["input_tokens"] = json!(150);
    mount(&app.llm, ANTHROPIC_PATH, 200, upstream).await;
    let mut body = native("claude-sonnet-4-5", "auto");
    body["react"] = json!({"require_action": true});
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.body["thought"],
        "I'll open the auth module to see the login flow."
    );
    assert_eq!(reply.body["action_details"]["tool_name"], "read_file");
    assert_eq!(reply.body["warnings"], json!([]));

    let sent = &app.upstream_bodies().await[0];
    assert_eq!(sent["tools"][0]["name"], "read_file");
    assert_eq!(
        sent["tools"][0]["input_schema"]["required"],
        json!(["path"])
    );
    assert_eq!(sent["tool_choice"], json!({"type": "any"}));
}

#[tokio::test]
async fn a_native_call_with_bad_arguments_is_repaired() {
    let app = spawn_app_answering_in_turn(
        OPENAI_PATH,
        vec![
            openai_tool_reply(None, "read_file", "{\"path\": 7.5}"),
            openai_tool_reply(None, "read_file", "{\"path\": \"a.js\"}"),
        ],
    )
    .await;
    let reply = app.post_react_step(&native("gpt-4o", "native")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.body["action_details"]["tool_args"],
        json!({"path": "a.js"})
    );
    let upstream = app.upstream_bodies().await;
    let second = upstream[1]["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let n = second.len();
    assert_eq!(second[n - 2]["content"], "read_file({\"path\":7.5})");
}

#[tokio::test]
async fn a_native_calls_bare_integer_for_a_text_parameter_is_its_text() {
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_tool_reply(None, "read_file", "{\"path\": 2024}"),
    )
    .await;
    let reply = app.post_react_step(&native("gpt-4o", "native")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.body["action_details"]["tool_args"],
        json!({"path": "2024"})
    );
    assert_eq!(app.upstream_bodies().await.len(), 1, "no repair round");
}

#[tokio::test]
async fn arguments_that_are_not_json_end_in_invalid_model_output() {
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_tool_reply(None, "read_file", "{\"path\": "),
    )
    .await;
    let mut body = native("gpt-4o", "native");
    body["max_repair_attempts"] = json!(0);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "invalid_model_output");
    assert_eq!(reply.body["error"]["raw_output"], "read_file({\"path\": )");
}

#[tokio::test]
async fn a_text_answer_in_native_mode_is_parsed_as_text() {
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_reply("Thought: No file needed.\nFinal Answer: In auth.js."),
    )
    .await;
    let reply = app.post_react_step(&native("gpt-4o", "native")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["direct_response"], "In auth.js.");
}

/// Text without a call is the provider's own way to answer in native mode: no format was missed,
/// so no warning says one was. In text mode the same reply is warned of.
#[tokio::test]
async fn a_plain_answer_is_warned_of_in_text_mode_only() {
    let plain = openai_reply("Login is handled in src/auth.js.");
    let app = spawn_app_answering(OPENAI_PATH, 200, plain.clone()).await;
    let reply = app.post_react_step(&native("gpt-4o", "native")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.body["direct_response"],
        "Login is handled in src/auth.js."
    );
    assert_eq!(reply.body["warnings"], json!([]), "{}", reply.text);
    let app = spawn_app_answering(OPENAI_PATH, 200, plain).await;
    let reply = app.post_react_step(&native("gpt-4o", "text")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.body["warnings"],
        json!([
            "the output had no 'Action:' or 'Final Answer:'; it was taken as a direct response"
        ])
    );
}

/// A call whose thought is all thinking (no text before the `tool_use`) has a thought: the one
/// the step shows. No warning says it gave none.
#[tokio::test]
async fn a_call_whose_thought_is_thinking_is_not_warned_of_as_thoughtless() {
    let app = spawn_app().await;
    let mut upstream = anthropic_tool_reply("", "read_file", json!({"path": "src/auth.js"}));
    upstream["content"] = json!([
        {"type": "thinking", "thinking": "The login flow should be in the auth module; I will read it.",
         "signature": crate::support::upstream::SIGNATURE},
        upstream["content"][1].clone(),
    ]);
    upstream["usage"]["input_tokens"] = json!(150);
    mount(&app.llm, ANTHROPIC_PATH, 200, upstream).await;
    let mut body = native("claude-sonnet-4-5", "native");
    body["llm_config"]["reasoning_effort"] = json!("low");
    // With thinking on, Anthropic takes no temperature but 1 (and it would be warned of).
    body["llm_config"]["temperature"] = Value::Null;
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.body["thought"],
        "The login flow should be in the auth module; I will read it."
    );
    assert_eq!(reply.body["action_details"]["tool_name"], "read_file");
    assert_eq!(reply.body["warnings"], json!([]), "{}", reply.text);
}

#[tokio::test]
async fn auto_mode_stays_with_text_for_compatible_servers() {
    let app = spawn_app_answering(
        OLLAMA_PATH,
        200,
        ollama_reply("Thought: t\nAction: read_file(path=\"a.js\")"),
    )
    .await;
    let mut body = native("llama3.1:8b", "auto");
    body["llm_config"]["provider"] = json!("ollama");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(app.upstream_bodies().await[0].get("tools").is_none());
}

#[tokio::test]
async fn native_mode_needs_declared_tools() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "q");
    body["llm_config"]["tool_mode"] = json!("native");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(
        reply.body["error"]["fields"][0]["field"],
        "llm_config.tool_mode"
    );
}

/// OpenAI's and Anthropic's rule on a tool's name, in its definition and in a call.
fn wire_name_ok(name: &Value) -> bool {
    let name = name.as_str().unwrap_or_default();
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[tokio::test]
async fn tools_named_with_dots_go_renamed_and_their_calls_come_back_as_named() {
    // An MCP server's `notion.search` went as written: OpenAI and Anthropic refuse the whole
    // request ("string does not match pattern").
    let long = format!("search.{}", "x".repeat(57));
    let renamed = format!("search_{}", "x".repeat(57));
    for (model, path, anthropic) in [
        ("gpt-4o", OPENAI_PATH, false),
        ("claude-sonnet-4-5", ANTHROPIC_PATH, true),
    ] {
        let reply = match anthropic {
            true => anthropic_tool_reply("Search it.", "notion_search", json!({"q": "login"})),
            false => openai_tool_reply(Some("Search it."), "notion_search", "{\"q\":\"login\"}"),
        };
        let app = spawn_app_answering(path, 200, reply).await;
        let mut body = native(model, "native");
        let schema =
            json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]});
        body["tools"] = json!([
            {"name": "notion.search", "description": "Search Notion.", "parameters": schema},
            {"name": "notion_search", "description": "Another.", "parameters": schema},
            {"name": long, "description": "Long.", "parameters": schema}]);
        body["conversation_history"] = json!([{"role": "user", "content": "Find it"},
            {"role": "assistant", "content": "", "toolCall": {"id": "call_1", "name": "notion.search", "parameters": {"q": "a"}}},
            {"role": "tool_observation", "content": "nothing", "tool_call_id": "call_1"}]);
        let step = app.post_react_step(&body).await;
        assert_eq!(step.status, 200, "{model}: {}", step.text);
        // The model called the tool `notion_search` stands for on the wire: the client's own.
        assert_eq!(step.body["action_details"]["tool_name"], "notion_search");
        let sent = app.upstream_bodies().await.pop().unwrap();
        let names: Vec<&Value> = sent["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.get("name").unwrap_or(&t["function"]["name"]))
            .collect();
        assert_eq!(
            names,
            [
                &json!("notion_search_2"),
                &json!("notion_search"),
                &json!(renamed)
            ]
        );
        let text = sent["messages"].to_string();
        assert!(!text.contains("notion.search"), "{model}: {text}");
        assert!(names.iter().all(|n| wire_name_ok(n)), "{names:?}");

        // A call of the renamed tool comes back under the name the client gave it.
        let reply = match anthropic {
            true => anthropic_tool_reply("Again.", "notion_search_2", json!({"q": "b"})),
            false => openai_tool_reply(Some("Again."), "notion_search_2", "{\"q\":\"b\"}"),
        };
        let app = spawn_app_answering(path, 200, reply).await;
        let step = app.post_react_step(&body).await;
        assert_eq!(step.status, 200, "{model}: {}", step.text);
        assert_eq!(step.body["action_details"]["tool_name"], "notion.search");
        let turn = step.body["updated_conversation_history"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(turn["toolCall"]["name"], "notion.search");
    }
}

#[tokio::test]
async fn a_reply_of_reasoning_alone_is_asked_again_not_a_502() {
    // vLLM's reasoning parser puts an output stopped inside its thinking all in
    // `reasoning_content`, with `content` null: it was 502 "no usable text".
    let app = spawn_app().await;
    let mut thinking = openai_reply("");
    thinking["choices"][0]["message"] = json!({"role": "assistant", "content": null,
        "reasoning_content": "The user wants the login code. I should search and then read the"});
    let answer = openai_reply("Thought: Found it.\nFinal Answer: In auth.js.");
    crate::support::upstream::mount_sequence(&app.llm, OPENAI_PATH, vec![thinking, answer]).await;
    let reply = app.post_react_step(&request("gpt-4o", "Where?")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["direct_response"], "In auth.js.");
    assert!(
        reply.body["warnings"]
            .to_string()
            .contains("only reasoning"),
        "{}",
        reply.text
    );
}

#[tokio::test]
async fn a_renamed_tool_never_takes_the_services_own_name_nor_leaves_a_history_call_as_it_was() {
    // `final.answer` beside the service's own `final_answer` tool (final_answer_schema) went
    // as a second `final_answer`; a history call of a tool this step does not send kept its
    // dotted name. Either way the provider refused the whole request.
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_tool_reply(Some("Done."), "final_answer", "{\"summary\":\"ok\"}"),
    )
    .await;
    let mut body = native("gpt-4o", "native");
    let schema =
        json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]});
    body["tools"] =
        json!([{"name": "final.answer", "description": "The client's own.", "parameters": schema}]);
    body["react"] = json!({"final_answer_schema": {"type": "object",
        "properties": {"summary": {"type": "string"}}, "required": ["summary"]}});
    body["conversation_history"] = json!([{"role": "user", "content": "Find it"},
        {"role": "assistant", "content": "", "toolCall": {"id": "call_1", "name": "mcp.gone", "parameters": {}}},
        {"role": "tool_observation", "content": "nothing", "tool_call_id": "call_1"}]);
    let step = app.post_react_step(&body).await;
    assert_eq!(step.status, 200, "{}", step.text);
    assert_eq!(
        step.body["status"], "direct_response_provided",
        "{}",
        step.text
    );
    let sent = app.upstream_bodies().await.pop().unwrap();
    let mut names: Vec<&str> = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["final_answer", "final_answer_2"]);
    let text = sent["messages"].to_string();
    assert!(
        !text.contains("mcp.gone") && text.contains("mcp_gone"),
        "{text}"
    );
}

#[tokio::test]
async fn the_last_step_names_the_answer_tool_as_the_model_sees_it() {
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_tool_reply(Some("Done."), "submit_answer", "{\"text\":\"ok\"}"),
    )
    .await;
    let mut body = native("gpt-4o", "native");
    let schema =
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
    body["tools"] =
        json!([{"name": "submit.answer", "description": "Answer.", "parameters": schema}]);
    body["react"] = json!({"answer_tool": "submit.answer"});
    body["max_iterations_left"] = json!(1);
    let step = app.post_react_step(&body).await;
    assert_eq!(step.status, 200, "{}", step.text);
    assert_eq!(step.body["action_details"]["tool_name"], "submit.answer");
    let sent = app.upstream_bodies().await.pop().unwrap().to_string();
    assert!(sent.contains("call no tool but submit_answer"), "{sent}");
    assert!(!sent.contains("submit.answer"), "{sent}");
}

#[tokio::test]
async fn a_schema_that_leaves_its_type_unsaid_goes_as_an_objects_and_another_root_is_refused() {
    // `{}` and properties alone went as written: Anthropic refuses "input_schema.type: Field
    // required", OpenAI "schema must be a JSON Schema of 'type: \"object\"'".
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_tool_reply(Some("Go."), "ping", "{}"),
    )
    .await;
    let mut body = native("gpt-4o", "native");
    body["tools"] = json!([
        {"name": "ping", "description": "Ping.", "parameters": {}},
        {"name": "find", "description": "Find.", "parameters": {"properties": {"q": {"type": "string"}}}}]);
    let step = app.post_react_step(&body).await;
    assert_eq!(step.status, 200, "{}", step.text);
    let sent = app.upstream_bodies().await.pop().unwrap();
    for tool in sent["tools"].as_array().unwrap() {
        assert_eq!(tool["function"]["parameters"]["type"], "object", "{tool}");
    }
    // A root that is no object cannot take a call's arguments natively; auto stays with text.
    body["tools"] =
        json!([{"name": "say", "description": "Say.", "parameters": {"type": "string"}}]);
    let step = app.post_react_step(&body).await;
    assert_eq!(step.status, 400, "{}", step.text);
    assert_eq!(
        step.body["error"]["fields"][0]["field"],
        "tools[0].parameters"
    );
    body["llm_config"]["tool_mode"] = json!("auto");
    app.post_react_step(&body).await;
    let sent = app.upstream_bodies().await.pop().unwrap();
    assert!(sent.get("tools").is_none(), "{sent}");
}
