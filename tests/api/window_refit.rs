//! A local server's own window (issue 34, item 2): llama.cpp refuses a prompt longer than the
//! context it was started with and names that window; the step fits the prompt again into it
//! instead of answering `context_overflow`.

use serde_json::{json, Value};
use wiremock::{Mock, ResponseTemplate};

use crate::support::app::spawn_app;
use crate::support::requests::request;
use crate::support::spec::assert_conforms;
use crate::support::upstream::{compatible_reply, COMPATIBLE_PATH};

/// llama.cpp's refusal, naming the window (and the prompt's size by its count, when given).
fn refusal(prompt: Option<u64>, window: u64) -> Value {
    let mut error = json!({"code": 400,
        "message": format!("the request exceeds the available context size ({window} tokens), try increasing it"),
        "type": "exceed_context_size_error", "n_ctx": window});
    if let Some(prompt) = prompt {
        error["n_prompt_tokens"] = json!(prompt);
    }
    json!({ "error": error })
}

fn long_request() -> Value {
    let mut body = request("qwen2.5-coder-1.5b", "What does the handler do?");
    body["llm_config"]["provider"] = json!("openai_compatible");
    body["llm_config"]["tokenLimit"] = json!(32_000);
    body["llm_config"]["reservedOutputTokens"] = json!(1000);
    body["explicit_context"] = json!([{"path": "src/handler.rs",
        "content": "pub fn handler(request: Request) -> Response { route(request) }\n".repeat(800)}]);
    body
}

#[tokio::test]
async fn a_refusal_that_names_a_smaller_window_is_fitted_again_into_it() {
    let app = spawn_app().await;
    Mock::given(wiremock::matchers::path(COMPATIBLE_PATH))
        .respond_with(ResponseTemplate::new(400).set_body_json(refusal(Some(12_059), 4096)))
        .up_to_n_times(1)
        .mount(&app.llm)
        .await;
    Mock::given(wiremock::matchers::path(COMPATIBLE_PATH))
        .respond_with(ResponseTemplate::new(200).set_body_json(compatible_reply(
            "Thought: read it.\nFinal Answer: it routes the request",
        )))
        .mount(&app.llm)
        .await;
    let reply = app.post_react_step(&long_request()).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_conforms("POST", "/api/agent/react_step", 200, &reply.body);
    let report = &reply.body["context_report"];
    assert_eq!(report["budget"], 4096 - 1000, "{report}");
    assert!(report["used"].as_u64().unwrap() <= 3096, "{report}");
    let warnings = reply.body["warnings"].to_string();
    assert!(
        warnings.contains("context window is 4096 tokens, not llm_config.tokenLimit's 32000"),
        "{warnings}"
    );
    let sent = app.upstream_bodies().await;
    assert_eq!(sent.len(), 2);
    assert!(sent[1].to_string().len() < sent[0].to_string().len() / 3);
    assert_eq!(sent[1]["max_tokens"], 1000);
}

#[tokio::test]
async fn a_window_too_small_for_the_answer_or_no_smaller_is_the_refusal() {
    // Without the prompt's size, only the window could make a second fit worth it.
    for (window, limit) in [(1100_u64, 32_000_u64), (64_000, 32_000)] {
        let app = spawn_app().await;
        Mock::given(wiremock::matchers::path(COMPATIBLE_PATH))
            .respond_with(ResponseTemplate::new(400).set_body_json(refusal(None, window)))
            .mount(&app.llm)
            .await;
        let mut body = long_request();
        body["llm_config"]["tokenLimit"] = json!(limit);
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 422, "{window}: {}", reply.text);
        assert_eq!(reply.body["error"]["type"], "context_overflow");
        assert_eq!(
            app.upstream_bodies().await.len(),
            1,
            "{window}: no second call"
        );
    }
}
