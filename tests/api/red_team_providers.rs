//! Red-team tests of the provider layer (issue 16): hostile upstreams in each wire format,
//! absurd numbers in refusals and counts, base URLs against the host-pattern allow-list, model
//! names that would send a key to a vendor the user did not mean, and `GET /api/providers`.
//!
//! A test that exposes a defect asserts the correct behaviour, so it fails until the defect is
//! fixed; the others show a defence holding against something the other suites do not try.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{json, Value};
use wiremock::matchers::path;
use wiremock::{Mock, Request, Respond, ResponseTemplate};

use crate::support::app::{spawn_app, spawn_app_answering, spawn_app_with, TestApp};
use crate::support::requests::{near_the_limit, request, KEY};
use crate::support::stream_upstream::{serve, Ending};
use crate::support::upstream::{anthropic_reply, mount, ANTHROPIC_PATH, COUNT_PATH, OPENAI_PATH};

/// Posts a step and returns its status and body, or why the server gave no answer at all (a
/// panic in a worker drops the connection).
async fn try_post(app: &TestApp, route: &str, body: &Value) -> Result<(u16, Value), String> {
    let response = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
        .post(format!("{}{route}", app.address))
        .json(body)
        .send()
        .await
        .map_err(|e| format!("no answer: {e:?}"))?;
    let status = response.status().as_u16();
    let text = response
        .text()
        .await
        .map_err(|e| format!("the answer broke off: {e:?}"))?;
    Ok((
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

async fn step(app: &TestApp, body: &Value) -> Result<(u16, Value), String> {
    try_post(app, "/api/agent/react_step", body).await
}

/// The data of the terminal event of a streamed step (`step` or `error`).
async fn stream_terminal(app: &TestApp, body: &Value) -> Result<(String, Value), String> {
    let (status, raw) = try_post(app, "/api/agent/react_step/stream", body).await?;
    let text = match raw {
        Value::String(s) => s,
        other => return Err(format!("HTTP {status}, not a stream: {other}")),
    };
    let mut decoder = reactstep::llm::sse::SseDecoder::default();
    let events = decoder.push(text.as_bytes()).map_err(|_| "not UTF-8")?;
    let last = events
        .into_iter()
        .rfind(|e| matches!(e.event.as_deref(), Some("step" | "error")))
        .ok_or_else(|| format!("the stream ended without a terminal event: {text}"))?;
    Ok((
        last.event.unwrap_or_default(),
        serde_json::from_str(&last.data).unwrap_or(Value::Null),
    ))
}

/// Paths the mock LLM was called at, in order.
async fn called_paths(app: &TestApp) -> Vec<String> {
    app.llm
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|r| r.url.path().to_string())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Absurd numbers from the provider: refusals (refit) and count_tokens (exact_count).
// ---------------------------------------------------------------------------------------------

/// Anthropic refusing every prompt as too long with the given wording.
async fn anthropic_refusing(app: &TestApp, message: &str) {
    Mock::given(path(ANTHROPIC_PATH))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({
            "type": "error",
            "error": {"type": "invalid_request_error", "message": message}
        })))
        .mount(&app.llm)
        .await;
}

#[tokio::test]
async fn a_refusal_naming_u64_max_prompt_tokens_is_a_422_not_a_crash() {
    // refit: (100 + margin) * reported overflows u64 for reported > u64::MAX / 140. With
    // overflow checks the connection is dropped without an answer; without them (release) the
    // product wraps: 131762457669353941 × 140 wraps to 124, a refit margin of 0 %, so the
    // prompt sent again is larger than the one just refused.
    for reported in [u64::MAX, u64::MAX / 100, 131_762_457_669_353_941] {
        let app = spawn_app().await;
        anthropic_refusing(
            &app,
            &format!("prompt is too long: {reported} tokens > 200000 maximum"),
        )
        .await;
        let outcome = step(&app, &request("claude-sonnet-4-5", "What does Login do?")).await;
        let (status, body) = outcome.unwrap_or_else(|e| panic!("{reported}: {e}"));
        assert_eq!(status, 422, "{reported}: {body}");
        assert_eq!(body["error"]["type"], "context_overflow", "{reported}");
        let calls = called_paths(&app).await;
        assert!(
            calls.len() <= 2,
            "{reported}: the key went out {} times",
            calls.len()
        );
    }
}

#[tokio::test]
async fn refusals_naming_zero_or_fewer_tokens_than_ours_are_answered_at_once() {
    for message in [
        "prompt is too long: 0 tokens > 200000 maximum",
        "prompt is too long: 1 tokens > 200000 maximum",
        "prompt is too long: -5000 tokens > 200000 maximum",
        "prompt is too long: 99999999999999999999999999 tokens > 200000 maximum",
        "prompt is too long: ,,,, tokens > 200000 maximum",
        "prompt is too long",
    ] {
        let app = spawn_app().await;
        anthropic_refusing(&app, message).await;
        let (status, body) = step(&app, &request("claude-sonnet-4-5", "q"))
            .await
            .unwrap_or_else(|e| panic!("{message}: {e}"));
        assert_eq!(status, 422, "{message}: {body}");
        assert_eq!(body["error"]["type"], "context_overflow", "{message}");
        assert_eq!(called_paths(&app).await.len(), 1, "{message}: no refit");
    }
}

#[tokio::test]
async fn a_refusal_with_a_huge_llama_cpp_field_is_a_422_not_a_crash() {
    let app = spawn_app_answering(
        crate::support::upstream::COMPATIBLE_PATH,
        400,
        json!({"error": {
            "code": 400,
            "message": "the request exceeds the available context size (2048 tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": u64::MAX, "n_ctx": 2048}}),
    )
    .await;
    let mut body = request("llama3.1:8b", "q");
    body["llm_config"]["provider"] = json!("openai_compatible");
    let (status, reply) = step(&app, &body).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status, 422, "{reply}");
    assert_eq!(reply["error"]["type"], "context_overflow");
    assert!(called_paths(&app).await.len() <= 2);
}

