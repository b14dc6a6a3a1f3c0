//! Issue 14, items 8–15, as one session: the mock upstream replays what a real 0.5B coding
//! model (Qwen2.5-Coder-0.5B-Instruct through llama-cpp-python) did over a loop, step by step,
//! with the history the service hands back carried into the next step, and each answer is
//! checked as the plugin would receive it.

use reactstep::llm::sse::SseDecoder;
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, ResponseTemplate};

use crate::support::app::{spawn_app, Reply, TestApp};
use crate::support::requests::request;
use crate::support::stream::STREAM_PATH;
use crate::support::stream_upstream::openai_stream;
use crate::support::upstream::{openai_reply, OPENAI_PATH};

/// Each reply bills 100 prompt and 10 completion tokens, so sums show how many were paid.
fn billed(content: &str, finish: &str) -> Value {
    let mut reply = openai_reply(content);
    reply["choices"][0]["finish_reason"] = json!(finish);
    reply["usage"]["prompt_tokens"] = json!(100);
    reply["usage"]["completion_tokens"] = json!(10);
    reply["usage"]["total_tokens"] = json!(110);
    reply
}

fn tools() -> Value {
    json!([
        {"name": "read_file", "description": "Read a file.",
         "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
        {"name": "code_search", "description": "Search the code.",
         "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}
    ])
}

/// The session: its history so far, carried from each answer to the next request.
struct Session {
    app: TestApp,
    history: Value,
    calls: usize,
}

impl Session {
    async fn start() -> Self {
        Self {
            app: spawn_app().await,
            history: json!([]),
            calls: 0,
        }
    }

    fn body(&self) -> Value {
        let mut body = request("qwen2.5-coder:0.5b", "Where is the session timeout set?");
        body["llm_config"]["provider"] = json!("openai");
        body["tools"] = tools();
        body["available_tools_prompt_segment"] = Value::Null;
        body["conversation_history"] = self.history.clone();
        body["max_iterations_left"] = json!(20);
        body
    }

    /// Serves `replies` for this step, one per model call, and checks they were all asked for.
    async fn step(&mut self, replies: Vec<Value>) -> Reply {
        self.app.llm.reset().await;
        let expected = replies.len();
        for reply in replies {
            Mock::given(method("POST"))
                .and(path(OPENAI_PATH))
                .respond_with(ResponseTemplate::new(200).set_body_json(reply))
                .up_to_n_times(1)
                .mount(&self.app.llm)
                .await;
        }
        let reply = self.app.post_react_step(&self.body()).await;
        assert_eq!(
            self.app.upstream_bodies().await.len(),
            expected,
            "model calls in step {}",
            self.calls
        );
        self.calls += 1;
        if let Some(history) = reply.body.get("updated_conversation_history") {
            self.history = history.clone();
        }
        reply
    }

    /// The last repair message the service sent the model in this step.
    async fn repair_feedback(&self) -> String {
        let bodies = self.app.upstream_bodies().await;
        bodies
            .last()
            .and_then(|b| {
                b["messages"].as_array()?.last()?["content"]
                    .as_str()
                    .map(str::to_string)
            })
            .unwrap_or_default()
    }
}

fn action(reply: &Reply) -> (String, Value) {
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "action_proposed", "{}", reply.text);
    let details = &reply.body["action_details"];
    (
        details["tool_name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        details["tool_args"].clone(),
    )
}

fn usage_calls(reply: &Reply) -> u64 {
    reply.body["usage"]["completion_tokens"]
        .as_u64()
        .unwrap_or(0)
        / 10
}

/// No ReAct tag and none of the service's own words in what the user reads.
fn assert_clean_answer(answer: &str) {
    for tag in [
        "Thought:",
        "Action:",
        "Action Input:",
        "Observation:",
        "Final Answer:",
    ] {
        assert!(!answer.contains(tag), "the answer holds {tag}: {answer:?}");
    }
    for ours in [
        "Answer again",
        "there is no tool named",
        "<tool name>",
        "<value>",
    ] {
        assert!(
            !answer.contains(ours),
            "the answer holds the service's words: {answer:?}"
        );
    }
}

#[tokio::test]
async fn a_small_model_session_gets_only_actions_it_meant_and_clean_answers() {
    let mut s = Session::start().await;
    let good_read =
        "Thought: The settings file should hold it.\nAction: read_file(path=\"src/settings.py\")";

    // 8: it copies the format example; the repair round gets the real call.
    let reply = s
        .step(vec![
            billed(
                "Thought: I will search.\nAction: tool_name(param=\"value\", other_param=2)",
                "stop",
            ),
            billed(good_read, "stop"),
        ])
        .await;
    assert_eq!(
        action(&reply),
        ("read_file".into(), json!({"path": "src/settings.py"}))
    );
    assert!(
        s.repair_feedback().await.contains("placeholder"),
        "{}",
        s.repair_feedback().await
    );
    assert_eq!(usage_calls(&reply), 2, "item 15: both calls billed");

    // 9: it copies a signature from the tool list.
    let reply = s
        .step(vec![
            billed(
                "Thought: Read it.\nAction: read_file(path: string) — Read a file.",
                "stop",
            ),
            billed(good_read, "stop"),
        ])
        .await;
    assert_eq!(action(&reply).1, json!({"path": "src/settings.py"}));
    assert!(s.repair_feedback().await.contains("signature"));

    // 10: a real call with the example's extra argument.
    let reply = s
        .step(vec![
            billed(
                "Thought: Search.\nAction: code_search(query=\"timeout\", other_param=2)",
                "stop",
            ),
            billed(
                "Thought: Search.\nAction: code_search(query=\"timeout\")",
                "stop",
            ),
        ])
        .await;
    assert_eq!(
        action(&reply),
        ("code_search".into(), json!({"query": "timeout"}))
    );

    // 11: passed-through markup is the action, never the thought.
    let reply = s
        .step(vec![billed(
            "Let me look at the config.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"config.py\"}}\n</tool_call><|im_end|>",
            "stop",
        )])
        .await;
    assert_eq!(action(&reply).1, json!({"path": "config.py"}));
    assert_eq!(reply.body["thought"], "Let me look at the config.");

    // 12: an answer holding a step, then an answer repeating the repair message: no answer.
    let reply = s
        .step(vec![
            billed("Final Answer: Thought: I should read it.\n\nAction: read_file(path=\"a.py\")", "stop"),
            billed("Thought: ok\nFinal Answer: Error: there is no tool named 'tool_name'. Answer again in the required format.", "stop"),
        ])
        .await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "invalid_model_output");
    assert_eq!(
        usage_calls(&reply),
        2,
        "item 15: an error reports both calls"
    );

    // 14: a thought alone, then a cut-off answer: repair rounds, never the thought as answer.
    let reply = s
        .step(vec![
            billed("Thought: The timeout is probably in settings.", "stop"),
            billed(
                "Thought: Found it.\nFinal Answer: SESSION_TIMEOUT = 30 * 60 in src/settings.py.",
                "stop",
            ),
        ])
        .await;
    assert_eq!(
        reply.body["direct_response"],
        "SESSION_TIMEOUT = 30 * 60 in src/settings.py."
    );
    assert_clean_answer(reply.body["direct_response"].as_str().unwrap_or_default());
    let reply = s
        .step(vec![
            billed(
                "Thought: Found it.\nFinal Answer: The timeout is set in",
                "length",
            ),
            billed(
                "Thought: Found it.\nFinal Answer: The timeout is set in",
                "length",
            ),
        ])
        .await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    assert!(reply.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("cut off"));
    assert_eq!(usage_calls(&reply), 2);

    // The history carried every proposed action: the session went on through each step.
    let turns = s.history.as_array().map_or(0, Vec::len);
    assert!(turns >= 5, "{}", s.history);
}

#[tokio::test]
async fn an_invented_answer_after_an_action_is_never_streamed() {
    // 13: the action, then a Final Answer the model made up: no `answer` event at all.
    let app = spawn_app().await;
    let output = "Thought: Read the settings.\nAction: read_file(path=\"src/settings.py\")\nFinal Answer: The timeout is 30 minutes.";
    let deltas: Vec<String> = output
        .chars()
        .collect::<Vec<_>>()
        .chunks(3)
        .map(|c| c.iter().collect())
        .collect();
    let deltas: Vec<&str> = deltas.iter().map(String::as_str).collect();
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(openai_stream(&deltas, "stop"), "text/event-stream"),
        )
        .mount(&app.llm)
        .await;
    let mut body = request("gpt-4o", "Where is the session timeout set?");
    body["tools"] = tools();
    body["available_tools_prompt_segment"] = Value::Null;

    let bytes = app
        .client
        .post(format!("{}{STREAM_PATH}", app.address))
        .json(&body)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .unwrap_or_else(|e| panic!("{e}"));
    let bytes = bytes.bytes().await.unwrap_or_default();
    let events = SseDecoder::default().push(&bytes).unwrap_or_default();
    let names: Vec<&str> = events.iter().filter_map(|e| e.event.as_deref()).collect();
    assert!(!names.contains(&"answer"), "{names:?}");
    let step = events
        .iter()
        .find(|e| e.event.as_deref() == Some("step"))
        .map(|e| e.data.clone());
    let step: Value = serde_json::from_str(&step.unwrap_or_default()).unwrap_or_default();
    assert_eq!(step["status"], "action_proposed");
    assert_eq!(step["thought"], "Read the settings.");
}
