//! The black-box tests every provider runs, driven by one table: each provider's mock checks the
//! request the way its API does (path, key header, required fields) and answers in its exact
//! wire format, streamed and not.

use serde_json::{json, Value};
use wiremock::{Mock, Request, Respond, ResponseTemplate};

use crate::support::app::{spawn_app, spawn_app_with, TestApp};
use crate::support::requests::{request, KEY};
use crate::support::stream::post_stream;

/// Which wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    ChatCompletions,
    Anthropic,
    Ollama,
}

/// How the key must arrive.
#[derive(Debug, Clone, Copy)]
enum KeyIn {
    Bearer,
    Header(&'static str),
}

struct Case {
    provider: &'static str,
    model: &'static str,
    /// The path the service must call.
    path: &'static str,
    wire: Wire,
    key: KeyIn,
}

const CASES: &[Case] = &[
    Case {
        provider: "openai",
        model: "gpt-4o",
        path: "/v1/chat/completions",
        wire: Wire::ChatCompletions,
        key: KeyIn::Bearer,
    },
    Case {
        provider: "anthropic",
        model: "claude-sonnet-4-5",
        path: "/v1/messages",
        wire: Wire::Anthropic,
        key: KeyIn::Header("x-api-key"),
    },
    Case {
        provider: "ollama",
        model: "qwen2.5-coder:7b",
        path: "/ollama/api/chat",
        wire: Wire::Ollama,
        key: KeyIn::Bearer,
    },
    Case {
        provider: "gemini",
        model: "gemini-2.5-flash",
        path: "/gemini/v1beta/openai/chat/completions",
        wire: Wire::ChatCompletions,
        key: KeyIn::Bearer,
    },
    Case {
        provider: "openrouter",
        model: "anthropic/claude-sonnet-4.5",
        path: "/openrouter/api/v1/chat/completions",
        wire: Wire::ChatCompletions,
        key: KeyIn::Bearer,
    },
    Case {
        provider: "deepseek",
        model: "deepseek-chat",
        path: "/deepseek/v1/chat/completions",
        wire: Wire::ChatCompletions,
        key: KeyIn::Bearer,
    },
    Case {
        provider: "mistral",
        model: "codestral-latest",
        path: "/mistral/v1/chat/completions",
        wire: Wire::ChatCompletions,
        key: KeyIn::Bearer,
    },
    Case {
        provider: "groq",
        model: "llama-3.3-70b-versatile",
        path: "/groq/openai/v1/chat/completions",
        wire: Wire::ChatCompletions,
        key: KeyIn::Bearer,
    },
    Case {
        provider: "xai",
        model: "grok-4",
        path: "/xai/v1/chat/completions",
        wire: Wire::ChatCompletions,
        key: KeyIn::Bearer,
    },
    Case {
        provider: "azure",
        model: "my-gpt-4o-deployment",
        path: "/azure/openai/v1/chat/completions",
        wire: Wire::ChatCompletions,
        key: KeyIn::Header("api-key"),
    },
    Case {
        provider: "bedrock",
        model: "openai.gpt-oss-120b-1:0",
        path: "/bedrock/openai/v1/chat/completions",
        wire: Wire::ChatCompletions,
        key: KeyIn::Bearer,
    },
    Case {
        provider: "openai_compatible",
        model: "Qwen/Qwen2.5-Coder-7B-Instruct",
        path: "/compat/v1/chat/completions",
        wire: Wire::ChatCompletions,
        key: KeyIn::Bearer,
    },
];

const TOKEN_LIMIT: u64 = 8192;

/// A mock of one provider: validates each request as the API would, then answers `reply`.
struct Provider {
    wire: Wire,
    key: KeyIn,
    reply: Answer,
}

#[derive(Clone)]
enum Answer {
    Text(&'static str),
    Call(&'static str, Value),
    Stream(&'static str),
    Status(u16),
    Drifted,
}

impl Respond for Provider {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        if let Err(why) = self.validate(request) {
            return ResponseTemplate::new(400).set_body_json(self.error_body(&why));
        }
        match &self.reply {
            Answer::Text(text) => ResponseTemplate::new(200).set_body_json(self.text(text)),
            Answer::Call(name, args) => {
                ResponseTemplate::new(200).set_body_json(self.call(name, args))
            }
            Answer::Stream(text) => {
                let (body, kind) = self.stream(text);
                ResponseTemplate::new(200).set_body_raw(body, kind)
            }
            Answer::Status(status) => ResponseTemplate::new(*status)
                .set_body_json(self.error_body(&format!("Incorrect API key provided: {KEY}"))),
            Answer::Drifted => ResponseTemplate::new(200).set_body_json(match self.wire {
                Wire::ChatCompletions => json!({"choices": [{"message": {"content": 42}}]}),
                Wire::Anthropic => json!({"content": "Thought: hi"}),
                Wire::Ollama => json!({"message": {"content": "hi"}}),
            }),
        }
    }
}

impl Provider {
    fn validate(&self, request: &Request) -> Result<(), String> {
        let header = |name: &str| {
            request
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let expected = match self.key {
            KeyIn::Bearer => ("authorization", format!("Bearer {KEY}")),
            KeyIn::Header(name) => (name, KEY.to_string()),
        };
        if header(expected.0).as_deref() != Some(expected.1.as_str()) {
            return Err(format!("the key must be in {}", expected.0));
        }
        if header("content-type").as_deref() != Some("application/json") {
            return Err("content-type must be application/json".into());
        }
        let body: Value = serde_json::from_slice(&request.body).map_err(|e| e.to_string())?;
        let model_ok = body["model"].is_string();
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        if !model_ok || messages.is_empty() {
            return Err("model and messages are required".into());
        }
        for m in &messages {
            // Anthropic takes a string or an array of content blocks, each with a type.
            let blocks = self.wire == Wire::Anthropic
                && m["content"].as_array().is_some_and(|blocks| {
                    !blocks.is_empty() && blocks.iter().all(|b| b["type"].is_string())
                });
            if !m["role"].is_string() || !(m["content"].is_string() || blocks) {
                return Err("each message needs a role and a content".into());
            }
        }
        match self.wire {
            Wire::ChatCompletions => {
                let cap = body["max_tokens"]
                    .as_u64()
                    .or(body["max_completion_tokens"].as_u64());
                if !matches!(cap, Some(n) if n > 0) {
                    return Err("max_tokens must be a positive integer".into());
                }
                if body["stream"] == true && body["stream_options"]["include_usage"] != true {
                    return Err("the service asks for usage on streams".into());
                }
                if !["system", "developer"].contains(&messages[0]["role"].as_str().unwrap_or("")) {
                    return Err("the instructions come first".into());
                }
            }
            Wire::Anthropic => {
                if header("anthropic-version").is_none() {
                    return Err("anthropic-version header: required".into());
                }
                if !body["max_tokens"].is_u64() || !body["system"].is_string() {
                    return Err("max_tokens and a top-level system are required".into());
                }
                if messages[0]["role"] != "user" {
                    return Err("messages: first message must use the \"user\" role".into());
                }
            }
            Wire::Ollama => {
                if body["options"]["num_ctx"] != TOKEN_LIMIT {
                    return Err("num_ctx must be the request's tokenLimit".into());
                }
                if !body["stream"].is_boolean() || !body["options"]["num_predict"].is_u64() {
                    return Err("stream and options.num_predict are sent".into());
                }
            }
        }
        Ok(())
    }

    fn error_body(&self, message: &str) -> Value {
        match self.wire {
            Wire::ChatCompletions => {
                json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}})
            }
            Wire::Anthropic => {
                json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
            }
            Wire::Ollama => json!({"error": message}),
        }
    }

