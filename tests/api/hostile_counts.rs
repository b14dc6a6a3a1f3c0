//! Absurd numbers from the provider: refusals as too long naming any number of tokens (or none),
//! and `count_tokens` answering u64::MAX, zero, garbage, slowly, with a redirect or with the key.
//! The step keeps its margin or answers 422, the key goes out no more than it must and is never
//! shown, and no hostile answer drops the other steps in flight.
//!
//! Written by a red team (issue 16): a test that exposes a defect asserts the correct behaviour,
//! so it fails until the defect is fixed; the others show a defence holding against something
//! the other suites do not try.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{json, Value};
use wiremock::matchers::path;
use wiremock::{Mock, Request, Respond, ResponseTemplate};

use crate::support::app::{spawn_app, spawn_app_answering, spawn_app_with, try_step, TestApp};
use crate::support::requests::{near_the_limit, request, KEY};
use crate::support::upstream::{anthropic_reply, mount, ANTHROPIC_PATH, COUNT_PATH, OPENAI_PATH};

/// Paths the mock LLM was called at, in order.
async fn called_paths(app: &TestApp) -> Vec<String> {
    app.llm
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|r| r.url.path().to_string())
        .collect()
}

/// Anthropic refusing every prompt as too long with the given wording.
async fn anthropic_refusing(app: &TestApp, message: &str) {
    Mock::given(path(ANTHROPIC_PATH))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({
            "type": "error",
            "error": {"type": "invalid_request_error", "message": message}
        })))
        .mount(&app.llm)
        .await;
}

#[tokio::test]
async fn a_refusal_naming_u64_max_prompt_tokens_is_a_422_not_a_crash() {
    // refit: (100 + margin) * reported overflows u64 for reported > u64::MAX / 140. With
    // overflow checks the connection is dropped without an answer; without them (release) the
    // product wraps: 131762457669353941 × 140 wraps to 124, a refit margin of 0 %, so the
    // prompt sent again is larger than the one just refused.
    for reported in [u64::MAX, u64::MAX / 100, 131_762_457_669_353_941] {
        let app = spawn_app().await;
        anthropic_refusing(
            &app,
            &format!("prompt is too long: {reported} tokens > 200000 maximum"),
        )
        .await;
        let outcome = try_step(&app, &request("claude-sonnet-4-5", "What does Login do?")).await;
        let (status, body) = outcome.unwrap_or_else(|e| panic!("{reported}: {e}"));
        assert_eq!(status, 422, "{reported}: {body}");
        assert_eq!(body["error"]["type"], "context_overflow", "{reported}");
        let calls = called_paths(&app).await;
        assert!(
            calls.len() <= 2,
            "{reported}: the key went out {} times",
            calls.len()
        );
    }
}

#[tokio::test]
async fn refusals_naming_zero_or_fewer_tokens_than_ours_are_answered_at_once() {
    for message in [
        "prompt is too long: 0 tokens > 200000 maximum",
        "prompt is too long: 1 tokens > 200000 maximum",
        "prompt is too long: -5000 tokens > 200000 maximum",
        "prompt is too long: 99999999999999999999999999 tokens > 200000 maximum",
        "prompt is too long: ,,,, tokens > 200000 maximum",
        "prompt is too long",
    ] {
        let app = spawn_app().await;
        anthropic_refusing(&app, message).await;
        let (status, body) = try_step(&app, &request("claude-sonnet-4-5", "q"))
            .await
            .unwrap_or_else(|e| panic!("{message}: {e}"));
        assert_eq!(status, 422, "{message}: {body}");
        assert_eq!(body["error"]["type"], "context_overflow", "{message}");
        assert_eq!(called_paths(&app).await.len(), 1, "{message}: no refit");
    }
}

#[tokio::test]
async fn a_refusal_with_a_huge_llama_cpp_field_is_a_422_not_a_crash() {
    let app = spawn_app_answering(
        crate::support::upstream::COMPATIBLE_PATH,
        400,
        json!({"error": {
            "code": 400,
            "message": "the request exceeds the available context size (2048 tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": u64::MAX, "n_ctx": 2048}}),
    )
    .await;
    let mut body = request("llama3.1:8b", "q");
    body["llm_config"]["provider"] = json!("openai_compatible");
    let (status, reply) = try_step(&app, &body)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status, 422, "{reply}");
    assert_eq!(reply["error"]["type"], "context_overflow");
    assert!(called_paths(&app).await.len() <= 2);
}

