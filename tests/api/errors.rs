//! Every error class: bad input (400, 413), upstream refusals (401, 400, 429), upstream failures
//! (502, 504), each with its documented type, a retry hint, and nothing the client sent lost.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wiremock::matchers::{method, path};
use wiremock::{Mock, ResponseTemplate};

use crate::support::app::{spawn_app, spawn_app_answering, spawn_app_with, TestApp};
use crate::support::requests::{kept_history, request, KEY};
use crate::support::upstream::{anthropic_reply, mount, openai_reply, ANTHROPIC_PATH, OPENAI_PATH};

fn fields(reply: &Value) -> Vec<String> {
    reply["error"]["fields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| f["field"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

async fn post_raw(app: &TestApp, body: &str) -> crate::support::app::Reply {
    app.send("POST", "/api/agent/react_step", Some(body.to_string()))
        .await
}

#[tokio::test]
async fn malformed_json_is_a_400_naming_the_body() {
    let app = spawn_app().await;
    let reply = post_raw(&app, r#"{"user_query": "hi", "llm_config": {"#).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.body["error"]["type"], "invalid_request");
    assert_eq!(reply.body["error"]["retryable"], false);
    assert_eq!(fields(&reply.body), ["body"]);
}

#[tokio::test]
async fn a_wrong_type_is_a_400_naming_the_field_and_keeping_the_session() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "hi");
    body["llm_config"]["tokenLimit"] = json!("many");
    body["conversation_history"] = json!([{"role": "user", "content": "earlier"}]);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400);
    assert_eq!(fields(&reply.body), ["llm_config.tokenLimit"]);
    assert_eq!(reply.body["session_id"], body["session_id"]);
    assert_eq!(
        reply.body["updated_conversation_history"],
        body["conversation_history"]
    );
    assert_eq!(reply.body["iterations_remaining"], 3);
}

#[tokio::test]
async fn a_missing_field_is_named() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "hi");
    body.as_object_mut().unwrap().remove("llm_config");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400);
    assert_eq!(fields(&reply.body), ["llm_config"]);
}

#[tokio::test]
async fn every_failing_field_is_named_at_once() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "");
    body["llm_config"]["reservedOutputTokens"] = json!(9000);
    body["llm_config"]["temperature"] = json!(3.0);
    body["user_api_keys"] = json!({"llmKey": "sk-with\nnewline"});
    body["vector_search_results_to_include"] =
        json!([{"content": "x", "start_line": 9, "end_line": 2}]);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        fields(&reply.body),
        [
            "llm_config.reservedOutputTokens",
            "llm_config.temperature",
            "user_api_keys.llmKey",
            "user_query",
            "vector_search_results_to_include[0]",
        ]
    );
    assert!(
        !reply.text.contains("sk-with"),
        "the key must not be echoed"
    );
}

#[tokio::test]
async fn history_turns_are_validated() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "hi");
    body["conversation_history"] = json!([
        {"role": "user", "content": "a", "timestamp": "yesterday"},
        {"role": "assistant", "content": "b", "toolCall": {"name": " "}}
    ]);
    let reply = app.post_react_step(&body).await;
    assert_eq!(
        fields(&reply.body),
        [
            "conversation_history[0].timestamp",
            "conversation_history[1].toolCall.name"
        ]
    );
    // An invalid history is not echoed: the error response must conform to the contract too.
    assert_eq!(reply.body["updated_conversation_history"], json!([]));

    body["conversation_history"] = json!([{"role": "system", "content": "a"}]);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400);
    assert_eq!(fields(&reply.body), ["conversation_history[0].role"]);
}

#[tokio::test]
async fn a_failed_step_echoes_the_history_exactly_as_it_was_sent() {
    // The echoed turns are decoded from the body again when an error needs them; past 64 KiB
    // that is done on the CPU pool.
    for padding in [0, 100_000] {
        let upstream = json!({"error": {"message": "The model `gpt-4o` does not exist or you do not have access to it.", "type": "invalid_request_error", "param": null, "code": "model_not_found"}});
        let app = spawn_app_answering(OPENAI_PATH, 404, upstream).await;
        let mut body = request("gpt-4o", "hi");
        body["conversation_history"] = kept_history(padding);
        body["client_extra"] = json!({"ignored": true});
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 400, "{}", reply.text);
        assert_eq!(reply.body["error"]["type"], "llm_model_not_found");
        assert_eq!(
            reply.body["updated_conversation_history"], body["conversation_history"],
            "padding {padding}"
        );
    }
}

