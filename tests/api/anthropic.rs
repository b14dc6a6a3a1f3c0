use serde_json::json;

use crate::support::app::{sorted_keys, spawn_app, spawn_app_answering, spawn_app_with};
use crate::support::requests::{near_the_limit, request, KEY};
use crate::support::upstream::{anthropic_reply, mount, ANTHROPIC_PATH, COUNT_PATH};

#[tokio::test]
async fn an_action_step_against_anthropic() {
    let output = "Thought: I should read the login component.\nAction: read_file(path=\"src/components/Login.tsx\")";
    let app = spawn_app_answering(ANTHROPIC_PATH, 200, anthropic_reply(output)).await;

    let reply = app
        .post_react_step(&request("claude-sonnet-4-5", "What does Login do?"))
        .await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "action_proposed");
    assert_eq!(reply.body["action_details"]["tool_name"], "read_file");
    assert_eq!(
        reply.body["action_details"]["tool_args"],
        json!({"path": "src/components/Login.tsx"})
    );
    assert_eq!(
        reply.body["usage"],
        json!({"prompt_tokens": 388, "completion_tokens": 29})
    );
    assert_eq!(reply.body["context_report"]["approximate"], true);
}

#[tokio::test]
async fn the_anthropic_call_uses_its_own_headers_and_fields() {
    let app = spawn_app_answering(
        ANTHROPIC_PATH,
        200,
        anthropic_reply("Thought: t\nFinal Answer: done"),
    )
    .await;

    let reply = app
        .post_react_step(&request("claude-3-5-haiku-latest", "Summarise."))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["direct_response"], "done");

    let received = app.llm.received_requests().await.unwrap();
    let sent = &received[0];
    assert_eq!(sent.headers["x-api-key"], KEY);
    assert_eq!(sent.headers["anthropic-version"], "2023-06-01");
    assert_eq!(sent.headers["content-type"], "application/json");
    assert!(sent.headers.get("authorization").is_none());
    let body: serde_json::Value = serde_json::from_slice(&sent.body).unwrap();
    assert_eq!(body["model"], "claude-3-5-haiku-latest");
    assert_eq!(body["max_tokens"], 1000);
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(body["stop_sequences"], json!(["\nObservation:"]));
    assert!(body["system"]
        .as_str()
        .unwrap()
        .contains("code_search(query)"));
    let messages = body["messages"].as_array().unwrap();
    assert!(messages
        .iter()
        .all(|m| m["role"] == "user" || m["role"] == "assistant"));
    assert_eq!(
        messages.last().unwrap(),
        &json!({"role": "user", "content": "Summarise."})
    );
    assert_eq!(
        sorted_keys(&body),
        [
            "max_tokens",
            "messages",
            "model",
            "stop_sequences",
            "system",
            "temperature"
        ]
    );
}

#[tokio::test]
async fn a_temperature_above_one_is_refused_for_anthropic() {
    let app = spawn_app().await;
    let mut body = request("claude-sonnet-4-5", "hi");
    body["llm_config"]["temperature"] = json!(1.5);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.body["error"]["fields"][0]["field"],
        "llm_config.temperature"
    );
    assert!(app.llm.received_requests().await.unwrap().is_empty());
}

/// The provider's own count (usage.input_tokens) is checked against the approximate count.
async fn step_with_upstream_count(margin: u32, input_tokens: u64) -> serde_json::Value {
    let app = spawn_app_with(|c| c.approximation_margin_percent = Some(margin)).await;
    let mut reply = anthropic_reply("Thought: t\nFinal Answer: done");
    reply["usage"]["input_tokens"] = json!(input_tokens);
    mount(&app.llm, ANTHROPIC_PATH, 200, reply).await;
    let reply = app
        .post_react_step(&request("claude-sonnet-4-5", "What does Login do?"))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.body
}

#[tokio::test]
async fn a_provider_count_above_the_approximate_count_is_reported() {
    let body = step_with_upstream_count(20, 1_000_000).await;
    let warnings = body["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("may need a larger margin")),
        "{warnings:?}"
    );
}

#[tokio::test]
async fn the_operator_sets_the_approximation_margin() {
    let plain = step_with_upstream_count(0, 1).await;
    let padded = step_with_upstream_count(100, 1).await;
    let used = |b: &serde_json::Value| b["context_report"]["used"].as_u64().unwrap();
    // Framing overheads are added after the margin, so doubling the text count is not exact.
    assert!(
        used(&padded) > used(&plain) * 19 / 10,
        "{} vs {}",
        used(&padded),
        used(&plain)
    );
    assert_eq!(plain["warnings"], json!([]));
}

/// A dry run's report for `model` on `provider`, with the same question and context.
async fn dry_run_report(
    app: &crate::support::app::TestApp,
    provider: &str,
    model: &str,
) -> serde_json::Value {
    let mut body = request(model, "What does Login do?");
    body["llm_config"]["provider"] = json!(provider);
    body["dry_run"] = json!(true);
    body["explicit_context"] = json!([{"path": "src/login.rs", "content": "pub fn login(user: &User) -> Session {\n    Session::start(user)\n}\n".repeat(40)}]);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.body["context_report"].clone()
}

