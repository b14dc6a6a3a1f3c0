//! Fallbacks inside one step (issue 33, part 3): `llm_config.fallbacks` names the models tried in
//! turn when the one before fails in a way another model can fix, each with its own key from
//! `user_api_keys.providerKeys`. Every provider answers at its own path of one mock, so what
//! each host received (and which key) is read from the mock; every answer is checked against
//! openapi.yaml (`model_used`, `fallback_attempts`, `usage`).

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wiremock::{Mock, ResponseTemplate};

use crate::support::app::{spawn_app, spawn_app_answering, spawn_app_with, TestApp};
use crate::support::gemini_upstream::GEMINI_PATH;
use crate::support::requests::{native_reasoning, request};
use crate::support::stream::post_stream;
use crate::support::stream_upstream::{openai_stream, serve, Ending};
use crate::support::upstream::{anthropic_reply, mount, openai_reply, ANTHROPIC_PATH, OPENAI_PATH};

const OPENAI_KEY: &str = "sk-proj-Qz7Xv3Lm9Wd2Kf8Hn4Tr6Yb1Pc5Gj0Ae3Ui7Oy";
const ANTHROPIC_KEY: &str = "sk-ant-api03-Hq2Wk8Zp4Lm7Rt1Yv6Nb3Xc9Df5Gs0Ja";
const GEMINI_KEY: &str = "AIzaSyQ7Xv3Lm9Wd2Kf8Hn4Tr6Yb1Pc5Gj0Ae3";
const KEYS: [&str; 3] = [OPENAI_KEY, ANTHROPIC_KEY, GEMINI_KEY];

const CLAUDE: &str = "claude-sonnet-4-5";
const GEMINI: &str = "gemini-2.5-flash";

/// A step for gpt-4o with its key, then `fallbacks`, their keys in `providerKeys`.
fn chained(fallbacks: Value, provider_keys: Value) -> Value {
    let mut body = request("gpt-4o", "Where is login handled?");
    body["llm_config"]["fallbacks"] = fallbacks;
    body["user_api_keys"] = json!({"llmKey": OPENAI_KEY, "providerKeys": provider_keys});
    body
}

fn claude() -> Value {
    json!({"provider": "anthropic", "modelName": CLAUDE, "tokenLimit": 200000})
}

fn gemini() -> Value {
    json!({"provider": "gemini", "modelName": GEMINI, "tokenLimit": 1000000})
}

fn all_keys() -> Value {
    json!({"anthropic": ANTHROPIC_KEY, "gemini": GEMINI_KEY})
}

fn rate_limited() -> Value {
    json!({"error": {"message": "Rate limit reached for gpt-4o on requests per min (RPM)",
        "type": "requests", "param": null, "code": "rate_limit_exceeded"}})
}

/// The requests each path of the mock received.
async fn received(app: &TestApp, at: &str) -> Vec<wiremock::Request> {
    let all = app.llm.received_requests().await.unwrap_or_default();
    all.into_iter().filter(|r| r.url.path() == at).collect()
}

/// Whether `key` is anywhere in the request: a header or the body.
fn carries(request: &wiremock::Request, key: &str) -> bool {
    let in_headers = request
        .headers
        .values()
        .any(|v| String::from_utf8_lossy(v.as_bytes()).contains(key));
    in_headers || String::from_utf8_lossy(&request.body).contains(key)
}

fn header<'a>(request: &'a wiremock::Request, name: &str) -> &'a str {
    request
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

fn assert_no_key(text: &str) {
    for key in KEYS {
        assert!(!text.contains(key), "a key in {text}");
    }
}

