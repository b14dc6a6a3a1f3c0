//! A request's `base_url` against the operator's host-pattern allow-list: only a plain spelling
//! of an allowed host passes (no trailing dot, case, look-alike, escape, user, port, query or
//! numeric address), and an allowed base URL never moves the key to another host.
//!
//! Written by a red team (issue 16): a test that exposes a defect asserts the correct behaviour,
//! so it fails until the defect is fixed; the others show a defence holding against something
//! the other suites do not try.

use serde_json::json;
use wiremock::{Mock, ResponseTemplate};

use crate::support::app::{spawn_app_with, try_step};
use crate::support::requests::request;

#[tokio::test]
async fn the_host_pattern_refuses_every_spelling_that_is_not_plain() {
    let app = spawn_app_with(|c| {
        c.base_urls.remove("azure");
        c.allowed_base_urls = vec![
            "https://*.openai.azure.com".into(),
            "https://*.services.ai.azure.com/openai/v1".into(),
        ];
    })
    .await;
    let mut body = request("my-deployment", "q");
    body["llm_config"]["provider"] = json!("azure");
    body["dry_run"] = json!(true);
    for good in [
        "https://contoso.openai.azure.com/openai",
        "https://contoso.openai.azure.com/openai/v1/",
        "  https://contoso.openai.azure.com/openai/v1  ",
        "https://xn--80ak6aa92e.openai.azure.com/openai/v1",
        "https://r1.services.ai.azure.com/openai/v1",
    ] {
        body["llm_config"]["base_url"] = json!(good);
        let (status, reply) = try_step(&app, &body).await.unwrap();
        assert_eq!(status, 200, "{good:?}: {reply}");
    }
    let long_label = format!("https://{}.openai.azure.com/openai/v1", "a".repeat(64));
    let mut bad = vec![
        "https://x.openai.azure.com./openai/v1",
        "https://x.openai.azure.com../openai/v1",
        "https://X.openai.azure.com/openai/v1",
        "https://x.OpenAI.azure.com/openai/v1",
        "https://\u{0445}.openai.azure.com/openai/v1",
        "https://\u{ff58}.openai.azure.com/openai/v1",
        "https://x\u{3002}openai.azure.com/openai/v1",
        "https://evil.com\u{3002}openai.azure.com/openai/v1",
        "https://x.openai.azure.com\\openai\\v1",
        "https://evil.com\\@x.openai.azure.com/openai/v1",
        "https:\\\\x.openai.azure.com/openai/v1",
        "https:x.openai.azure.com/openai/v1",
        "https:/x.openai.azure.com/openai/v1",
        "https:///x.openai.azure.com/openai/v1",
        "https://@x.openai.azure.com/openai/v1",
        "https://:@x.openai.azure.com/openai/v1",
        "https://x.openai.azure.com:443/openai/v1",
        "https://x.openai.azure.com:/openai/v1",
        "https://x.openai.azure.com/openai/v1?",
        "https://x.openai.azure.com/openai/v1#",
        "https://x.openai.azure.com/open ai/v1",
        "https://x.openai.azure.com/open\tai/v1",
        "https://x.openai.azure.com/open\nai/v1",
        "https://x.openai.azure.com/%2e%2e/v1",
        "https://x.openai.azure.com/openai/%2E%2E/%2E%2E",
        "https://x.openai.azure.com/./openai/v1",
        "https://x%2eopenai%2eazure%2ecom/openai/v1",
        "https://x.openai.azure.com%00.evil.com/openai/v1",
        "https://x.openai.azure.com%2f.evil.com/openai/v1",
        "https://x.openai.azure.com%40evil.com/openai/v1",
        "https://[::ffff:7f00:1]/openai/v1",
        "https://[::ffff:127.0.0.1]/openai/v1",
        "https://2130706433/openai/v1",
        "https://0x7f.0.0.1/openai/v1",
        "https://127.1/openai/v1",
        "https://x.openai.azure.com\u{200b}/openai/v1",
        "https://x_y.openai.azure.com/openai/v1",
        "https://*.openai.azure.com/openai/v1",
        "https://%2a.openai.azure.com/openai/v1",
        "HTTPS://x.openai.azure.com/openai/v1",
        "wss://x.openai.azure.com/openai/v1",
        "//x.openai.azure.com/openai/v1",
        "x.openai.azure.com/openai/v1",
        "https://r1.services.ai.azure.com/openai/v1/chat",
        "https://r1.services.ai.azure.com/openai/v1/..",
        "https://r1.services.ai.azure.com/OPENAI/v1",
        "https://r1.services.ai.azure.com/openai/v1;x",
    ];
    bad.push(&long_label);
    for url in bad {
        body["llm_config"]["base_url"] = json!(url);
        let (status, reply) = try_step(&app, &body).await.unwrap();
        assert_eq!(status, 400, "{url:?}: {reply}");
        assert_eq!(
            reply["error"]["fields"][0]["field"], "llm_config.base_url",
            "{url:?}"
        );
    }
    assert!(app.llm.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn an_allowed_base_url_never_moves_the_key_to_another_host() {
    // An exact entry on the loopback mock, taken by every wire format: each call, counts and
    // summaries included, goes to that host and nowhere else, whatever the model name says.
    let elsewhere = wiremock::MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(500))
        .mount(&elsewhere)
        .await;
    let allowed = format!("{}/v1", elsewhere.uri());
    let for_app = allowed.clone();
    let app = spawn_app_with(move |c| c.allowed_base_urls = vec![for_app]).await;
    for (provider, model) in [
        ("anthropic", "claude-sonnet-4-5"),
        ("ollama", "llama3.1:8b"),
        ("azure", "..x"),
        ("azure", "dep.name_1-x"),
        ("openrouter", "openai/o3@evil.example"),
        ("openai_compatible", "x/../../../evil"),
        ("gemini", "gemini-2.5-flash#@evil.example"),
    ] {
        let mut body = request(model, "q");
        body["llm_config"]["provider"] = json!(provider);
        body["llm_config"]["base_url"] = json!(allowed);
        let _ = try_step(&app, &body).await.unwrap();
    }
    assert!(
        app.llm.received_requests().await.unwrap().is_empty(),
        "the configured upstream was called"
    );
    let host = elsewhere.uri().trim_start_matches("http://").to_string();
    let reached = elsewhere.received_requests().await.unwrap();
    assert!(!reached.is_empty());
    for r in reached {
        assert_eq!(r.headers["host"].to_str().unwrap(), host, "{}", r.url);
        assert!(
            !r.url.path().contains("evil") && !r.url.path().contains(".."),
            "{}",
            r.url
        );
    }
}