#[tokio::test]
async fn each_model_family_gets_its_calibrated_margin() {
    let app = spawn_app().await;
    let exact = dry_run_report(&app, "openai", "gpt-4o").await;
    assert_eq!(exact["approximate"], false);
    assert_eq!(exact["approximation_margin_percent"], 0);
    let mut previous = exact["used"].as_u64().unwrap();
    // In rising order of margin: each counts the same prompt as more tokens than the last.
    for (provider, model, margin) in [
        ("ollama", "llama3.1:8b", 20),
        ("anthropic", "claude-sonnet-4-5", 40),
        ("ollama", "mistral:7b", 45),
        ("anthropic", "claude-opus-4-7", 80),
    ] {
        let report = dry_run_report(&app, provider, model).await;
        assert_eq!(report["approximate"], true, "{model}");
        assert_eq!(report["approximation_margin_percent"], margin, "{model}");
        let used = report["used"].as_u64().unwrap();
        assert!(used > previous, "{model}: {used} after {previous}");
        previous = used;
    }
    assert!(app.llm.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn the_operator_margin_replaces_the_calibrated_one() {
    let app = spawn_app_with(|c| c.approximation_margin_percent = Some(5)).await;
    for (provider, model) in [("anthropic", "claude-opus-4-7"), ("ollama", "mistral:7b")] {
        let report = dry_run_report(&app, provider, model).await;
        assert_eq!(report["approximation_margin_percent"], 5, "{model}");
    }
    let exact = dry_run_report(&app, "openai", "gpt-4o").await;
    assert_eq!(exact["approximation_margin_percent"], 0);
}

/// Anthropic's count endpoint: checks the request as the API does (no output settings, its
/// headers) and answers the counts given, one per call.
struct Counter {
    counts: Vec<u64>,
    calls: std::sync::atomic::AtomicUsize,
}

impl wiremock::Respond for Counter {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        let header = |name: &str| request.headers.get(name).and_then(|v| v.to_str().ok());
        let valid = header("x-api-key") == Some(KEY)
            && header("anthropic-version").is_some()
            && body["model"].is_string()
            && body["system"].is_string()
            && body["messages"].is_array()
            && ["max_tokens", "stop_sequences", "temperature", "stream"]
                .iter()
                .all(|f| body.get(f).is_none());
        if !valid {
            return wiremock::ResponseTemplate::new(400).set_body_json(json!({"type": "error",
                "error": {"type": "invalid_request_error", "message": "max_tokens: Extra inputs are not permitted"}}));
        }
        let call = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        wiremock::ResponseTemplate::new(200)
            .set_body_json(json!({"input_tokens": self.counts[call.min(self.counts.len() - 1)]}))
    }
}

fn included(body: &serde_json::Value) -> usize {
    body["context_report"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["fate"] == "included")
        .count()
}

#[tokio::test]
async fn a_claude_prompt_near_its_limit_is_counted_by_anthropic_and_keeps_its_context() {
    let app = spawn_app().await;
    let mut dry = near_the_limit();
    dry["dry_run"] = json!(true);
    let margin_only = app.post_react_step(&dry).await;
    assert!(
        included(&margin_only.body) < 4,
        "with the margin, some file is left out: {}",
        margin_only.body["context_report"]
    );

    wiremock::Mock::given(wiremock::matchers::path(COUNT_PATH))
        .respond_with(Counter {
            counts: vec![2_300],
            calls: Default::default(),
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
    let reply = app.post_react_step(&near_the_limit()).await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    let report = &reply.body["context_report"];
    assert_eq!(included(&reply.body), 4, "every file: {report}");
    assert_eq!(report["counter"], "anthropic_count_tokens");
    assert_eq!(report["approximate"], false);
    assert_eq!(report["used"], 2_300);
    assert_eq!(reply.body["warnings"], json!([]));
    let requests = app.llm.received_requests().await.unwrap();
    let paths: Vec<&str> = requests.iter().map(|r| r.url.path()).collect();
    assert_eq!(paths, [COUNT_PATH, ANTHROPIC_PATH]);
}

#[tokio::test]
async fn a_count_over_the_budget_is_fitted_by_it_and_counted_again() {
    let app = spawn_app().await;
    wiremock::Mock::given(wiremock::matchers::path(COUNT_PATH))
        .respond_with(Counter {
            counts: vec![3_400, 2_450],
            calls: Default::default(),
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
    let reply = app.post_react_step(&near_the_limit()).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["context_report"]["used"], 2_450);
    assert_eq!(
        reply.body["context_report"]["counter"],
        "anthropic_count_tokens"
    );
    let requests = app.llm.received_requests().await.unwrap();
    let counts: Vec<serde_json::Value> = requests
        .iter()
        .filter(|r| r.url.path() == COUNT_PATH)
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert_eq!(counts.len(), 2);
    let size = |b: &serde_json::Value| b["system"].to_string().len();
    assert!(
        size(&counts[1]) < size(&counts[0]),
        "the second prompt is smaller"
    );
    assert!(included(&reply.body) < 4);
}

#[tokio::test]
async fn a_failed_count_keeps_the_margin_with_a_warning() {
    let app = spawn_app().await;
    mount(
        &app.llm,
        COUNT_PATH,
        529,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    )
    .await;
    mount(
        &app.llm,
        ANTHROPIC_PATH,
        200,
        anthropic_reply("Final Answer: ok"),
    )
    .await;
    let reply = app.post_react_step(&near_the_limit()).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(included(&reply.body) < 5);
    assert_eq!(reply.body["context_report"]["counter"], "approximation");
    assert_eq!(reply.body["context_report"]["approximate"], true);
    assert!(
        reply.body["warnings"]
            .to_string()
            .contains("could not count"),
        "{}",
        reply.body["warnings"]
    );
}
