//! Tool calls written as text in native mode (issue 33, part 5): a model asked through the
//! provider's tool calling that writes its call in the content instead (a JSON object, a
//! Hermes `<tool_call>` block, an `Action:` line, or a `Final Answer:` that is itself a call)
//! gets the call read by the text mode's parser and checked like any action, never returned as
//! its final answer. On the OpenAI and Anthropic wires and an `openai_compatible` server, as
//! small local models behind one do this most.

use serde_json::{json, Value};
use wiremock::{Mock, ResponseTemplate};

use crate::support::app::{spawn_app, spawn_app_answering, spawn_app_answering_in_turn};
use crate::support::requests::request;
use crate::support::stream::post_stream;
use crate::support::upstream::{
    anthropic_reply, compatible_reply, openai_reply, ANTHROPIC_PATH, COMPATIBLE_PATH, OPENAI_PATH,
};

struct Wire {
    name: &'static str,
    model: &'static str,
    provider: Option<&'static str>,
    path: &'static str,
    reply: fn(&str) -> Value,
}

const WIRES: [Wire; 3] = [
    Wire {
        name: "openai",
        model: "gpt-4o",
        provider: None,
        path: OPENAI_PATH,
        reply: openai_reply,
    },
    Wire {
        name: "anthropic",
        model: "claude-sonnet-4-5",
        provider: None,
        path: ANTHROPIC_PATH,
        reply: anthropic_reply,
    },
    Wire {
        name: "openai_compatible",
        model: "qwen2.5-coder:7b",
        provider: Some("openai_compatible"),
        path: COMPATIBLE_PATH,
        reply: compatible_reply,
    },
];

/// A native-mode step with two declared tools.
fn native(wire: &Wire, mode: &str) -> Value {
    let mut body = request(wire.model, "Where is login handled?");
    body["available_tools_prompt_segment"] = Value::Null;
    body["llm_config"]["tool_mode"] = json!(mode);
    if let Some(provider) = wire.provider {
        body["llm_config"]["provider"] = json!(provider);
    }
    body["tools"] = json!([
        {"name": "read_file", "description": "Read a file.",
         "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
        {"name": "grep_search", "description": "Search files with a regular expression.",
         "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
                        "required": ["pattern"], "additionalProperties": false}}
    ]);
    body
}

/// Content that holds a call, and the call it holds.
fn written_calls() -> Vec<(&'static str, &'static str, Value)> {
    let read = json!({"path": "src/auth.js"});
    let grep = json!({"pattern": "login", "path": "src"});
    vec![
        (
            r#"{"name": "read_file", "arguments": {"path": "src/auth.js"}}"#,
            "read_file",
            read.clone(),
        ),
        (
            "I will search for it.\n{\"name\": \"grep_search\", \"parameters\": {\"pattern\": \"login\", \"path\": \"src\"}}",
            "grep_search",
            grep.clone(),
        ),
        (
            "<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"src/auth.js\"}}\n</tool_call>",
            "read_file",
            read.clone(),
        ),
        (
            "Thought: The login code is in auth.js.\nAction: read_file(path=\"src/auth.js\")",
            "read_file",
            read.clone(),
        ),
        (
            "Thought: I should search.\nFinal Answer: {\"name\": \"grep_search\", \"arguments\": {\"pattern\": \"login\", \"path\": \"src\"}}",
            "grep_search",
            grep.clone(),
        ),
        (
            "Thought: I should search.\nFinal Answer: {{\"name\": \"grep_search\", \"arguments\": {{\"pattern\": \"login\", \"path\": \"src\"}}}}",
            "grep_search",
            grep.clone(),
        ),
        (
            "Thought: I should search.\nFinal Answer: <tools>{\"name\": \"grep_search\", \"arguments\": {\"pattern\": \"login\", \"path\": \"src\"}}</tools>",
            "grep_search",
            grep.clone(),
        ),
        (
            "Thought: Read it.\nFinal Answer: <tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"src/auth.js\"}}\n</tool_call>",
            "read_file",
            read.clone(),
        ),
        (
            "Thought: Read it.\nFinal Answer: Action: read_file(path=\"src/auth.js\")",
            "read_file",
            read.clone(),
        ),
        // gpt-oss's harmony final channel holding a ReAct step.
        (
            "<|channel|>analysis<|message|>Read it.<|end|><|start|>assistant<|channel|>final<|message|>Thought: The login code is in auth.js.\nAction: read_file(path=\"src/auth.js\")<|return|>",
            "read_file",
            read.clone(),
        ),
        // The 2026 dialects returned as content instead of calls.
        (
            "<minimax:tool_call>\n<invoke name=\"read_file\">\n<parameter name=\"path\">src/auth.js</parameter>\n</invoke>\n</minimax:tool_call>",
            "read_file",
            read.clone(),
        ),
        (
            "<TOOLCALL>[{\"name\":\"read_file\",\"arguments\":{\"path\":\"src/auth.js\"}}]</TOOLCALL>",
            "read_file",
            read.clone(),
        ),
        (
            "[TOOL_CALLS]read_file[CALL_ID]a1B2c3D4e[ARGS]{\"path\":\"src/auth.js\"}",
            "read_file",
            read.clone(),
        ),
        (
            "<function_calls>read_file(path=\"src/auth.js\")</function_calls>",
            "read_file",
            read.clone(),
        ),
        (
            "<start_function_call>call:read_file{path:<escape>src/auth.js<escape>}<end_function_call>",
            "read_file",
            read.clone(),
        ),
        (
            "<|tool_call>call:grep_search{pattern:<|\"|>login<|\"|>,path:<|\"|>src<|\"|>}<tool_call|>",
            "grep_search",
            grep.clone(),
        ),
        // A bare call after `Final Answer:`, as a real 0.5B model wrote.
        (
            "Thought: Read it.\nFinal Answer: `read_file(path=\"src/auth.js\")`",
            "read_file",
            read,
        ),
    ]
}

