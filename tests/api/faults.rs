//! Fault injection: a misbehaving upstream on loopback, case by case. Each case checks the
//! documented status and `error.type`, how many attempts were made (retries where another try
//! can help, none where it cannot, and none past the step's deadline), and that the server
//! goes on serving. docs/reliability.md lists the same cases and outcomes.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::net::TcpListener;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::app::{spawn_app_with, TestApp};
use crate::support::requests::request;
use crate::support::upstream::{anthropic_reply, openai_reply, ANTHROPIC_PATH, OPENAI_PATH};

/// Replies `first` (status, body, headers) `times` times, then the good reply.
async fn failing_then_ok(at: &str, first: ResponseTemplate, times: u64, ok: Value) -> MockServer {
    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(at))
        .respond_with(first)
        .up_to_n_times(times)
        .with_priority(1)
        .mount(&llm)
        .await;
    Mock::given(method("POST"))
        .and(path(at))
        .respond_with(ResponseTemplate::new(200).set_body_json(ok))
        .with_priority(2)
        .mount(&llm)
        .await;
    llm
}

async fn app_against(
    llm: &MockServer,
    tweak: impl FnOnce(&mut reactstep::config::Config),
) -> TestApp {
    let uri = llm.uri();
    spawn_app_with(move |c| {
        c.openai_base_url = format!("{uri}/v1");
        c.anthropic_base_url = uri.clone();
        tweak(c);
    })
    .await
}

async fn attempts(llm: &MockServer) -> usize {
    llm.received_requests().await.map_or(0, |r| r.len())
}

/// The server answers a plain offline step after the fault.
async fn still_serving(app: &TestApp) {
    let mut body = request("gpt-4o", "still there?");
    body["mock_response"] = json!("Thought: yes\nFinal Answer: yes");
    assert_eq!(app.post_react_step(&body).await.status, 200);
}

fn ok() -> Value {
    openai_reply("Thought: t\nFinal Answer: fine")
}

#[tokio::test]
async fn a_429_with_retry_after_is_waited_out_and_retried() {
    let limited = ResponseTemplate::new(429)
        .insert_header("retry-after-ms", "3")
        .set_body_json(json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}));
    let llm = failing_then_ok(OPENAI_PATH, limited, 1, ok()).await;
    let app = app_against(&llm, |_| {}).await;
    let reply = app.post_react_step(&request("gpt-4o", "q")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(attempts(&llm).await, 2);
    still_serving(&app).await;
}

#[tokio::test]
async fn server_errors_are_retried_until_they_pass() {
    for status in [500, 502, 503, 504] {
        let llm = failing_then_ok(OPENAI_PATH, ResponseTemplate::new(status), 2, ok()).await;
        let app = app_against(&llm, |_| {}).await;
        let reply = app.post_react_step(&request("gpt-4o", "q")).await;
        assert_eq!(reply.status, 200, "{status}: {}", reply.text);
        assert_eq!(attempts(&llm).await, 3, "{status}");
    }
}

#[tokio::test]
async fn anthropic_overload_529_is_retried() {
    let overloaded = ResponseTemplate::new(529).set_body_json(
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    );
    let llm = failing_then_ok(
        ANTHROPIC_PATH,
        overloaded,
        1,
        anthropic_reply("Thought: t\nFinal Answer: fine"),
    )
    .await;
    let app = app_against(&llm, |_| {}).await;
    let reply = app
        .post_react_step(&request("claude-sonnet-4-5", "q"))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(attempts(&llm).await, 2);
}

#[tokio::test]
async fn an_upstream_that_stays_down_is_a_502_after_every_retry() {
    let llm = failing_then_ok(OPENAI_PATH, ResponseTemplate::new(503), 100, ok()).await;
    let app = app_against(&llm, |_| {}).await;
    let reply = app.post_react_step(&request("gpt-4o", "q")).await;
    assert_eq!(reply.status, 502);
    assert_eq!(reply.body["error"]["type"], "llm_unavailable");
    assert_eq!(attempts(&llm).await, 4, "the first attempt and 3 retries");
    still_serving(&app).await;
}