    fn text(&self, text: &str) -> Value {
        match self.wire {
            Wire::ChatCompletions => json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320}
            }),
            Wire::Anthropic => json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn", "stop_sequence": null,
                "usage": {"input_tokens": 300, "output_tokens": 20}
            }),
            Wire::Ollama => json!({
                "model": "m", "created_at": "2025-01-01T00:00:00Z",
                "message": {"role": "assistant", "content": text},
                "done": true, "done_reason": "stop", "prompt_eval_count": 300, "eval_count": 20
            }),
        }
    }

    fn call(&self, name: &str, args: &Value) -> Value {
        match self.wire {
            Wire::ChatCompletions => json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                    "role": "assistant", "content": "Thought: I should look.",
                    "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": name, "arguments": args.to_string()}}]}}],
                "usage": {"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320}
            }),
            Wire::Anthropic => json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                "content": [{"type": "text", "text": "Thought: I should look."},
                            {"type": "tool_use", "id": "toolu_1", "name": name, "input": args}],
                "stop_reason": "tool_use", "stop_sequence": null,
                "usage": {"input_tokens": 300, "output_tokens": 20}
            }),
            Wire::Ollama => json!({
                "model": "m", "created_at": "2025-01-01T00:00:00Z",
                "message": {"role": "assistant", "content": "Thought: I should look.",
                    "tool_calls": [{"function": {"name": name, "arguments": args}}]},
                "done": true, "done_reason": "stop", "prompt_eval_count": 300, "eval_count": 20
            }),
        }
    }

    /// The text streamed in three pieces, in the provider's framing.
    fn stream(&self, text: &str) -> (Vec<u8>, &'static str) {
        let third = text.len() / 3;
        let pieces = [&text[..third], &text[third..2 * third], &text[2 * third..]];
        let mut out = String::new();
        match self.wire {
            Wire::ChatCompletions => {
                for piece in pieces {
                    let chunk = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                        "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]});
                    out.push_str(&format!("data: {chunk}\n\n"));
                }
                let end = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
                let usage = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                    "choices": [], "usage": {"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320}});
                out.push_str(&format!("data: {end}\n\ndata: {usage}\n\ndata: [DONE]\n\n"));
                (out.into_bytes(), "text/event-stream")
            }
            Wire::Anthropic => {
                let mut event = |name: &str, data: Value| {
                    out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
                };
                event(
                    "message_start",
                    json!({"type": "message_start", "message": {"id": "m", "type": "message",
                    "role": "assistant", "content": [], "model": "m", "stop_reason": null,
                    "usage": {"input_tokens": 300, "output_tokens": 1}}}),
                );
                event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}}),
                );
                for piece in pieces {
                    event(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": 0,
                        "delta": {"type": "text_delta", "text": piece}}),
                    );
                }
                event(
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": 0}),
                );
                event(
                    "message_delta",
                    json!({"type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 20}}),
                );
                event("message_stop", json!({"type": "message_stop"}));
                (out.into_bytes(), "text/event-stream")
            }
            Wire::Ollama => {
                for piece in pieces {
                    let line = json!({"model": "m", "created_at": "2025-01-01T00:00:00Z",
                        "message": {"role": "assistant", "content": piece}, "done": false});
                    out.push_str(&format!("{line}\n"));
                }
                let end = json!({"model": "m", "created_at": "2025-01-01T00:00:00Z",
                    "message": {"role": "assistant", "content": ""}, "done": true, "done_reason": "stop",
                    "prompt_eval_count": 300, "eval_count": 20});
                out.push_str(&format!("{end}\n"));
                (out.into_bytes(), "application/x-ndjson")
            }
        }
    }
}