#[tokio::test]
async fn a_missing_key_is_a_400_for_hosted_providers() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "hi");
    body.as_object_mut().unwrap().remove("user_api_keys");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400);
    assert_eq!(fields(&reply.body), ["user_api_keys.llmKey"]);
}

#[tokio::test]
async fn a_body_over_the_limit_is_a_413() {
    let app = spawn_app_with(|c| c.max_body_bytes = 2048).await;
    let body = request("gpt-4o", &"x".repeat(4096));
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 413);
    assert_eq!(reply.body["error"]["type"], "payload_too_large");
}

#[tokio::test]
async fn a_chunked_body_over_the_limit_is_a_413_too() {
    let app = spawn_app_with(|c| c.max_body_bytes = 2048).await;
    let address = app.address.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let chunk = "x".repeat(1024);
    let mut raw = format!(
        "POST /api/agent/react_step HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    for _ in 0..4 {
        raw.push_str(&format!("{:x}\r\n{chunk}\r\n", chunk.len()));
    }
    raw.push_str("0\r\n\r\n");
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("payload_too_large"));
}

async fn upstream_fails(
    status: u16,
    body: Value,
    headers: &[(&str, &str)],
) -> (TestApp, crate::support::app::Reply) {
    let app = spawn_app().await;
    let mut template = ResponseTemplate::new(status).set_body_json(body);
    for (name, value) in headers {
        template = template.insert_header(*name, *value);
    }
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(template)
        .mount(&app.llm)
        .await;
    let reply = app.post_react_step(&request("gpt-4o", "hi")).await;
    (app, reply)
}

#[tokio::test]
async fn a_rejected_key_is_a_401_that_does_not_echo_the_key() {
    let upstream = json!({"error": {"message": format!("Incorrect API key provided: {KEY}. You can find your API key at https://platform.openai.com/account/api-keys."), "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}});
    let (_, reply) = upstream_fails(401, upstream, &[]).await;
    assert_eq!(reply.status, 401);
    assert_eq!(reply.body["error"]["type"], "llm_auth");
    assert_eq!(reply.body["error"]["retryable"], false);
    assert!(!reply.text.contains(KEY));
    assert_eq!(reply.body["updated_conversation_history"], json!([]));
}

#[tokio::test]
async fn an_unknown_model_is_a_400_llm_model_not_found() {
    let upstream = json!({"error": {"message": "The model `gpt-9` does not exist or you do not have access to it.", "type": "invalid_request_error", "param": null, "code": "model_not_found"}});
    let (_, reply) = upstream_fails(404, upstream, &[]).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.body["error"]["type"], "llm_model_not_found");
    assert!(reply.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("gpt-9"));
}

#[tokio::test]
async fn a_rate_limit_is_a_429_with_retry_after() {
    let upstream = json!({"error": {"message": "Rate limit reached for gpt-4o on requests per min (RPM): Limit 3, Used 3.", "type": "requests", "param": null, "code": "rate_limit_exceeded"}});
    let (_, reply) = upstream_fails(429, upstream, &[("retry-after", "7")]).await;
    assert_eq!(reply.status, 429);
    assert_eq!(reply.body["error"]["type"], "llm_rate_limited");
    assert_eq!(reply.body["error"]["retryable"], true);
    assert_eq!(reply.body["error"]["retry_after_seconds"], 7);
    assert_eq!(reply.headers["retry-after"], "7");
}

#[tokio::test]
async fn an_exhausted_quota_is_a_429_that_says_not_to_retry() {
    let upstream = json!({"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}});
    let (_, reply) = upstream_fails(429, upstream, &[]).await;
    assert_eq!(reply.status, 429);
    assert_eq!(reply.body["error"]["retryable"], false);
    assert!(reply.headers.get("retry-after").is_none());
}

#[tokio::test]
async fn an_upstream_5xx_is_a_retryable_502() {
    let upstream = json!({"error": {"message": "The server had an error while processing your request.", "type": "server_error", "param": null, "code": null}});
    let (_, reply) = upstream_fails(500, upstream, &[]).await;
    assert_eq!(reply.status, 502);
    assert_eq!(reply.body["error"]["type"], "llm_unavailable");
    assert_eq!(reply.body["error"]["retryable"], true);
}

#[tokio::test]
async fn another_upstream_4xx_is_passed_on_as_llm_request_rejected() {
    // (A refusal as too long is 422 context_overflow instead: see ollama.rs.)
    let upstream = json!({"error": {"message": "Invalid 'messages[1].content': string too long. Expected a string with maximum length 10485760.", "type": "invalid_request_error", "param": "messages", "code": "string_above_max_length"}});
    let (_, reply) = upstream_fails(400, upstream, &[]).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.body["error"]["type"], "llm_request_rejected");
    assert!(reply.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("string too long"));
}

#[tokio::test]
async fn anything_shaped_like_a_key_is_scrubbed_from_upstream_messages() {
    let other_key = "sk-proj-Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2";
    let upstream = json!({"error": {"message": format!("Project key {other_key} may not use this model; proxy token Bearer 0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f."), "type": "invalid_request_error", "code": null}});
    let (_, reply) = upstream_fails(400, upstream, &[]).await;
    assert_eq!(reply.status, 400);
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(!reply.text.contains(other_key), "{message}");
    assert!(!reply.text.contains("0a1b2c3d4e5f6a7b8c9d"), "{message}");
    assert!(message.contains("may not use this model"), "{message}");
}

#[tokio::test]
async fn anthropic_overload_529_is_a_502() {
    let upstream = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}, "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"});
    let app = spawn_app_answering(ANTHROPIC_PATH, 529, upstream).await;
    let reply = app
        .post_react_step(&request("claude-sonnet-4-5", "hi"))
        .await;
    assert_eq!(reply.status, 502);
    assert_eq!(reply.body["error"]["type"], "llm_unavailable");
}

