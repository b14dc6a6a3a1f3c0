//! `react.loop_guard`: a loop read from the history alone. At `warn_after` the prompt's tail
//! (never the cached prefix) tells the model, and the answer reports it; at `stop_after` a call
//! that would go on with it is a 422 `loop_detected`. On the OpenAI and Anthropic wires,
//! streamed and not; every reply checked against openapi.yaml.

use serde_json::{json, Value};
use wiremock::{Mock, ResponseTemplate};

use crate::support::app::{spawn_app, spawn_app_answering};
use crate::support::requests::request;
use crate::support::stream::post_stream;
use crate::support::upstream::{anthropic_reply, openai_reply, ANTHROPIC_PATH, OPENAI_PATH};

const TASK: &str = "Where is login handled?";
const NOTICE: &str = "Loop warning: you have made the same call";
const SAME_AGAIN: &str =
    "Thought: Let me read it once more.\nAction: read_file(path=\"src/auth.js\")";
const SOMETHING_ELSE: &str =
    "Thought: Reading it again tells me nothing; I will search.\nAction: code_search(query=\"login\")";

/// One call and the observation answering it.
fn step(i: usize, name: &str, args: Value, result: &str) -> [Value; 2] {
    let id = format!("call_{i}");
    [
        json!({"role": "assistant", "content": "I will look.",
               "toolCall": {"id": id, "name": name, "parameters": args}}),
        json!({"role": "tool_observation", "content": result, "tool_call_id": id}),
    ]
}

/// The task, then `n` reads of src/auth.js that each found the same.
fn same_reads(n: usize) -> Vec<Value> {
    let mut turns = vec![json!({"role": "user", "content": TASK})];
    for i in 0..n {
        turns.extend(step(
            i,
            "read_file",
            json!({"path": "src/auth.js"}),
            "export function login() {}",
        ));
    }
    turns
}

/// A step in the middle of a loop with `history`.
fn looping(model: &str, history: Vec<Value>) -> Value {
    let mut body = request(model, "");
    body["conversation_history"] = json!(history);
    body["max_iterations_left"] = json!(8);
    body
}

struct Wire {
    model: &'static str,
    path: &'static str,
    reply: fn(&str) -> Value,
}

const OPENAI: Wire = Wire {
    model: "gpt-4o",
    path: OPENAI_PATH,
    reply: openai_reply,
};
const ANTHROPIC: Wire = Wire {
    model: "claude-sonnet-4-5",
    path: ANTHROPIC_PATH,
    reply: anthropic_reply,
};

/// The text of the prompt before its last message (the system prompt included), and of the
/// last message.
fn prefix_and_tail(sent: &Value) -> (String, String) {
    let messages = sent["messages"].as_array().unwrap();
    let (last, before) = messages.split_last().unwrap();
    let prefix = format!("{}{}", sent["system"], json!(before));
    (prefix, last.to_string())
}

async fn warned_on(wire: &Wire) {
    let app = spawn_app_answering(wire.path, 200, (wire.reply)(SOMETHING_ELSE)).await;
    let reply = app
        .post_react_step(&looping(wire.model, same_reads(3)))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "action_proposed");
    assert_eq!(reply.body["action_details"]["tool_name"], "code_search");
    assert_eq!(
        reply.body["loop_guard"],
        json!({"kind": "same_call", "steps": 1, "times": 3, "action": "warned",
               "repeated": [{"tool_name": "read_file", "tool_args": {"path": "src/auth.js"}}]})
    );
    let warnings = reply.body["warnings"].to_string();
    assert!(
        warnings.contains("loop guard: the model called read_file with the same arguments 3 times"),
        "{warnings}"
    );
    let sent = &app.upstream_bodies().await[0];
    let (prefix, tail) = prefix_and_tail(sent);
    assert!(tail.contains(NOTICE), "{}: {tail}", wire.model);
    assert!(
        tail.contains(r#"read_file({\"path\":\"src/auth.js\"})"#),
        "{tail}"
    );
    assert!(
        !prefix.contains("Loop warning"),
        "the cached prefix is the same as without a loop"
    );
}

