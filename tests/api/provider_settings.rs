//! The 2026 settings of the providers' own APIs (issue 32, items 4 to 6): adaptive thinking for
//! the Claude models that need it, strict tools, and the prompt cache's lifetime. The mocks
//! refuse what the real APIs refuse, so a wrong form fails the step.

use serde_json::{json, Value};
use wiremock::{Mock, Request, Respond, ResponseTemplate};

use crate::support::app::spawn_app;
use crate::support::requests::{native_reasoning, request};
use crate::support::spec::assert_conforms;
use crate::support::upstream::{anthropic_reply, mount, openai_reply, ANTHROPIC_PATH, OPENAI_PATH};

/// Anthropic's rule on the thinking form: the budget form is refused from Opus 4.7 on, the
/// adaptive form before Claude 4.6.
struct ThinkingRules;

fn version(model: &str) -> (u32, u32) {
    let numbers: Vec<u32> = model
        .split('-')
        .filter(|p| p.len() <= 2)
        .filter_map(|p| p.parse().ok())
        .collect();
    (numbers[0], numbers.get(1).copied().unwrap_or(0))
}

impl Respond for ThinkingRules {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let model = body["model"].as_str().unwrap_or_default();
        let refuse = |message: &str| {
            ResponseTemplate::new(400).set_body_json(json!({"type": "error",
                "error": {"type": "invalid_request_error", "message": message}}))
        };
        let v = version(model);
        match body["thinking"]["type"].as_str() {
            Some("enabled") if v >= (4, 7) => {
                return refuse("\"thinking.type.enabled\" is not supported for this model. Use \"thinking.type.adaptive\" and \"output_config.effort\" to control thinking behavior.")
            }
            Some("adaptive") if v < (4, 6) => {
                return refuse("adaptive thinking is not supported on this model")
            }
            Some("adaptive") if body["thinking"].get("budget_tokens").is_some() => {
                return refuse("thinking.adaptive.budget_tokens: Extra inputs are not permitted")
            }
            _ => {}
        }
        if body.get("output_config").is_some() && body["thinking"]["type"] != "adaptive" {
            return refuse("output_config.effort is only taken with adaptive thinking here");
        }
        let cap = match v {
            (4, 5) | (3, 7) => 64_000,
            (4, 0 | 1) if model.contains("opus") => 32_000,
            _ => u64::MAX,
        };
        let max_tokens = body["max_tokens"].as_u64().unwrap_or(0);
        if max_tokens > cap {
            return refuse(&format!("max_tokens: {max_tokens} > {cap}, which is the maximum allowed number of output tokens for {model}"));
        }
        ResponseTemplate::new(200).set_body_json(anthropic_reply("Thought: ok\nFinal Answer: done"))
    }
}

#[tokio::test]
async fn each_claude_model_gets_the_thinking_form_it_takes() {
    let app = spawn_app().await;
    Mock::given(wiremock::matchers::path(ANTHROPIC_PATH))
        .respond_with(ThinkingRules)
        .mount(&app.llm)
        .await;
    for (model, adaptive) in [
        ("claude-opus-4-7", true),
        ("claude-sonnet-4-6", true),
        ("claude-sonnet-5", true),
        ("claude-sonnet-4-5", false),
        ("claude-3-7-sonnet-20250219", false),
    ] {
        let body = native_reasoning(model, "medium");
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 200, "{model}: {}", reply.text);
        assert_conforms("POST", "/api/agent/react_step", 200, &reply.body);
        let asked = app.bodies_sent_to(ANTHROPIC_PATH).await.pop().unwrap();
        // The room for thinking is the same either way: the answer's plus the effort's budget.
        assert_eq!(asked["max_tokens"], 1000 + 8192, "{model}");
        if adaptive {
            assert_eq!(asked["thinking"], json!({"type": "adaptive"}), "{model}");
            assert_eq!(
                asked["output_config"],
                json!({"effort": "medium"}),
                "{model}"
            );
        } else {
            assert_eq!(
                asked["thinking"],
                json!({"type": "enabled", "budget_tokens": 8192}),
                "{model}"
            );
            assert!(asked.get("output_config").is_none(), "{model}");
        }
    }
    // Room past the model's cap: the budget gives way, with a warning (it once went on top,
    // and the request was refused).
    let mut body = native_reasoning("claude-sonnet-4-5", "high");
    body["llm_config"]["tokenLimit"] = json!(200_000);
    body["llm_config"]["reservedOutputTokens"] = json!(60_000);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let asked = app.bodies_sent_to(ANTHROPIC_PATH).await.pop().unwrap();
    assert_eq!(asked["max_tokens"], 64_000);
    assert_eq!(asked["thinking"]["budget_tokens"], 4_000);
    assert!(reply.body["warnings"]
        .to_string()
        .contains("thinking budget was cut"));
    // No thinking asked, none sent, on any model.
    let reply = app
        .post_react_step(&native_reasoning("claude-opus-4-7", "none"))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let asked = app.bodies_sent_to(ANTHROPIC_PATH).await.pop().unwrap();
    assert!(asked.get("thinking").is_none() && asked.get("output_config").is_none());
}

