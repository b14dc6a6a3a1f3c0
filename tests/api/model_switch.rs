//! A loop that changes model mid-way keeps working on every provider (issue 32, item 3): Claude
//! with thinking, then Gemini 3, then the Responses API, then Claude again. Each mock refuses
//! what its real API refuses: Claude's thinking on a turn whose last call has none, or with a
//! signature another model made; Gemini's current turn without signatures; the Responses API's
//! unpaired calls and altered items. Each step's state goes only to the model that made it.

use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{json, Value};
use wiremock::{Mock, Request, Respond, ResponseTemplate};

use crate::support::app::{spawn_app, TestApp};
use crate::support::gemini_upstream::{GeminiModel, GEMINI_PATH, SKIP};
use crate::support::provider_rules::{anthropic_structure, pairing_refusal};
use crate::support::requests::request;
use crate::support::responses_upstream::{ResponsesModel, Scripted};
use crate::support::upstream::ANTHROPIC_PATH;

const RESPONSES_PATH: &str = "/v1/responses";
const CLAUDE: &str = "claude-sonnet-4-5";
const GEMINI: &str = "gemini-3-pro-preview";
const GPT: &str = "gpt-5";

/// Who answers each step (the 7th answers).
fn model_at(step: usize) -> &'static str {
    match step {
        1 | 2 | 7 => CLAUDE,
        3 | 4 => GEMINI,
        _ => GPT,
    }
}

fn signature(model: &str, step: usize) -> String {
    format!("claude-sig:{model}:{step}")
}

/// Claude with thinking: replies with a signed thinking block and a call (an answer at step 7),
/// and refuses, as the API does with thinking on, a last tool turn that does not lead with
/// thinking this model signed.
struct Claude {
    next: AtomicUsize,
}

fn anthropic_refusal(message: &str) -> ResponseTemplate {
    ResponseTemplate::new(400).set_body_json(
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}}),
    )
}

fn thinking_refusal(body: &Value) -> Option<ResponseTemplate> {
    body.get("thinking")?;
    let model = body["model"].as_str().unwrap_or_default();
    let messages = body["messages"].as_array()?;
    let last_tool_turn = messages.iter().rev().find(|m| {
        m["role"] == "assistant"
            && m["content"]
                .as_array()
                .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_use"))
    })?;
    let first = &last_tool_turn["content"][0];
    if first["type"] != "thinking" {
        return Some(anthropic_refusal("Expected `thinking` or `redacted_thinking`, but found `text`. When `thinking` is enabled, a final `assistant` message must start with a thinking block"));
    }
    let signed = first["signature"].as_str().unwrap_or_default();
    (!signed.starts_with(&format!("claude-sig:{model}:")))
        .then(|| anthropic_refusal("Invalid `signature` in `thinking` block"))
}

impl Respond for Claude {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        if let Some(refused) = pairing_refusal(true, &body).or_else(|| thinking_refusal(&body)) {
            return refused;
        }
        if let Err(why) = anthropic_structure(&body) {
            return anthropic_refusal(&why);
        }
        let step = [1, 2, 7][self.next.fetch_add(1, Ordering::SeqCst)];
        let model = body["model"].as_str().unwrap();
        let mut content = Vec::new();
        if body.get("thinking").is_some() {
            content.push(
                json!({"type": "thinking", "thinking": format!("step {step}"),
                "signature": signature(model, step)}),
            );
        }
        let stop = if step == 7 {
            content.push(json!({"type": "text", "text": "Thought: all read\nFinal Answer: done"}));
            "end_turn"
        } else {
            content.push(json!({"type": "text", "text": format!("Thought: step {step}")}));
            content.push(json!({"type": "tool_use", "id": format!("toolu_0{step}"),
                "name": "read_file", "input": {"path": format!("{step}.rs")}}));
            "tool_use"
        };
        ResponseTemplate::new(200).set_body_json(json!({"id": "msg_01", "type": "message",
            "role": "assistant", "model": model, "content": content, "stop_reason": stop,
            "usage": {"input_tokens": 500, "output_tokens": 40}}))
    }
}

fn gemini_script(step: usize) -> Vec<(&'static str, &'static str)> {
    match step {
        3 => vec![("call_g3", "3.rs")],
        4 => vec![("call_g4", "4.rs")],
        _ => Vec::new(),
    }
}

