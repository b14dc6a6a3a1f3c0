//! Issue 14, items 14 and 15: every response that followed billed model calls reports their
//! summed usage, errors included; a reply cut at the output limit before it decided anything,
//! and a reply holding only a thought, get a repair round instead of becoming the answer.

use reactstep::llm::sse::SseDecoder;
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, ResponseTemplate};

use crate::support::app::{spawn_app, spawn_app_answering_in_turn, spawn_app_with, TestApp};
use crate::support::requests::request;
use crate::support::spec::assert_conforms_to_schema;
use crate::support::stream_upstream::openai_stream;
use crate::support::upstream::{mount_sequence, openai_reply, OPENAI_PATH};

const GOOD: &str = "Thought: The login code is in auth.js.\nAction: read_file(path=\"auth.js\")";

/// An OpenAI reply with its own finish reason and usage, so that sums can be told apart.
fn reply(content: &str, finish: &str, prompt: u64, completion: u64) -> Value {
    let mut reply = openai_reply(content);
    reply["choices"][0]["finish_reason"] = json!(finish);
    reply["usage"]["prompt_tokens"] = json!(prompt);
    reply["usage"]["completion_tokens"] = json!(completion);
    reply["usage"]["total_tokens"] = json!(prompt + completion);
    reply
}

fn usage(prompt: u64, completion: u64) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion})
}

fn warnings(body: &Value) -> Vec<&str> {
    body["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

/// The last message of the `n`th upstream request: the repair round's feedback.
async fn feedback_sent(app: &TestApp, n: usize) -> String {
    let bodies = app.upstream_bodies().await;
    bodies[n]["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn an_invalid_output_after_a_repair_round_reports_both_calls() {
    let bad = "Thought: Delete it.\nAction: delete_everything(path=\"/\")";
    let app = spawn_app_answering_in_turn(
        OPENAI_PATH,
        vec![reply(bad, "stop", 400, 30), reply(bad, "stop", 470, 31)],
    )
    .await;

    let reply = app.post_react_step(&request("gpt-4o", "Clean up")).await;

    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "invalid_model_output");
    assert_eq!(reply.body["usage"], usage(870, 61));
    assert_eq!(app.upstream_bodies().await.len(), 2);
}

#[tokio::test]
async fn a_repair_call_that_fails_still_reports_the_first_call() {
    let app = spawn_app_with(|c| c.retries = 1).await;
    let bad = "Thought: Delete it.\nAction: delete_everything(path=\"/\")";
    mount_sequence(&app.llm, OPENAI_PATH, vec![reply(bad, "stop", 400, 30)]).await;
    // Mounted after the sequence: it answers once the invalid reply has been served.
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ResponseTemplate::new(500).set_body_json(
            json!({"error": {"message": "The server had an error", "type": "server_error"}}),
        ))
        .mount(&app.llm)
        .await;

    let reply = app.post_react_step(&request("gpt-4o", "Clean up")).await;

    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "llm_unavailable");
    assert_eq!(reply.body["usage"], usage(400, 30));
    // The first call, then the repair call and its one retry.
    assert_eq!(app.upstream_bodies().await.len(), 3);
}

#[tokio::test]
async fn a_first_call_that_fails_reports_no_usage() {
    let app = spawn_app_with(|c| c.retries = 0).await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ResponseTemplate::new(503).set_body_json(json!({"error": {"message": "x"}})))
        .mount(&app.llm)
        .await;

    let reply = app.post_react_step(&request("gpt-4o", "Where?")).await;

    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["usage"], Value::Null);
}

#[tokio::test]
async fn an_empty_output_reports_its_usage() {
    let app = spawn_app_answering_in_turn(OPENAI_PATH, vec![reply("  ", "stop", 300, 1)]).await;

    let reply = app.post_react_step(&request("gpt-4o", "Where?")).await;

    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "llm_bad_response");
    assert_eq!(reply.body["usage"], usage(300, 1));
}

#[tokio::test]
async fn a_reply_cut_mid_action_is_repaired_and_both_calls_are_counted() {
    let cut = "Thought: I will read the login code.\nAction: read_file(path=\"src/au";
    let app = spawn_app_answering_in_turn(
        OPENAI_PATH,
        vec![
            reply(cut, "length", 400, 1000),
            reply(GOOD, "stop", 1450, 20),
        ],
    )
    .await;

    let reply = app.post_react_step(&request("gpt-4o", "Where?")).await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "action_proposed");
    assert_eq!(reply.body["action_details"]["tool_args"]["path"], "auth.js");
    assert_eq!(reply.body["usage"], usage(1850, 1020));
    let warnings = warnings(&reply.body);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("cut off at the output limit")),
        "{warnings:?}"
    );
    let feedback = feedback_sent(&app, 1).await;
    assert!(
        feedback.contains("cut off at the output limit") && feedback.contains("shorter"),
        "{feedback}"
    );
}

#[tokio::test]
async fn prose_cut_at_the_limit_is_not_taken_as_the_answer() {
    let cut = "The login code lives in auth.js, where the function";
    let app = spawn_app_answering_in_turn(
        OPENAI_PATH,
        vec![
            reply(cut, "length", 400, 1000),
            reply(cut, "length", 1450, 1000),
        ],
    )
    .await;

    let reply = app.post_react_step(&request("gpt-4o", "Where?")).await;

    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "invalid_model_output");
    assert_eq!(reply.body["direct_response"], Value::Null);
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("cut off at the output limit"), "{message}");
    assert_eq!(reply.body["error"]["raw_output"], cut);
    assert_eq!(reply.body["usage"], usage(1850, 2000));
}