#[tokio::test]
async fn a_rate_limited_provider_falls_back_to_another_with_its_own_key_only() {
    let app = spawn_app().await;
    mount(&app.llm, OPENAI_PATH, 429, rate_limited()).await;
    let answer = anthropic_reply("Thought: The router names it.\nFinal Answer: In auth.js.");
    mount(&app.llm, ANTHROPIC_PATH, 200, answer).await;

    let reply = app
        .post_react_step(&chained(json!([claude()]), all_keys()))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["direct_response"], "In auth.js.");
    assert_eq!(
        reply.body["model_used"],
        json!({"provider": "anthropic", "modelName": CLAUDE})
    );
    let attempts = reply.body["fallback_attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0]["provider"], "openai");
    assert_eq!(attempts[0]["modelName"], "gpt-4o");
    assert_eq!(attempts[0]["error_type"], "llm_rate_limited");
    assert!(attempts[0]["message"]
        .as_str()
        .unwrap()
        .contains("Rate limit reached"));
    assert!(reply.body["warnings"]
        .to_string()
        .contains("1 model(s) of the chain failed before the one that answered"));
    // No 429 was billed: the step's usage is Claude's alone.
    assert_eq!(
        reply.body["usage"],
        json!({"prompt_tokens": 388, "completion_tokens": 29})
    );
    assert_no_key(&reply.text);

    // The first provider was retried as usual (the first try and 3 retries), with its key only.
    let openai = received(&app, OPENAI_PATH).await;
    assert_eq!(openai.len(), 4);
    for request in &openai {
        assert_eq!(
            header(request, "authorization"),
            format!("Bearer {OPENAI_KEY}")
        );
        assert!(!carries(request, ANTHROPIC_KEY) && !carries(request, GEMINI_KEY));
    }
    let anthropic = received(&app, ANTHROPIC_PATH).await;
    assert_eq!(anthropic.len(), 1);
    assert_eq!(header(&anthropic[0], "x-api-key"), ANTHROPIC_KEY);
    assert!(!carries(&anthropic[0], OPENAI_KEY) && !carries(&anthropic[0], GEMINI_KEY));
    assert!(anthropic[0].headers.get("authorization").is_none());
}

#[tokio::test]
async fn a_prompt_over_the_first_budget_goes_to_the_next_bigger_model_unsent() {
    let app = spawn_app().await;
    mount(
        &app.llm,
        ANTHROPIC_PATH,
        200,
        anthropic_reply("Final Answer: auth.js"),
    )
    .await;
    // gpt-4o's budget (150 - 100) cannot hold the instructions; Gemini's (120 - 100) is
    // smaller still and is skipped; Claude's holds it.
    let mut body = chained(
        json!([
            {"provider": "gemini", "modelName": GEMINI, "tokenLimit": 120},
            claude()
        ]),
        all_keys(),
    );
    body["llm_config"]["tokenLimit"] = json!(150);
    body["llm_config"]["reservedOutputTokens"] = json!(100);

    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["model_used"]["provider"], "anthropic");
    let attempts = reply.body["fallback_attempts"].as_array().unwrap();
    assert_eq!(
        attempts.len(),
        1,
        "the smaller Gemini was not tried: {attempts:?}"
    );
    assert_eq!(attempts[0]["modelName"], "gpt-4o");
    assert_eq!(attempts[0]["error_type"], "context_overflow");
    assert!(attempts[0].get("usage").is_none(), "nothing was billed");
    // Claude's own budget: the prompt was fitted anew for it.
    assert_eq!(reply.body["context_report"]["budget"], 200000 - 100);
    assert!(received(&app, OPENAI_PATH).await.is_empty());
    assert!(received(&app, GEMINI_PATH).await.is_empty());
}