/// The app with `case`'s mock answering `reply`, and a request for its model.
async fn setup(case: &Case, reply: Answer) -> (TestApp, Value) {
    let app = spawn_app().await;
    Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path(case.path))
        .respond_with(Provider {
            wire: case.wire,
            key: case.key,
            reply,
        })
        .mount(&app.llm)
        .await;
    let mut body = request(case.model, "Where is the login code?");
    body["llm_config"]["provider"] = json!(case.provider);
    (app, body)
}

#[tokio::test]
async fn every_provider_proposes_an_action_from_text() {
    for case in CASES {
        let output = "Thought: I should search.\nAction: code_search(query=\"login\")";
        let (app, body) = setup(case, Answer::Text(output)).await;
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 200, "{}: {}", case.provider, reply.text);
        assert_eq!(reply.body["status"], "action_proposed", "{}", case.provider);
        assert_eq!(
            reply.body["action_details"]["tool_args"],
            json!({"query": "login"}),
            "{}",
            case.provider
        );
        assert_eq!(
            reply.body["usage"],
            json!({"prompt_tokens": 300, "completion_tokens": 20}),
            "{}",
            case.provider
        );
    }
}

#[tokio::test]
async fn every_provider_streams_a_final_answer() {
    for case in CASES {
        let output = "Thought: It is in auth.js.\nFinal Answer: In src/auth.js, line 12.";
        let (app, body) = setup(case, Answer::Stream(output)).await;
        let streamed = post_stream(&app, &body).await;
        assert_eq!(streamed.status, 200, "{}", case.provider);
        assert_eq!(
            streamed.joined("thought"),
            "It is in auth.js.",
            "{}",
            case.provider
        );
        let (name, data) = streamed.terminal();
        assert_eq!(name, "step", "{}: {data}", case.provider);
        assert_eq!(
            data["direct_response"], "In src/auth.js, line 12.",
            "{}",
            case.provider
        );
        assert_eq!(data["usage"]["prompt_tokens"], 300, "{}", case.provider);
        assert_eq!(
            app.upstream_bodies().await[0]["stream"],
            true,
            "{}",
            case.provider
        );
    }
}