#[tokio::test]
async fn a_cut_reply_holding_a_complete_action_is_proposed_with_a_warning() {
    let app =
        spawn_app_answering_in_turn(OPENAI_PATH, vec![reply(GOOD, "length", 400, 1000)]).await;

    let reply = app.post_react_step(&request("gpt-4o", "Where?")).await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "action_proposed");
    assert_eq!(reply.body["usage"], usage(400, 1000));
    let warnings = warnings(&reply.body);
    assert!(
        warnings.iter().any(|w| w.contains("may be cut short")),
        "{warnings:?}"
    );
    assert_eq!(app.upstream_bodies().await.len(), 1);
}

#[tokio::test]
async fn a_thought_only_reply_gets_a_repair_round() {
    let app = spawn_app_answering_in_turn(
        OPENAI_PATH,
        vec![
            reply("Thought: I should look at the login code.", "stop", 400, 12),
            reply(GOOD, "stop", 440, 20),
        ],
    )
    .await;

    let reply = app.post_react_step(&request("gpt-4o", "Where?")).await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "action_proposed");
    assert_eq!(reply.body["thought"], "The login code is in auth.js.");
    assert_eq!(reply.body["usage"], usage(840, 32));
    let feedback = feedback_sent(&app, 1).await;
    assert!(feedback.contains("only a 'Thought:'"), "{feedback}");
}

#[tokio::test]
async fn a_thought_only_reply_twice_is_an_invalid_output() {
    let thought = "Thought: I should look at the login code.";
    let app = spawn_app_answering_in_turn(
        OPENAI_PATH,
        vec![
            reply(thought, "stop", 400, 12),
            reply(thought, "stop", 440, 12),
        ],
    )
    .await;

    let reply = app.post_react_step(&request("gpt-4o", "Where?")).await;

    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "invalid_model_output");
    assert_eq!(reply.body["thought"], Value::Null);
    assert_eq!(reply.body["usage"], usage(840, 24));
}

#[tokio::test]
async fn plain_prose_is_still_a_direct_response() {
    let prose = "The login code is in auth.js.";
    let app = spawn_app_answering_in_turn(OPENAI_PATH, vec![reply(prose, "stop", 400, 9)]).await;

    let reply = app.post_react_step(&request("gpt-4o", "Where?")).await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["direct_response"], prose);
    assert_eq!(reply.body["usage"], usage(400, 9));
}

#[tokio::test]
async fn a_mock_response_reports_no_usage_even_when_it_fails() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "Where?");
    body["mock_response"] = json!(GOOD);
    let ok = app.post_react_step(&body).await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert_eq!(ok.body["usage"], Value::Null);

    body["mock_response"] = json!("Thought: only thinking.");
    let failed = app.post_react_step(&body).await;
    assert_eq!(failed.status, 502, "{}", failed.text);
    assert_eq!(failed.body["error"]["type"], "invalid_model_output");
    assert_eq!(failed.body["usage"], Value::Null);
    assert!(app.upstream_bodies().await.is_empty());
}

#[tokio::test]
async fn the_streamed_error_event_carries_the_usage() {
    let app = spawn_app().await;
    let bad = openai_stream(
        &[
            "Thought: Delete.\nAction: delete_everything(",
            "path=\"/\")",
        ],
        "stop",
    );
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ResponseTemplate::new(200).set_body_raw(bad, "text/event-stream"))
        .mount(&app.llm)
        .await;

    let response = app
        .client
        .post(format!("{}/api/agent/react_step/stream", app.address))
        .json(&request("gpt-4o", "Clean up"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let bytes = response.bytes().await.unwrap();
    let mut decoder = SseDecoder::default();
    let events = decoder.push(&bytes).unwrap();
    let last = events.last().expect("a terminal event");
    assert_eq!(last.event.as_deref(), Some("error"));
    let data: Value = serde_json::from_str(&last.data).unwrap();
    assert_conforms_to_schema("ErrorResponse", &data);
    assert_eq!(data["error"]["type"], "invalid_model_output");
    // Two streamed calls, each reporting 512 + 31 in its last chunk.
    assert_eq!(data["usage"], usage(1024, 62));
}

#[tokio::test]
async fn a_step_cut_by_its_deadline_reports_the_calls_it_paid_for() {
    // The attempt may take longer than the step: the step's deadline is what stops it.
    let app = spawn_app_with(|c| {
        c.llm_timeout_secs = 60;
        c.step_timeout_secs = 2;
        c.retries = 0;
    })
    .await;
    let bad = "Thought: Delete it.\nAction: delete_everything(path=\"/\")";
    mount_sequence(&app.llm, OPENAI_PATH, vec![reply(bad, "stop", 400, 30)]).await;
    // The repair round's call never answers in time.
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(reply(GOOD, "stop", 1, 1))
                .set_delay(std::time::Duration::from_secs(30)),
        )
        .mount(&app.llm)
        .await;

    let reply = app.post_react_step(&request("gpt-4o", "Clean up")).await;

    assert_eq!(reply.status, 504, "{}", reply.text);
    assert_eq!(reply.body["usage"], usage(400, 30));
}