async fn switching_app() -> TestApp {
    let app = spawn_app().await;
    Mock::given(wiremock::matchers::path(ANTHROPIC_PATH))
        .respond_with(Claude {
            next: AtomicUsize::new(0),
        })
        .mount(&app.llm)
        .await;
    Mock::given(wiremock::matchers::path(GEMINI_PATH))
        .respond_with(GeminiModel {
            script: gemini_script,
        })
        .mount(&app.llm)
        .await;
    let read = |p: &str| ("read_file".to_string(), json!({ "path": p }));
    Mock::given(wiremock::matchers::path(RESPONSES_PATH))
        .respond_with(ResponsesModel::new(vec![
            Scripted::Calls(Some("I will read 5.rs.".into()), vec![read("5.rs")]),
            Scripted::Calls(None, vec![read("6.rs")]),
        ]))
        .mount(&app.llm)
        .await;
    app
}

/// Step `step`'s request, on the model of that step.
fn body(step: usize, history: &Value) -> Value {
    let model = model_at(step);
    let mut body = request(model, if step == 1 { "Read 1.rs to 6.rs" } else { "" });
    body["conversation_history"] = history.clone();
    body["max_iterations_left"] = json!(10);
    body["llm_config"]["tool_mode"] = json!("native");
    body["llm_config"]["tokenLimit"] = json!(100_000);
    body["llm_config"]
        .as_object_mut()
        .unwrap()
        .remove("temperature");
    body["tools"] = json!([{"name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]);
    let (provider, key) = match model {
        CLAUDE => ("anthropic", "sk-ant-api03-test-0123456789"),
        GEMINI => ("gemini", "AIzaSyD-test-key-0123456789abcdefghijk"),
        _ => ("openai", "sk-proj-test-0123456789abcdef"),
    };
    body["llm_config"]["provider"] = json!(provider);
    body["user_api_keys"]["llmKey"] = json!(key);
    match model {
        CLAUDE => body["llm_config"]["reasoning_effort"] = json!("low"),
        GPT => body["llm_config"]["api"] = json!("responses"),
        _ => {}
    }
    body
}

#[tokio::test]
async fn a_loop_that_moves_from_claude_to_gemini_to_responses_and_back_completes() {
    let app = switching_app().await;
    let mut history = json!([]);
    let mut warnings = Vec::new();
    for step in 1..=7 {
        let reply = app.post_react_step(&body(step, &history)).await;
        assert_eq!(
            reply.status,
            200,
            "step {step} on {}: {}",
            model_at(step),
            reply.text
        );
        warnings.push(reply.body["warnings"].to_string());
        history = reply.body["updated_conversation_history"].clone();
        let turn = history.as_array().unwrap().last().unwrap();
        // Each state is marked with the model that made it.
        if let Some(origin) = turn["reasoning_state"].get("origin") {
            assert_eq!(origin["model"], model_at(step), "step {step}");
        }
        if step == 7 {
            assert_eq!(
                reply.body["status"], "direct_response_provided",
                "{}",
                reply.text
            );
            break;
        }
        assert_eq!(
            reply.body["status"], "action_proposed",
            "step {step}: {}",
            reply.text
        );
        let id = reply.body["action_details"]["tool_call_id"].clone();
        history
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "tool_observation",
            "content": format!("the text of {step}.rs"), "tool_call_id": id}));
    }
    // Claude's own state went back to Claude at step 2 (the mock refuses its call otherwise).
    let claude = app.bodies_sent_to(ANTHROPIC_PATH).await;
    assert_eq!(claude.len(), 3);
    assert!(claude[1].to_string().contains(&signature(CLAUDE, 1)));
    // Gemini got Claude's calls with the stand-in, and its own signature back at step 4.
    let gemini = app.bodies_sent_to(GEMINI_PATH).await;
    assert_eq!(gemini.len(), 2);
    assert_eq!(
        gemini[0].to_string().matches(SKIP).count(),
        2,
        "{}",
        gemini[0]
    );
    assert!(
        warnings[2].contains("conversation_history[1]: its reasoning_state was made by anthropic"),
        "{}",
        warnings[2]
    );
    // The Responses API got the earlier turns rebuilt as calls and outputs, its own items back.
    let responses = app.bodies_sent_to(RESPONSES_PATH).await;
    assert_eq!(responses.len(), 2);
    let input = responses[0]["input"].to_string();
    for id in ["toolu_01", "toolu_02", "call_g3", "call_g4"] {
        assert!(
            input.contains(&format!("\"call_id\":\"{id}\"")),
            "{id}: {input}"
        );
    }
    assert!(
        !input.contains("claude-sig") && !input.contains("thought_signature"),
        "{input}"
    );
    assert!(responses[1]["input"]
        .to_string()
        .contains("encrypted_content"));
    // Back on Claude, whose thinking the turn's last call (the Responses API's) lacks: it is
    // asked without thinking, and says so; its own earlier state is not refused.
    assert!(claude[2].get("thinking").is_none(), "{}", claude[2]);
    assert!(
        warnings[6].contains("thinking was not asked for in this step"),
        "{}",
        warnings[6]
    );
}
