//! A native loop is one turn (issue 32, item 0): the task is the first user message, and from
//! the second step on what follows the last assistant call is only its results. What is new in
//! a step (the focused file, the last-step notice) goes inside the turn: a text block after the
//! `tool_result` blocks on Anthropic, the last tool result's content on Chat Completions and
//! Ollama. The client here is the careless kind: it sends the task again with every step.

use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{json, Value};
use wiremock::{Mock, Request, Respond, ResponseTemplate};

use crate::support::app::{spawn_app, TestApp};
use crate::support::provider_rules::pairing_refusal;
use crate::support::requests::request;
use crate::support::upstream::{
    anthropic_reply, anthropic_tool_reply, ollama_reply, openai_reply, openai_tool_reply,
    ANTHROPIC_PATH, OLLAMA_PATH, OPENAI_PATH,
};

const TASK: &str = "Find where the session token is refreshed.";
const STEPS: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Wire {
    OpenAi,
    Anthropic,
    Ollama,
}

impl Wire {
    fn model(self) -> &'static str {
        match self {
            Self::OpenAi => "gpt-4o",
            Self::Anthropic => "claude-sonnet-4-5",
            Self::Ollama => "qwen2.5-coder:7b",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Self::OpenAi => OPENAI_PATH,
            Self::Anthropic => ANTHROPIC_PATH,
            Self::Ollama => OLLAMA_PATH,
        }
    }

    /// A call to read `file{step}.rs`, or the answer at the last step.
    fn reply(self, step: usize) -> Value {
        let path = format!("src/file{step}.rs");
        let thought = format!("Thought: file {step} should say more.");
        match (self, step == STEPS) {
            (Self::OpenAi, true) => openai_reply("Thought: found it.\nFinal Answer: in refresh()."),
            (Self::Anthropic, true) => {
                anthropic_reply("Thought: found it.\nFinal Answer: in refresh().")
            }
            (Self::Ollama, true) => ollama_reply("Thought: found it.\nFinal Answer: in refresh()."),
            (Self::OpenAi, false) => {
                let mut reply = openai_tool_reply(
                    Some(&thought),
                    "read_file",
                    &json!({ "path": path }).to_string(),
                );
                reply["choices"][0]["message"]["tool_calls"][0]["id"] =
                    json!(format!("call_{step}"));
                reply
            }
            (Self::Anthropic, false) => {
                let mut reply =
                    anthropic_tool_reply(&thought, "read_file", json!({ "path": path }));
                reply["content"][1]["id"] = json!(format!("toolu_{step}"));
                reply
            }
            (Self::Ollama, false) => {
                let mut reply = ollama_reply(&thought);
                reply["message"]["tool_calls"] =
                    json!([{"function": {"name": "read_file", "arguments": {"path": path}}}]);
                reply
            }
        }
    }
}

/// Answers the steps in order, refusing (as the real APIs do) calls and results that do not pair.
struct Upstream {
    wire: Wire,
    next: AtomicUsize,
}

impl Respond for Upstream {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        if self.wire != Wire::Ollama {
            if let Some(refusal) = pairing_refusal(self.wire == Wire::Anthropic, &body) {
                return refusal;
            }
        }
        let step = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        ResponseTemplate::new(200).set_body_json(self.wire.reply(step))
    }
}

fn focused(step: usize) -> String {
    format!("fn focused_{step}() {{ /* the file the user looks at, step {step} */ }}")
}