#[tokio::test]
async fn every_provider_proposes_a_native_call() {
    for case in CASES {
        let (app, mut body) = setup(
            case,
            Answer::Call("read_file", json!({"path": "src/auth.js"})),
        )
        .await;
        body["tools"] = json!([{"name": "read_file", "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]);
        body["llm_config"]["tool_mode"] = json!("native");
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 200, "{}: {}", case.provider, reply.text);
        assert_eq!(
            reply.body["action_details"]["tool_name"], "read_file",
            "{}",
            case.provider
        );
        assert_eq!(
            reply.body["action_details"]["tool_args"],
            json!({"path": "src/auth.js"}),
            "{}",
            case.provider
        );
        let sent = &app.upstream_bodies().await[0];
        assert!(sent["tools"].is_array(), "{}: {sent}", case.provider);
    }
}

#[tokio::test]
async fn every_provider_reports_a_refused_key_without_showing_it() {
    for case in CASES {
        let (app, body) = setup(case, Answer::Status(401)).await;
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 401, "{}: {}", case.provider, reply.text);
        assert_eq!(reply.body["error"]["type"], "llm_auth", "{}", case.provider);
        assert!(!reply.text.contains(KEY), "{}", case.provider);
        assert!(
            reply.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(case.provider),
            "{}: {}",
            case.provider,
            reply.text
        );
    }
}

#[tokio::test]
async fn every_provider_reports_a_drifted_reply_as_a_bad_response() {
    for case in CASES {
        let (app, body) = setup(case, Answer::Drifted).await;
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 502, "{}: {}", case.provider, reply.text);
        assert_eq!(
            reply.body["error"]["type"], "llm_bad_response",
            "{}",
            case.provider
        );
    }
}

#[tokio::test]
async fn every_provider_is_tried_again_after_a_server_error() {
    for case in CASES {
        let (app, body) = setup(case, Answer::Status(503)).await;
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 502, "{}: {}", case.provider, reply.text);
        assert_eq!(
            reply.body["error"]["type"], "llm_unavailable",
            "{}",
            case.provider
        );
        assert_eq!(
            app.upstream_bodies().await.len(),
            4,
            "{}: one call and three retries",
            case.provider
        );
    }
}

