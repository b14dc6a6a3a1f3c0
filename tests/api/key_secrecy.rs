//! Runs the real binary, configured only through REACTSTEP_* variables, with every log level on,
//! through the paths that touch the key (success, rejection, rate limit, an error inside a
//! stream, bad input), and checks
//! that the key appears in no response and no log line.

use std::process::Stdio;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::helpers::{request, KEY};
use crate::upstream::{openai_reply, OPENAI_PATH};

#[tokio::test]
async fn the_key_never_reaches_a_response_or_a_log_line() {
    let llm = MockServer::start().await;
    let echoed = json!({"error": {"message": format!("Incorrect API key provided: {KEY}."), "type": "invalid_request_error", "code": "invalid_api_key"}});
    for (query, status, body) in [
        ("ok", 200, openai_reply("Thought: t\nFinal Answer: a")),
        ("denied", 401, echoed.clone()),
        ("limited", 429, echoed.clone()),
        ("broken", 500, echoed),
    ] {
        Mock::given(method("POST"))
            .and(path(OPENAI_PATH))
            .and(wiremock::matchers::body_string_contains(format!(
                "\"content\":\"{query}\""
            )))
            .respond_with(ResponseTemplate::new(status).set_body_json(body))
            .mount(&llm)
            .await;
    }

    // An error inside a stream that started with 200, echoing the key.
    let in_stream = format!(
        "data: {{\"error\":{{\"message\":\"Incorrect API key provided: {KEY}.\",\"type\":\"invalid_request_error\"}}}}\n\n"
    );
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .and(wiremock::matchers::body_string_contains(
            "\"content\":\"streamed\"",
        ))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("content-type", "text/event-stream")
                .set_body_string(in_stream),
        )
        .mount(&llm)
        .await;

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_reactstep"))
        .env("REACTSTEP_BIND", "127.0.0.1:0")
        .env("REACTSTEP_OPENAI_BASE_URL", format!("{}/v1", llm.uri()))
        .env("REACTSTEP_LOG_FORMAT", "json")
        .env("REACTSTEP_WORKERS", "1")
        .env("REACTSTEP_RETRY_BASE_MS", "1")
        .env("REACTSTEP_RETRY_CAP_MS", "5")
        .env("RUST_LOG", "trace")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    // Drain the log continuously (a full pipe would block the server) and report the port,
    // which the startup line carries.
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (port_tx, port_rx) = tokio::sync::oneshot::channel();
    let reader = tokio::spawn(async move {
        let mut log = String::new();
        let mut port_tx = Some(port_tx);
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(entry) = serde_json::from_str::<serde_json::Value>(&line) {
                if let Some(port) = entry["port"].as_u64() {
                    if let Some(tx) = port_tx.take() {
                        tx.send(port).unwrap();
                    }
                }
            }
            log.push_str(&line);
            log.push('\n');
        }
        log
    });
    let port = port_rx.await.expect("the server logs its port at startup");

    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/api/agent/react_step");
    let mut responses = String::new();
    for (query, expected) in [
        ("ok", 200),
        ("denied", 401),
        ("limited", 429),
        ("broken", 502),
    ] {
        let reply = client
            .post(&url)
            .json(&request("gpt-4o", query))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status().as_u16(), expected);
        responses.push_str(&reply.text().await.unwrap());
    }
    let streamed = client
        .post(format!("{url}/stream"))
        .json(&request("gpt-4o", "streamed"))
        .send()
        .await
        .unwrap();
    assert_eq!(streamed.status().as_u16(), 200);
    let events = streamed.text().await.unwrap();
    assert!(events.contains("event: error"), "{events}");
    responses.push_str(&events);
    let mut bad = request("gpt-4o", "hi");
    bad["llm_config"]["tokenLimit"] = json!("wrong");
    responses.push_str(
        &client
            .post(&url)
            .json(&bad)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );

    child.kill().await.unwrap();
    let log = reader.await.unwrap();

    assert!(
        log.contains("request failed") || log.contains("request refused"),
        "errors are logged: {log}"
    );
    assert!(!responses.contains(KEY), "a response held the key");
    assert!(!log.contains(KEY), "a log line held the key");
    assert!(!log.contains("SECRET"), "a log line held part of the key");
}