/// Step `step`'s request: the task again, the history so far, this step's focused file.
fn body(wire: Wire, step: usize, history: &Value, task: &str) -> Value {
    let mut body = request(wire.model(), task);
    body["conversation_history"] = history.clone();
    body["max_iterations_left"] = json!(STEPS + 1 - step);
    body["implicit_context"] = json!({"last_focused_file_path": "src/focus.rs",
        "last_focused_file_content": focused(step)});
    body["available_tools_prompt_segment"] = Value::Null;
    body["tools"] = json!([{"name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]);
    body["llm_config"]["tool_mode"] = json!("native");
    body["llm_config"]["tokenLimit"] = json!(32_000);
    if wire == Wire::Ollama {
        body["llm_config"]["provider"] = json!("ollama");
    }
    body
}

/// The service, its upstream answering the steps in order on `wire`.
async fn app_on(wire: Wire) -> TestApp {
    let app = spawn_app().await;
    Mock::given(wiremock::matchers::path(wire.path()))
        .respond_with(Upstream {
            wire,
            next: AtomicUsize::new(0),
        })
        .mount(&app.llm)
        .await;
    app
}

/// Runs the loop; what the upstream got at each step and the last history.
async fn run_loop(wire: Wire, task_at: impl Fn(usize) -> String) -> (Vec<Value>, Value) {
    let app = app_on(wire).await;
    let mut history = json!([]);
    for step in 1..=STEPS {
        let reply = app
            .post_react_step(&body(wire, step, &history, &task_at(step)))
            .await;
        assert_eq!(reply.status, 200, "{wire:?} step {step}: {}", reply.text);
        history = reply.body["updated_conversation_history"].clone();
        if step < STEPS {
            assert_eq!(
                reply.body["status"], "action_proposed",
                "{wire:?} step {step}"
            );
            history.as_array_mut().unwrap().push(json!({
                "role": "tool_observation",
                "content": format!("the text of file {step}"),
                "tool_call_id": reply.body["action_details"]["tool_call_id"],
            }));
        } else {
            assert_eq!(reply.body["status"], "direct_response_provided", "{wire:?}");
        }
    }
    (app.bodies_sent_to(wire.path()).await, history)
}

/// A message's text, whether it is a string or blocks.
fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .map(|b| {
                b["text"]
                    .as_str()
                    .or(b["content"].as_str())
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The user messages a request holds, and the messages that are not its system prompt.
fn turns(body: &Value) -> Vec<&Value> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .collect()
}

/// Whether a message is a user message that only answers calls: on Anthropic, one that starts
/// with `tool_result` blocks.
fn answers_calls(message: &Value) -> bool {
    message["content"][0]["type"] == "tool_result"
}

fn assert_one_turn(wire: Wire, sent: &[Value]) {
    assert_eq!(sent.len(), STEPS, "{wire:?}: one call per step");
    for (i, body) in sent.iter().enumerate().skip(1) {
        let step = i + 1;
        let turns = turns(body);
        // The task, once, at the start: every later user message only answers calls.
        assert_eq!(turns[0]["role"], "user", "{wire:?} step {step}");
        assert!(text_of(turns[0]).contains(TASK), "{wire:?} step {step}");
        let new_turns: Vec<&&Value> = turns[1..]
            .iter()
            .filter(|m| m["role"] == "user" && !answers_calls(m))
            .collect();
        assert!(
            new_turns.is_empty(),
            "{wire:?} step {step}: a new user turn after the task: {new_turns:?}"
        );
        let whole = body.to_string();
        assert_eq!(
            whole.matches(TASK).count(),
            1,
            "{wire:?} step {step}: the task is sent once"
        );
        // What is new in the step is inside the turn, after the last result.
        let last = turns.last().unwrap();
        let last_text = text_of(last);
        assert!(
            last_text.contains(&format!("the text of file {}", step - 1))
                && last_text.contains(&focused(step)),
            "{wire:?} step {step}: the focused file should follow the last result: {last}"
        );
        assert!(
            !whole.contains(&focused(step - 1)),
            "{wire:?} step {step}: an old focused file"
        );
        if step == STEPS {
            assert!(
                last_text.contains("This is the last step"),
                "{wire:?}: the notice"
            );
        }
        match wire {
            Wire::Anthropic => assert!(answers_calls(last), "{wire:?} step {step}: {last}"),
            Wire::OpenAi | Wire::Ollama => {
                assert_eq!(last["role"], "tool", "{wire:?} step {step}: {last}")
            }
        }
    }
}

fn user_turns(history: &Value) -> usize {
    history
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["role"] == "user")
        .count()
}

#[tokio::test]
async fn a_native_loop_on_chat_completions_is_one_turn() {
    let (sent, history) = run_loop(Wire::OpenAi, |_| TASK.to_string()).await;
    assert_one_turn(Wire::OpenAi, &sent);
    assert_eq!(user_turns(&history), 1, "the task is kept once: {history}");
}

#[tokio::test]
async fn a_native_loop_on_anthropic_is_one_turn() {
    let (sent, history) = run_loop(Wire::Anthropic, |_| TASK.to_string()).await;
    assert_one_turn(Wire::Anthropic, &sent);
    assert_eq!(user_turns(&history), 1, "the task is kept once: {history}");
}

#[tokio::test]
async fn a_native_loop_on_ollama_is_one_turn() {
    let (sent, history) = run_loop(Wire::Ollama, |_| TASK.to_string()).await;
    assert_one_turn(Wire::Ollama, &sent);
    assert_eq!(user_turns(&history), 1, "the task is kept once: {history}");
}

/// A client that clears the query after the first step (the loop driver, the TypeScript
/// client) gets the same prompts.
#[tokio::test]
async fn a_client_that_sends_the_task_once_gets_the_same_prompts() {
    let once = |step: usize| {
        if step == 1 {
            TASK.to_string()
        } else {
            String::new()
        }
    };
    let (sent_once, _) = run_loop(Wire::OpenAi, once).await;
    let (sent_again, _) = run_loop(Wire::OpenAi, |_| TASK.to_string()).await;
    assert_eq!(sent_once, sent_again);
}

/// What the user says in the middle of a loop that is not the task is a new turn, as the user
/// meant it: it is sent, and kept.
#[tokio::test]
async fn a_new_request_mid_loop_is_a_new_turn() {
    let also = "Also check the logout path.";
    let task_at = |step: usize| match step {
        3 => also.to_string(),
        _ => TASK.to_string(),
    };
    let (sent, history) = run_loop(Wire::OpenAi, task_at).await;
    let third = turns(&sent[2]);
    let last = turns(&sent[2]).last().copied().unwrap();
    assert_eq!(last["role"], "user", "{third:?}");
    assert!(text_of(last).contains(also));
    // At step 4 the task is not the latest user turn any more: sent again, it is a request of
    // its own (kept); at step 5 it repeats the latest and is left out.
    assert_eq!(user_turns(&history), 3, "{history}");
}

/// A dry run shows the prompt as the wire sends it: on the wires that keep what is new in a step
/// inside the last tool result (Chat Completions, Ollama), it is shown there, where it showed as a
/// user message of its own; a failed tool's result is shown, and counted, as those wires say it
/// (Ollama's said nothing of the failure). Anthropic's text block stays the user message after
/// the results, its failure a flag.
#[tokio::test]
async fn a_dry_run_shows_the_turns_new_text_where_the_wire_sends_it() {
    for wire in [Wire::OpenAi, Wire::Ollama, Wire::Anthropic] {
        let app = app_on(wire).await;
        let first = app.post_react_step(&body(wire, 1, &json!([]), TASK)).await;
        let mut history = first.body["updated_conversation_history"].clone();
        history.as_array_mut().unwrap().push(json!({
            "role": "tool_observation",
            "content": "the text of file 1",
            "tool_call_id": first.body["action_details"]["tool_call_id"],
            "is_error": true,
        }));
        let mut second = body(wire, 2, &history, "");
        second["dry_run"] = json!(true);
        let dry = app.post_react_step(&second).await;
        assert_eq!(dry.status, 200, "{wire:?}: {}", dry.text);
        let mut succeeded = second.clone();
        succeeded["conversation_history"][2]["is_error"] = json!(false);
        let counted = app.post_react_step(&succeeded).await.body["prompt"]["tokens"].clone();
        assert!(
            dry.body["prompt"]["tokens"].as_u64() > counted.as_u64(),
            "{wire:?}: the failure is counted"
        );
        second["dry_run"] = json!(false);
        assert_eq!(app.post_react_step(&second).await.status, 200);

        let shown = dry.body["prompt"]["messages"].as_array().unwrap()[1..].to_vec();
        let sent = app.bodies_sent_to(wire.path()).await;
        let sent = turns(&sent[1]);
        let roles: Vec<&str> = shown.iter().map(|m| m["role"].as_str().unwrap()).collect();
        let last = shown.last().unwrap();
        match wire {
            Wire::Anthropic => {
                assert_eq!(roles, ["user", "assistant", "tool", "user"], "{shown:?}");
                assert!(text_of(last).contains(&focused(2)));
            }
            Wire::OpenAi | Wire::Ollama => {
                assert_eq!(roles, ["user", "assistant", "tool"], "{wire:?}: {shown:?}");
                assert_eq!(text_of(last), text_of(sent.last().unwrap()), "{wire:?}");
                assert!(text_of(last).starts_with("[the tool failed] the text of file 1"));
                assert!(text_of(last).contains(&focused(2)));
                assert_eq!(shown.len(), sent.len());
            }
        }
    }
}
