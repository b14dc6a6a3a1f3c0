//! Several calls in one turn: all proposed (`parallel_actions`), each checked against its tool,
//! each with its id, all kept on the history turn; or only the first, when turned off.

use serde_json::{json, Value};

use crate::support::app::{spawn_app, spawn_app_answering};
use crate::support::requests::request;
use crate::support::upstream::{anthropic_reply, mount, openai_reply, ANTHROPIC_PATH, OPENAI_PATH};

fn with_tools(model: &str, mode: &str) -> Value {
    let mut body = request(model, "Compare a.js and b.js");
    body["llm_config"]["tool_mode"] = json!(mode);
    body["available_tools_prompt_segment"] = Value::Null;
    body["tools"] = json!([{"name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]);
    body
}

fn two_openai_calls() -> Value {
    let mut reply = openai_reply("");
    reply["choices"][0]["finish_reason"] = json!("tool_calls");
    reply["choices"][0]["message"] = json!({"role": "assistant", "content": "Thought: read both.",
        "tool_calls": [
            {"id": "call_A", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a.js\"}"}},
            {"id": "call_B", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"b.js\"}"}}]});
    reply
}

#[tokio::test]
async fn two_native_calls_are_both_proposed_with_their_ids() {
    let app = spawn_app_answering(OPENAI_PATH, 200, two_openai_calls()).await;
    let reply = app.post_react_step(&with_tools("gpt-4o", "native")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let all = reply.body["parallel_actions"].as_array().unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0], reply.body["action_details"]);
    assert_eq!(all[1]["tool_args"], json!({"path": "b.js"}));
    assert_eq!(all[1]["tool_call_id"], "call_B");
    let turn = &reply.body["updated_conversation_history"][1];
    assert_eq!(turn["toolCall"]["id"], "call_A");
    let ids: Vec<&str> = turn["toolCalls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["call_A", "call_B"]);
    assert_eq!(reply.body["warnings"], json!([]));
    assert!(app.upstream_bodies().await[0]
        .get("parallel_tool_calls")
        .is_none());
}

#[tokio::test]
async fn ids_a_server_repeats_in_a_turn_or_across_turns_are_replaced() {
    // Some servers (DeepSeek and GLM behind vLLM) number each turn's calls from `call_0`.
    let mut reply = two_openai_calls();
    let calls = &mut reply["choices"][0]["message"]["tool_calls"];
    calls[0]["id"] = json!("call_0");
    calls[1]["id"] = json!("call_0");
    let app = spawn_app_answering(OPENAI_PATH, 200, reply.clone()).await;
    let step = app.post_react_step(&with_tools("gpt-4o", "native")).await;
    assert_eq!(step.status, 200, "{}", step.text);
    let all = step.body["parallel_actions"].as_array().unwrap();
    assert_eq!(all[0]["tool_call_id"], "call_0");
    assert_ne!(all[1]["tool_call_id"], "call_0");
    assert!(step.body["warnings"].to_string().contains("repeated an id"));

    // The next turn's calls numbered from `call_0` again.
    let mut next = with_tools("gpt-4o", "native");
    let mut history = step.body["updated_conversation_history"].clone();
    for action in all {
        history
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "tool_observation",
            "content": "contents", "tool_call_id": action["tool_call_id"]}));
    }
    next["conversation_history"] = history;
    next["user_query"] = json!("");
    let app = spawn_app_answering(OPENAI_PATH, 200, reply).await;
    let step = app.post_react_step(&next).await;
    assert_eq!(step.status, 200, "{}", step.text);
    let ids: Vec<&Value> = step.body["parallel_actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["tool_call_id"])
        .collect();
    assert!(ids.iter().all(|id| *id != "call_0"), "{ids:?}");
    assert_ne!(ids[0], ids[1]);
}