#[tokio::test]
async fn client_errors_are_never_retried() {
    for (status, kind) in [
        (400, "llm_request_rejected"),
        (401, "llm_auth"),
        (403, "llm_auth"),
        (404, "llm_model_not_found"),
        (422, "llm_request_rejected"),
    ] {
        let failure = ResponseTemplate::new(status)
            .set_body_json(json!({"error": {"message": "no", "type": "invalid_request_error"}}));
        let llm = failing_then_ok(OPENAI_PATH, failure, 100, ok()).await;
        let app = app_against(&llm, |_| {}).await;
        let reply = app.post_react_step(&request("gpt-4o", "q")).await;
        assert_eq!(reply.body["error"]["type"], kind, "{status}");
        assert_eq!(attempts(&llm).await, 1, "{status} was retried");
    }
}

#[tokio::test]
async fn a_hanging_upstream_is_cut_off_by_the_step_deadline() {
    let hang = ResponseTemplate::new(200)
        .set_body_json(ok())
        .set_delay(Duration::from_secs(30));
    let llm = failing_then_ok(OPENAI_PATH, hang, 100, ok()).await;
    // Attempts of 1 s, retries allowed, but the whole step has 2 s: at most 2 attempts fit
    // (3 with the waits rounding in their favour), never the 4 the retries alone would allow.
    let app = app_against(&llm, |c| {
        c.llm_timeout_secs = 1;
        c.step_timeout_secs = 2;
    })
    .await;
    let reply = app.post_react_step(&request("gpt-4o", "q")).await;
    assert_eq!(reply.status, 504, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "llm_timeout");
    let made = attempts(&llm).await;
    assert!((1..=3).contains(&made), "{made} attempts");
    still_serving(&app).await;
}

#[tokio::test]
async fn a_reset_connection_is_retried_then_a_502() {
    // Accepts each connection and drops it at once, counting them.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}", listener.local_addr().unwrap());
    let (count_tx, mut count_rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            // Counted before the reset can be seen, so the count is complete when the reply is.
            let _ = count_tx.send(());
            drop(socket);
        }
    });
    let app = spawn_app_with(move |c| c.openai_base_url = format!("{uri}/v1")).await;
    let reply = app.post_react_step(&request("gpt-4o", "q")).await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "llm_unavailable");
    let mut connections = 0;
    while count_rx.try_recv().is_ok() {
        connections += 1;
    }
    assert_eq!(connections, 4, "the first attempt and 3 retries");
    still_serving(&app).await;
}

#[tokio::test]
async fn replies_that_are_not_the_documented_json_are_502s_without_retry() {
    for bad in [
        ResponseTemplate::new(200).set_body_string("<html>upstream proxy error</html>"),
        ResponseTemplate::new(200).set_body_json(json!({"unexpected": "shape"})),
        ResponseTemplate::new(200).set_body_json(json!({"choices": []})),
    ] {
        let llm = failing_then_ok(OPENAI_PATH, bad, 100, ok()).await;
        let app = app_against(&llm, |_| {}).await;
        let reply = app.post_react_step(&request("gpt-4o", "q")).await;
        assert_eq!(reply.status, 502, "{}", reply.text);
        assert_eq!(reply.body["error"]["type"], "llm_bad_response");
        assert_eq!(attempts(&llm).await, 1);
        still_serving(&app).await;
    }
}

#[tokio::test]
async fn a_huge_reply_is_refused_not_held() {
    let huge = format!("{{\"pad\":\"{}\"}}", "x".repeat(20 * 1024 * 1024));
    let llm = failing_then_ok(
        OPENAI_PATH,
        ResponseTemplate::new(200).set_body_raw(huge, "application/json"),
        100,
        ok(),
    )
    .await;
    let app = app_against(&llm, |_| {}).await;
    let reply = app.post_react_step(&request("gpt-4o", "q")).await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "llm_bad_response");
    assert!(reply.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("larger than"));
    still_serving(&app).await;
}
