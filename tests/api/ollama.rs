//! Ollama through its native API, and other OpenAI-compatible local servers.

use serde_json::json;

use crate::support::app::{spawn_app, spawn_app_answering};
use crate::support::requests::request;
use crate::support::upstream::{
    compatible_reply, mount, ollama_reply, COMPATIBLE_PATH, OLLAMA_PATH,
};

fn local_request(provider: &str, query: &str) -> serde_json::Value {
    let mut body = request("llama3.1:8b", query);
    body["llm_config"]["provider"] = json!(provider);
    body.as_object_mut().unwrap().remove("user_api_keys");
    body
}

#[tokio::test]
async fn an_action_step_against_ollama_sets_the_context_window() {
    let output = "Thought: Let me search.\nAction: code_search(query=\"session middleware\")";
    let app = spawn_app_answering(OLLAMA_PATH, 200, ollama_reply(output)).await;

    let reply = app
        .post_react_step(&local_request("ollama", "Where are sessions checked?"))
        .await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "action_proposed");
    assert_eq!(
        reply.body["action_details"]["tool_args"],
        json!({"query": "session middleware"})
    );
    assert_eq!(
        reply.body["usage"],
        json!({"prompt_tokens": 301, "completion_tokens": 24})
    );

    let received = app.llm.received_requests().await.unwrap();
    assert!(
        received[0].headers.get("authorization").is_none(),
        "no key was given, none is sent"
    );
    let body: serde_json::Value = serde_json::from_slice(&received[0].body).unwrap();
    assert_eq!(body["model"], "llama3.1:8b");
    assert_eq!(body["stream"], false);
    assert_eq!(
        body["options"]["num_ctx"], 8192,
        "without num_ctx Ollama cuts the front of a long prompt"
    );
    assert_eq!(body["options"]["num_predict"], 1000);
    assert_eq!(body["options"]["stop"], json!(["\nObservation:"]));
}

#[tokio::test]
async fn an_action_step_against_an_openai_compatible_server() {
    let output = "Thought: Let me search.\nAction: code_search(query=\"session middleware\")";
    let app = spawn_app_answering(COMPATIBLE_PATH, 200, compatible_reply(output)).await;

    let reply = app
        .post_react_step(&local_request("openai_compatible", "Where?"))
        .await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.body["action_details"]["tool_args"],
        json!({"query": "session middleware"})
    );
    let received = app.llm.received_requests().await.unwrap();
    assert!(received[0].headers.get("authorization").is_none());
    let body: serde_json::Value = serde_json::from_slice(&received[0].body).unwrap();
    assert_eq!(
        body["max_tokens"], 1000,
        "some servers drop max_completion_tokens, so max_tokens is sent"
    );
    assert_eq!(body["stop"], json!(["\nObservation:"]));
}

#[tokio::test]
async fn a_final_answer_from_a_thinking_local_model() {
    let output = "<think>\nThe user asks what 2+2 is. Trivial.\n</think>\n\nFinal Answer: 4";
    let app = spawn_app_answering(OLLAMA_PATH, 200, ollama_reply(output)).await;

    let reply = app
        .post_react_step(&local_request("ollama", "What is 2+2?"))
        .await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "direct_response_provided");
    assert_eq!(reply.body["direct_response"], "4");
    assert_eq!(reply.body["thought"], "The user asks what 2+2 is. Trivial.");
}

#[tokio::test]
async fn a_key_given_for_a_local_server_is_sent_as_bearer() {
    let app = spawn_app().await;
    mount(&app.llm, OLLAMA_PATH, 200, ollama_reply("Final Answer: ok")).await;
    mount(
        &app.llm,
        COMPATIBLE_PATH,
        200,
        compatible_reply("Final Answer: ok"),
    )
    .await;
    for provider in ["ollama", "openai_compatible"] {
        let mut body = local_request(provider, "hi");
        body["user_api_keys"] = json!({"llmKey": "llama-server-key"});
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 200, "{provider}: {}", reply.text);
    }
    let received = app.llm.received_requests().await.unwrap();
    assert_eq!(received.len(), 2);
    for request in received {
        assert_eq!(request.headers["authorization"], "Bearer llama-server-key");
    }
}

#[tokio::test]
async fn a_model_name_that_names_no_provider_is_a_400() {
    let app = spawn_app().await;
    let mut body = local_request("ollama", "hi");
    body["llm_config"]
        .as_object_mut()
        .unwrap()
        .remove("provider");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.body["error"]["fields"][0]["field"],
        "llm_config.provider"
    );
    // The message names the field it could not infer from, not the value sent in it.
    let message = reply.body["error"]["fields"][0]["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("modelName"), "{message}");
    assert!(!message.contains("llama3.1:8b"), "{message}");
}