#[tokio::test]
async fn azure_without_a_base_url_anywhere_is_a_400() {
    let app = crate::support::app::spawn_app_with(|c| {
        c.base_urls.remove("azure");
    })
    .await;
    let mut body = request("my-deployment", "q");
    body["llm_config"]["provider"] = json!("azure");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(
        reply.body["error"]["fields"][0]["field"],
        "llm_config.base_url"
    );
    let message = reply.body["error"]["fields"][0]["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("REACTSTEP_AZURE_BASE_URL"), "{message}");
}

#[tokio::test]
async fn a_host_pattern_admits_any_azure_resource_and_nothing_else() {
    let app = crate::support::app::spawn_app_with(|c| {
        c.base_urls.remove("azure");
        c.allowed_base_urls = vec!["https://*.openai.azure.com".into()];
    })
    .await;
    let mut body = request("my-deployment", "q");
    body["llm_config"]["provider"] = json!("azure");
    body["dry_run"] = json!(true);
    body["llm_config"]["base_url"] = json!("https://contoso-eu.openai.azure.com/openai/v1");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);

    for url in [
        "https://evil.com/.openai.azure.com",
        "https://x.openai.azure.com.evil.com/openai/v1",
        "https://user@x.openai.azure.com/openai/v1",
        "https://x.openai.azure.com@evil.com/openai/v1",
        "http://x.openai.azure.com/openai/v1",
        "https://1.2.3.4/openai/v1",
        "https://[::1]/openai/v1",
        "https://a.b.openai.azure.com/openai/v1",
        "https://x.openai.azure.com:444/openai/v1",
        "https://x%2eopenai.azure.com/openai/v1",
        "http://169.254.169.254/latest/meta-data",
    ] {
        body["llm_config"]["base_url"] = json!(url);
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 400, "{url}: {}", reply.text);
        assert_eq!(
            reply.body["error"]["fields"][0]["field"], "llm_config.base_url",
            "{url}"
        );
    }
}

#[tokio::test]
async fn a_pattern_that_would_widen_too_far_stops_the_start() {
    let mut config = reactstep::config::Config::defaults();
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.allowed_base_urls = vec!["https://*.com".into()];
    let built = reactstep::startup::Application::build(&config);
    assert!(built.is_err_and(|e| e.to_string().contains("REACTSTEP_ALLOWED_BASE_URLS")));
}

#[tokio::test]
async fn the_provider_list_names_every_provider_and_no_secret() {
    let app = spawn_app().await;
    let reply = app.send("GET", "/api/providers", None).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let listed: Vec<&str> = reply.body["providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let mut expected: Vec<&str> = CASES.iter().map(|c| c.provider).collect();
    let mut sorted = listed.clone();
    sorted.sort_unstable();
    expected.sort_unstable();
    assert_eq!(sorted, expected, "the table of cases covers every provider");
    let anthropic = &reply.body["providers"][1];
    assert_eq!(anthropic["name"], "anthropic");
    assert_eq!(anthropic["base_url_host"], "127.0.0.1");
    assert_eq!(anthropic["model_prefixes"], json!(["claude-"]));
    assert_eq!(anthropic["capabilities"]["counting"], "margin");
    let ollama = reply.body["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "ollama")
        .unwrap();
    assert_eq!(ollama["capabilities"]["requires_key"], false);
    assert_eq!(ollama["capabilities"]["native_by_default"], false);

    let guarded = crate::support::app::spawn_app_with(|c| {
        c.api_tokens = Some("operator-token-0123456789".parse().unwrap());
    })
    .await;
    assert_eq!(
        guarded.send("GET", "/api/providers", None).await.status,
        401
    );
}

#[tokio::test]
async fn openrouter_gets_the_operators_attribution_headers() {
    let app = crate::support::app::spawn_app_with(|c| {
        c.read_provider_variables(|name| match name {
            "REACTSTEP_OPENROUTER_REFERER" => Some("https://editor.example".into()),
            "REACTSTEP_OPENROUTER_TITLE" => Some("Example Editor".into()),
            _ => None,
        });
    })
    .await;
    let case = CASES.iter().find(|c| c.provider == "openrouter").unwrap();
    Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path(case.path))
        .and(wiremock::matchers::header(
            "http-referer",
            "https://editor.example",
        ))
        .and(wiremock::matchers::header("x-title", "Example Editor"))
        .respond_with(Provider {
            wire: case.wire,
            key: case.key,
            reply: Answer::Text("Final Answer: ok"),
        })
        .mount(&app.llm)
        .await;
    let mut body = request(case.model, "q");
    body["llm_config"]["provider"] = json!("openrouter");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["direct_response"], "ok");
}