fn tools() -> Value {
    json!([
        {"name": "read_file", "description": "Read a file.",
         "parameters": {"type": "object", "additionalProperties": false, "required": ["path"],
                        "properties": {"path": {"type": "string"}}}},
        {"name": "search", "description": "Search the code.",
         "parameters": {"type": "object", "required": ["query"],
                        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}}}
    ])
}

fn strict_request(model: &str) -> Value {
    let mut body = request(model, "Where is login handled?");
    body["tools"] = tools();
    body["available_tools_prompt_segment"] = Value::Null;
    body["llm_config"]["tool_mode"] = json!("native");
    body["llm_config"]["strict_tools"] = json!(true);
    body
}

fn warnings(body: &Value) -> Vec<String> {
    body["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn strict_tools_go_strict_where_they_fit_and_a_misfit_is_said() {
    let app = spawn_app().await;
    let reply = openai_reply("Thought: ok\nFinal Answer: x");
    mount(&app.llm, OPENAI_PATH, 200, reply).await;
    let reply = app.post_react_step(&strict_request("gpt-4o")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let asked = app.bodies_sent_to(OPENAI_PATH).await.pop().unwrap();
    assert_eq!(asked["tools"][0]["function"]["strict"], true);
    assert!(
        asked["tools"][1]["function"].get("strict").is_none(),
        "{asked}"
    );
    let said = warnings(&reply.body);
    assert!(
        said.iter()
            .any(|w| w.contains("tool search was sent non-strict")
                && w.contains("additionalProperties")),
        "{said:?}"
    );
    assert!(!said.iter().any(|w| w.contains("read_file")), "{said:?}");
    // Off by default: no flag on any tool, no warning.
    let mut plain = strict_request("gpt-4o");
    plain["llm_config"]["strict_tools"] = Value::Null;
    let reply = app.post_react_step(&plain).await;
    let asked = app.bodies_sent_to(OPENAI_PATH).await.pop().unwrap();
    assert!(!asked.to_string().contains("strict"), "{asked}");
    assert!(!warnings(&reply.body).iter().any(|w| w.contains("strict")));
}

#[tokio::test]
async fn anthropic_takes_strict_where_its_subset_fits_and_ollama_says_it_has_none() {
    let app = spawn_app().await;
    Mock::given(wiremock::matchers::path(ANTHROPIC_PATH))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(anthropic_reply("Thought: ok\nFinal Answer: x")),
        )
        .mount(&app.llm)
        .await;
    let reply = app
        .post_react_step(&strict_request("claude-sonnet-4-5"))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let asked = app.bodies_sent_to(ANTHROPIC_PATH).await.pop().unwrap();
    assert_eq!(asked["tools"][0]["strict"], true);
    // Anthropic refuses a strict tool with an object open to more properties ("For 'object'
    // type, 'additionalProperties' must be explicitly set to false"): sent non-strict.
    assert!(asked["tools"][1].get("strict").is_none(), "{asked}");
    let said = warnings(&reply.body);
    assert!(
        said.iter()
            .any(|w| w.contains("tool search was sent non-strict")
                && w.contains("Anthropic's strict subset")),
        "{said:?}"
    );
    // Claude 3 has no strict tool use at all.
    let reply = app
        .post_react_step(&strict_request("claude-3-5-haiku-latest"))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let asked = app.bodies_sent_to(ANTHROPIC_PATH).await.pop().unwrap();
    assert!(!asked["tools"].to_string().contains("strict"), "{asked}");
    assert!(warnings(&reply.body)
        .iter()
        .any(|w| w.contains("has no strict tool calling")));
    let mut local = strict_request("qwen2.5-coder:7b");
    local["llm_config"]["provider"] = json!("ollama");
    local["mock_response"] = json!("Thought: ok\nFinal Answer: x");
    let reply = app.post_react_step(&local).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    // A mocked step calls no provider, so nothing is adjusted: ask the real call instead.
    let mut local = strict_request("qwen2.5-coder:7b");
    local["llm_config"]["provider"] = json!("ollama");
    Mock::given(wiremock::matchers::path(
        crate::support::upstream::OLLAMA_PATH,
    ))
    .respond_with(
        ResponseTemplate::new(200).set_body_json(crate::support::upstream::ollama_reply(
            "Thought: ok\nFinal Answer: x",
        )),
    )
    .mount(&app.llm)
    .await;
    let reply = app.post_react_step(&local).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let said = warnings(&reply.body);
    assert!(
        said.iter()
            .any(|w| w.contains("strict_tools: ollama has no strict")),
        "{said:?}"
    );
}

/// A prompt long enough for Anthropic to cache its system part.
fn cached_request(model: &str, ttl: &str) -> Value {
    let mut body = request(model, "Where is login handled?");
    body["explicit_context"] =
        json!([{"path": "src/auth.rs", "content": "fn login() {}\n".repeat(900)}]);
    body["llm_config"]["tokenLimit"] = json!(64_000);
    body["llm_config"]["prompt_cache_ttl"] = json!(ttl);
    body
}

#[tokio::test]
async fn the_cache_lifetime_goes_in_each_providers_own_field() {
    let app = spawn_app().await;
    Mock::given(wiremock::matchers::path(ANTHROPIC_PATH))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(anthropic_reply("Thought: ok\nFinal Answer: x")),
        )
        .mount(&app.llm)
        .await;
    let reply = openai_reply("Thought: ok\nFinal Answer: x");
    mount(&app.llm, OPENAI_PATH, 200, reply).await;
    let reply = app
        .post_react_step(&cached_request("claude-sonnet-4-5", "1h"))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let asked = app.bodies_sent_to(ANTHROPIC_PATH).await.pop().unwrap();
    let text = asked.to_string();
    let markers = text.matches("\"cache_control\"").count();
    assert!(markers >= 1, "{text}");
    assert_eq!(
        text.matches(r#""ttl":"1h""#).count(),
        markers,
        "every breakpoint: {text}"
    );
    assert_eq!(
        asked["system"][0]["cache_control"],
        json!({"type": "ephemeral", "ttl": "1h"})
    );

    let reply = app.post_react_step(&cached_request("gpt-4o", "24h")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let asked = app.bodies_sent_to(OPENAI_PATH).await.pop().unwrap();
    assert_eq!(asked["prompt_cache_retention"], "24h");
    assert!(asked["prompt_cache_key"].is_string());
    // Without a lifetime, neither field says one.
    let mut default = cached_request("gpt-4o", "24h");
    default["llm_config"]["prompt_cache_ttl"] = Value::Null;
    app.post_react_step(&default).await;
    let asked = app.bodies_sent_to(OPENAI_PATH).await.pop().unwrap();
    assert!(asked.get("prompt_cache_retention").is_none());
}

#[tokio::test]
async fn a_lifetime_the_provider_does_not_have_is_a_400_naming_the_field() {
    let app = spawn_app().await;
    for (model, provider, ttl, said) in [
        ("claude-sonnet-4-5", None, "24h", "takes \"5m\" or \"1h\""),
        ("gpt-4o", None, "1h", "takes \"in_memory\" or \"24h\""),
        ("qwen2.5-coder:7b", Some("ollama"), "5m", "takes none"),
    ] {
        let mut body = cached_request(model, ttl);
        if let Some(p) = provider {
            body["llm_config"]["provider"] = json!(p);
        }
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 400, "{model} {ttl}: {}", reply.text);
        assert_conforms("POST", "/api/agent/react_step", 400, &reply.body);
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(message.contains("llm_config.prompt_cache_ttl"), "{message}");
        let field = &reply.body["error"]["fields"][0];
        assert_eq!(field["field"], "llm_config.prompt_cache_ttl");
        let why = field["message"].as_str().unwrap();
        assert!(why.contains(said), "{model}: {why}");
    }
    let reply = app.post_react_step(&cached_request("gpt-4o", "2h")).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert!(reply.text.contains("prompt_cache_ttl"), "{}", reply.text);
}

#[tokio::test]
async fn the_responses_api_on_a_provider_without_it_is_a_400_naming_the_field() {
    let app = spawn_app().await;
    let mut body = request("claude-sonnet-4-5", "Where is login handled?");
    body["llm_config"]["api"] = json!("responses");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_conforms("POST", "/api/agent/react_step", 400, &reply.body);
    assert!(reply.text.contains("llm_config.api"), "{}", reply.text);
    assert!(
        reply
            .text
            .contains("provider anthropic does not serve the responses API"),
        "{}",
        reply.text
    );
}

#[tokio::test]
async fn an_effort_a_model_does_not_take_goes_as_the_nearest_it_takes() {
    // gpt-5 has no `none`, gpt-5.1 no `minimal`, the o series neither: each refuses the request
    // ("Unsupported value: 'minimal' is not supported with the 'gpt-5.1' model").
    let app = spawn_app().await;
    let reply = openai_reply("Thought: ok\nFinal Answer: x");
    mount(&app.llm, OPENAI_PATH, 200, reply).await;
    for (model, wanted, sent) in [
        ("gpt-5", "none", "minimal"),
        ("gpt-5.1", "minimal", "low"),
        ("o3", "minimal", "low"),
        ("gpt-5.1", "none", "none"),
    ] {
        let reply = app.post_react_step(&native_reasoning(model, wanted)).await;
        assert_eq!(reply.status, 200, "{model}: {}", reply.text);
        let asked = app.bodies_sent_to(OPENAI_PATH).await.pop().unwrap();
        assert_eq!(asked["reasoning_effort"], sent, "{model} {wanted}");
        let said = warnings(&reply.body);
        let warned = said
            .iter()
            .any(|w| w.contains(&format!("was sent as \"{sent}\"")));
        assert_eq!(warned, wanted != sent, "{model} {wanted}: {said:?}");
    }
}