#[tokio::test]
async fn a_stream_without_usage_is_counted_by_the_service_and_marked_approximate() {
    let app = spawn_app().await;
    let chunk = |content: &str| {
        let data = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]});
        format!("data: {data}\n\n")
    };
    // A server that ignores stream_options.include_usage: no usage chunk at all.
    let body = format!(
        "{}{}data: {}\n\ndata: [DONE]\n\n",
        chunk("Thought: known.\nFinal Answer: "),
        chunk("in auth.js"),
        json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    );
    wiremock::Mock::given(wiremock::matchers::path(COMPATIBLE_PATH))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_raw(body, "text/event-stream"))
        .mount(&app.llm)
        .await;
    let streamed =
        crate::support::stream::post_stream(&app, &local_request("openai_compatible", "q")).await;
    let (name, step) = streamed.terminal();
    assert_eq!(name, "step", "{step}");
    assert_eq!(step["direct_response"], "in auth.js");
    assert_eq!(step["usage"]["approximate"], true, "{step}");
    assert_eq!(
        step["usage"]["prompt_tokens"], step["context_report"]["used"],
        "the prompt as the service counted it"
    );
    let completion = step["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((5..20).contains(&completion), "{completion}");

    // A provider that reports usage is not marked.
    mount(&app.llm, OLLAMA_PATH, 200, ollama_reply("Final Answer: ok")).await;
    let reply = app.post_react_step(&local_request("ollama", "q")).await;
    assert_eq!(
        reply.body["usage"],
        json!({"prompt_tokens": 301, "completion_tokens": 24})
    );
}

#[tokio::test]
async fn a_timed_out_attempt_is_not_repeated_on_a_local_server() {
    for (provider, path, expected_calls) in [
        ("ollama", OLLAMA_PATH, 1),
        ("openai_compatible", COMPATIBLE_PATH, 1),
        ("openai", crate::support::upstream::OPENAI_PATH, 2),
    ] {
        let app = crate::support::app::spawn_app_with(|c| {
            c.llm_timeout_secs = 1;
            c.retries = 1;
        })
        .await;
        wiremock::Mock::given(wiremock::matchers::path(path))
            .respond_with(
                wiremock::ResponseTemplate::new(200)
                    .set_body_json(ollama_reply("Final Answer: late"))
                    .set_delay(std::time::Duration::from_secs(3)),
            )
            .mount(&app.llm)
            .await;
        let mut body = local_request(provider, "q");
        body["user_api_keys"] = json!({"llmKey": crate::support::requests::KEY});
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 504, "{provider}: {}", reply.text);
        assert_eq!(reply.body["error"]["type"], "llm_timeout", "{provider}");
        let calls = app.llm.received_requests().await.unwrap().len();
        assert_eq!(
            calls, expected_calls,
            "{provider}: a single-slot server would still be generating the first"
        );
    }
}

/// A compatible server that refuses prompts whose size it reports, the way vLLM words it.
struct Refusing {
    /// Its count of each prompt, by call: then it accepts.
    counts: Vec<u64>,
    calls: std::sync::atomic::AtomicUsize,
}

impl wiremock::Respond for Refusing {
    fn respond(&self, _: &wiremock::Request) -> wiremock::ResponseTemplate {
        let call = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        match self.counts.get(call) {
            Some(n) => wiremock::ResponseTemplate::new(400).set_body_json(json!({
                "object": "error",
                "message": format!("This model's maximum context length is 4096 tokens. However, you requested {} tokens ({n} in the messages, 1000 in the completion). Please reduce the length of the messages or completion.", n + 1000),
                "type": "BadRequestError", "param": null, "code": 400})),
            None => wiremock::ResponseTemplate::new(200)
                .set_body_json(compatible_reply("Final Answer: it fits now")),
        }
    }
}

/// A local request with three files of digits (log lines): counted low by o200k_base.
fn digits_request() -> serde_json::Value {
    let mut body = local_request("openai_compatible", "What failed?");
    let log: String = (0..120)
        .map(|i| {
            format!(
                "2025-03-0{} 12:{:02}:{:02} 4{:04} 0.{:06}\n",
                i % 9 + 1,
                i % 60,
                i * 7 % 60,
                i * 37,
                i * 7919
            )
        })
        .collect();
    body["explicit_context"] = json!([
        {"path": "logs/a.log", "content": log},
        {"path": "logs/b.log", "content": log.replace('1', "7")},
        {"path": "logs/c.log", "content": log.replace('2', "9")},
    ]);
    body
}

