//! Honest endings (issue 34, item 2): an answer given on the loop's last step, where the model
//! was told to answer now, is marked `forced_final`; and a repair round in native mode asks in
//! the native format, never for an `Action:` line the system prompt does not use.

use serde_json::json;

use crate::support::app::spawn_app_answering_in_turn;
use crate::support::requests::{native_reasoning, request};
use crate::support::spec::assert_conforms;
use crate::support::upstream::{openai_reply, openai_tool_reply, OPENAI_PATH};

#[tokio::test]
async fn an_answer_on_the_last_step_is_marked_forced() {
    let answer = openai_reply("Thought: I must answer now.\nFinal Answer: probably in auth.rs");
    let app = spawn_app_answering_in_turn(OPENAI_PATH, vec![answer.clone(), answer]).await;
    let mut body = request("gpt-4o", "Where is login handled?");
    body["max_iterations_left"] = json!(1);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_conforms("POST", "/api/agent/react_step", 200, &reply.body);
    assert_eq!(reply.body["forced_final"], true);
    assert_eq!(reply.body["termination_reason"], "success");
    let warnings = reply.body["warnings"].to_string();
    assert!(warnings.contains("forced_final"), "{warnings}");
    // With steps left, an answer is the model's own: no mark.
    body["max_iterations_left"] = json!(2);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.body.get("forced_final").is_none(), "{}", reply.text);
}