/// count_tokens answering the given raw bodies in turn (the last one repeated).
struct CountAnswers {
    answers: Vec<ResponseTemplate>,
    calls: AtomicUsize,
}

impl Respond for CountAnswers {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        self.answers[call.min(self.answers.len() - 1)].clone()
    }
}

async fn with_count_answers(app: &TestApp, answers: Vec<ResponseTemplate>) {
    Mock::given(path(COUNT_PATH))
        .respond_with(CountAnswers {
            answers,
            calls: AtomicUsize::new(0),
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
}

fn counted(n: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({ "input_tokens": n }))
}

#[tokio::test]
async fn a_count_of_u64_max_keeps_the_margin_and_does_not_crash() {
    // exact_count: (exact * 100) overflows u64 for exact > u64::MAX / 100.
    for n in [u64::MAX, u64::MAX / 99] {
        let app = spawn_app().await;
        with_count_answers(&app, vec![counted(json!(n))]).await;
        let (status, body) = step(&app, &near_the_limit())
            .await
            .unwrap_or_else(|e| panic!("count {n}: {e}"));
        assert_eq!(status, 200, "count {n}: {body}");
        assert_eq!(body["context_report"]["counter"], "approximation", "{n}");
        let counts = called_paths(&app)
            .await
            .iter()
            .filter(|p| *p == COUNT_PATH)
            .count();
        assert!(counts <= 2, "{n}: {counts} count calls");
    }
}

#[tokio::test]
async fn garbage_counts_keep_the_margin_and_never_make_a_third_count_call() {
    let garbage = [
        counted(json!(-1)),
        counted(json!(1.5)),
        counted(json!("2300")),
        counted(json!(null)),
        ResponseTemplate::new(200).set_body_string("input_tokens: 2300"),
        ResponseTemplate::new(200).set_body_json(json!({"tokens": 2300})),
        ResponseTemplate::new(200).set_body_raw(
            r#"{"input_tokens":18446744073709551616}"#,
            "application/json",
        ),
    ];
    for answer in garbage {
        let app = spawn_app().await;
        with_count_answers(&app, vec![answer]).await;
        let (status, body) = step(&app, &near_the_limit())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["context_report"]["counter"], "approximation");
        assert!(body["warnings"].to_string().contains("could not count"));
        let paths = called_paths(&app).await;
        assert_eq!(paths, [COUNT_PATH, ANTHROPIC_PATH], "{body}");
    }
    // Counts over the budget every time: two count calls, never a third.
    let app = spawn_app().await;
    with_count_answers(&app, vec![counted(json!(3_400))]).await;
    let (status, body) = step(&app, &near_the_limit()).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["context_report"]["counter"], "approximation");
    let paths = called_paths(&app).await;
    assert_eq!(paths, [COUNT_PATH, COUNT_PATH, ANTHROPIC_PATH]);
}