#[tokio::test]
async fn a_vendor_slash_model_id_implies_openrouter_only_with_an_openrouter_key() {
    let app = spawn_app().await;
    let openrouter_key = "sk-or-v1-0123456789abcdef0123456789abcdef";
    Mock::given(wiremock::matchers::path(
        "/openrouter/api/v1/chat/completions",
    ))
    .and(wiremock::matchers::header(
        "authorization",
        format!("Bearer {openrouter_key}").as_str(),
    ))
    .respond_with(ResponseTemplate::new(200).set_body_json(json!({
        "id": "gen-1", "object": "chat.completion", "created": 1, "model": "anthropic/claude-sonnet-4.5",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Final Answer: routed"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}})))
    .mount(&app.llm)
    .await;
    let mut body = request("anthropic/claude-sonnet-4.5", "q");
    body["user_api_keys"]["llmKey"] = json!(openrouter_key);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["direct_response"], "routed");

    // The same id with another vendor's key (Groq serves such ids too) is not guessed.
    let reply = app
        .post_react_step(&request("anthropic/claude-sonnet-4.5", "q"))
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(
        reply.body["error"]["fields"][0]["field"],
        "llm_config.provider"
    );
    assert_eq!(app.llm.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn azure_takes_the_deployments_form_for_a_base_ending_in_openai() {
    let app = crate::support::app::spawn_app_with(|c| {
        let v1 = c.base_urls["azure"].clone();
        let resource = v1.replace("/azure/openai/v1", "/contoso/openai");
        c.base_urls.insert("azure".into(), resource);
    })
    .await;
    Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path(
            "/contoso/openai/deployments/gpt-4o-prod/chat/completions",
        ))
        .and(wiremock::matchers::query_param("api-version", "2024-10-21"))
        .respond_with(Provider {
            wire: Wire::ChatCompletions,
            key: KeyIn::Header("api-key"),
            reply: Answer::Text("Final Answer: from the deployment"),
        })
        .mount(&app.llm)
        .await;
    let mut body = request("gpt-4o-prod", "q");
    body["llm_config"]["provider"] = json!("azure");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["direct_response"], "from the deployment");
    assert_eq!(
        reply.body["context_report"]["counter"], "o200k_base",
        "Azure serves OpenAI's models: counted exactly"
    );
}

#[tokio::test]
async fn an_azure_deployment_name_cannot_climb_out_of_its_path() {
    let app = spawn_app().await;
    for name in ["..", ".", "a/../../x", "dep?x=1", "dep%2e%2e", ""] {
        let mut body = request(name, "q");
        body["llm_config"]["provider"] = json!("azure");
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 400, "{name:?}: {}", reply.text);
        let fields: Vec<&str> = reply.body["error"]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["field"].as_str().unwrap())
            .collect();
        assert!(
            fields.contains(&"llm_config.modelName"),
            "{name:?}: {fields:?}"
        );
    }
    assert!(app.llm.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn an_unknown_provider_is_a_400_that_lists_the_known_ones() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "q");
    body["llm_config"]["provider"] = json!("vertex");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(
        reply.body["error"]["fields"][0]["field"],
        "llm_config.provider"
    );
    let message = reply.body["error"]["fields"][0]["message"]
        .as_str()
        .unwrap();
    for name in ["openai", "gemini", "openai_compatible"] {
        assert!(message.contains(name), "{message}");
    }
    assert!(
        !message.contains("vertex"),
        "the value sent is not repeated: {message}"
    );
}

#[tokio::test]
async fn the_provider_list_shows_only_hosts_and_honours_the_token() {
    let app = spawn_app_with(|c| {
        c.openai_base_url =
            "https://proxyuser:proxy-PASSWORD-123@gateway.internal:8443/t/SECRET-PATH-TOKEN/v1"
                .into();
        c.base_urls.insert(
            "groq".into(),
            // A query or a fragment stops start-up (the API's path would go after it).
            "https://frag:SECRET-QUERY-KEY@gw.internal/v1".into(),
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
