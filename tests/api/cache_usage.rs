//! What a step cost: cache reads and writes and reasoning tokens, where the provider reports
//! them, in the response, the stream's `step` event and the metrics.

use serde_json::json;

use crate::support::app::{spawn_app, spawn_app_answering};
use crate::support::requests::request;
use crate::support::upstream::{anthropic_reply, openai_reply, ANTHROPIC_PATH, OPENAI_PATH};

#[tokio::test]
async fn openai_cache_hits_and_reasoning_tokens_are_reported() {
    let mut reply = openai_reply("Final Answer: ok");
    reply["usage"] = json!({"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 256, "audio_tokens": 0}});
    let app = spawn_app_answering(OPENAI_PATH, 200, reply).await;
    let step = app.post_react_step(&request("gpt-4o", "q")).await;
    assert_eq!(step.status, 200, "{}", step.text);
    assert_eq!(
        step.body["usage"],
        json!({"prompt_tokens": 2006, "completion_tokens": 300,
               "cached_prompt_tokens": 1920, "reasoning_tokens": 256})
    );
    // The metrics are the process's: other tests add to them at the same time.
    assert!(cache_reads(&app).await >= 1920);
}

async fn cache_reads(app: &crate::support::app::TestApp) -> u64 {
    let metrics = app.send("GET", "/metrics", None).await.text;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("reactstep_prompt_cache_tokens_total{kind=\"read\"} "))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn anthropic_cache_reads_and_writes_are_reported_plain_and_streamed() {
    let mut reply = anthropic_reply("Final Answer: ok");
    reply["usage"] = json!({"input_tokens": 12, "output_tokens": 20,
        "cache_read_input_tokens": 3000, "cache_creation_input_tokens": 500});
    let app = spawn_app_answering(ANTHROPIC_PATH, 200, reply).await;
    let step = app
        .post_react_step(&request("claude-sonnet-4-5", "q"))
        .await;
    assert_eq!(step.status, 200, "{}", step.text);
    assert_eq!(
        step.body["usage"],
        json!({"prompt_tokens": 3512, "completion_tokens": 20,
               "cached_prompt_tokens": 3000, "cache_creation_prompt_tokens": 500})
    );

    let streamed_app = spawn_app().await;
    let events = [
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant",
            "content": [], "model": "m", "usage": {"input_tokens": 12, "output_tokens": 1,
            "cache_read_input_tokens": 3000}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Final Answer: ok"}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 20}}),
        json!({"type": "message_stop"}),
    ];
    let body: String = events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect();
    wiremock::Mock::given(wiremock::matchers::path(ANTHROPIC_PATH))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_raw(body, "text/event-stream"))
        .mount(&streamed_app.llm)
        .await;
    let streamed =
        crate::support::stream::post_stream(&streamed_app, &request("claude-sonnet-4-5", "q"))
            .await;
    let (name, step) = streamed.terminal();
    assert_eq!(name, "step");
    assert_eq!(step["usage"]["cached_prompt_tokens"], 3000);
    assert_eq!(step["usage"]["completion_tokens"], 20);
}