#[tokio::test]
async fn three_same_calls_are_warned_of_in_the_prompts_tail_on_openai() {
    warned_on(&OPENAI).await;
}

#[tokio::test]
async fn three_same_calls_are_warned_of_in_the_prompts_tail_on_anthropic() {
    warned_on(&ANTHROPIC).await;
}

async fn stopped_on(wire: &Wire) {
    let app = spawn_app_answering(wire.path, 200, (wire.reply)(SAME_AGAIN)).await;
    let body = looping(wire.model, same_reads(5));
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    assert_eq!(reply.body["status"], "error");
    assert_eq!(reply.body["error"]["type"], "loop_detected");
    assert_eq!(reply.body["error"]["retryable"], false);
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("read_file") && message.contains("5 times"),
        "{message}"
    );
    assert_eq!(reply.body["loop_guard"]["action"], "stopped");
    assert_eq!(reply.body["loop_guard"]["times"], 5);
    assert_eq!(
        reply.body["updated_conversation_history"], body["conversation_history"],
        "the history is echoed as sent"
    );
    assert_eq!(reply.body["iterations_remaining"], 8);
    assert!(
        reply.body["usage"]["prompt_tokens"].as_u64().unwrap() > 0,
        "the model call was billed"
    );
    assert!(reply.body["context_report"].is_object());
    assert_eq!(app.upstream_bodies().await.len(), 1, "no repair round");
}

#[tokio::test]
async fn a_sixth_same_call_is_a_422_loop_detected_on_openai() {
    stopped_on(&OPENAI).await;
}

#[tokio::test]
async fn a_sixth_same_call_is_a_422_loop_detected_on_anthropic() {
    stopped_on(&ANTHROPIC).await;
}

/// On the last step the prompt tells the model to answer in place of the guard's notice, and a
/// call is summarised, never run: the guard says nothing, rather than claim it warned.
#[tokio::test]
async fn on_the_last_step_the_guard_says_nothing() {
    let app = spawn_app_answering(OPENAI_PATH, 200, openai_reply(SAME_AGAIN)).await;
    let mut body = looping("gpt-4o", same_reads(4));
    body["max_iterations_left"] = json!(1);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(
        reply.body.get("loop_guard").is_none_or(Value::is_null),
        "{}",
        reply.text
    );
    assert!(!reply.text.contains("loop guard"), "{}", reply.text);
    let sent = app.upstream_bodies().await;
    assert!(!sent[0].to_string().contains(NOTICE));
}

#[tokio::test]
async fn after_five_something_else_or_an_answer_goes_through() {
    for (output, status) in [
        (SOMETHING_ELSE, "action_proposed"),
        (
            "Thought: I have it.\nFinal Answer: Login is in src/auth.js.",
            "direct_response_provided",
        ),
    ] {
        let app = spawn_app_answering(OPENAI_PATH, 200, openai_reply(output)).await;
        let reply = app.post_react_step(&looping("gpt-4o", same_reads(5))).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(reply.body["status"], status);
        assert_eq!(reply.body["loop_guard"]["action"], "warned");
        assert_eq!(reply.body["loop_guard"]["times"], 5);
    }
    // On the last step the call becomes the summary, as always: nothing is stopped.
    let app = spawn_app_answering(OPENAI_PATH, 200, openai_reply(SAME_AGAIN)).await;
    let mut body = looping("gpt-4o", same_reads(5));
    body["max_iterations_left"] = json!(1);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["termination_reason"], "max_iterations");
}