async fn used_by_the_service(app: &crate::support::app::TestApp, body: &serde_json::Value) -> u64 {
    let mut dry = body.clone();
    dry["dry_run"] = json!(true);
    let reply = app.post_react_step(&dry).await;
    reply.body["context_report"]["used"].as_u64().unwrap()
}

#[tokio::test]
async fn a_prompt_refused_as_too_long_is_fitted_again_by_the_providers_count() {
    let app = spawn_app().await;
    let body = digits_request();
    let used = used_by_the_service(&app, &body).await;
    wiremock::Mock::given(wiremock::matchers::path(COMPATIBLE_PATH))
        .respond_with(Refusing {
            counts: vec![used * 3 / 2],
            calls: Default::default(),
        })
        .mount(&app.llm)
        .await;

    let reply = app.post_react_step(&body).await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["direct_response"], "it fits now");
    let warnings = reply.body["warnings"].to_string();
    assert!(warnings.contains("fitted again"), "{warnings}");
    let sent = app.upstream_bodies().await;
    assert_eq!(sent.len(), 2);
    let size = |b: &serde_json::Value| b["messages"].to_string().len();
    assert!(
        size(&sent[1]) < size(&sent[0]),
        "the second prompt is smaller"
    );
    let margin = reply.body["context_report"]["approximation_margin_percent"]
        .as_u64()
        .unwrap();
    assert!(margin > 45, "the margin grew by the ratio: {margin}");
}

#[tokio::test]
async fn a_second_refusal_is_a_422_with_the_report_never_a_400() {
    let app = spawn_app().await;
    let body = digits_request();
    let used = used_by_the_service(&app, &body).await;
    wiremock::Mock::given(wiremock::matchers::path(COMPATIBLE_PATH))
        .respond_with(Refusing {
            counts: vec![used * 3 / 2, used * 3 / 2],
            calls: Default::default(),
        })
        .mount(&app.llm)
        .await;

    let reply = app.post_react_step(&body).await;

    assert_eq!(reply.status, 422, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "context_overflow");
    assert_eq!(reply.body["error"]["retryable"], false);
    assert!(
        reply.body["context_report"]["items"].is_array(),
        "{}",
        reply.text
    );
    assert_eq!(
        app.upstream_bodies().await.len(),
        2,
        "fitted again once, not more"
    );
}

#[tokio::test]
async fn an_exact_count_refused_as_too_long_is_a_422_at_once() {
    let app = spawn_app_answering(
        crate::support::upstream::OPENAI_PATH,
        400,
        json!({"error": {
            // The window is the request's own tokenLimit: no smaller window to fit again into.
            "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9210 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
    )
    .await;
    let reply = app.post_react_step(&request("gpt-4o", "q")).await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "context_overflow");
    assert_eq!(
        reply.body["context_report"]["approximate"], false,
        "{}",
        reply.text
    );
    assert_eq!(app.upstream_bodies().await.len(), 1);
}

#[tokio::test]
async fn an_event_stream_with_no_event_is_an_empty_reply_not_a_truncated_one() {
    let app = spawn_app().await;
    wiremock::Mock::given(wiremock::matchers::path(COMPATIBLE_PATH))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_raw("", "text/event-stream"))
        .mount(&app.llm)
        .await;
    let streamed =
        crate::support::stream::post_stream(&app, &local_request("openai_compatible", "q")).await;
    let (name, error) = streamed.terminal();
    assert_eq!(name, "error", "{error}");
    assert_eq!(error["error"]["type"], "llm_bad_response");
    assert_eq!(error["error"]["retryable"], false);
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("without any content"), "{message}");
    assert!(!message.contains("truncated"), "{message}");
    assert!(error["context_report"]["used"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn a_stream_that_never_ends_a_line_is_cut_off_at_the_reply_cap() {
    let app = spawn_app().await;
    // One JSON line of 17 MiB with no line break, as a broken server might send.
    let endless = format!(
        "{{\"message\":{{\"role\":\"assistant\",\"content\":\"{}",
        "a".repeat(17 << 20)
    );
    wiremock::Mock::given(wiremock::matchers::path(OLLAMA_PATH))
        .respond_with(
            wiremock::ResponseTemplate::new(200).set_body_raw(endless, "application/x-ndjson"),
        )
        .mount(&app.llm)
        .await;
    let streamed = crate::support::stream::post_stream(&app, &local_request("ollama", "q")).await;
    let (name, error) = streamed.terminal();
    assert_eq!(name, "error");
    assert_eq!(error["error"]["type"], "llm_bad_response");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("larger than"));
}