#[tokio::test]
async fn a_count_far_over_the_budget_keeps_the_margin_instead_of_failing_the_step() {
    // The prompt fitted with the margin fits (the dry run says so); a count ten or a million
    // times ours scales the margin so far that the mandatory parts no longer fit, and
    // exact_count's `?` turns that into the step's error instead of keeping the margin.
    for n in [30_000_u64, 1_000_000_000_000] {
        let app = spawn_app().await;
        let mut dry = near_the_limit();
        dry["dry_run"] = json!(true);
        let (status, _) = step(&app, &dry).await.unwrap();
        assert_eq!(status, 200);
        with_count_answers(&app, vec![counted(json!(n))]).await;
        let (status, body) = step(&app, &near_the_limit()).await.unwrap();
        assert_eq!(status, 200, "count {n}: {body}");
        assert_eq!(body["context_report"]["counter"], "approximation", "{n}");
        assert!(
            called_paths(&app)
                .await
                .contains(&ANTHROPIC_PATH.to_string()),
            "{n}: the prompt with the margin was never sent"
        );
    }
}

#[tokio::test]
async fn a_count_of_zero_is_not_reported_as_the_prompts_size() {
    // A non-empty prompt is never 0 tokens: taking that figure as exact reports `used: 0` and
    // sends the prompt fitted without the margin on the strength of it.
    let app = spawn_app().await;
    with_count_answers(&app, vec![counted(json!(0))]).await;
    let (status, body) = step(&app, &near_the_limit()).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        body["context_report"]["used"].as_u64().unwrap() > 0,
        "report: {}",
        body["context_report"]
    );
}

#[tokio::test]
async fn a_slow_count_endpoint_cannot_push_the_step_past_its_deadline() {
    let app = spawn_app_with(|c| {
        c.step_timeout_secs = 3;
        c.llm_timeout_secs = 30;
    })
    .await;
    // A count endpoint that does not answer within the test at all: a step that waited for it
    // would never be answered, whatever the machine's speed.
    with_count_answers(
        &app,
        vec![counted(json!(2_300)).set_delay(Duration::from_secs(3600))],
    )
    .await;
    let answered = tokio::time::timeout(Duration::from_secs(60), step(&app, &near_the_limit()))
        .await
        .expect("the step is answered although the count endpoint never is");
    let (status, body) = answered.unwrap();
    // Either the margin was kept after the count ran out of time, or the step's deadline.
    assert!(status == 200 || status == 504, "HTTP {status}: {body}");
}

// ---------------------------------------------------------------------------------------------
// Hostile streams.
// ---------------------------------------------------------------------------------------------

fn sse(data: &Value) -> String {
    format!("data: {data}\n\n")
}

fn openai_chunk(delta: Value) -> Value {
    json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
           "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
}

/// An upstream on loopback for the `openai` provider that streams `pieces`.
async fn openai_streaming(pieces: Vec<Vec<u8>>) -> TestApp {
    let uri = serve(200, pieces, Ending::Complete).await.uri;
    spawn_app_with(move |c| c.openai_base_url = format!("{uri}/v1")).await
}