#[tokio::test]
async fn a_call_written_in_the_content_is_read_as_the_call_on_every_wire() {
    for wire in &WIRES {
        for (content, tool, args) in written_calls() {
            let app = spawn_app_answering(wire.path, 200, (wire.reply)(content)).await;
            let reply = app.post_react_step(&native(wire, "native")).await;
            let case = format!("{} {content:?}", wire.name);
            assert_eq!(reply.status, 200, "{case}: {}", reply.text);
            assert_eq!(
                reply.body["status"], "action_proposed",
                "{case}: {}",
                reply.text
            );
            assert_eq!(reply.body["action_details"]["tool_name"], tool, "{case}");
            assert_eq!(reply.body["action_details"]["tool_args"], args, "{case}");
            let id = reply.body["action_details"]["tool_call_id"]
                .as_str()
                .unwrap();
            assert!(id.starts_with("call_"), "{case}: the service's own id");
            let turn = reply.body["updated_conversation_history"]
                .as_array()
                .unwrap()
                .last()
                .unwrap()
                .clone();
            assert_eq!(turn["toolCall"]["name"], tool, "{case}");
            if content.contains("Final Answer:") {
                let warnings = reply.body["warnings"].to_string();
                assert!(
                    warnings.contains("the final answer was a call to grep_search")
                        || warnings.contains("the final answer was a call to read_file"),
                    "{case}: {warnings}"
                );
            }
            assert_eq!(
                app.upstream_bodies().await.len(),
                1,
                "{case}: no repair round"
            );
        }
    }
}

#[tokio::test]
async fn auto_mode_that_resolves_to_native_reads_them_too() {
    let wire = &WIRES[0];
    let content = "Thought: I should search.\nFinal Answer: {\"name\": \"grep_search\", \"arguments\": {\"pattern\": \"login\"}}";
    let app = spawn_app_answering(wire.path, 200, (wire.reply)(content)).await;
    let reply = app.post_react_step(&native(wire, "auto")).await;
    assert_eq!(reply.body["status"], "action_proposed", "{}", reply.text);
    assert!(
        app.upstream_bodies().await[0]["tools"].is_array(),
        "auto is native here"
    );
}