#[tokio::test]
async fn a_providers_context_length_refusal_goes_to_a_bigger_window() {
    let app = spawn_app().await;
    let too_long = json!({"error": {"message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}});
    mount(&app.llm, OPENAI_PATH, 400, too_long).await;
    mount(
        &app.llm,
        GEMINI_PATH,
        200,
        openai_reply("Final Answer: auth.js"),
    )
    .await;

    let reply = app
        .post_react_step(&chained(json!([gemini()]), all_keys()))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.body["model_used"],
        json!({"provider": "gemini", "modelName": GEMINI})
    );
    assert_eq!(
        reply.body["fallback_attempts"][0]["error_type"],
        "context_overflow"
    );
    assert_eq!(
        received(&app, OPENAI_PATH).await.len(),
        1,
        "a 400 is not retried"
    );
    let gemini = received(&app, GEMINI_PATH).await;
    assert_eq!(
        header(&gemini[0], "authorization"),
        format!("Bearer {GEMINI_KEY}")
    );
    assert!(!carries(&gemini[0], OPENAI_KEY));
}

#[tokio::test]
async fn a_rejected_key_or_request_does_not_fall_back() {
    let app = spawn_app().await;
    let bad_key = json!({"error": {"message": "Incorrect API key provided.",
        "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}});
    mount(&app.llm, OPENAI_PATH, 401, bad_key).await;
    mount(
        &app.llm,
        ANTHROPIC_PATH,
        200,
        anthropic_reply("Final Answer: no"),
    )
    .await;

    let reply = app
        .post_react_step(&chained(json!([claude()]), all_keys()))
        .await;
    assert_eq!(reply.status, 401, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "llm_auth");
    assert!(reply.body.get("model_used").is_none());
    // The chain is reported: the one model tried, its error the step's.
    assert_eq!(
        reply.body["fallback_attempts"],
        json!([{"provider": "openai", "modelName": "gpt-4o", "error_type": "llm_auth",
            "message": reply.body["error"]["message"]}])
    );
    assert!(received(&app, ANTHROPIC_PATH).await.is_empty());

    // A request the provider refuses as formed is no model's to fix either.
    let app = spawn_app().await;
    let invalid = json!({"error": {"message": "Invalid value for 'stop'.",
        "type": "invalid_request_error", "param": "stop", "code": null}});
    mount(&app.llm, OPENAI_PATH, 400, invalid).await;
    mount(
        &app.llm,
        ANTHROPIC_PATH,
        200,
        anthropic_reply("Final Answer: no"),
    )
    .await;
    let reply = app
        .post_react_step(&chained(json!([claude()]), all_keys()))
        .await;
    assert_eq!(reply.body["error"]["type"], "llm_request_rejected");
    assert!(received(&app, ANTHROPIC_PATH).await.is_empty());
}

/// A fallback is sent its provider's own key: when that key is refused, the error names its
/// slot, not `llmKey`, which the first model used and which may be fine.
#[tokio::test]
async fn a_fallbacks_refused_key_is_named_by_its_own_slot() {
    let app = spawn_app().await;
    mount(&app.llm, OPENAI_PATH, 429, rate_limited()).await;
    let bad_key = json!({"type": "error", "error": {"type": "authentication_error",
        "message": "invalid x-api-key"}});
    mount(&app.llm, ANTHROPIC_PATH, 401, bad_key).await;

    let reply = app
        .post_react_step(&chained(json!([claude()]), all_keys()))
        .await;
    assert_eq!(reply.status, 401, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "llm_auth");
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(
        message.ends_with("check user_api_keys.providerKeys.anthropic"),
        "{message}"
    );
    let attempts = &reply.body["fallback_attempts"];
    assert_eq!(attempts[1]["message"], message);
    assert_eq!(attempts[0]["error_type"], "llm_rate_limited");

    // The first model's refused key is `llmKey`'s.
    let app = spawn_app().await;
    mount(&app.llm, OPENAI_PATH, 401, bad_key_openai()).await;
    let reply = app
        .post_react_step(&chained(json!([claude()]), all_keys()))
        .await;
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(message.ends_with("check user_api_keys.llmKey"), "{message}");
}

fn bad_key_openai() -> Value {
    json!({"error": {"message": "Incorrect API key provided.",
        "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}})
}

/// A price for each model of the chain, in dollars per million tokens.
const PRICES: &str = r#"{
    "gpt-4o": {"input": 2.5, "cached_input": 1.25, "output": 10},
    "gemini-2.5-flash": {"input": 0.3, "cached_input": 0.075, "output": 2.5},
    "claude-sonnet-4-5": {"input": 3, "cached_input": 0.3, "cache_write": 3.75, "output": 15}
}"#;

#[tokio::test]
async fn a_chain_of_three_sums_what_every_model_billed_at_its_own_price() {
    let dir = tempfile::tempdir().unwrap();
    let prices = dir.path().join("prices.json");
    std::fs::write(&prices, PRICES).unwrap();
    let app = spawn_app_with(|c| c.prices_file = Some(prices)).await;
    let down = json!({"error": {"message": "The server had an error", "type": "server_error"}});
    mount(&app.llm, OPENAI_PATH, 503, down).await;
    // Gemini's filter stops the output: billed, and no answer while a model is left.
    let mut filtered = openai_reply("");
    filtered["choices"][0]["finish_reason"] = json!("content_filter");
    mount(&app.llm, GEMINI_PATH, 200, filtered).await;
    let answer = anthropic_reply("Thought: Found it.\nFinal Answer: In auth.js.");
    mount(&app.llm, ANTHROPIC_PATH, 200, answer).await;

    let reply = app
        .post_react_step(&chained(json!([gemini(), claude()]), all_keys()))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["model_used"]["modelName"], CLAUDE);
    let attempts = &reply.body["fallback_attempts"];
    assert_eq!(attempts[0]["error_type"], "llm_unavailable");
    assert!(attempts[0].get("usage").is_none());
    assert_eq!(attempts[1]["modelName"], GEMINI);
    assert_eq!(attempts[1]["error_type"], "llm_bad_response");
    assert!(attempts[1]["message"]
        .as_str()
        .unwrap()
        .contains("refused to answer (finish reason: content_filter)"));
    // 412 × 0.3 + 37 × 2.5 = 216.1 per million tokens.
    assert_eq!(
        attempts[1]["usage"],
        json!({"prompt_tokens": 412, "completion_tokens": 37, "cost_usd": 0.0002161})
    );
    // Gemini's and Claude's calls (388 × 3 + 29 × 15 = 1,599 per million), each at its price.
    assert_eq!(
        reply.body["usage"],
        json!({"prompt_tokens": 412 + 388, "completion_tokens": 37 + 29, "cost_usd": 0.0018151})
    );
    assert_eq!(received(&app, OPENAI_PATH).await.len(), 4);
    assert_eq!(
        received(&app, GEMINI_PATH).await.len(),
        1,
        "a refusal is not retried"
    );
}

#[tokio::test]
async fn when_every_model_fails_the_last_error_comes_with_every_attempt() {
    let app = spawn_app().await;
    mount(&app.llm, OPENAI_PATH, 429, rate_limited()).await;
    let overloaded = json!({"type": "error", "error": {"type": "overloaded_error",
        "message": format!("Overloaded ({OPENAI_KEY} never reached us)")}});
    mount(&app.llm, ANTHROPIC_PATH, 529, overloaded).await;

    let reply = app
        .post_react_step(&chained(json!([claude()]), all_keys()))
        .await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "llm_unavailable");
    let attempts = reply.body["fallback_attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["error_type"], "llm_rate_limited");
    assert_eq!(attempts[1]["provider"], "anthropic");
    assert_eq!(attempts[1]["message"], reply.body["error"]["message"]);
    assert_no_key(&reply.text);
    assert_eq!(
        received(&app, ANTHROPIC_PATH).await.len(),
        4,
        "retried as usual"
    );
}

/// An OpenAI-style stream served whole by the mock.
fn streamed(bytes: Vec<u8>) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(bytes, "text/event-stream")
}

async fn mount_stream(app: &TestApp, at: &str, bytes: Vec<u8>) {
    Mock::given(wiremock::matchers::path(at))
        .respond_with(streamed(bytes))
        .mount(&app.llm)
        .await;
}

/// The opening of a stream (HTTP 200, the role chunk, `text`) that never finishes.
fn opened_stream(text: &str) -> Vec<u8> {
    let mut bytes = openai_stream(&[text], "stop");
    let finish = String::from_utf8_lossy(&bytes)
        .find("\"delta\":{}")
        .unwrap();
    let cut = String::from_utf8_lossy(&bytes[..finish])
        .rfind("data: ")
        .unwrap();
    bytes.truncate(cut);
    bytes
}

#[tokio::test]
async fn a_stream_that_fails_before_any_output_falls_back_unseen() {
    let app = spawn_app().await;
    // The provider accepts the call, then its stream reports an error before any text.
    let mut failing = opened_stream("");
    failing.extend_from_slice(
        b"data: {\"error\":{\"message\":\"The server is overloaded\",\"type\":\"server_error\"}}\n\n",
    );
    mount_stream(&app, OPENAI_PATH, failing).await;
    let answer = [
        "Thought: The router names it.",
        "\nFinal Answer: In auth.js.",
    ];
    mount_stream(&app, GEMINI_PATH, openai_stream(&answer, "stop")).await;

    let streamed = post_stream(&app, &chained(json!([gemini()]), all_keys())).await;
    assert_eq!(streamed.status, 200);
    assert_eq!(streamed.joined("thought"), "The router names it.");
    assert!(streamed.events.iter().all(|(name, _)| name != "retry"));
    let (name, step) = streamed.terminal();
    assert_eq!(name, "step", "{step}");
    assert_eq!(step["direct_response"], "In auth.js.");
    assert_eq!(step["model_used"]["provider"], "gemini");
    assert_eq!(
        step["fallback_attempts"][0]["error_type"],
        "llm_unavailable"
    );
    assert_eq!(
        step["usage"],
        json!({"prompt_tokens": 512, "completion_tokens": 31})
    );
}

#[tokio::test]
async fn once_output_was_streamed_a_failure_is_the_steps() {
    // The thought is streamed, then the connection breaks (llm_unavailable, a failure another
    // model could fix, were nothing shown yet).
    let thought = opened_stream("Thought: I will read auth.js first.\n");
    let upstream = serve(200, vec![thought], Ending::CutShort).await;
    let uri = upstream.uri.clone();
    let app = spawn_app_with(move |c| c.openai_base_url = format!("{uri}/v1")).await;
    mount_stream(
        &app,
        GEMINI_PATH,
        openai_stream(&["Final Answer: no"], "stop"),
    )
    .await;

    let streamed = post_stream(&app, &chained(json!([gemini()]), all_keys())).await;
    assert_eq!(streamed.status, 200);
    assert!(
        !streamed.joined("thought").is_empty(),
        "{:?}",
        streamed.events
    );
    let (name, error) = streamed.terminal();
    assert_eq!(name, "error", "{error}");
    assert_eq!(error["error"]["type"], "llm_unavailable");
    assert_eq!(error["fallback_attempts"][0]["modelName"], "gpt-4o");
    assert!(received(&app, GEMINI_PATH).await.is_empty());
}

/// A streamed refusal of which nothing was shown (text before any tag is not streamed) falls
/// back as a whole one does: it was the step's answer, with the refusal warning. One whose
/// thought was streamed stays the answer, the fallback unasked.
#[tokio::test]
async fn a_streamed_refusal_nothing_of_which_was_shown_falls_back() {
    // Native, a tagged answer is held until the reply is over: unseen when the filter stops it.
    for (first, native, falls_back) in [
        ("I can't help with that.", false, true),
        ("Thought: Reading auth.js.\nFinal Answer: It", false, false),
        ("Final Answer: Here is a partial", true, true),
        // The thought was shown: no fallback, and the held answer is sent.
        (
            "Thought: I think.\nFinal Answer: Here is a partial",
            true,
            false,
        ),
    ] {
        let app = spawn_app().await;
        mount_stream(&app, OPENAI_PATH, openai_stream(&[first], "content_filter")).await;
        let answer = [
            "Thought: The router names it.",
            "\nFinal Answer: In auth.js.",
        ];
        mount_stream(&app, GEMINI_PATH, openai_stream(&answer, "stop")).await;
        let mut body = chained(json!([gemini()]), all_keys());
        if native {
            body = crate::support::requests::with_native_read_file(body);
        }
        let streamed = post_stream(&app, &body).await;
        let (name, step) = streamed.terminal();
        assert_eq!(name, "step", "{step}");
        let tried = received(&app, GEMINI_PATH).await.len();
        assert_eq!(tried, usize::from(falls_back), "{first}");
        if falls_back {
            assert_eq!(step["direct_response"], "In auth.js.");
            assert_eq!(step["fallback_attempts"][0]["modelName"], "gpt-4o");
            assert_eq!(streamed.joined("thought"), "The router names it.");
        } else {
            assert_eq!(step["model_used"]["modelName"], "gpt-4o");
            assert!(
                step["warnings"].to_string().contains("content_filter"),
                "{step}"
            );
            let answer = step["direct_response"].as_str().unwrap();
            assert_eq!(streamed.joined("answer"), answer);
        }
    }
}

/// An app with these call and step timeouts whose OpenAI model answers after `delay` seconds
/// and whose Claude, the fallback, answers `claude_answer` at once.
async fn slow_openai_then_claude(
    llm_timeout_secs: u64,
    step_timeout_secs: u64,
    delay: u64,
    claude_answer: &str,
) -> TestApp {
    let app = spawn_app_with(|c| {
        c.llm_timeout_secs = llm_timeout_secs;
        c.step_timeout_secs = step_timeout_secs;
    })
    .await;
    Mock::given(wiremock::matchers::path(OPENAI_PATH))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(openai_reply("Final Answer: late"))
                .set_delay(Duration::from_secs(delay)),
        )
        .mount(&app.llm)
        .await;
    mount(
        &app.llm,
        ANTHROPIC_PATH,
        200,
        anthropic_reply(claude_answer),
    )
    .await;
    app
}

#[tokio::test]
async fn a_timed_out_model_is_not_retried_while_another_is_left() {
    let app = slow_openai_then_claude(1, 30, 20, "Final Answer: on time").await;

    let started = Instant::now();
    let reply = app
        .post_react_step(&chained(json!([claude()]), all_keys()))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["direct_response"], "on time");
    assert_eq!(
        reply.body["fallback_attempts"][0]["error_type"],
        "llm_timeout"
    );
    assert_eq!(received(&app, OPENAI_PATH).await.len(), 1);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_slow_first_model_cannot_take_the_step_past_its_deadline() {
    let app = slow_openai_then_claude(60, 2, 30, "Final Answer: never asked").await;

    let started = Instant::now();
    let reply = app
        .post_react_step(&chained(json!([claude()]), all_keys()))
        .await;
    let took = started.elapsed();
    assert_eq!(reply.status, 504, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "llm_timeout");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // The model that was being asked when the deadline passed is named, with the step's error.
    assert_eq!(
        reply.body["fallback_attempts"],
        json!([{"provider": "openai", "modelName": "gpt-4o", "error_type": "llm_timeout",
            "message": reply.body["error"]["message"]}])
    );
    assert!(received(&app, ANTHROPIC_PATH).await.is_empty());
}

const SIGNATURE: &str = "EqQBCgIYAhIMsig-of-claude-sonnet-4-5";

#[tokio::test]
async fn the_next_model_gets_the_step_made_for_it_and_its_own_state_back() {
    let app = spawn_app().await;
    let down = json!({"error": {"message": "The server had an error", "type": "server_error"}});
    mount(&app.llm, OPENAI_PATH, 500, down).await;
    let mut answer = anthropic_reply("");
    answer["content"] = json!([
        {"type": "thinking", "thinking": "a.js reads length of undefined", "signature": "sig-new"},
        {"type": "text", "text": "Final Answer: a.js:3 reads undefined.length"}
    ]);
    answer["stop_reason"] = json!("end_turn");
    mount(&app.llm, ANTHROPIC_PATH, 200, answer).await;

    // A native loop whose last call Claude made, with its signed thinking.
    let mut body = native_reasoning("gpt-4o", "low");
    body["user_query"] = json!("");
    body["conversation_history"] = json!([
        {"role": "user", "content": "Why does a.js throw?"},
        {"role": "assistant", "content": "",
         "toolCall": {"id": "toolu_01", "name": "read_file", "parameters": {"path": "a.js"}},
         "reasoning_state": {"blocks": [{"type": "thinking", "thinking": "read it", "signature": SIGNATURE}],
             "origin": {"provider": "anthropic", "api": "chat", "model": CLAUDE}}},
        {"role": "tool_observation", "content": "a.js:3 reads undefined.length", "tool_call_id": "toolu_01"}
    ]);
    body["llm_config"]["fallbacks"] = json!([claude()]);
    body["user_api_keys"] = json!({"llmKey": OPENAI_KEY, "providerKeys": all_keys()});

    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    // OpenAI was asked in its own structure, without Claude's state.
    let openai: Value = serde_json::from_slice(&received(&app, OPENAI_PATH).await[0].body).unwrap();
    assert!(openai["tools"].is_array());
    assert!(!openai.to_string().contains(SIGNATURE));
    // Claude got the step made for it: its tools, its thinking budget, its own state back.
    let claude: Value =
        serde_json::from_slice(&received(&app, ANTHROPIC_PATH).await[0].body).unwrap();
    assert_eq!(claude["tools"][0]["name"], "read_file");
    assert_eq!(claude["thinking"]["type"], "enabled");
    let assistant = claude["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    assert_eq!(assistant["content"][0]["signature"], SIGNATURE);
    // The new turn's state is the answering model's.
    let history = reply.body["updated_conversation_history"]
        .as_array()
        .unwrap();
    assert_eq!(
        history.last().unwrap()["reasoning_state"]["origin"],
        json!({"provider": "anthropic", "api": "chat", "model": CLAUDE})
    );
    let warnings = reply.body["warnings"].to_string();
    assert!(
        !warnings.contains("reasoning_state was made by"),
        "{warnings}"
    );
}

fn fields(reply: &Value) -> Vec<&str> {
    reply["error"]["fields"]
        .as_array()
        .map(|a| a.iter().map(|f| f["field"].as_str().unwrap()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn every_fallback_is_checked_as_the_first_model_is() {
    let app = spawn_app().await;
    let mut body = chained(
        json!([
            {"modelName": "claude-haiku-4-5"},
            {"provider": "anthropic", "modelName": CLAUDE},
            {"provider": "gemini", "modelName": GEMINI, "api": "responses",
             "tokenLimit": 4096, "reservedOutputTokens": 5000},
            {"provider": "openai", "modelName": "gpt-4o-mini", "base_url": "https://evil.example/v1"}
        ]),
        json!({"gemini": GEMINI_KEY, "openai": OPENAI_KEY}),
    );
    body["llm_config"]["temperature"] = json!(1.5);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(
        fields(&reply.body),
        [
            "llm_config.fallbacks[0].provider",
            "llm_config.fallbacks[1].provider",
            "llm_config.fallbacks[2].api",
            "llm_config.fallbacks[2].reservedOutputTokens",
            "llm_config.fallbacks[3].base_url",
            "user_api_keys.providerKeys.anthropic",
        ]
    );
    let text = reply.body["error"]["fields"].to_string();
    assert!(
        text.contains("between 0 and 1 for provider anthropic"),
        "{text}"
    );
    assert_no_key(&reply.text);
    assert!(app.llm.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_key_in_another_providers_slot_is_refused_and_sent_nowhere() {
    let app = spawn_app().await;
    // Claude's key where Gemini's goes, and the first model's OpenAI key as Claude's.
    let body = chained(
        json!([gemini(), claude()]),
        json!({"gemini": ANTHROPIC_KEY, "anthropic": OPENAI_KEY}),
    );
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(
        fields(&reply.body),
        [
            "user_api_keys.providerKeys.anthropic",
            "user_api_keys.providerKeys.gemini"
        ]
    );
    let messages = reply.body["error"]["fields"].to_string();
    assert!(messages.contains("is a key of anthropic") && messages.contains("goes to gemini"));
    assert!(messages.contains("is a key of openai") && messages.contains("goes to anthropic"));
    assert_no_key(&reply.text);

    // A slot that is no provider's, and a field a fallback does not take.
    let body = chained(json!([claude()]), json!({"antropic": ANTHROPIC_KEY}));
    let reply = app.post_react_step(&body).await;
    assert_eq!(
        fields(&reply.body),
        [
            "user_api_keys.providerKeys",
            "user_api_keys.providerKeys.anthropic"
        ]
    );
    assert!(reply.body["error"]["fields"][0]["message"]
        .as_str()
        .unwrap()
        .contains("`antropic` is not a provider"));
    let mut with_temperature = claude();
    with_temperature["temperature"] = json!(0.5);
    let reply = app
        .post_react_step(&chained(json!([with_temperature]), all_keys()))
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert!(
        fields(&reply.body)[0].starts_with("llm_config.fallbacks[0]"),
        "{}",
        reply.text
    );
    assert!(app.llm.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_thousand_fallbacks_are_one_error() {
    let app = spawn_app().await;
    let many: Vec<Value> = (0..1000).map(|_| claude()).collect();
    let reply = app
        .post_react_step(&chained(Value::Array(many), all_keys()))
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(fields(&reply.body), ["llm_config.fallbacks"]);
    assert_eq!(
        reply.body["error"]["fields"][0]["message"],
        "length must be at most 4"
    );
}

#[tokio::test]
async fn an_azure_fallback_needs_a_deployment_name_a_base_url_and_its_key() {
    let app = spawn_app_with(|c| {
        c.base_urls.remove("azure");
    })
    .await;
    let body = chained(
        json!([{"provider": "azure", "modelName": "../gpt"}]),
        json!({}),
    );
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(
        fields(&reply.body),
        [
            "llm_config.fallbacks[0].base_url",
            "llm_config.fallbacks[0].modelName",
            "user_api_keys.providerKeys.azure",
        ]
    );
    // Offline (`mock_response`), a fallback needs no key, as the first model does not.
    let mut body = chained(json!([claude()]), json!({}));
    body["mock_response"] = json!("Final Answer: offline");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["model_used"]["provider"], "openai");
    assert!(reply.body.get("fallback_attempts").is_none());
}

#[tokio::test]
async fn an_openai_refusal_with_a_stop_is_a_refusal_and_falls_back() {
    // `refusal` in place of `content` with finish `stop` (a structured output or strict tool
    // declined) was taken for the answer: no fallback, no warning.
    let app = spawn_app().await;
    let mut declined = openai_reply("");
    declined["choices"][0]["message"] = json!({"role": "assistant", "content": null, "refusal": "I'm sorry, I can't assist with that."});
    mount(&app.llm, OPENAI_PATH, 200, declined.clone()).await;
    let answer = anthropic_reply("Thought: Found it.\nFinal Answer: In auth.js.");
    mount(&app.llm, ANTHROPIC_PATH, 200, answer).await;
    let reply = app
        .post_react_step(&chained(json!([claude()]), all_keys()))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["direct_response"], "In auth.js.");
    let attempts = &reply.body["fallback_attempts"];
    assert!(
        attempts[0]["message"].as_str().unwrap().contains("refusal"),
        "{attempts}"
    );
    // With no model left, the refusal is the answer, said to be one.
    let app = spawn_app_answering(OPENAI_PATH, 200, declined).await;
    let reply = app.post_react_step(&request("gpt-4o", "Where?")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(
        reply.body["warnings"].to_string().contains("refusal"),
        "{}",
        reply.text
    );
}
