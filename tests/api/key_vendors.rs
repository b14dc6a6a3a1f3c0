//! A key whose prefix names its vendor (`sk-ant-`, `sk-or-`, `sk-proj-`, `gsk_`, `xai-`,
//! `AIza`, OpenAI's legacy form) is never sent to another vendor, on either endpoint: the step
//! is a 400 naming both vendors, the key is not repeated, and the upstream is never called.
//! Plain `sk-` keys, generic servers and a request's base URL at an unknown host keep working.

use serde_json::{json, Value};
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::app::{spawn_app_with, TestApp};
use crate::support::requests::request;
use crate::support::upstream::openai_reply;

const OPENROUTER: &str = "sk-or-v1-4f1c9e2a7b3d8e6f0a5c1b9d2e7f3a8c6b4d0e1f";
const OPENAI_PROJECT: &str = "sk-proj-Qz7Xv3Lm9Wd2Kf8Hn4Tr6Yb1Pc5Gj0Ae3Ui7Oy";
const ANTHROPIC: &str = "sk-ant-api03-Hq2Wk8Zp4Lm7Rt1Yv6Nb3Xc9Df5Gs0Ja";
const GROQ: &str = "gsk_Vn3Bq8Wz1Kx6Lp4Ty9Hr2Md7Fs5Gc0Je";
const XAI: &str = "xai-Pw5Rk2Nz8Qt1Lx7Vb4My9Hd3Fg6Sc0Ja";
const GEMINI: &str = "AIzaSyQ7Xv3Lm9Wd2Kf8Hn4Tr6Yb1Pc5Gj0Ae3";
/// `sk-`, 20 characters, "OpenAI" in base64, 20 more: OpenAI's legacy user key.
const OPENAI_LEGACY: &str = "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";
/// DeepSeek's shape: plain `sk-`, claimed by no vendor.
const PLAIN: &str = "sk-0f3a9c1e7b5d2f8a4c6e0b9d1f7a3c5e";

/// The app, its mock answering every call, and `also` among the base URLs a request may name.
async fn app(also: Option<String>) -> TestApp {
    let app = spawn_app_with(|c| {
        c.allowed_base_urls = vec![
            "https://openrouter.ai/api/v1".into(),
            "https://api.openai.com/v1".into(),
        ];
        c.allowed_base_urls.extend(also);
    })
    .await;
    answer_everything(&app.llm).await;
    app
}

async fn answer_everything(server: &MockServer) {
    Mock::given(any())
        .respond_with(
            ResponseTemplate::new(200).set_body_json(openai_reply("Thought: t\nFinal Answer: a")),
        )
        .mount(server)
        .await;
}

fn step(key: &str, model: &str, provider: Option<&str>, base_url: Option<&str>) -> Value {
    let mut body = request(model, "q");
    body["user_api_keys"]["llmKey"] = json!(key);
    if let Some(provider) = provider {
        body["llm_config"]["provider"] = json!(provider);
    }
    if let Some(url) = base_url {
        body["llm_config"]["base_url"] = json!(url);
    }
    body
}

