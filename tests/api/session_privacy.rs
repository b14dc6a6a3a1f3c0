//! The session id a client sends never reaches any upstream as it was sent: not in the URL, a
//! header or the body, for any wire format.
//!
//! Written by a red team (issue 17): a test that exposes a defect asserts the promised behaviour,
//! so it fails until the defect is fixed; the others show a defence holding.

use serde_json::json;
use wiremock::matchers::path;
use wiremock::{Mock, ResponseTemplate};

use crate::support::app::spawn_app;
use crate::support::requests::request;
use crate::support::upstream::{anthropic_reply, openai_reply, ANTHROPIC_PATH, OPENAI_PATH};

#[tokio::test]
async fn red_team_17_the_session_id_never_reaches_any_upstream_raw() {
    let session = "alice@example.com-secret-session-7731";
    let app = spawn_app().await;
    Mock::given(path(OPENAI_PATH))
        .respond_with(ResponseTemplate::new(200).set_body_json(openai_reply("Final Answer: ok")))
        .mount(&app.llm)
        .await;
    Mock::given(path(ANTHROPIC_PATH))
        .respond_with(ResponseTemplate::new(200).set_body_json(anthropic_reply("Final Answer: ok")))
        .mount(&app.llm)
        .await;
    Mock::given(path("/deepseek/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(openai_reply("Final Answer: ok")))
        .mount(&app.llm)
        .await;
    for (model, provider) in [
        ("gpt-4o", None),
        ("claude-sonnet-4-5", None),
        ("deepseek-chat", Some("deepseek")),
    ] {
        let mut body = request(model, "hi");
        body["session_id"] = json!(session);
        if let Some(p) = provider {
            body["llm_config"]["provider"] = json!(p);
        }
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 200, "{model}: {}", reply.body);
    }
    for r in app.llm.received_requests().await.unwrap() {
        let all = format!(
            "{} {:?} {}",
            r.url,
            r.headers,
            String::from_utf8_lossy(&r.body)
        );
        assert!(
            !all.contains(session),
            "the raw session id went to {}",
            r.url
        );
        assert!(
            !all.contains("alice"),
            "part of the session id went to {}",
            r.url
        );
    }
}