#[tokio::test]
async fn an_unreadable_reply_is_a_502_bad_response() {
    let app = spawn_app().await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ResponseTemplate::new(200).set_body_string("<html>proxy error</html>"))
        .mount(&app.llm)
        .await;
    let reply = app.post_react_step(&request("gpt-4o", "hi")).await;
    assert_eq!(reply.status, 502);
    assert_eq!(reply.body["error"]["type"], "llm_bad_response");
}

#[tokio::test]
async fn an_empty_output_is_a_502_bad_response() {
    let app = spawn_app_answering(ANTHROPIC_PATH, 200, anthropic_reply("")).await;
    let reply = app
        .post_react_step(&request("claude-sonnet-4-5", "hi"))
        .await;
    assert_eq!(reply.status, 502);
    assert_eq!(reply.body["error"]["type"], "llm_bad_response");
    mount(&app.llm, OPENAI_PATH, 200, openai_reply("   ")).await;
    let reply = app.post_react_step(&request("gpt-4o", "hi")).await;
    assert_eq!(reply.status, 502);
}

#[tokio::test]
async fn no_answer_within_the_timeout_is_a_504() {
    let app = spawn_app_with(|c| c.llm_timeout_secs = 1).await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(openai_reply("Final Answer: late"))
                .set_delay(Duration::from_secs(10)),
        )
        .mount(&app.llm)
        .await;
    let reply = app.post_react_step(&request("gpt-4o", "hi")).await;
    assert_eq!(reply.status, 504);
    assert_eq!(reply.body["error"]["type"], "llm_timeout");
    assert_eq!(reply.body["error"]["retryable"], true);
}

#[tokio::test]
async fn an_unreachable_provider_is_a_502() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let app = spawn_app_with(|c| c.openai_base_url = format!("http://127.0.0.1:{port}/v1")).await;
    let reply = app.post_react_step(&request("gpt-4o", "hi")).await;
    assert_eq!(reply.status, 502);
    assert_eq!(reply.body["error"]["type"], "llm_unavailable");
    assert!(
        !reply.text.contains(&port.to_string()),
        "the upstream address is configuration, not the client's"
    );
}
