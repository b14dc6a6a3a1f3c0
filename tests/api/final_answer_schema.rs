//! A final answer a program can use (issue 33, part 4): `react.final_answer_schema` asks for a
//! JSON answer, which is read and checked like an action's arguments, repaired once, and
//! returned as `direct_response_json`; in native mode the model may give it through a
//! `final_answer` tool.

use serde_json::{json, Value};

use crate::support::app::{spawn_app, spawn_app_answering_in_turn};
use crate::support::requests::request;
use crate::support::spec::assert_conforms;
use crate::support::stream::post_stream;
use crate::support::upstream::{anthropic_tool_reply, openai_reply, ANTHROPIC_PATH, OPENAI_PATH};

fn schema() -> Value {
    json!({"type": "object", "required": ["file", "line"], "additionalProperties": false,
        "properties": {"file": {"type": "string"}, "line": {"type": "integer", "minimum": 1}}})
}

/// `body` in native mode, with a tool of its own besides `final_answer`.
fn natively(mut body: Value) -> Value {
    body["llm_config"]["tool_mode"] = json!("native");
    body["tools"] = json!([{"name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]);
    body
}

fn asking(model: &str) -> Value {
    let mut body = request(model, "Where is the session refreshed?");
    body["react"] = json!({"final_answer_schema": schema()});
    body
}

const GOOD: &str = "Thought: found it.\nFinal Answer: {\"file\": \"src/session.rs\", \"line\": 42}";

fn system_prompt(body: &Value) -> String {
    let messages = body["messages"].as_array().unwrap();
    match body.get("system") {
        Some(system) => system.to_string(),
        None => messages[0]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    }
}

#[tokio::test]
async fn an_answer_that_matches_comes_back_as_its_json() {
    let app = spawn_app_answering_in_turn(OPENAI_PATH, vec![openai_reply(GOOD)]).await;
    let reply = app.post_react_step(&asking("gpt-4o")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_conforms("POST", "/api/agent/react_step", 200, &reply.body);
    assert_eq!(
        reply.body["direct_response_json"],
        json!({"file": "src/session.rs", "line": 42})
    );
    assert_eq!(
        reply.body["direct_response"],
        r#"{"file":"src/session.rs","line":42}"#
    );
    let sent = app.upstream_bodies().await;
    let system = system_prompt(&sent[0]);
    assert!(
        system.contains("Final answer format") && system.contains("\"minimum\":1"),
        "{system}"
    );
    // Without a schema the field is absent and the prompt says nothing of it.
    let app = spawn_app_answering_in_turn(OPENAI_PATH, vec![openai_reply(GOOD)]).await;
    let reply = app
        .post_react_step(&request("gpt-4o", "Where is the session refreshed?"))
        .await;
    assert!(
        reply.body.get("direct_response_json").is_none(),
        "{}",
        reply.text
    );
    assert!(!system_prompt(&app.upstream_bodies().await[0]).contains("Final answer format"));
}

#[tokio::test]
async fn an_answer_that_does_not_match_is_repaired_once() {
    let app = spawn_app_answering_in_turn(
        OPENAI_PATH,
        vec![
            openai_reply("Thought: found it.\nFinal Answer: It is in src/session.rs, line 42."),
            openai_reply(GOOD),
        ],
    )
    .await;
    let reply = app.post_react_step(&asking("gpt-4o")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["direct_response_json"]["line"], 42);
    let warnings = reply.body["warnings"].to_string();
    assert!(
        warnings.contains("does not match final_answer_schema"),
        "{warnings}"
    );
    let sent = app.upstream_bodies().await;
    assert_eq!(sent.len(), 2);
    let feedback = sent[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .to_string();
    assert!(feedback.contains("final_answer_schema"), "{feedback}");
}

#[tokio::test]
async fn an_answer_that_never_matches_is_a_502_naming_the_schema_errors() {
    let wrong = openai_reply("Thought: found it.\nFinal Answer: {\"file\": \"a.rs\", \"line\": 0}");
    let app = spawn_app_answering_in_turn(OPENAI_PATH, vec![wrong.clone(), wrong]).await;
    let reply = app.post_react_step(&asking("gpt-4o")).await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_conforms("POST", "/api/agent/react_step", 502, &reply.body);
    assert_eq!(reply.body["error"]["type"], "invalid_model_output");
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("/line") && message.contains("final_answer_schema"),
        "{message}"
    );
}

#[tokio::test]
async fn a_streamed_step_ends_with_the_answers_json() {
    let app = spawn_app().await;
    let sse = crate::support::stream_upstream::openai_stream(&[GOOD], "stop");
    wiremock::Mock::given(wiremock::matchers::path(OPENAI_PATH))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream"))
        .mount(&app.llm)
        .await;
    let streamed = post_stream(&app, &asking("gpt-4o")).await;
    let (name, event) = streamed.terminal();
    assert_eq!(name, "step", "{event}");
    assert_eq!(event["direct_response_json"]["file"], "src/session.rs");
}

#[tokio::test]
async fn in_native_mode_the_final_answer_tool_gives_the_answer() {
    let call = anthropic_tool_reply(
        "Thought: found it.",
        "final_answer",
        json!({"file": "src/session.rs", "line": 42}),
    );
    let app = spawn_app_answering_in_turn(ANTHROPIC_PATH, vec![call]).await;
    let body = natively(asking("claude-sonnet-4-5"));
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.body["status"], "direct_response_provided",
        "{}",
        reply.text
    );
    assert_eq!(
        reply.body["direct_response_json"],
        json!({"file": "src/session.rs", "line": 42})
    );
    let sent = app.upstream_bodies().await;
    let tools = sent[0]["tools"].as_array().unwrap();
    let offered = tools.iter().find(|t| t["name"] == "final_answer").unwrap();
    assert_eq!(offered["input_schema"], schema());
}

/// A turn that calls a tool and then answers through `final_answer`: before the last step the
/// call is proposed and the answer marked left out (it came before the call's result); on the
/// last step, where no call runs, the answer is the step's. Before, it was dropped as a call of
/// no tool in both.
#[tokio::test]
async fn an_answer_given_after_a_call_in_the_same_turn_is_not_lost() {
    let mut turn = anthropic_tool_reply("Thought: found it.", "read_file", json!({"path": "a.rs"}));
    let answer = json!({"type": "tool_use", "id": "toolu_02", "name": "final_answer",
        "input": {"file": "src/session.rs", "line": 42}});
    turn["content"].as_array_mut().unwrap().push(answer);
    let app = spawn_app_answering_in_turn(ANTHROPIC_PATH, vec![turn.clone(), turn]).await;
    let mut body = natively(asking("claude-sonnet-4-5"));
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "action_proposed", "{}", reply.text);
    assert_eq!(reply.body["action_details"]["tool_name"], "read_file");
    assert_eq!(reply.body["answer_left_out"], true, "{}", reply.text);
    assert!(
        !reply.text.contains("there is no tool named"),
        "{}",
        reply.text
    );
    body["max_iterations_left"] = json!(1);
    let last = app.post_react_step(&body).await;
    assert_eq!(last.status, 200, "{}", last.text);
    assert_eq!(
        last.body["status"], "direct_response_provided",
        "{}",
        last.text
    );
    assert_eq!(
        last.body["direct_response_json"],
        json!({"file": "src/session.rs", "line": 42})
    );
    assert_conforms("POST", "/api/agent/react_step", 200, &last.body);
}

/// A schema of something other than an object goes to the `final_answer` tool wrapped as
/// `answer`; its references still point into the tool's parameters (a provider refuses a
/// dangling one), and the answer given through the tool is read.
#[tokio::test]
async fn a_wrapped_schemas_references_reach_the_provider_whole() {
    let hits = json!({"type": "array", "items": {"$ref": "#/$defs/hit"},
        "$defs": {"hit": {"type": "object", "required": ["file"],
                          "properties": {"file": {"type": "string"}}}}});
    let call = anthropic_tool_reply(
        "Thought: found them.",
        "final_answer",
        json!({"answer": [{"file": "a.rs"}, {"file": "b.rs"}]}),
    );
    let app = spawn_app_answering_in_turn(ANTHROPIC_PATH, vec![call]).await;
    let mut body = natively(asking("claude-sonnet-4-5"));
    body["react"] = json!({"final_answer_schema": hits});
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.body["direct_response_json"],
        json!([{"file": "a.rs"}, {"file": "b.rs"}])
    );
    let sent = app.upstream_bodies().await;
    let tools = sent[0]["tools"].as_array().unwrap();
    let offered = tools.iter().find(|t| t["name"] == "final_answer").unwrap();
    let parameters = &offered["input_schema"];
    assert_eq!(
        parameters["properties"]["answer"]["items"]["$ref"],
        "#/$defs/hit"
    );
    assert_eq!(parameters["$defs"]["hit"]["required"], json!(["file"]));
}

#[tokio::test]
async fn a_schema_that_cannot_be_one_is_a_400_naming_the_field() {
    let app = spawn_app().await;
    let mut deep = json!({"type": "string"});
    for _ in 0..40 {
        deep = json!({"type": "array", "items": deep});
    }
    for bad in [
        json!("a string"),
        json!({"$ref": "https://example.com/answer.json"}),
        json!({"type": "object", "properties": {"x": {"pattern": "("}}}),
        deep,
    ] {
        let mut body = asking("gpt-4o");
        body["react"]["final_answer_schema"] = bad.clone();
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 400, "{bad}: {}", reply.text);
        assert_conforms("POST", "/api/agent/react_step", 400, &reply.body);
        assert_eq!(
            reply.body["error"]["fields"][0]["field"], "react.final_answer_schema",
            "{bad}"
        );
    }
    assert!(app.upstream_bodies().await.is_empty());
}
