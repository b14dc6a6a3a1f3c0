//! Reasoning of megabytes, from the provider or sent back in the history: the history the
//! service returns can be sent back, and the prompt stays inside the budget and the deadline.
//!
//! Written by a red team (issue 17): a test that exposes a defect asserts the promised behaviour,
//! so it fails until the defect is fixed; the others show a defence holding.

use serde_json::{json, Value};
use wiremock::matchers::path;
use wiremock::{Mock, ResponseTemplate};

use crate::support::app::{spawn_app, spawn_app_answering};
use crate::support::provider_rules::anthropic_structure;
use crate::support::requests::native_reasoning;
use crate::support::upstream::{anthropic_reply, openai_reply, ANTHROPIC_PATH, SIGNATURE};

#[tokio::test]
async fn red_team_17_megabytes_of_reasoning_content_do_not_break_the_loop() {
    // DeepSeek answers a tool call with 9 MB of reasoning_content (under the 16 MiB reply cap).
    // The service hands it back in reasoning_state (and again in `thought`) and tells the client
    // to send it back untouched, but its own body limit (8 MiB) refuses the next request.
    let app = spawn_app().await;
    let reasoning =
        "Need the file first; the stack trace points at line three of a.js. ".repeat(135_000);
    let mut reply = openai_reply("");
    reply["choices"][0]["message"] = json!({"role": "assistant", "content": "",
        "reasoning_content": reasoning,
        "tool_calls": [{"id": "call_00_x", "type": "function",
            "function": {"name": "read_file", "arguments": "{\"path\":\"a.js\"}"}}]});
    reply["choices"][0]["finish_reason"] = json!("tool_calls");
    Mock::given(path("/deepseek/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(reply))
        .up_to_n_times(1)
        .mount(&app.llm)
        .await;
    Mock::given(path("/deepseek/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(openai_reply("Final Answer: done")))
        .mount(&app.llm)
        .await;
    let mut body = native_reasoning("deepseek-chat", "high");
    body["llm_config"]["provider"] = json!("deepseek");
    body["llm_config"]["tokenLimit"] = json!(64_000);
    let first = app.post_react_step(&body).await;
    if first.status != 200 {
        assert_eq!(
            first.body["error"]["type"], "llm_bad_response",
            "{}",
            first.body
        );
        return;
    }
    let mut history = first.body["updated_conversation_history"].clone();
    history.as_array_mut().unwrap().push(json!({
        "role": "tool_observation", "content": "a.js:3 reads undefined.length",
        "tool_call_id": first.body["action_details"]["tool_call_id"]
    }));
    let mut next = body.clone();
    next["user_query"] = json!("");
    next["conversation_history"] = history;
    let size = next.to_string().len();
    let second = app.post_react_step(&next).await;
    assert_eq!(
        second.status,
        200,
        "the history the service returned ({size} bytes) cannot be sent back: {}",
        second.text.chars().take(400).collect::<String>()
    );
}

#[tokio::test]
async fn red_team_17_an_enormous_thinking_block_sent_back_stays_inside_the_budget() {
    // A reasoning_state of 3 MB of thinking on an early turn, thinking on: the prompt must still
    // fit (context_report.used <= budget) and what goes upstream must be of that size.
    let app = spawn_app_answering(ANTHROPIC_PATH, 200, anthropic_reply("Final Answer: ok")).await;
    let huge =
        "The session store is keyed by the token hash and expires entries lazily. ".repeat(40_000);
    let mut body = native_reasoning("claude-sonnet-4-5", "low");
    body["llm_config"]["tokenLimit"] = json!(32_000);
    body["user_query"] = json!("and now?");
    body["conversation_history"] = json!([
        {"role": "user", "content": "Why does a.js throw?"},
        {"role": "assistant", "content": "read it", "toolCall": {"id": "toolu_1", "name": "read_file", "parameters": {"path": "a.js"}},
         "reasoning_state": {"blocks": [{"type": "thinking", "thinking": huge, "signature": SIGNATURE}]}},
        {"role": "tool_observation", "content": "a.js:3 reads undefined.length", "tool_call_id": "toolu_1"},
        {"role": "assistant", "content": "read b", "toolCall": {"id": "toolu_2", "name": "read_file", "parameters": {"path": "b.js"}},
         "reasoning_state": {"blocks": [{"type": "thinking", "thinking": "b next", "signature": SIGNATURE}]}},
        {"role": "tool_observation", "content": "b.js is fine", "tool_call_id": "toolu_2"}
    ]);
    // A step past its deadline would be 504, which is none of the answers allowed here.
    let reply = app.post_react_step(&body).await;
    if reply.status != 200 {
        assert!([413, 422].contains(&reply.status), "{}", reply.body);
        return;
    }
    let report = &reply.body["context_report"];
    assert!(
        report["used"].as_u64() <= report["budget"].as_u64(),
        "{report}"
    );
    let sent = app.upstream_bodies().await.pop().unwrap();
    let bytes = sent.to_string().len();
    assert!(
        bytes < 32_000 * 8,
        "{bytes} bytes went upstream for a 32,000-token window"
    );
    if let Err(why) = anthropic_structure(&sent) {
        panic!("Anthropic would refuse this body: {why}");
    }
}

#[tokio::test]
async fn red_team_17_many_thinking_blocks_sent_back_are_answered_within_the_deadline() {
    // 150,000 redacted blocks on one turn: counted as almost nothing, sent as megabytes.
    let app = spawn_app_answering(ANTHROPIC_PATH, 200, anthropic_reply("Final Answer: ok")).await;
    let blocks: Vec<Value> = (0..150_000)
        .map(|_| json!({"type": "redacted_thinking", "data": "EmwK"}))
        .collect();
    let mut body = native_reasoning("claude-sonnet-4-5", "low");
    body["llm_config"]["tokenLimit"] = json!(32_000);
    body["user_query"] = json!("");
    body["conversation_history"] = json!([
        {"role": "user", "content": "Why does a.js throw?"},
        {"role": "assistant", "content": "read it", "toolCall": {"id": "toolu_1", "name": "read_file", "parameters": {"path": "a.js"}},
         "reasoning_state": {"blocks": blocks}},
        {"role": "tool_observation", "content": "a.js:3 reads undefined.length", "tool_call_id": "toolu_1"}
    ]);
    // A step past its deadline would be 504, which is none of the answers allowed here.
    let reply = app.post_react_step(&body).await;
    assert!(
        [200, 400, 413, 422].contains(&reply.status),
        "{}",
        reply.status
    );
    if reply.status == 200 {
        let report = &reply.body["context_report"];
        assert!(
            report["used"].as_u64() <= report["budget"].as_u64(),
            "{report}"
        );
        let sent = app.upstream_bodies().await.pop().unwrap();
        let bytes = sent.to_string().len();
        assert!(
            bytes < 32_000 * 8,
            "{bytes} bytes ({} blocks) went upstream for a 32,000-token window, counted as {}",
            sent.to_string().matches("redacted_thinking").count(),
            report["used"]
        );
    }
}