#[tokio::test]
async fn a_native_repair_round_asks_for_a_native_call() {
    let app = spawn_app_answering_in_turn(
        OPENAI_PATH,
        vec![
            openai_reply("Thought: I know it.\nFinal Answer: in auth.rs"),
            openai_tool_reply(Some("Thought: look"), "read_file", r#"{"path":"auth.rs"}"#),
        ],
    )
    .await;
    let mut body = native_reasoning("gpt-4o", "low");
    body["llm_config"]
        .as_object_mut()
        .unwrap()
        .remove("reasoning_effort");
    body["react"] = json!({"require_action": true});
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "action_proposed");
    let sent = app.upstream_bodies().await;
    let feedback = sent[1]["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(feedback.contains("tool-calling interface"), "{feedback}");
    assert!(!feedback.contains("Action:"), "{feedback}");
    // Text mode keeps its own format.
    let app = spawn_app_answering_in_turn(
        OPENAI_PATH,
        vec![
            openai_reply("Thought: I know it.\nFinal Answer: in auth.rs"),
            openai_reply("Thought: look\nAction: read_file(path=\"auth.rs\")"),
        ],
    )
    .await;
    let mut body = request("gpt-4o", "Where is login handled?");
    body["react"] = json!({"require_action": true});
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let sent = app.upstream_bodies().await;
    let feedback = sent[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .to_string();
    assert!(feedback.contains("Action: <tool name>"), "{feedback}");
}

/// Issue 34, item 2: a call and then an answer (the model answered before seeing the result):
/// the call is proposed and the response says an answer was left out. The opposite order, an
/// answer and then an invented call, gives the answer, with no such mark.
#[tokio::test]
async fn an_answer_after_the_call_taken_is_marked_left_out() {
    let call_then_answer = openai_reply(
        "Thought: Read it.\nAction: read_file(path=\"src/auth.rs\")\nFinal Answer: Login is in src/auth.rs.",
    );
    let answer_then_call = openai_reply(
        "Thought: I know it.\nFinal Answer: Login is in src/auth.rs.\nAction: read_file(path=\"src/auth.rs\")",
    );
    let app =
        spawn_app_answering_in_turn(OPENAI_PATH, vec![call_then_answer, answer_then_call]).await;
    let body = request("gpt-4o", "Where is login handled?");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_conforms("POST", "/api/agent/react_step", 200, &reply.body);
    assert_eq!(reply.body["status"], "action_proposed");
    assert_eq!(reply.body["action_details"]["tool_name"], "read_file");
    assert_eq!(reply.body["answer_left_out"], true);
    let warnings = reply.body["warnings"].to_string();
    assert!(warnings.contains("answer_left_out"), "{warnings}");

    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_conforms("POST", "/api/agent/react_step", 200, &reply.body);
    assert_eq!(reply.body["status"], "direct_response_provided");
    assert_eq!(reply.body["direct_response"], "Login is in src/auth.rs.");
    assert!(
        reply.body.get("answer_left_out").is_none(),
        "{}",
        reply.text
    );
    let warnings = reply.body["warnings"].to_string();
    assert!(warnings.contains("the action left out"), "{warnings}");
}

/// A call with no answer after it carries no mark.
#[tokio::test]
async fn a_lone_call_is_not_marked() {
    let call = openai_reply("Thought: Read it.\nAction: read_file(path=\"src/auth.rs\")");
    let app = spawn_app_answering_in_turn(OPENAI_PATH, vec![call]).await;
    let reply = app
        .post_react_step(&request("gpt-4o", "Where is login handled?"))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "action_proposed");
    assert!(
        reply.body.get("answer_left_out").is_none(),
        "{}",
        reply.text
    );
}

/// The streamed step says an answer was left out as the plain response does: its terminal
/// `step` event carries the field and the warning, and no `answer` delta was sent.
#[tokio::test]
async fn a_streamed_step_marks_the_answer_left_out() {
    use crate::support::app::spawn_app_with;
    use crate::support::stream::post_stream;
    use crate::support::stream_upstream::{openai_stream, serve, Ending};

    let output = [
        "Thought: Read it.\nAction: read_file(pa",
        "th=\"src/auth.rs\")\nFinal Ans",
        "wer: Login is in src/auth.rs.",
    ];
    let upstream = serve(200, vec![openai_stream(&output, "stop")], Ending::Complete).await;
    let uri = upstream.uri.clone();
    let app = spawn_app_with(move |c| c.openai_base_url = format!("{uri}/v1")).await;
    let streamed = post_stream(&app, &request("gpt-4o", "Where is login handled?")).await;
    assert_eq!(streamed.status, 200);
    let (name, step) = streamed.terminal();
    assert_eq!(name, "step", "{step}");
    assert_eq!(step["status"], "action_proposed", "{step}");
    assert_eq!(step["action_details"]["tool_name"], "read_file");
    assert_eq!(step["answer_left_out"], true, "{step}");
    assert!(
        step["warnings"].to_string().contains("answer_left_out"),
        "{step}"
    );
    assert_eq!(streamed.joined("answer"), "");
}

/// The client's answer tool (`react.answer_tool`, a driver's `submit_answer`) called on the last
/// step is proposed, so the answer it carries is not lost; any other call there is summarised.
#[tokio::test]
async fn the_answer_tool_on_the_last_step_is_proposed_not_summarised() {
    let answered = openai_reply(
        "Thought: Found it.\nAction: submit_answer(answer=\"login is in auth.rs\")\nAction: code_search(query=\"x\")",
    );
    let other = openai_reply("Thought: One more look.\nAction: code_search(query=\"login\")");
    let second = openai_reply(
        "Thought: Found it.\nAction: code_search(query=\"x\")\nAction: submit_answer(answer=\"in auth.rs\")",
    );
    let app = spawn_app_answering_in_turn(
        OPENAI_PATH,
        vec![answered.clone(), second, other.clone(), answered, other],
    )
    .await;
    let mut body = request("gpt-4o", "Where is login handled?");
    body["available_tools_prompt_segment"] = json!(
        "- code_search(query): search the code\n- submit_answer(answer): give the final answer"
    );
    body["max_iterations_left"] = json!(1);
    body["react"] = json!({"answer_tool": "submit_answer"});

    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_conforms("POST", "/api/agent/react_step", 200, &reply.body);
    assert_eq!(reply.body["status"], "action_proposed");
    assert_eq!(reply.body["iterations_remaining"], 0);
    let action = &reply.body["action_details"];
    assert_eq!(action["tool_name"], "submit_answer");
    assert_eq!(action["tool_args"]["answer"], "login is in auth.rs");
    assert!(
        reply.body.get("parallel_actions").is_none(),
        "{}",
        reply.text
    );
    assert!(reply.body["warnings"]
        .to_string()
        .contains("react.answer_tool"));

    // Wherever the answer tool stands in the turn, it is the call proposed.
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.body["status"], "action_proposed", "{}", reply.text);
    assert_eq!(
        reply.body["action_details"]["tool_args"]["answer"],
        "in auth.rs"
    );
    assert!(
        reply.body.get("parallel_actions").is_none(),
        "{}",
        reply.text
    );
    // The last step's notice leaves the answer tool open.
    let sent = app.upstream_bodies().await;
    let notice = sent[0]["messages"].as_array().unwrap().last().unwrap()["content"].to_string();
    assert!(
        notice.contains("call no tool but submit_answer"),
        "{notice}"
    );

    // Any other tool on the last step is summarised, as without the setting.
    let reply = app.post_react_step(&body).await;
    assert_eq!(
        reply.body["status"], "direct_response_provided",
        "{}",
        reply.text
    );
    assert_eq!(reply.body["termination_reason"], "max_iterations");

    // Without the setting, the answer tool is summarised like any tool.
    body.as_object_mut().unwrap().remove("react");
    let reply = app.post_react_step(&body).await;
    assert_eq!(
        reply.body["status"], "direct_response_provided",
        "{}",
        reply.text
    );
    let long = "t".repeat(65);
    body["react"] = json!({"answer_tool": long});
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert!(reply.text.contains("react.answer_tool"), "{}", reply.text);
}