#[tokio::test]
async fn a_key_that_names_its_vendor_is_sent_to_no_other() {
    let app = app(None).await;
    let router = Some("https://openrouter.ai/api/v1");
    let cases = [
        // The two: the model name implies the provider, the key says otherwise.
        (OPENROUTER, "gpt-4o", None, None, "openrouter", "openai"),
        (
            OPENAI_PROJECT,
            "claude-sonnet-4-5",
            None,
            None,
            "openai",
            "anthropic",
        ),
        (
            ANTHROPIC,
            "gpt-4o",
            Some("openai"),
            None,
            "anthropic",
            "openai",
        ),
        (GROQ, "grok-4", Some("xai"), None, "groq", "xai"),
        (XAI, "llama-3.3-70b", Some("groq"), None, "xai", "groq"),
        (
            GEMINI,
            "deepseek-chat",
            Some("deepseek"),
            None,
            "gemini",
            "deepseek",
        ),
        (
            OPENAI_LEGACY,
            "mistral-large-latest",
            Some("mistral"),
            None,
            "openai",
            "mistral",
        ),
        (
            OPENROUTER,
            "dep-1",
            Some("azure"),
            Some("https://api.openai.com/v1"),
            "openrouter",
            "openai",
        ),
        // A request's base URL at a known vendor's host is that vendor.
        (
            OPENAI_PROJECT,
            "openai/gpt-4o",
            Some("openai_compatible"),
            router,
            "openai",
            "openrouter",
        ),
    ];
    for (key, model, provider, url, owner, goes_to) in cases {
        let body = step(key, model, provider, url);
        for route in ["/api/agent/react_step", "/api/agent/react_step/stream"] {
            let what = format!("{owner} key to {goes_to} at {route}");
            let reply = app.send("POST", route, Some(body.to_string())).await;
            assert_eq!(reply.status, 400, "{what}: {}", reply.text);
            assert_eq!(reply.body["error"]["type"], "invalid_request", "{what}");
            assert_eq!(reply.body["error"]["retryable"], false, "{what}");
            let field = &reply.body["error"]["fields"][0];
            assert_eq!(
                field["field"], "user_api_keys.llmKey",
                "{what}: {}",
                reply.text
            );
            let message = field["message"].as_str().unwrap();
            assert!(
                message.contains(&format!("is a key of {owner} "))
                    && message.contains(&format!("goes to {goes_to}")),
                "{what}: {message}"
            );
            for piece in key.as_bytes().windows(8) {
                let piece = std::str::from_utf8(piece).unwrap();
                assert!(!reply.text.contains(piece), "{what} repeats {piece:?}");
            }
        }
    }
    let called = app.llm.received_requests().await.unwrap();
    assert!(
        called.is_empty(),
        "the upstream was called: {:?}",
        called[0].url
    );
}

#[tokio::test]
async fn keys_go_where_they_may() {
    // A base URL at a host where no vendor's API lives: a company's proxy may take any key.
    let proxy = MockServer::start().await;
    answer_everything(&proxy).await;
    let proxy_url = format!("{}/v1", proxy.uri());
    let app = app(Some(proxy_url.clone())).await;
    // The key's own vendor; a generic server, which may be a proxy for anyone; a plain `sk-`
    // key, which names no vendor; and OpenRouter through the OpenAI wire at openrouter.ai. Some
    // are dry runs, which check everything and call nothing: openrouter.ai is not reachable
    // from the test, and the mock answers in OpenAI's wire only.
    let router = Some("https://openrouter.ai/api/v1");
    let cases = [
        (OPENROUTER, "openai/gpt-4o", Some("openrouter"), None, true),
        (
            ANTHROPIC,
            "claude-sonnet-4-5",
            Some("openai_compatible"),
            None,
            true,
        ),
        (OPENAI_PROJECT, "gpt-4o", None, None, true),
        (PLAIN, "gpt-4o", None, None, true),
        (PLAIN, "claude-sonnet-4-5", None, None, false),
        (OPENROUTER, "gpt-4o", Some("openai"), router, false),
    ];
    let mut calls = 0;
    for (key, model, provider, url, call) in cases {
        let mut body = step(key, model, provider, url);
        body["dry_run"] = json!(!call);
        let reply = app.post_react_step(&body).await;
        assert_eq!(
            reply.status, 200,
            "{model} with {provider:?}: {}",
            reply.text
        );
        calls += usize::from(call);
    }
    assert_eq!(app.llm.received_requests().await.unwrap().len(), calls);
    let body = step(ANTHROPIC, "gpt-4o", Some("openai"), Some(&proxy_url));
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let reached = proxy.received_requests().await.unwrap();
    assert_eq!(reached.len(), 1);
    assert_eq!(
        reached[0].headers["authorization"],
        format!("Bearer {ANTHROPIC}").as_str()
    );
}