/// count_tokens answering the given raw bodies in turn (the last one repeated).
struct CountAnswers {
    answers: Vec<ResponseTemplate>,
    calls: AtomicUsize,
}

impl Respond for CountAnswers {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        self.answers[call.min(self.answers.len() - 1)].clone()
    }
}

async fn with_count_answers(app: &TestApp, answers: Vec<ResponseTemplate>) {
    Mock::given(path(COUNT_PATH))
        .respond_with(CountAnswers {
            answers,
            calls: AtomicUsize::new(0),
        })
        .mount(&app.llm)
        .await;
    mount(
        &app.llm,
        ANTHROPIC_PATH,
        200,
        anthropic_reply("Final Answer: ok"),
    )
    .await;
}

fn counted(n: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({ "input_tokens": n }))
}

#[tokio::test]
async fn a_count_of_u64_max_keeps_the_margin_and_does_not_crash() {
    // exact_count: (exact * 100) overflows u64 for exact > u64::MAX / 100.
    for n in [u64::MAX, u64::MAX / 99] {
        let app = spawn_app().await;
        with_count_answers(&app, vec![counted(json!(n))]).await;
        let (status, body) = try_step(&app, &near_the_limit())
            .await
            .unwrap_or_else(|e| panic!("count {n}: {e}"));
        assert_eq!(status, 200, "count {n}: {body}");
        assert_eq!(body["context_report"]["counter"], "approximation", "{n}");
        let counts = called_paths(&app)
            .await
            .iter()
            .filter(|p| *p == COUNT_PATH)
            .count();
        assert!(counts <= 2, "{n}: {counts} count calls");
    }
}

#[tokio::test]
async fn garbage_counts_keep_the_margin_and_never_make_a_third_count_call() {
    let garbage = [
        counted(json!(-1)),
        counted(json!(1.5)),
        counted(json!("2300")),
        counted(json!(null)),
        ResponseTemplate::new(200).set_body_string("input_tokens: 2300"),
        ResponseTemplate::new(200).set_body_json(json!({"tokens": 2300})),
        ResponseTemplate::new(200).set_body_raw(
            r#"{"input_tokens":18446744073709551616}"#,
            "application/json",
        ),
    ];
    for answer in garbage {
        let app = spawn_app().await;
        with_count_answers(&app, vec![answer]).await;
        let (status, body) = try_step(&app, &near_the_limit())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["context_report"]["counter"], "approximation");
        assert!(body["warnings"].to_string().contains("could not count"));
        let paths = called_paths(&app).await;
        assert_eq!(paths, [COUNT_PATH, ANTHROPIC_PATH], "{body}");
    }
    // Counts over the budget every time: two count calls, never a third.
    let app = spawn_app().await;
    with_count_answers(&app, vec![counted(json!(3_400))]).await;
    let (status, body) = try_step(&app, &near_the_limit()).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["context_report"]["counter"], "approximation");
    let paths = called_paths(&app).await;
    assert_eq!(paths, [COUNT_PATH, COUNT_PATH, ANTHROPIC_PATH]);
}

#[tokio::test]
async fn a_count_far_over_the_budget_keeps_the_margin_instead_of_failing_the_step() {
    // The prompt fitted with the margin fits (the dry run says so); a count ten or a million
    // times ours scales the margin so far that the mandatory parts no longer fit, and
    // exact_count's `?` turns that into the step's error instead of keeping the margin.
    for n in [30_000_u64, 1_000_000_000_000] {
        let app = spawn_app().await;
        let mut dry = near_the_limit();
        dry["dry_run"] = json!(true);
        let (status, _) = try_step(&app, &dry).await.unwrap();
        assert_eq!(status, 200);
        with_count_answers(&app, vec![counted(json!(n))]).await;
        let (status, body) = try_step(&app, &near_the_limit()).await.unwrap();
        assert_eq!(status, 200, "count {n}: {body}");
        assert_eq!(body["context_report"]["counter"], "approximation", "{n}");
        assert!(
            called_paths(&app)
                .await
                .contains(&ANTHROPIC_PATH.to_string()),
            "{n}: the prompt with the margin was never sent"
        );
    }
}