#[tokio::test]
async fn a_pythonic_list_is_several_calls_and_a_bad_one_is_left_out() {
    let output = "Thought: read them.\n[read_file(path='a.js'), read_file(path='b.js'), delete_file(path='c.js')]";
    let app = spawn_app_answering(OPENAI_PATH, 200, openai_reply(output)).await;
    let reply = app.post_react_step(&with_tools("gpt-4o", "text")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let all = reply.body["parallel_actions"].as_array().unwrap();
    let paths: Vec<&Value> = all.iter().map(|a| &a["tool_args"]["path"]).collect();
    assert_eq!(paths, [&json!("a.js"), &json!("b.js")]);
    assert_ne!(all[0]["tool_call_id"], all[1]["tool_call_id"]);
    let warnings = reply.body["warnings"].to_string();
    assert!(
        warnings.contains("call 3 of the turn was left out"),
        "{warnings}"
    );
}

#[tokio::test]
async fn one_call_has_no_parallel_actions() {
    let output = "Thought: read it.\nAction: read_file(path=\"a.js\")";
    let app = spawn_app_answering(OPENAI_PATH, 200, openai_reply(output)).await;
    let reply = app.post_react_step(&with_tools("gpt-4o", "text")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.body.get("parallel_actions").is_none());
    assert!(reply.body["updated_conversation_history"][1]
        .get("toolCalls")
        .is_none());
}

#[tokio::test]
async fn with_parallel_calls_off_the_providers_are_told_and_only_the_first_is_proposed() {
    let app = spawn_app_answering(OPENAI_PATH, 200, two_openai_calls()).await;
    let mut body = with_tools("gpt-4o", "native");
    body["llm_config"]["parallel_tool_calls"] = json!(false);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.body.get("parallel_actions").is_none());
    assert_eq!(reply.body["action_details"]["tool_call_id"], "call_A");
    assert!(reply.body["warnings"]
        .to_string()
        .contains("parallel_tool_calls off"));
    assert_eq!(app.upstream_bodies().await[0]["parallel_tool_calls"], false);

    mount(
        &app.llm,
        ANTHROPIC_PATH,
        200,
        anthropic_reply("Final Answer: ok"),
    )
    .await;
    let mut body = with_tools("claude-sonnet-4-5", "native");
    body["llm_config"]["parallel_tool_calls"] = json!(false);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let sent = app.upstream_bodies().await;
    assert_eq!(
        sent.last().unwrap()["tool_choice"],
        json!({"type": "auto", "disable_parallel_tool_use": true})
    );
}

#[tokio::test]
async fn a_parallel_turn_answered_by_two_observations_goes_back_whole() {
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_reply("Final Answer: a.js is longer"),
    )
    .await;
    let mut body = with_tools("gpt-4o", "text");
    body["user_query"] = json!("");
    body["conversation_history"] = json!([
        {"role": "user", "content": "Compare a.js and b.js"},
        {"role": "assistant", "content": "read both",
         "toolCall": {"id": "call_A", "name": "read_file", "parameters": {"path": "a.js"}},
         "toolCalls": [
            {"id": "call_A", "name": "read_file", "parameters": {"path": "a.js"}},
            {"id": "call_B", "name": "read_file", "parameters": {"path": "b.js"}}]},
        {"role": "tool_observation", "content": "40 lines", "tool_call_id": "call_A"},
        {"role": "tool_observation", "content": "12 lines", "tool_call_id": "call_B"}
    ]);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let sent = app.upstream_bodies().await[0]["messages"].to_string();
    assert!(sent.contains("read_file(path=\\\"a.js\\\")"), "{sent}");
    assert!(sent.contains("read_file(path=\\\"b.js\\\")"), "{sent}");
    assert!(
        sent.contains("40 lines") && sent.contains("12 lines"),
        "{sent}"
    );
    assert_eq!(
        reply.body["updated_conversation_history"][1]["toolCalls"][1]["id"],
        "call_B"
    );
}

