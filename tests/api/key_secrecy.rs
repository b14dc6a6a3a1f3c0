//! Runs the real binary, configured only through REACTSTEP_* variables, with every log level on,
//! through the paths that touch the key (success, rejection, rate limit, an error inside a
//! stream, bad input; over plain HTTP and over HTTPS with HTTP/2), and checks that the key
//! appears in no response and no log line.

use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::binary::RunningBinary;
use crate::support::https_upstream;
use crate::support::requests::{request, KEY};
use crate::support::upstream::{openai_reply, OPENAI_PATH};

/// An upstream error that quotes the key back, as OpenAI's 401 does.
fn echoing_the_key() -> Value {
    json!({"error": {"message": format!("Incorrect API key provided: {KEY}."), "type": "invalid_request_error", "code": "invalid_api_key"}})
}

/// Posts a step for each query, checks its status, and returns the bodies, one after another.
async fn post_each(client: &reqwest::Client, url: &str, cases: &[(&str, u16)]) -> String {
    let mut responses = String::new();
    for &(query, expected) in cases {
        let reply = client
            .post(url)
            .json(&request("gpt-4o", query))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status().as_u16(), expected, "{query}");
        responses.push_str(&reply.text().await.unwrap());
    }
    responses
}

#[tokio::test]
async fn the_key_never_reaches_a_response_or_a_log_line() {
    let llm = MockServer::start().await;
    let echoed = echoing_the_key();
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

    let server = RunningBinary::start(&llm.uri(), "trace").await;
    let port = server.port;

    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/api/agent/react_step");
    let cases = [
        ("ok", 200),
        ("denied", 401),
        ("limited", 429),
        ("broken", 502),
    ];
    let mut responses = post_each(&client, &url, &cases).await;
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

    let log = server.stop().await;

    assert!(
        log.contains("request failed") || log.contains("request refused"),
        "errors are logged: {log}"
    );
    assert!(!responses.contains(KEY), "a response held the key");
    assert!(!log.contains(KEY), "a log line held the key");
    assert!(!log.contains("SECRET"), "a log line held part of the key");
}

/// The same over HTTPS and HTTP/2, the path to every hosted provider, whose libraries log
/// differently at `trace`.
#[tokio::test]
async fn over_http2_the_key_reaches_no_response_and_no_log_line() {
    let upstream = https_upstream::start(None, |body| async move {
        if String::from_utf8_lossy(&body).contains("\"content\":\"denied\"") {
            (401, echoing_the_key().to_string())
        } else {
            (200, openai_reply("Thought: t\nFinal Answer: a").to_string())
        }
    })
    .await;
    let ca = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca.path(), &upstream.ca_pem).unwrap();
    let ca_path = ca.path().to_str().unwrap();
    let server = RunningBinary::start_with(
        &upstream.uri,
        "trace",
        &[("REACTSTEP_UPSTREAM_CA_FILE", ca_path)],
    )
    .await;

    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{}/api/agent/react_step", server.port);
    let responses = post_each(&client, &url, &[("ok", 200), ("denied", 401)]).await;
    let log = server.stop().await;

    let versions = upstream.versions.lock().unwrap().clone();
    assert_eq!(versions, vec![hyper::Version::HTTP_2; 2]);
    assert!(log.contains("request refused"), "the 401 is logged: {log}");
    assert!(!responses.contains(KEY), "a response held the key");
    assert!(!log.contains(KEY), "a log line held the key");
    assert!(!log.contains("SECRET"), "a log line held part of the key");
}

/// A key pasted into the model's name or the session id (a form with several fields) reaches no
/// log line: the upstream fails, and its retry is logged inside the step's spans, which name
/// both.
#[tokio::test]
async fn a_key_pasted_into_the_model_name_or_the_session_reaches_no_log_line() {
    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ResponseTemplate::new(500).set_body_json(
            json!({"error": {"message": "The server had an error", "type": "server_error"}}),
        ))
        .mount(&llm)
        .await;
    let server = RunningBinary::start(&llm.uri(), "trace").await;
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{}/api/agent/react_step", server.port);
    let mut body = request(&format!("gpt-4o-{KEY}"), "hi");
    body["session_id"] = json!(format!("session {KEY}"));
    let mut responses = String::new();
    for endpoint in [url.clone(), format!("{url}/stream")] {
        let reply = client.post(&endpoint).json(&body).send().await.unwrap();
        assert_eq!(reply.status().as_u16(), 502, "{endpoint}");
        responses.push_str(&reply.text().await.unwrap());
    }
    // A session id that holds no key is logged as it is, though a UUID is shaped like a key.
    let mut plain = body.clone();
    plain["session_id"] = json!("5c2f7a1f-0000-4000-8000-00000000abcd");
    let reply = client.post(&url).json(&plain).send().await.unwrap();
    assert_eq!(reply.status().as_u16(), 502);
    let log = server.stop().await;

    assert!(
        log.contains("retrying the upstream call"),
        "the retry is logged inside the step's spans: {log}"
    );
    assert!(
        log.contains("\"session_id\":\"5c2f7a1f-0000-4000-8000-00000000abcd\""),
        "the plain session id is logged: {log}"
    );
    assert!(!log.contains(KEY), "a log line held the key");
    assert!(!log.contains("SECRET"), "a log line held part of the key");
    // The client's own session id comes back as it was sent (it names the session); nothing
    // else in the answers may hold the key.
    let session = body["session_id"].as_str().unwrap();
    assert!(
        !responses.replace(session, "").contains("SECRET"),
        "a response held the key: {responses}"
    );
}
