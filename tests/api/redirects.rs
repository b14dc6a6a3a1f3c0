//! An upstream that answers with a redirect: nothing follows it, so the key stays with the
//! provider it was meant for and nothing the redirect target says reaches the client.

use wiremock::matchers::any;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::app::{spawn_app, spawn_app_answering, TestApp};
use crate::support::requests::request;
use crate::support::spec::assert_conforms;
use crate::support::upstream::{anthropic_reply, openai_reply, ANTHROPIC_PATH, OPENAI_PATH};

const TARGET_TEXT: &str = "REDIRECT-TARGET-SPEAKING";

/// A host that would answer any call with a valid reply, to show nothing reached it.
async fn redirect_target() -> MockServer {
    let target = MockServer::start().await;
    let body = openai_reply(&format!("Thought: t\nFinal Answer: {TARGET_TEXT}"));
    Mock::given(any())
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .mount(&target)
        .await;
    target
}

async fn redirect(app: &TestApp, at: &str, status: u16, location: &str) {
    app.llm.reset().await;
    Mock::given(any())
        .and(wiremock::matchers::path(at))
        .respond_with(
            ResponseTemplate::new(status)
                .insert_header("location", location)
                .set_body_string(format!("moved: {TARGET_TEXT}")),
        )
        .mount(&app.llm)
        .await;
}

#[tokio::test]
async fn no_redirect_is_followed_for_any_provider_or_status() {
    let app = spawn_app().await;
    let target = redirect_target().await;
    let cases = [
        (
            "gpt-4o",
            OPENAI_PATH,
            format!("{}/v1/chat/completions", target.uri()),
        ),
        (
            "claude-sonnet-4-5",
            ANTHROPIC_PATH,
            format!("{}/v1/messages", target.uri()),
        ),
        // The same host, another path: still not followed.
        ("gpt-4o", OPENAI_PATH, "/elsewhere".to_string()),
    ];
    for (model, at, location) in &cases {
        for status in [301, 302, 303, 307, 308] {
            redirect(&app, at, status, location).await;
            for path in ["/api/agent/react_step", "/api/agent/react_step/stream"] {
                let reply = app
                    .send("POST", path, Some(request(model, "q").to_string()))
                    .await;
                assert_eq!(reply.status, 502, "{model} {status} {path}: {}", reply.text);
                assert_eq!(reply.body["error"]["type"], "llm_bad_response");
                assert_eq!(reply.body["error"]["retryable"], false);
                let message = reply.body["error"]["message"].as_str().unwrap();
                assert!(message.contains(&format!("HTTP {status}")), "{message}");
                assert!(!reply.text.contains(TARGET_TEXT), "{}", reply.text);
                assert_conforms("post", path, 502, &reply.body);
            }
            let calls = app.llm.received_requests().await.unwrap();
            assert_eq!(calls.len(), 2, "one call per endpoint, no retry");
        }
    }
    let reached = target.received_requests().await.unwrap();
    assert!(
        reached.is_empty(),
        "the redirect target was called: {reached:?}"
    );
}

#[tokio::test]
async fn the_anthropic_reply_shape_is_not_what_stops_a_redirect() {
    // The control: the same upstream answering 200 is used, so the 502 above is the redirect's.
    let app = spawn_app_answering(
        ANTHROPIC_PATH,
        200,
        anthropic_reply("Thought: t\nFinal Answer: fine"),
    )
    .await;
    let reply = app
        .post_react_step(&request("claude-sonnet-4-5", "q"))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}