#[tokio::test]
async fn the_same_calls_with_different_results_are_no_loop() {
    let mut history = vec![json!({"role": "user", "content": TASK})];
    for i in 0..6 {
        history.extend(step(
            i,
            "run_tests",
            json!({}),
            &format!("{} tests failed", 6 - i),
        ));
    }
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_reply("Thought: Again.\nAction: run_tests()"),
    )
    .await;
    let mut body = looping("gpt-4o", history);
    body["available_tools_prompt_segment"] = json!("run_tests() - run the tests");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.body.get("loop_guard").is_none(), "{}", reply.text);
    assert!(!reply.body["warnings"].to_string().contains("loop guard"));
    let sent = &app.upstream_bodies().await[0];
    assert!(!sent.to_string().contains("Loop warning"));
}

#[tokio::test]
async fn a_cycle_of_two_calls_is_warned_of_then_stopped() {
    let cycle = |rounds: usize| {
        let mut history = vec![json!({"role": "user", "content": TASK})];
        for i in 0..rounds * 2 {
            let (name, args, result) = match i % 2 {
                0 => ("code_search", json!({"query": "login"}), "src/auth.js:3"),
                _ => (
                    "read_file",
                    json!({"path": "src/auth.js"}),
                    "export function login() {}",
                ),
            };
            history.extend(step(i, name, args, result));
        }
        looping("gpt-4o", history)
    };
    let app = spawn_app_answering(OPENAI_PATH, 200, openai_reply(SOMETHING_ELSE)).await;
    let reply = app.post_react_step(&cycle(3)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.body["loop_guard"],
        json!({"kind": "cycle", "steps": 2, "times": 3, "action": "warned", "repeated": [
            {"tool_name": "code_search", "tool_args": {"query": "login"}},
            {"tool_name": "read_file", "tool_args": {"path": "src/auth.js"}}]})
    );
    let (_, tail) = prefix_and_tail(&app.upstream_bodies().await[0]);
    assert!(
        tail.contains("Loop warning: you have gone round the same 2 calls 3 times"),
        "{tail}"
    );

    // Five rounds done: the search that would begin a sixth is refused.
    let reply = app.post_react_step(&cycle(5)).await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "loop_detected");
    assert_eq!(reply.body["loop_guard"]["kind"], "cycle");
}

#[tokio::test]
async fn loop_guard_false_turns_it_off() {
    let app = spawn_app_answering(OPENAI_PATH, 200, openai_reply(SAME_AGAIN)).await;
    let mut body = looping("gpt-4o", same_reads(6));
    body["react"] = json!({"loop_guard": false});
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.body.get("loop_guard").is_none());
    assert!(!app.upstream_bodies().await[0]
        .to_string()
        .contains("Loop warning"));

    // Thresholds of the client's own.
    body["react"] = json!({"loop_guard": {"warn_after": 2, "stop_after": 2}});
    body["conversation_history"] = json!(same_reads(2));
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    assert_eq!(reply.body["loop_guard"]["times"], 2);
    body["react"] = json!({"loop_guard": {"warn_after": 7}});
    body["conversation_history"] = json!(same_reads(6));
    let reply = app.post_react_step(&body).await;
    assert_eq!(
        reply.status, 200,
        "stop_after follows warn_after up: {}",
        reply.text
    );
    assert!(reply.body.get("loop_guard").is_none());
}

#[tokio::test]
async fn bad_settings_are_400s_that_name_the_field() {
    let app = spawn_app().await;
    for (setting, field, says) in [
        (
            json!({"warn_after": 1}),
            "react.loop_guard.warn_after",
            "from 2 to 100",
        ),
        (
            json!({"stop_after": 101}),
            "react.loop_guard.stop_after",
            "from 2 to 100",
        ),
        (
            json!({"warn_after": 2.5}),
            "react.loop_guard.warn_after",
            "integer",
        ),
        (
            json!({"warn_after": "3"}),
            "react.loop_guard.warn_after",
            "integer",
        ),
        (
            json!({"warn_after": 6, "stop_after": 4}),
            "react.loop_guard.stop_after",
            "at least warn_after (6)",
        ),
        (
            json!({"stop_afterr": 4}),
            "react.loop_guard",
            "only warn_after and stop_after",
        ),
        (json!("yes"), "react.loop_guard", "false, true or an object"),
        (json!(3), "react.loop_guard", "false, true or an object"),
    ] {
        let mut body = looping("gpt-4o", same_reads(1));
        body["react"] = json!({ "loop_guard": setting });
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 400, "{setting}: {}", reply.text);
        let fields = reply.body["error"]["fields"].as_array().unwrap();
        assert!(
            fields
                .iter()
                .any(|f| f["field"] == field && f["message"].as_str().unwrap().contains(says)),
            "{setting}: {fields:?}"
        );
    }
    assert!(
        app.llm.received_requests().await.unwrap().is_empty(),
        "no model was called"
    );
}