#[tokio::test]
async fn a_list_after_an_action_tag_is_several_calls_too() {
    let app = spawn_app().await;
    for output in [
        "Thought: read both.\nAction: [read_file(path='a.js'), read_file(path='b.js')]",
        "Thought: read both.\nAction: read_file(path='a.js')\nAction: read_file(path='b.js')",
    ] {
        let mut body = with_tools("gpt-4o", "text");
        body["mock_response"] = json!(output);
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let all = reply.body["parallel_actions"]
            .as_array()
            .unwrap_or_else(|| panic!("{output}: {}", reply.body));
        let paths: Vec<&Value> = all.iter().map(|a| &a["tool_args"]["path"]).collect();
        assert_eq!(paths, [&json!("a.js"), &json!("b.js")], "{output}");
    }
}

/// `n` native calls to `read_file`; the second's id is 300 characters, the third's not ASCII.
fn many_calls(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let id = match i {
                1 => "x".repeat(300),
                2 => "call_é".to_string(),
                _ => format!("call_{i}"),
            };
            json!({"id": id, "type": "function",
                   "function": {"name": "read_file", "arguments": format!("{{\"path\":\"f{i}.js\"}}")}})
        })
        .collect()
}

/// The step's answer, then its history sent back as the next step's (with the calls' results):
/// what the service returned, it must accept.
async fn returned_history_is_accepted(app: &crate::support::app::TestApp, reply: &Value) {
    let mut history = reply["updated_conversation_history"]
        .as_array()
        .unwrap()
        .clone();
    let turn = history.last().unwrap().clone();
    for call in turn["toolCalls"].as_array().unwrap() {
        history
            .push(json!({"role": "tool_observation", "content": "ok", "tool_call_id": call["id"]}));
    }
    let mut next = with_tools("gpt-4o", "native");
    next["conversation_history"] = Value::Array(history);
    next["mock_response"] = json!("Thought: done.\nFinal Answer: read");
    let again = app.post_react_step(&next).await;
    assert_eq!(again.status, 200, "{}", again.text);
}

fn assert_kept_64_with_valid_ids(body: &Value, made: usize) {
    let all = body["parallel_actions"].as_array().unwrap();
    assert_eq!(all.len(), 64, "the first 64 calls are kept");
    assert_eq!(all[63]["tool_args"], json!({"path": "f63.js"}), "in order");
    for action in all {
        let id = action["tool_call_id"].as_str().unwrap();
        assert!(
            (1..=256).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic()),
            "{id}"
        );
    }
    assert_eq!(all[0]["tool_call_id"], "call_0");
    assert!(all[1]["tool_call_id"]
        .as_str()
        .unwrap()
        .starts_with("call_"));
    let warnings = body["warnings"].to_string();
    assert!(
        warnings.contains(&format!("the model made {made} tool calls"))
            && warnings.contains(&format!("the other {} dropped", made - 64)),
        "{warnings}"
    );
    assert!(warnings.contains("2 tool call id(s)"), "{warnings}");
}