#[tokio::test]
async fn a_written_call_is_checked_against_the_tools_schema() {
    for wire in &WIRES {
        let bad = "Thought: Search.\nFinal Answer: {\"name\": \"grep_search\", \"arguments\": {\"pattern\": [7]}}";
        let fixed = r#"{"name": "grep_search", "arguments": {"pattern": "login"}}"#;
        let app =
            spawn_app_answering_in_turn(wire.path, vec![(wire.reply)(bad), (wire.reply)(fixed)])
                .await;
        let reply = app.post_react_step(&native(wire, "native")).await;
        assert_eq!(reply.status, 200, "{}: {}", wire.name, reply.text);
        assert_eq!(
            reply.body["action_details"]["tool_args"],
            json!({"pattern": "login"})
        );
        let warnings = reply.body["warnings"].to_string();
        assert!(
            warnings.contains("it was asked again"),
            "{}: {warnings}",
            wire.name
        );
        assert_eq!(
            app.upstream_bodies().await.len(),
            2,
            "{}: one repair round",
            wire.name
        );
    }
}

#[tokio::test]
async fn a_real_answer_stays_an_answer() {
    let answers = [
        "Thought: I know it.\nFinal Answer: Login is handled in src/auth.js; read_file on it shows login().",
        "Thought: I know it.\nFinal Answer: Use grep_search with {\"pattern\": \"login\"} to find more, but login is in src/auth.js.",
        "Thought: I know it.\nFinal Answer: {\"name\": \"deploy\", \"arguments\": {}} is the config of the deploy step.",
        "Thought: I know it.\nFinal Answer: {\"status\": \"ok\", \"file\": \"src/auth.js\"}",
        "Login is handled in src/auth.js.",
    ];
    for wire in &WIRES {
        for answer in answers {
            let app = spawn_app_answering(wire.path, 200, (wire.reply)(answer)).await;
            let reply = app.post_react_step(&native(wire, "native")).await;
            let case = format!("{} {answer:?}", wire.name);
            assert_eq!(reply.status, 200, "{case}: {}", reply.text);
            assert_eq!(
                reply.body["status"], "direct_response_provided",
                "{case}: {}",
                reply.text
            );
            let text = reply.body["direct_response"].as_str().unwrap();
            assert!(!text.is_empty() && answer.contains(text), "{case}: {text}");
            assert!(
                !reply.body["warnings"].to_string().contains("was a call"),
                "{case}"
            );
        }
    }
}

#[tokio::test]
async fn text_mode_keeps_a_call_written_as_the_answer_a_repair_round() {
    let wire = &WIRES[0];
    let mut body = native(wire, "text");
    body["max_repair_attempts"] = json!(0);
    let content = "Thought: Read it.\nFinal Answer: <tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"src/auth.js\"}}\n</tool_call>";
    let app = spawn_app_answering(wire.path, 200, (wire.reply)(content)).await;
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "invalid_model_output");
}

/// An OpenAI or Anthropic stream of `text` in pieces of 7 bytes (the texts here are ASCII).
fn streamed(wire: &Wire, text: &str) -> ResponseTemplate {
    let pieces: Vec<String> = text
        .as_bytes()
        .chunks(7)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let body = match wire.path {
        ANTHROPIC_PATH => crate::support::stream_upstream::anthropic_stream(&pieces),
        _ => crate::support::stream_upstream::openai_stream(&pieces, "stop"),
    };
    ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")
}

#[tokio::test]
async fn streamed_no_answer_delta_is_sent_for_a_call_written_as_the_answer() {
    for wire in &WIRES {
        streamed_on(wire).await;
    }
}

async fn streamed_on(wire: &Wire) {
    let app = spawn_app().await;
    for (content, tool, args) in written_calls() {
        Mock::given(wiremock::matchers::path(wire.path))
            .respond_with(streamed(wire, content))
            .up_to_n_times(1)
            .mount(&app.llm)
            .await;
        let streamed = post_stream(&app, &native(wire, "native")).await;
        let (name, step) = streamed.terminal();
        assert_eq!(name, "step", "{content:?}: {step}");
        assert_eq!(step["status"], "action_proposed", "{content:?}: {step}");
        assert_eq!(step["action_details"]["tool_name"], tool, "{content:?}");
        assert_eq!(step["action_details"]["tool_args"], args, "{content:?}");
        assert_eq!(streamed.joined("answer"), "", "{content:?}");
        assert!(
            !streamed.joined("thought").contains("grep_search")
                && !streamed.joined("thought").contains("read_file"),
            "{content:?}: {}",
            streamed.joined("thought")
        );
    }
}
