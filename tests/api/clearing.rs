//! Old tool results cleared (issue 33, part 2): `react.clear_tool_results` sends results older
//! than the last steps as placeholders, moving the line in blocks so the prompt's prefix is kept
//! for several steps at a time; the history the client keeps is untouched; Anthropic can clear
//! them itself.

use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{json, Value};
use wiremock::{Mock, Request, Respond, ResponseTemplate};

use crate::support::app::{spawn_app, TestApp};
use crate::support::prefix::{mean, reused_shares};
use crate::support::provider_rules::pairing_refusal;
use crate::support::requests::request;
use crate::support::spec::assert_conforms;
use crate::support::upstream::{
    anthropic_reply, anthropic_tool_reply, openai_reply, openai_tool_reply, ANTHROPIC_PATH,
    OPENAI_PATH,
};

const STEPS: usize = 10;

struct Loop {
    anthropic: bool,
    next: AtomicUsize,
}

impl Respond for Loop {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        if let Some(refused) = pairing_refusal(self.anthropic, &body) {
            return refused;
        }
        let step = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        let path = format!("src/part{step}.rs");
        let reply = match (self.anthropic, step == STEPS) {
            (false, true) => openai_reply("Thought: done.\nFinal Answer: read them all"),
            (true, true) => anthropic_reply("Thought: done.\nFinal Answer: read them all"),
            (false, false) => {
                let mut r = openai_tool_reply(
                    Some("Thought: next"),
                    "read_file",
                    &json!({"path": path}).to_string(),
                );
                r["choices"][0]["message"]["tool_calls"][0]["id"] = json!(format!("call_{step}"));
                r
            }
            (true, false) => {
                let mut r =
                    anthropic_tool_reply("Thought: next", "read_file", json!({"path": path}));
                r["content"][1]["id"] = json!(format!("toolu_{step}"));
                r
            }
        };
        ResponseTemplate::new(200).set_body_json(reply)
    }
}

/// A long tool result, different at every step.
fn result(step: usize) -> String {
    (0..120)
        .map(|i| format!("fn part{step}_item{i}() -> u32 {{ {i} }}\n"))
        .collect()
}