#[tokio::test]
async fn a_count_of_zero_is_not_reported_as_the_prompts_size() {
    // A non-empty prompt is never 0 tokens: taking that figure as exact reports `used: 0` and
    // sends the prompt fitted without the margin on the strength of it.
    let app = spawn_app().await;
    with_count_answers(&app, vec![counted(json!(0))]).await;
    let (status, body) = try_step(&app, &near_the_limit()).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        body["context_report"]["used"].as_u64().unwrap() > 0,
        "report: {}",
        body["context_report"]
    );
}

#[tokio::test]
async fn a_slow_count_endpoint_cannot_push_the_step_past_its_deadline() {
    let app = spawn_app_with(|c| {
        c.step_timeout_secs = 3;
        c.llm_timeout_secs = 30;
    })
    .await;
    // A count endpoint that does not answer within the test at all: a step that waited for it
    // would never be answered, whatever the machine's speed.
    with_count_answers(
        &app,
        vec![counted(json!(2_300)).set_delay(Duration::from_secs(3600))],
    )
    .await;
    let answered = tokio::time::timeout(Duration::from_secs(60), try_step(&app, &near_the_limit()))
        .await
        .expect("the step is answered although the count endpoint never is");
    let (status, body) = answered.unwrap();
    // Either the margin was kept after the count ran out of time, or the step's deadline.
    assert!(status == 200 || status == 504, "HTTP {status}: {body}");
}

#[tokio::test]
async fn a_count_or_refusal_that_echoes_the_key_never_shows_it() {
    let echo =
        format!("invalid x-api-key: {KEY} (prompt is too long: 300 tokens > 200000 maximum)");
    // count_tokens echoing the key: its error becomes a warning.
    let app = spawn_app().await;
    with_count_answers(
        &app,
        vec![
            ResponseTemplate::new(400).set_body_json(json!({"type": "error",
            "error": {"type": "invalid_request_error", "message": echo}})),
        ],
    )
    .await;
    let (status, body) = try_step(&app, &near_the_limit()).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(!body.to_string().contains("SECRET-key"), "{body}");
    assert!(body["warnings"].to_string().contains("could not count"));
    // A refusal as too long echoing the key: refitted once, then a 422 without it.
    let app = spawn_app().await;
    anthropic_refusing(&app, &echo).await;
    let (status, body) = try_step(&app, &request("claude-sonnet-4-5", "q"))
        .await
        .unwrap();
    assert_eq!(status, 422, "{body}");
    assert!(!body.to_string().contains("SECRET-key"), "{body}");
    assert_eq!(
        called_paths(&app).await.len(),
        2,
        "the key went out once more, not more"
    );
}

#[tokio::test]
async fn a_count_endpoint_that_redirects_is_not_followed() {
    let target = wiremock::MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"input_tokens": 2300})))
        .mount(&target)
        .await;
    let app = spawn_app().await;
    with_count_answers(
        &app,
        vec![ResponseTemplate::new(307)
            .insert_header("location", format!("{}{COUNT_PATH}", target.uri()).as_str())],
    )
    .await;
    let (status, body) = try_step(&app, &near_the_limit()).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["context_report"]["counter"], "approximation");
    assert!(target.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn one_hostile_refusal_does_not_drop_the_other_steps_in_flight() {
    // The refit overflow above panics (in a build with overflow checks); the panic stays in the
    // hostile request's connection task: a step in flight on the same worker is answered.
    let app = spawn_app().await;
    Mock::given(path(OPENAI_PATH))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(crate::support::upstream::openai_reply(
                    "Thought: t\nFinal Answer: slow",
                ))
                .set_delay(Duration::from_secs(2)),
        )
        .mount(&app.llm)
        .await;
    anthropic_refusing(
        &app,
        &format!("prompt is too long: {} tokens > 200000 maximum", u64::MAX),
    )
    .await;
    let innocent = request("gpt-4o", "q");
    let hostile = request("claude-sonnet-4-5", "q");
    let (innocent, _) = tokio::join!(try_step(&app, &innocent), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        try_step(&app, &hostile).await
    });
    let (status, body) = innocent.unwrap_or_else(|e| panic!("the innocent step: {e}"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["direct_response"], "slow");
}