/// An OpenAI or Anthropic stream of `text`.
fn stream_of(anthropic: bool, text: &str) -> ResponseTemplate {
    let body = if anthropic {
        crate::support::stream_upstream::anthropic_stream(&[text])
    } else {
        crate::support::stream_upstream::openai_stream(&[text], "stop")
    };
    ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")
}

async fn streamed_on(wire: &Wire) {
    let anthropic = wire.path == ANTHROPIC_PATH;
    let app = spawn_app().await;
    let answer = |text: &str| {
        Mock::given(wiremock::matchers::path(wire.path))
            .respond_with(stream_of(anthropic, text))
            .up_to_n_times(1)
    };
    answer(SOMETHING_ELSE).mount(&app.llm).await;
    let streamed = post_stream(&app, &looping(wire.model, same_reads(3))).await;
    let (name, step) = streamed.terminal();
    assert_eq!(name, "step", "{}: {step}", wire.model);
    assert_eq!(step["loop_guard"]["action"], "warned");
    assert_eq!(step["action_details"]["tool_name"], "code_search");
    let sent = &app.upstream_bodies().await[0];
    assert_eq!(sent["stream"], true);
    assert!(prefix_and_tail(sent).1.contains(NOTICE));

    answer(SAME_AGAIN).mount(&app.llm).await;
    let body = looping(wire.model, same_reads(5));
    let streamed = post_stream(&app, &body).await;
    assert_eq!(streamed.status, 200);
    let (name, error) = streamed.terminal();
    assert_eq!(name, "error", "{}: {error}", wire.model);
    assert_eq!(error["error"]["type"], "loop_detected");
    assert_eq!(error["error"]["retryable"], false);
    assert_eq!(error["loop_guard"]["action"], "stopped");
    assert_eq!(
        error["updated_conversation_history"],
        body["conversation_history"]
    );
    assert_eq!(
        streamed.joined("thought"),
        "Let me read it once more.",
        "the thought streamed before the call was read"
    );
}

#[tokio::test]
async fn streamed_steps_warn_and_stop_on_openai() {
    streamed_on(&OPENAI).await;
}

#[tokio::test]
async fn streamed_steps_warn_and_stop_on_anthropic() {
    streamed_on(&ANTHROPIC).await;
}