fn body(anthropic: bool, step: usize, history: &Value, clearing: Value) -> Value {
    let model = if anthropic {
        "claude-sonnet-4-5"
    } else {
        "gpt-4o"
    };
    let mut body = request(model, if step == 1 { "Read every part." } else { "" });
    body["conversation_history"] = history.clone();
    body["max_iterations_left"] = json!(STEPS + 1 - step);
    body["available_tools_prompt_segment"] = Value::Null;
    body["tools"] = json!([{"name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]);
    body["llm_config"]["tool_mode"] = json!("native");
    body["llm_config"]["tokenLimit"] = json!(128_000);
    body["max_observation_tokens"] = json!(8000);
    body["react"] = json!({"clear_tool_results": clearing});
    // The files a user keeps in context, as a real loop has: the prefix measure compares what is
    // reused with what is new in each step.
    body["explicit_context"] = json!([{"path": "src/lib.rs",
        "content": "pub fn handler(request: Request) -> Response { route(request) }\n".repeat(1500)}]);
    body
}

async fn run(anthropic: bool, clearing: Value) -> (TestApp, Vec<Value>, Value) {
    let app = spawn_app().await;
    let path = if anthropic {
        ANTHROPIC_PATH
    } else {
        OPENAI_PATH
    };
    Mock::given(wiremock::matchers::path(path))
        .respond_with(Loop {
            anthropic,
            next: AtomicUsize::new(0),
        })
        .mount(&app.llm)
        .await;
    let mut history = json!([]);
    let mut replies = Vec::new();
    for step in 1..=STEPS {
        let reply = app
            .post_react_step(&body(anthropic, step, &history, clearing.clone()))
            .await;
        assert_eq!(reply.status, 200, "step {step}: {}", reply.text);
        assert_conforms("POST", "/api/agent/react_step", 200, &reply.body);
        history = reply.body["updated_conversation_history"].clone();
        if step < STEPS {
            history.as_array_mut().unwrap().push(json!({"role": "tool_observation",
                "content": result(step), "tool_call_id": reply.body["action_details"]["tool_call_id"]}));
        }
        replies.push(reply.body);
    }
    (app, replies, history)
}

/// Which step's results each request sent whole.
fn whole_results(body: &Value) -> Vec<usize> {
    let text = body["messages"].to_string();
    (1..STEPS)
        .filter(|s| text.contains(&format!("fn part{s}_item119()")))
        .collect()
}

#[tokio::test]
async fn old_results_are_cleared_in_blocks_and_the_prefix_is_kept() {
    let (app, replies, history) =
        run(false, json!({"keep_last_steps": 2, "min_tokens": 100})).await;
    let bodies = app.bodies_sent_to(OPENAI_PATH).await;
    let kept: Vec<Vec<usize>> = bodies.iter().map(whole_results).collect();
    // Step 7 is the first with four results older than the last two steps: from then on the
    // first four go as placeholders, and none other until four more are old.
    for (i, whole) in kept.iter().enumerate() {
        let step = i + 1;
        let cleared: Vec<usize> = (1..step).filter(|s| !whole.contains(s)).collect();
        let want: Vec<usize> = if step >= 7 {
            (1..=4).collect()
        } else {
            Vec::new()
        };
        assert_eq!(cleared, want, "step {step}: results sent whole {whole:?}");
    }
    let placeholder = bodies[6]["messages"].to_string();
    assert!(
        placeholder.contains("cleared to save room: the result of read_file"),
        "{placeholder}"
    );
    // The report says so, with the tokens saved.
    let report = &replies[6]["context_report"]["cleared_tool_results"];
    assert_eq!(
        report["turns"].as_array().map(Vec::len),
        Some(4),
        "{report}"
    );
    assert!(
        report["tokens_saved"].as_u64().unwrap() > 4 * 1000,
        "{report}"
    );
    assert!(replies[5]["context_report"]
        .get("cleared_tool_results")
        .is_none());
    // The client's history is whole.
    assert!(history.to_string().contains("fn part1_item119()"));
    // The prompt's start changed once (at step 7) in ten steps: every other request begins with
    // the whole of the one before.
    let texts: Vec<String> = bodies.iter().map(|b| b["messages"].to_string()).collect();
    let breaks: Vec<usize> = texts
        .windows(2)
        .enumerate()
        .filter(|(_, w)| {
            let end = w[0].rfind("\"role\":\"tool\"").unwrap_or(0);
            !w[1].starts_with(&w[0][..end])
        })
        .map(|(i, _)| i + 2)
        .collect();
    assert_eq!(breaks, [7]);
    let ratios = reused_shares(&texts);
    let average = mean(&ratios);
    assert!(
        average >= 0.9,
        "prefix kept on average {average:.3}: {ratios:?}"
    );
}

#[tokio::test]
async fn off_by_default_and_short_results_stay() {
    let (app, _, _) = run(false, Value::Null).await;
    let bodies = app.bodies_sent_to(OPENAI_PATH).await;
    assert_eq!(
        whole_results(bodies.last().unwrap()),
        (1..STEPS).collect::<Vec<_>>()
    );
    let (app, _, _) = run(false, json!({"keep_last_steps": 2, "min_tokens": 100_000})).await;
    let bodies = app.bodies_sent_to(OPENAI_PATH).await;
    assert_eq!(
        whole_results(bodies.last().unwrap()),
        (1..STEPS).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn anthropic_clears_them_itself_when_asked() {
    let (app, replies, _) = run(true, json!({"keep_last_steps": 3, "server_side": true})).await;
    let requests = app.llm.received_requests().await.unwrap_or_default();
    let calls: Vec<_> = requests
        .iter()
        .filter(|r| r.url.path() == ANTHROPIC_PATH)
        .collect();
    for r in &calls {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            body["context_management"],
            json!({"edits": [{"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": 3}}]})
        );
        assert_eq!(
            r.headers.get("anthropic-beta").map(|v| v.as_bytes()),
            Some(&b"context-management-2025-06-27"[..])
        );
    }
    // Nothing is cleared here: the provider does it.
    let last: Value = serde_json::from_slice(&calls.last().unwrap().body).unwrap();
    assert_eq!(whole_results(&last), (1..STEPS).collect::<Vec<_>>());
    assert!(replies
        .iter()
        .all(|r| r["context_report"].get("cleared_tool_results").is_none()));
    // Elsewhere `server_side` clears here, as a provider without it cannot.
    let (app, _, _) = run(false, json!({"keep_last_steps": 2, "server_side": true})).await;
    let bodies = app.bodies_sent_to(OPENAI_PATH).await;
    assert!(!bodies
        .last()
        .unwrap()
        .to_string()
        .contains("context_management"));
    assert_eq!(whole_results(bodies.last().unwrap()), [5, 6, 7, 8, 9]);
}

#[tokio::test]
async fn bad_settings_are_a_400_naming_the_field() {
    let app = spawn_app().await;
    for bad in [
        json!({"keep_last_steps": 0}),
        json!({"keep_last_steps": 2, "min_tokens": -1}),
        json!({"keep_last_steps": 2, "keep": 1}),
        json!({"min_tokens": 10}),
        json!(3),
    ] {
        let reply = app
            .post_react_step(&body(false, 1, &json!([]), bad.clone()))
            .await;
        assert_eq!(reply.status, 400, "{bad}: {}", reply.text);
        assert_conforms("POST", "/api/agent/react_step", 400, &reply.body);
        assert!(
            reply.text.contains("clear_tool_results"),
            "{bad}: {}",
            reply.text
        );
    }
}
