//! Issue 17, part 7: what a step cost. With the operator's price table (`REACTSTEP_PRICES_FILE`)
//! `usage.cost_usd` is filled in from the provider's figures, in the response, the stream's
//! `step` event and an error's usage; without a table, or for a model not in it, it is absent;
//! and a table that is not exactly right stops start-up.

use serde_json::{json, Value};
use wiremock::matchers::path;
use wiremock::{Mock, ResponseTemplate};

use crate::support::app::{spawn_app_answering, spawn_app_with, TestApp};
use crate::support::binary::RunningBinary;
use crate::support::requests::request;
use crate::support::upstream::{
    anthropic_reply, mount, mount_sequence, openai_reply, ANTHROPIC_PATH, OPENAI_PATH,
};

/// Prices as the providers list them, in dollars per million tokens; `gpt-4o` leaves
/// `cache_write` to default to `input`.
const TABLE: &str = r#"{
    "gpt-4o": {"input": 2.5, "cached_input": 1.25, "output": 10},
    "claude-sonnet-4-5": {"input": 3, "cached_input": 0.3, "cache_write": 3.75, "output": 15}
}"#;

/// The table written to a file that lives as long as the guard.
fn table_file(text: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prices.json");
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

async fn priced_app() -> (TestApp, tempfile::TempDir) {
    let (dir, file) = table_file(TABLE.as_bytes());
    let app = spawn_app_with(|c| c.prices_file = Some(file)).await;
    (app, dir)
}

fn openai_cached_reply() -> Value {
    let mut reply = openai_reply("Final Answer: ok");
    reply["usage"] = json!({"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 256, "audio_tokens": 0}});
    reply
}

#[tokio::test]
async fn an_openai_step_with_cache_hits_is_priced_at_each_rate() {
    let (app, _table) = priced_app().await;
    mount(&app.llm, OPENAI_PATH, 200, openai_cached_reply()).await;
    let step = app.post_react_step(&request("gpt-4o", "q")).await;
    assert_eq!(step.status, 200, "{}", step.text);
    // 86 uncached × 2.5 + 1920 cached × 1.25 + 300 output × 10 = 5615 per million tokens.
    assert_eq!(
        step.body["usage"],
        json!({"prompt_tokens": 2006, "completion_tokens": 300,
               "cached_prompt_tokens": 1920, "reasoning_tokens": 256, "cost_usd": 0.005615})
    );
}

#[tokio::test]
async fn an_anthropic_step_with_cache_reads_and_writes_is_priced_plain_and_streamed() {
    let (app, _table) = priced_app().await;
    let mut reply = anthropic_reply("Final Answer: ok");
    reply["usage"] = json!({"input_tokens": 12, "output_tokens": 20,
        "cache_read_input_tokens": 3000, "cache_creation_input_tokens": 500});
    mount(&app.llm, ANTHROPIC_PATH, 200, reply).await;
    let step = app
        .post_react_step(&request("claude-sonnet-4-5", "q"))
        .await;
    assert_eq!(step.status, 200, "{}", step.text);
    // Anthropic's input_tokens leaves the cache out; prompt_tokens holds all three, and each is
    // priced once: 12 × 3 + 3000 × 0.3 + 500 × 3.75 + 20 × 15 = 3111 per million tokens.
    assert_eq!(
        step.body["usage"],
        json!({"prompt_tokens": 3512, "completion_tokens": 20, "cached_prompt_tokens": 3000,
               "cache_creation_prompt_tokens": 500, "cost_usd": 0.003111})
    );

    let (streamed_app, _table) = priced_app().await;
    let events = [
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant",
            "content": [], "model": "m", "usage": {"input_tokens": 12, "output_tokens": 1,
            "cache_read_input_tokens": 3000, "cache_creation_input_tokens": 500}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Final Answer: ok"}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 20}}),
        json!({"type": "message_stop"}),
    ];
    let body: String = events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect();
    Mock::given(path(ANTHROPIC_PATH))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream"))
        .mount(&streamed_app.llm)
        .await;
    let streamed =
        crate::support::stream::post_stream(&streamed_app, &request("claude-sonnet-4-5", "q"))
            .await;
    let (name, step) = streamed.terminal();
    assert_eq!(name, "step", "{step}");
    assert_eq!(step["usage"]["prompt_tokens"], 3512);
    assert_eq!(step["usage"]["cost_usd"], 0.003111);
}

#[tokio::test]
async fn a_model_not_in_the_table_and_a_service_without_one_report_no_cost() {
    let (app, _table) = priced_app().await;
    mount(&app.llm, OPENAI_PATH, 200, openai_cached_reply()).await;
    // Names match exactly: a model of the same family is not priced as its neighbour.
    let step = app.post_react_step(&request("gpt-4o-mini", "q")).await;
    assert_eq!(step.status, 200, "{}", step.text);
    assert_eq!(step.body["usage"]["prompt_tokens"], 2006);
    assert!(
        step.body["usage"].get("cost_usd").is_none(),
        "{}",
        step.text
    );

    let bare = spawn_app_answering(OPENAI_PATH, 200, openai_cached_reply()).await;
    let step = bare.post_react_step(&request("gpt-4o", "q")).await;
    assert_eq!(step.status, 200, "{}", step.text);
    assert_eq!(step.body["usage"]["cached_prompt_tokens"], 1920);
    assert!(
        step.body["usage"].get("cost_usd").is_none(),
        "{}",
        step.text
    );
}

#[tokio::test]
async fn an_error_after_billed_calls_carries_their_cost() {
    let (app, _table) = priced_app().await;
    let bad = "Thought: Delete it.\nAction: delete_everything(path=\"/\")";
    let billed = |prompt: u64, completion: u64| {
        let mut reply = openai_reply(bad);
        reply["usage"] = json!({"prompt_tokens": prompt, "completion_tokens": completion});
        reply
    };
    mount_sequence(
        &app.llm,
        OPENAI_PATH,
        vec![billed(400, 30), billed(470, 31)],
    )
    .await;
    let reply = app.post_react_step(&request("gpt-4o", "Clean up")).await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "invalid_model_output");
    // Both calls, summed then priced: 870 × 2.5 + 61 × 10 = 2785 per million tokens.
    assert_eq!(
        reply.body["usage"],
        json!({"prompt_tokens": 870, "completion_tokens": 61, "cost_usd": 0.002785})
    );
}

#[tokio::test]
async fn the_services_own_counts_are_priced_as_the_estimate_they_are() {
    let (dir, file) = table_file(br#"{"gpt-4o": {"input": 1, "output": 2}}"#);
    let app = spawn_app_with(|c| c.prices_file = Some(file)).await;
    let mut reply = openai_reply("Final Answer: ok");
    reply.as_object_mut().unwrap().remove("usage");
    mount(&app.llm, OPENAI_PATH, 200, reply).await;
    let step = app.post_react_step(&request("gpt-4o", "q")).await;
    assert_eq!(step.status, 200, "{}", step.text);
    let usage = &step.body["usage"];
    assert_eq!(usage["approximate"], true, "{usage}");
    let prompt = usage["prompt_tokens"].as_u64().unwrap();
    let completion = usage["completion_tokens"].as_u64().unwrap();
    assert!(prompt > 0 && completion > 0, "{usage}");
    assert_eq!(
        usage["cost_usd"].as_f64(),
        Some((prompt + 2 * completion) as f64 / 1e6),
        "{usage}"
    );
    drop(dir);
}

#[tokio::test]
async fn the_binary_reads_the_table_named_by_the_environment() {
    let llm = wiremock::MockServer::start().await;
    mount(&llm, OPENAI_PATH, 200, openai_cached_reply()).await;
    let (_table, file) = table_file(TABLE.as_bytes());
    let mut server = RunningBinary::start_with(
        &llm.uri(),
        "info",
        &[("REACTSTEP_PRICES_FILE", file.to_str().unwrap())],
    )
    .await;
    server.logged("price table loaded").await;
    let reply: Value = reqwest::Client::new()
        .post(format!(
            "http://127.0.0.1:{}/api/agent/react_step",
            server.port
        ))
        .json(&request("gpt-4o", "q"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(reply["usage"]["cost_usd"], 0.005615, "{reply}");
    server.stop().await;
}

/// Runs the binary on a price file, which must stop start-up.
async fn start_up_on(file: &std::path::Path) -> (std::process::ExitStatus, String) {
    let file = file.display().to_string();
    crate::support::binary::start_up_with(&[("REACTSTEP_PRICES_FILE", &file)]).await
}

#[tokio::test]
async fn a_price_table_that_is_not_exactly_right_stops_start_up() {
    let mut huge = TABLE.as_bytes().to_vec();
    // Valid JSON, padded past the 1 MiB cap: refused for its size before it is parsed.
    huge.resize(1024 * 1024 + 1, b' ');
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "negative",
            br#"{"gpt-4o": {"input": -2.5, "output": 10}}"#.to_vec(),
            "gives `gpt-4o`.input as -2.5",
        ),
        (
            "unknown field",
            br#"{"gpt-4o": {"input": 2.5, "output": 10, "cached": 1.25}}"#.to_vec(),
            "unknown field `cached`",
        ),
        (
            "missing output",
            br#"{"gpt-4o": {"input": 2.5}}"#.to_vec(),
            "missing field `output`",
        ),
        (
            "too large a price",
            br#"{"gpt-4o": {"input": 2.5, "output": 1e7}}"#.to_vec(),
            "gives `gpt-4o`.output as 10000000",
        ),
        (
            "not JSON",
            b"gpt-4o: 2.5 in, 10 out".to_vec(),
            "is not a valid price table",
        ),
        ("huge", huge, "is larger than 1048576 bytes"),
    ];
    for (what, text, reason) in cases {
        let (_dir, file) = table_file(&text);
        let (status, stderr) = start_up_on(&file).await;
        assert!(!status.success(), "{what}: {status:?}");
        assert!(
            stderr.contains("REACTSTEP_PRICES_FILE") && stderr.contains(reason),
            "{what}: {stderr}"
        );
    }
    let (dir, _) = table_file(b"{}");
    let (status, stderr) = start_up_on(&dir.path().join("absent.json")).await;
    assert!(!status.success(), "{status:?}");
    assert!(stderr.contains("cannot be read"), "{stderr}");
}