#[tokio::test]
async fn in_a_native_loop_the_notice_goes_inside_the_turn() {
    let tools = json!([
        {"name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
        {"name": "code_search", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}
    ]);
    for wire in [&OPENAI, &ANTHROPIC] {
        let reply = match wire.path {
            OPENAI_PATH => crate::support::upstream::openai_tool_reply(
                None,
                "code_search",
                "{\"query\":\"login\"}",
            ),
            _ => crate::support::upstream::anthropic_tool_reply(
                "",
                "code_search",
                json!({"query": "login"}),
            ),
        };
        let app = spawn_app_answering(wire.path, 200, reply).await;
        let mut body = looping(wire.model, same_reads(3));
        body["available_tools_prompt_segment"] = Value::Null;
        body["tools"] = tools.clone();
        body["llm_config"]["tool_mode"] = json!("native");
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(reply.body["loop_guard"]["times"], 3);
        let sent = &app.upstream_bodies().await[0];
        let messages = sent["messages"].as_array().unwrap();
        let last = messages.last().unwrap();
        // The notice continues the turn of the last result: OpenAI's `tool` message, or the
        // user message that holds Anthropic's `tool_result`.
        if wire.path == OPENAI_PATH {
            assert_eq!(last["role"], "tool", "{last}");
        } else {
            assert_eq!(last["content"][0]["type"], "tool_result", "{last}");
        }
        assert!(last.to_string().contains(NOTICE), "{last}");
        assert_eq!(
            messages
                .iter()
                .filter(|m| m.to_string().contains("Loop warning"))
                .count(),
            1
        );
    }
}

/// A loop of 4,999 same calls (9,999 turns, the history's limit is 10,000): refused in about
/// the time of any step.
#[tokio::test]
async fn ten_thousand_turns_of_the_same_call() {
    let app = spawn_app_answering(OPENAI_PATH, 200, openai_reply(SAME_AGAIN)).await;
    let body = looping("gpt-4o", same_reads(4_999));
    let started = std::time::Instant::now();
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 422, "{}", &reply.text[..500]);
    assert_eq!(reply.body["loop_guard"]["times"], 4_999);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn arguments_in_another_key_order_are_the_same_call() {
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_reply("Thought: again\nAction: code_search(query=\"login\", limit=5)"),
    )
    .await;
    let mut history = vec![json!({"role": "user", "content": TASK})];
    for i in 0..5 {
        let args = match i % 2 {
            0 => json!({"query": "login", "limit": 5}),
            _ => json!({"limit": 5, "query": "login"}),
        };
        history.extend(step(i, "code_search", args, "src/auth.js:3"));
    }
    let reply = app.post_react_step(&looping("gpt-4o", history)).await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    assert_eq!(reply.body["loop_guard"]["kind"], "same_call");
}

/// Arguments of half a megabyte, three times: the notice quotes the call short.
#[tokio::test]
async fn huge_arguments_are_quoted_short() {
    let app = spawn_app_answering(OPENAI_PATH, 200, openai_reply(SOMETHING_ELSE)).await;
    let big = "x".repeat(512 * 1024);
    let mut history = vec![json!({"role": "user", "content": TASK})];
    for i in 0..3 {
        history.extend(step(
            i,
            "write_file",
            json!({"path": "a.txt", "content": big}),
            "written",
        ));
    }
    let mut body = looping("gpt-4o", history);
    body["available_tools_prompt_segment"] = json!("code_search(query), write_file(path, content)");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", &reply.text[..500]);
    assert_eq!(
        reply.body["loop_guard"]["repeated"][0]["tool_args"]["content"]
            .as_str()
            .unwrap()
            .len(),
        big.len(),
        "the report names the call exactly"
    );
    let (_, tail) = prefix_and_tail(&app.upstream_bodies().await[0]);
    assert!(tail.contains(NOTICE), "{}", &tail[..500.min(tail.len())]);
    assert!(tail.len() < 2_000, "{}", tail.len());
}

#[tokio::test]
async fn the_notice_names_a_renamed_tool_as_the_model_sees_it() {
    // `fs.read_file` goes to the model as `fs_read_file`: the notice quoted a name it never saw.
    let history: Vec<Value> = same_reads(3)
        .into_iter()
        .map(|turn| {
            let text = turn
                .to_string()
                .replace("\"read_file\"", "\"fs.read_file\"");
            serde_json::from_str(&text).unwrap()
        })
        .collect();
    let reply =
        crate::support::upstream::openai_tool_reply(None, "code_search", "{\"query\":\"x\"}");
    let app = spawn_app_answering(OPENAI_PATH, 200, reply).await;
    let mut body = looping("gpt-4o", history);
    body["available_tools_prompt_segment"] = Value::Null;
    body["tools"] = json!([
        {"name": "fs.read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
        {"name": "code_search", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}
    ]);
    body["llm_config"]["tool_mode"] = json!("native");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["loop_guard"]["times"], 3);
    let sent = app.upstream_bodies().await[0].to_string();
    assert!(sent.contains("fs_read_file({"), "{sent}");
    assert!(!sent.contains("fs.read_file"), "{sent}");
}
