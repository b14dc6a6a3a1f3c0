//! Amazon Bedrock's OpenAI-compatible Chat Completions: a step goes to the Region's
//! `…/openai/v1/chat/completions` with the Bedrock API key as the bearer token, and a Bedrock
//! key goes nowhere else.

use serde_json::json;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, ResponseTemplate};

use crate::support::app::spawn_app;
use crate::support::requests::{native_reasoning, request};
use crate::support::upstream::openai_tool_reply;

/// The shape of a long-term Bedrock API key ("BedrockAPIKey-…" in base64 after `ABSK`).
const BEDROCK_KEY: &str = "ABSKQmVkcm9ja0FQSUtleS10ZXN0LWF0LTEyMzQ1Njc4OTAxMg==";

#[tokio::test]
async fn a_step_goes_to_bedrock_with_its_key_as_the_bearer_token() {
    let app = spawn_app().await;
    let mut reply = openai_tool_reply(None, "read_file", r#"{"path":"a.js"}"#);
    reply["model"] = json!("openai.gpt-oss-120b-1:0");
    Mock::given(method("POST"))
        .and(path("/bedrock/openai/v1/chat/completions"))
        .and(header(
            "authorization",
            format!("Bearer {BEDROCK_KEY}").as_str(),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(reply))
        .expect(1)
        .mount(&app.llm)
        .await;
    let mut body = native_reasoning("openai.gpt-oss-120b-1:0", "high");
    body["llm_config"]["provider"] = json!("bedrock");
    body["user_api_keys"]["llmKey"] = json!(BEDROCK_KEY);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "action_proposed");
    assert_eq!(reply.body["action_details"]["tool_args"]["path"], "a.js");
    let sent = app.upstream_bodies().await.pop().unwrap();
    assert_eq!(sent["model"], "openai.gpt-oss-120b-1:0");
    assert_eq!(sent["reasoning_effort"], "high", "gpt-oss takes it");
    assert_eq!(sent["tool_choice"], "auto");
}

#[tokio::test]
async fn a_bedrock_key_is_not_sent_to_another_vendor_nor_a_model_name_guessed() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "hi");
    body["user_api_keys"]["llmKey"] = json!(BEDROCK_KEY);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert!(reply.text.contains("bedrock"), "{}", reply.text);
    // Bedrock's ids name no provider: without `provider` the step is refused, not guessed.
    let mut body = request("openai.gpt-oss-120b-1:0", "hi");
    body["user_api_keys"]["llmKey"] = json!(BEDROCK_KEY);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert!(app.llm.received_requests().await.unwrap().is_empty());
}
