//! Anthropic's `cache_control` marker on odd histories: never on an empty block or on an
//! assistant turn that holds only thinking, never more than four, so that Anthropic accepts the
//! body.
//!
//! Written by a red team (issue 17): a test that exposes a defect asserts the promised behaviour,
//! so it fails until the defect is fixed; the others show a defence holding.

use serde_json::{json, Value};

use crate::support::app::spawn_app_answering;
use crate::support::provider_rules::anthropic_structure;
use crate::support::requests::{native_reasoning, request};
use crate::support::upstream::{anthropic_reply, ANTHROPIC_PATH, SIGNATURE};

/// A long opening user turn, so that the cached prefix passes Claude's 1,024-token minimum.
fn long_user_turn() -> Value {
    let words =
        "the login handler reads the session cookie and checks the token against the store "
            .repeat(120);
    json!({"role": "user", "content": words})
}

#[tokio::test]
async fn red_team_17_an_empty_assistant_turn_gets_no_cache_marker_and_no_empty_block() {
    // The step's tail is a user message whose new part starts at 0; the breakpoint goes on the
    // block before it: here an assistant turn whose content is empty. `Content::blocks_mut`
    // turns `Text("")` into an empty text block and marks it.
    for empty in ["", " \n"] {
        let app =
            spawn_app_answering(ANTHROPIC_PATH, 200, anthropic_reply("Final Answer: ok")).await;
        let mut body = request("claude-sonnet-4-5", "And the logout handler?");
        body["llm_config"]["tokenLimit"] = json!(200_000);
        body["conversation_history"] =
            json!([long_user_turn(), {"role": "assistant", "content": empty}]);
        let reply = app.post_react_step(&body).await;
        let sent = app.upstream_bodies().await;
        if reply.status == 400 {
            assert!(sent.is_empty(), "refused, yet sent upstream");
            continue;
        }
        assert_eq!(reply.status, 200, "{:?}: {}", empty, reply.body);
        let sent = sent.last().unwrap();
        assert!(
            sent.to_string().contains("cache_control"),
            "the prefix is long enough to be cached: {sent}"
        );
        if let Err(why) = anthropic_structure(sent) {
            panic!(
                "{empty:?}: Anthropic would refuse this body: {why}\n{}",
                sent["messages"]
            );
        }
    }
}

#[tokio::test]
async fn red_team_17_a_thinking_only_assistant_turn_never_carries_the_marker() {
    // Thinking on, an assistant turn with only its thinking blocks (no text, no call) just
    // before the step's tail: the breakpoint must skip it, and there are at most 4 markers.
    let app = spawn_app_answering(ANTHROPIC_PATH, 200, anthropic_reply("Final Answer: ok")).await;
    let mut body = native_reasoning("claude-sonnet-4-5", "low");
    body["user_query"] = json!("go on");
    body["conversation_history"] = json!([
        long_user_turn(),
        {"role": "assistant", "content": "", "reasoning_state": {"blocks": [
            {"type": "thinking", "thinking": "hm", "signature": SIGNATURE},
            {"type": "redacted_thinking", "data": "EmwKAhgB"}]}}
    ]);
    let reply = app.post_react_step(&body).await;
    let sent = app.upstream_bodies().await;
    if reply.status == 400 {
        assert!(sent.is_empty());
        return;
    }
    assert_eq!(reply.status, 200, "{}", reply.body);
    let sent = sent.last().unwrap();
    if let Err(why) = anthropic_structure(sent) {
        panic!(
            "Anthropic would refuse this body: {why}\n{}",
            sent["messages"]
        );
    }
}