#[tokio::test]
async fn a_tool_call_index_of_u64_max_followed_by_one_without_an_index_does_not_crash() {
    let stream = [
        sse(&openai_chunk(json!({"tool_calls": [
            {"index": u64::MAX, "id": "a", "type": "function",
             "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}}]}))),
        sse(&openai_chunk(json!({"tool_calls": [
            {"id": "b", "type": "function",
             "function": {"name": "read_file", "arguments": "{\"path\":\"b\"}"}}]}))),
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n".to_string(),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    let app = openai_streaming(vec![stream.into_bytes()]).await;
    let mut body = request("gpt-4o", "Read a.");
    body["tools"] = json!([{"name": "read_file", "description": "Reads a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]);
    body["llm_config"]["tool_mode"] = json!("native");
    let (name, data) = stream_terminal(&app, &body)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Today the decoder's `last + 1` overflows: the step task panics and the client gets
    // internal_error (the whole worker, on a route that does not run the step in a task).
    assert!(
        name == "step" || data["error"]["type"] == "llm_bad_response",
        "{name}: {data}"
    );
}

#[tokio::test]
async fn text_after_done_in_the_same_read_is_not_part_of_the_answer() {
    // OpenAI: `[DONE]` then more chunks, all in one network read.
    let stream = [
        sse(&openai_chunk(
            json!({"content": "Thought: t\nFinal Answer: ok"}),
        )),
        "data: [DONE]\n\n".to_string(),
        sse(&openai_chunk(json!({"content": " INJECTED-AFTER-DONE"}))),
    ]
    .concat();
    let app = openai_streaming(vec![stream.into_bytes()]).await;
    let (name, data) = stream_terminal(&app, &request("gpt-4o", "q"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(name, "step", "{data}");
    assert_eq!(data["direct_response"], "ok", "{data}");
}

#[tokio::test]
async fn ollama_text_after_done_true_in_the_same_read_is_not_part_of_the_answer() {
    let lines = [
        json!({"model": "m", "message": {"role": "assistant", "content": "Thought: t\nFinal Answer: ok"}, "done": false}),
        json!({"model": "m", "message": {"role": "assistant", "content": ""}, "done": true,
               "done_reason": "stop", "prompt_eval_count": 10, "eval_count": 5}),
        json!({"model": "m", "message": {"role": "assistant", "content": " INJECTED-AFTER-DONE"}, "done": false}),
    ]
    .iter()
    .map(|l| format!("{l}\n"))
    .collect::<String>();
    let uri = serve(200, vec![lines.into_bytes()], Ending::Complete)
        .await
        .uri;
    let app = spawn_app_with(move |c| c.ollama_base_url = uri).await;
    let mut body = request("llama3.1:8b", "q");
    body["llm_config"]["provider"] = json!("ollama");
    let (name, data) = stream_terminal(&app, &body)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(name, "step", "{data}");
    assert_eq!(data["direct_response"], "ok", "{data}");
}

#[tokio::test]
async fn ollama_lines_split_mid_character_and_error_lines_with_the_key() {
    // A line split inside a multi-byte character decodes whole.
    let text = "Thought: t\nFinal Answer: h\u{e9}llo \u{1F600}";
    let first = format!(
        "{}\n",
        json!({"model": "m", "message": {"role": "assistant", "content": text}, "done": false})
    );
    let last = format!(
        "{}\n",
        json!({"model": "m", "message": {"role": "assistant", "content": ""}, "done": true, "done_reason": "stop"})
    );
    let bytes = [first, last].concat().into_bytes();
    let emoji = bytes
        .windows(4)
        .position(|w| w == "\u{1F600}".as_bytes())
        .unwrap();
    let pieces =
        crate::support::stream_upstream::cut_at(&bytes, &[emoji + 1, emoji + 2, emoji + 3]);
    let uri = serve(200, pieces, Ending::Complete).await.uri;
    let app = spawn_app_with(move |c| c.ollama_base_url = uri).await;
    let mut body = request("llama3.1:8b", "q");
    body["llm_config"]["provider"] = json!("ollama");
    let (name, data) = stream_terminal(&app, &body).await.unwrap();
    assert_eq!(name, "step", "{data}");
    assert_eq!(data["direct_response"], "h\u{e9}llo \u{1F600}");

    // An error line that echoes the key: a 502-class error, the key scrubbed.
    let lines = format!(
        "{}\n{}\n",
        json!({"model": "m", "message": {"role": "assistant", "content": "Thought: "}, "done": false}),
        json!({"error": format!("unauthorized: Bearer {KEY}")})
    );
    let uri = serve(200, vec![lines.into_bytes()], Ending::Complete)
        .await
        .uri;
    let app = spawn_app_with(move |c| c.ollama_base_url = uri).await;
    let (status, raw) = try_post(&app, "/api/agent/react_step/stream", &body)
        .await
        .unwrap();
    assert_eq!(status, 200);
    let raw = raw.as_str().unwrap_or_default().to_string();
    assert!(!raw.contains("SECRET-key"), "{raw}");
    assert!(raw.contains("event: error"), "{raw}");

    // Not UTF-8 inside a line: a bad response, not a panic.
    let uri = serve(
        200,
        vec![b"{\"message\":{\"content\":\"\xff\xfe\"},\"done\":false}\n".to_vec()],
        Ending::Complete,
    )
    .await
    .uri;
    let app = spawn_app_with(move |c| c.ollama_base_url = uri).await;
    let (name, data) = stream_terminal(&app, &body).await.unwrap();
    assert_eq!(name, "error");
    assert_eq!(data["error"]["type"], "llm_bad_response", "{data}");
}

/// A stream that never ends a line, `total` bytes in pieces of `piece` bytes, against Ollama
/// (JSON lines) or OpenAI (SSE); the stream's last event.
async fn endless_line(ollama: bool, total: usize, piece: usize) -> (String, Value) {
    let head = if ollama {
        b"{\"message\":{\"role\":\"assistant\",\"content\":\"".to_vec()
    } else {
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"".to_vec()
    };
    let mut bytes = head;
    bytes.resize(total, b'a');
    let pieces: Vec<Vec<u8>> = bytes.chunks(piece).map(<[u8]>::to_vec).collect();
    let uri = serve(200, pieces, Ending::Complete).await.uri;
    let app = spawn_app_with(move |c| {
        if ollama {
            c.ollama_base_url = uri;
        } else {
            c.openai_base_url = format!("{uri}/v1");
        }
        c.llm_timeout_secs = 300;
        c.step_timeout_secs = 300;
    })
    .await;
    let mut body = request(if ollama { "llama3.1:8b" } else { "gpt-4o" }, "q");
    if ollama {
        body["llm_config"]["provider"] = json!("ollama");
    }
    stream_terminal(&app, &body)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_line_that_never_ends_in_small_reads_is_refused_at_the_cap() {
    // Each read used to re-scan everything buffered since the last line break (quadratic in
    // the line's length): the framers now search only the new bytes. How long it takes is the
    // benchmarks' business, not a test's; what a test can hold is that the line is refused.
    for ollama in [true, false] {
        let (name, data) = endless_line(ollama, 2 << 20, 1024).await;
        assert_eq!(name, "error", "{data}");
        assert_eq!(data["error"]["type"], "llm_bad_response");
    }
}

// ---------------------------------------------------------------------------------------------
// Inference: a model name must not send the user's key to a vendor they did not name.
// ---------------------------------------------------------------------------------------------

/// A step for `model` with a key and no `provider`: where, if anywhere, the key went.
async fn inferred(app: &TestApp, model: &str) -> (u16, Value, Vec<String>) {
    app.llm.reset().await;
    let mut body = request(model, "q");
    body["dry_run"] = json!(false);
    let (status, reply) = step(app, &body).await.unwrap();
    let reached: Vec<String> = app
        .llm
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| {
            r.headers
                .values()
                .any(|v| v.to_str().is_ok_and(|v| v.contains(KEY)))
        })
        .map(|r| r.url.path().to_string())
        .collect();
    (status, reply, reached)
}

#[tokio::test]
async fn local_and_hugging_face_model_names_are_not_inferred_as_a_hosted_vendor() {
    // Before the provider layer these names were a 400 ("provider is required"); now each
    // sends the key to a hosted vendor: an Ollama tag (`name:size`) is never a hosted API's
    // model, `deepseek-ai/` is the Hugging Face organisation (Together, Fireworks, vLLM) that
    // matches the `deepseek-` prefix, and `Qwen/…` is the project's own vLLM test model.
    let app = spawn_app().await;
    let mut wrong = Vec::new();
    for model in [
        "deepseek-r1:8b",
        "deepseek-coder-v2:16b",
        "mistral-nemo:12b",
        "mistral-small:24b",
        "deepseek-ai/DeepSeek-V3",
        "Qwen/Qwen2.5-Coder-7B-Instruct",
        "mistralai/Mistral-7B-Instruct-v0.3",
    ] {
        let (status, reply, reached) = inferred(&app, model).await;
        let refused =
            status == 400 && reply["error"]["fields"][0]["field"] == "llm_config.provider";
        if !reached.is_empty() || !refused {
            wrong.push(format!("{model} -> key sent to {reached:?}, HTTP {status}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[tokio::test]
async fn groq_model_ids_without_a_provider_do_not_send_the_groq_key_to_openrouter() {
    // Groq serves these exact ids (the README says no prefix is Groq's alone), and so do other
    // routers; inferring OpenRouter hands a Groq (or Together, …) key to openrouter.ai.
    let app = spawn_app().await;
    let mut wrong = Vec::new();
    for model in [
        "openai/gpt-oss-120b",
        "meta-llama/llama-4-scout-17b-16e-instruct",
        "qwen/qwen3-32b",
        "moonshotai/kimi-k2-instruct",
    ] {
        let (status, _, reached) = inferred(&app, model).await;
        if !reached.is_empty() {
            wrong.push(format!("{model} -> key sent to {reached:?}, HTTP {status}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[tokio::test]
async fn inference_holds_for_the_names_the_readme_lists() {
    let app = spawn_app().await;
    let body = |m: &str| {
        let mut b = request(m, "q");
        b["dry_run"] = json!(true);
        b
    };
    for (model, counter) in [
        ("GPT-4O", "o200k_base"),
        ("Claude-Sonnet-4-5", "approximation"),
        ("o1ama-local", "o200k_base"),
    ] {
        let (status, reply) = step(&app, &body(model)).await.unwrap();
        assert_eq!(status, 200, "{model}: {reply}");
        assert_eq!(reply["context_report"]["counter"], counter, "{model}");
    }
    // No name at all, or only a prefix's vendor part: a 400, never a guess.
    for model in ["", " ", "openrouter", "/", "anthropic"] {
        let (status, _) = step(&app, &body(model)).await.unwrap();
        assert_eq!(status, 400, "{model:?}");
    }
    assert!(app.llm.received_requests().await.unwrap().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Base URLs against the host-pattern allow-list.
// ---------------------------------------------------------------------------------------------

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
        let (status, reply) = step(&app, &body).await.unwrap();
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
        let (status, reply) = step(&app, &body).await.unwrap();
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
        let _ = step(&app, &body).await.unwrap();
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

// ---------------------------------------------------------------------------------------------
// GET /api/providers.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_provider_list_shows_only_hosts_and_honours_the_token() {
    let app = spawn_app_with(|c| {
        c.openai_base_url =
            "https://proxyuser:proxy-PASSWORD-123@gateway.internal:8443/t/SECRET-PATH-TOKEN/v1"
                .into();
        c.base_urls.insert(
            "groq".into(),
            "https://gw.internal/v1?api_key=SECRET-QUERY-KEY#frag".into(),
        );
        c.read_provider_variables(|name| match name {
            "REACTSTEP_OPENROUTER_REFERER" => Some("https://SECRET-REFERER.example".into()),
            "REACTSTEP_OPENROUTER_TITLE" => Some("SECRET-TITLE".into()),
            _ => None,
        });
        c.api_tokens = Some("operator-token-0123456789".parse().unwrap());
    })
    .await;
    let get = |auth: Option<&str>, path: &str| {
        let mut r = reqwest::Client::new().get(format!("{}{path}", app.address));
        if let Some(a) = auth {
            r = r.header("authorization", a);
        }
        r.send()
    };
    for auth in [
        None,
        Some("Bearer operator-token-012345678"),
        Some("Bearer operator-token-01234567890"),
        Some("Basic b3BlcmF0b3ItdG9rZW4tMDEyMzQ1Njc4OQ=="),
        Some("operator-token-0123456789"),
        Some("Bearer "),
    ] {
        let reply = get(auth, "/api/providers").await.unwrap();
        assert_eq!(reply.status(), 401, "{auth:?}");
    }
    let reply = get(None, "/api/providers?token=operator-token-0123456789")
        .await
        .unwrap();
    assert_eq!(reply.status(), 401);
    let reply = get(Some("Bearer operator-token-0123456789"), "/api/providers")
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let text = reply.text().await.unwrap();
    for secret in [
        "proxyuser",
        "PASSWORD",
        "SECRET",
        "8443",
        "/t/",
        "api_key",
        "frag",
    ] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    let body: Value = serde_json::from_str(&text).unwrap();
    crate::support::spec::assert_conforms("get", "/api/providers", 200, &body);
    let host = |name: &str| {
        body["providers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()["base_url_host"]
            .clone()
    };
    assert_eq!(host("openai"), "gateway.internal");
    assert_eq!(host("groq"), "gw.internal");
}

// ---------------------------------------------------------------------------------------------
// The key in the new error paths; Anthropic's stream.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_count_or_refusal_that_echoes_the_key_never_shows_it() {
    let echo =
        format!("invalid x-api-key: {KEY} (prompt is too long: 300 tokens > 200000 maximum)");
    // count_tokens echoing the key: its error becomes a warning.
    let app = spawn_app().await;
    with_count_answers(
        &app,
        vec![
            ResponseTemplate::new(400).set_body_json(json!({"type": "error",
            "error": {"type": "invalid_request_error", "message": echo}})),
        ],
    )
    .await;
    let (status, body) = step(&app, &near_the_limit()).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(!body.to_string().contains("SECRET-key"), "{body}");
    assert!(body["warnings"].to_string().contains("could not count"));
    // A refusal as too long echoing the key: refitted once, then a 422 without it.
    let app = spawn_app().await;
    anthropic_refusing(&app, &echo).await;
    let (status, body) = step(&app, &request("claude-sonnet-4-5", "q"))
        .await
        .unwrap();
    assert_eq!(status, 422, "{body}");
    assert!(!body.to_string().contains("SECRET-key"), "{body}");
    assert_eq!(
        called_paths(&app).await.len(),
        2,
        "the key went out once more, not more"
    );
}

/// An upstream on loopback for the `anthropic` provider that streams `events` (type, data).
async fn anthropic_streaming(events: &[Value]) -> TestApp {
    let stream: String = events
        .iter()
        .map(|e| {
            format!(
                "event: {}\ndata: {e}\n\n",
                e["type"].as_str().unwrap_or("x")
            )
        })
        .collect();
    let uri = serve(200, vec![stream.into_bytes()], Ending::Complete)
        .await
        .uri;
    spawn_app_with(move |c| c.anthropic_base_url = uri).await
}

fn text_delta(text: &str) -> Value {
    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})
}

#[tokio::test]
async fn anthropic_streams_of_odd_shapes() {
    let start = json!({"type": "message_start", "message": {"id": "m", "type": "message",
        "role": "assistant", "content": [], "model": "claude",
        "usage": {"input_tokens": 10, "output_tokens": 1}}});
    let stop = json!({"type": "message_stop"});
    let body = request("claude-sonnet-4-5", "q");

    // Unknown event types and block types are skipped; no message_start means no usage: the
    // service counts it and says so.
    let app = anthropic_streaming(&[
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "server_tool_use", "id": "x", "name": "web"}}),
        json!({"type": "brand_new_event", "payload": [1, 2, 3]}),
        text_delta("Thought: t\nFinal Answer: ok"),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": {}}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
        stop.clone(),
    ])
    .await;
    let (name, data) = stream_terminal(&app, &body).await.unwrap();
    assert_eq!(name, "step", "{data}");
    assert_eq!(data["direct_response"], "ok");
    assert_eq!(data["usage"]["approximate"], true, "{data}");

    // No message_stop: truncated, never a silently partial answer.
    let app = anthropic_streaming(&[
        start.clone(),
        text_delta("Thought: t\nFinal Answer: partial"),
    ])
    .await;
    let (name, data) = stream_terminal(&app, &body).await.unwrap();
    assert_eq!(name, "error", "{data}");
    assert_eq!(data["error"]["type"], "llm_bad_response");

    // An error event mid-stream, the key in it.
    let app = anthropic_streaming(&[
        start.clone(),
        text_delta("Thought: "),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": format!("Overloaded for {KEY}")}}),
    ])
    .await;
    let (name, data) = stream_terminal(&app, &body).await.unwrap();
    assert_eq!(name, "error", "{data}");
    assert!(!data.to_string().contains("SECRET-key"), "{data}");

    // Usage of u64::MAX on message_start with cache reads: the sum must not overflow.
    let app = anthropic_streaming(&[
        json!({"type": "message_start", "message": {"usage": {"input_tokens": u64::MAX,
            "cache_read_input_tokens": 1, "output_tokens": 1}}}),
        text_delta("Thought: t\nFinal Answer: ok"),
        stop,
    ])
    .await;
    let (name, data) = stream_terminal(&app, &body).await.unwrap();
    assert_ne!(data["error"]["type"], "internal_error", "{name}: {data}");
}

#[tokio::test]
async fn a_count_endpoint_that_redirects_is_not_followed() {
    let target = wiremock::MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"input_tokens": 2300})))
        .mount(&target)
        .await;
    let app = spawn_app().await;
    with_count_answers(
        &app,
        vec![ResponseTemplate::new(307)
            .insert_header("location", format!("{}{COUNT_PATH}", target.uri()).as_str())],
    )
    .await;
    let (status, body) = step(&app, &near_the_limit()).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["context_report"]["counter"], "approximation");
    assert!(target.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn one_hostile_refusal_does_not_drop_the_other_steps_in_flight() {
    // The refit overflow above panics (in a build with overflow checks); the panic stays in the
    // hostile request's connection task: a step in flight on the same worker is answered.
    let app = spawn_app().await;
    Mock::given(path(OPENAI_PATH))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(crate::support::upstream::openai_reply(
                    "Thought: t\nFinal Answer: slow",
                ))
                .set_delay(Duration::from_secs(2)),
        )
        .mount(&app.llm)
        .await;
    anthropic_refusing(
        &app,
        &format!("prompt is too long: {} tokens > 200000 maximum", u64::MAX),
    )
    .await;
    let innocent = request("gpt-4o", "q");
    let hostile = request("claude-sonnet-4-5", "q");
    let (innocent, _) = tokio::join!(step(&app, &innocent), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        step(&app, &hostile).await
    });
    let (status, body) = innocent.unwrap_or_else(|e| panic!("the innocent step: {e}"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["direct_response"], "slow");
}