#[tokio::test]
async fn calls_past_a_turns_bound_and_bad_ids_never_make_a_history_the_next_step_refuses() {
    let mut reply = openai_reply("");
    reply["choices"][0]["finish_reason"] = json!("tool_calls");
    reply["choices"][0]["message"] =
        json!({"role": "assistant", "content": "Thought: read all.", "tool_calls": many_calls(65)});
    let app = spawn_app_answering(OPENAI_PATH, 200, reply).await;
    let reply = app.post_react_step(&with_tools("gpt-4o", "native")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_kept_64_with_valid_ids(&reply.body, 65);
    returned_history_is_accepted(&app, &reply.body).await;
}

#[tokio::test]
async fn an_anthropic_reply_of_many_tool_uses_keeps_the_first_64() {
    let mut reply = anthropic_reply("Thought: read all.");
    let content = reply["content"].as_array_mut().unwrap();
    for call in many_calls(100) {
        let input: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        content.push(
            json!({"type": "tool_use", "id": call["id"], "name": "read_file", "input": input}),
        );
    }
    reply["stop_reason"] = json!("tool_use");
    let app = spawn_app_answering(ANTHROPIC_PATH, 200, reply).await;
    let reply = app
        .post_react_step(&with_tools("claude-sonnet-4-5", "native"))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_kept_64_with_valid_ids(&reply.body, 100);
    returned_history_is_accepted(&app, &reply.body).await;
}

#[tokio::test]
async fn a_stream_of_many_calls_keeps_the_first_64() {
    let app = spawn_app().await;
    let chunk = |delta: Value| {
        json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
               "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
    };
    let calls: Vec<Value> = many_calls(70)
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            c["index"] = json!(i);
            c
        })
        .collect();
    // Half the calls in one event, the rest one event each.
    let mut events = vec![
        chunk(json!({"content": "Thought: read all."})),
        chunk(json!({"tool_calls": calls[..35]})),
    ];
    events.extend(
        calls[35..]
            .iter()
            .map(|c| chunk(json!({"tool_calls": [c]}))),
    );
    let mut stream: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    stream.push_str(r#"data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#);
    stream.push_str("\n\ndata: [DONE]\n\n");
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(
            wiremock::ResponseTemplate::new(200).set_body_raw(stream, "text/event-stream"),
        )
        .mount(&app.llm)
        .await;
    let streamed = crate::support::stream::post_stream(&app, &with_tools("gpt-4o", "native")).await;
    let (name, step) = streamed.terminal();
    assert_eq!(name, "step", "{step}");
    assert_kept_64_with_valid_ids(step, 70);
    returned_history_is_accepted(&app, step).await;
}

/// One native call to `read_file` whose arguments' JSON text is `arguments`.
fn one_call_reply(arguments: &str) -> Value {
    let mut reply = openai_reply("");
    reply["choices"][0]["finish_reason"] = json!("tool_calls");
    reply["choices"][0]["message"] = json!({"role": "assistant", "content": "Thought: read.",
        "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "read_file", "arguments": arguments}}]});
    reply
}

#[tokio::test]
async fn what_a_model_writes_in_a_call_never_makes_a_history_the_next_step_refuses() {
    let deep = format!("{{\"path\":{}\"a\"{}}}", "[".repeat(126), "]".repeat(126));
    let many = format!("{{\"path\":[{}0]}}", "0,".repeat(150_000));
    let long = format!("{{\"path\":\"{}\"}}", "a".repeat(8_500_000));
    let controls = format!("{{\"path\":\"{}\"}}", "\u{1}".repeat(1_500_000));
    let mut wide = openai_reply("");
    wide["choices"][0]["message"] = json!({"role": "assistant", "content": "Thought: read.",
        "tool_calls": (0..64).map(|i| json!({"id": format!("call_{i}"), "type": "function",
            "function": {"name": "read_file", "arguments": json!({"path": "b".repeat(200_000)}).to_string()}}))
            .collect::<Vec<_>>()});
    let replies = [
        ("126 deep", one_call_reply(&deep)),
        ("150,000 values", one_call_reply(&many)),
        ("an 8.5 MB string", one_call_reply(&long)),
        ("1.5 M control characters", one_call_reply(&controls)),
        ("64 calls of 200 KB", wide),
    ];
    for (what, reply) in replies {
        let app = spawn_app_answering(OPENAI_PATH, 200, reply).await;
        let answer = app.post_react_step(&with_tools("gpt-4o", "native")).await;
        // A bounded refusal, never an answer a next step cannot carry.
        assert!(
            answer.text.len() < 3 * 1024 * 1024,
            "{what}: {} bytes",
            answer.text.len()
        );
        match answer.status {
            200 => returned_history_is_accepted(&app, &answer.body).await,
            502 => {
                let kind = answer.body["error"]["type"].as_str().unwrap_or_default();
                assert!(
                    kind == "invalid_model_output" || kind == "llm_bad_response",
                    "{what}: {}",
                    answer.text
                );
            }
            other => panic!("{what}: {other} {}", answer.text),
        }
    }
}
