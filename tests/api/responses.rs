//! OpenAI's Responses API (`llm_config.api: "responses"`), used statelessly: loops of five steps
//! and more through the real server, plain, streamed, in text mode and with parallel calls, each
//! of which completes only because every turn's output items go back as they came (the mock
//! refuses a request otherwise, as the real API does). Also: the reused prefix of `input`, a
//! commentary before a call, a commentary alone, usage, errors, and who serves the API.

use serde_json::{json, Value};
use wiremock::matchers::path;
use wiremock::{Mock, ResponseTemplate};

use crate::support::app::{spawn_app, spawn_app_with, TestApp};
use crate::support::prefix::reused_shares;
use crate::support::requests::request;
use crate::support::responses_upstream::{ResponsesModel, Scripted};
use crate::support::stream::post_stream;
use crate::support::upstream::OPENAI_PATH;

const RESPONSES_PATH: &str = "/v1/responses";

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Native,
    Streamed,
    Text,
}

fn read(path: &str) -> (String, Value) {
    ("read_file".into(), json!({ "path": path }))
}

fn body(mode: Mode) -> Value {
    // A long task, as a real one with its context is: the prefix measure compares what is
    // reused with what is new in each step.
    let task = format!(
        "Read the files one by one and say what they do. {}",
        "The service handles logins, sessions and their expiry. ".repeat(80)
    );
    let mut body = request("gpt-5", &task);
    body["llm_config"]["provider"] = json!("openai");
    body["llm_config"]["api"] = json!("responses");
    body["llm_config"]["tokenLimit"] = json!(64_000);
    body["llm_config"]["tool_mode"] = json!(if mode == Mode::Text { "text" } else { "native" });
    body["llm_config"]
        .as_object_mut()
        .unwrap()
        .remove("temperature");
    body["max_iterations_left"] = json!(10);
    body["tools"] = json!([{"name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]);
    body
}

async fn model(app: &TestApp, script: Vec<Scripted>) {
    Mock::given(path(RESPONSES_PATH))
        .respond_with(ResponsesModel::new(script))
        .mount(&app.llm)
        .await;
}

/// One step through the service: its reply body and status.
async fn step(app: &TestApp, body: &Value, mode: Mode) -> (u16, Value) {
    if mode != Mode::Streamed {
        let reply = app.post_react_step(body).await;
        return (reply.status, reply.body);
    }
    let streamed = post_stream(app, body).await;
    let (name, event) = streamed.terminal();
    if name == "step" {
        // Each summary part a blank line apart, then a commentary message, as the step's
        // thought has them; a preamble is never part of the answer.
        let thought = event["thought"].as_str().unwrap();
        let joined = streamed.joined("thought");
        assert_eq!(joined, thought);
        assert!(joined.contains(".\n\nThen."), "{joined:?}");
        assert!(!streamed.joined("answer").contains("Let me"));
    }
    let status = match name.as_str() {
        "step" => 200,
        _ => event["error"]["status"].as_u64().unwrap_or(500) as u16,
    };
    (status, event.clone())
}

/// The proposed calls of a step.
fn actions(step: &Value) -> Vec<Value> {
    match step["parallel_actions"].as_array() {
        Some(all) => all.clone(),
        None => vec![step["action_details"].clone()],
    }
}

/// The next request: the step's history, each call answered by its id.
fn answered(mut body: Value, step: &Value) -> Value {
    let mut history = step["updated_conversation_history"].clone();
    let turns = history.as_array_mut().unwrap();
    for action in actions(step) {
        let mut turn = json!({"role": "tool_observation",
            "content": format!("contents of {}", action["tool_args"]["path"].as_str().unwrap())});
        if action["tool_call_id"].is_string() {
            turn["tool_call_id"] = action["tool_call_id"].clone();
        }
        turns.push(turn);
    }
    body["conversation_history"] = history;
    body["user_query"] = json!("");
    body
}

/// Runs the loop to its answer; returns every step's reply.
async fn run_loop(app: &TestApp, mode: Mode, steps: usize) -> Vec<Value> {
    let mut body = body(mode);
    let mut replies = Vec::new();
    for n in 1..=steps {
        let (status, reply) = step(app, &body, mode).await;
        assert_eq!(status, 200, "step {n}: {reply}");
        replies.push(reply.clone());
        if reply["status"] == "direct_response_provided" {
            assert_eq!(n, steps, "the loop ended early");
            return replies;
        }
        assert_eq!(reply["status"], "action_proposed", "step {n}: {reply}");
        body = answered(body, &reply);
    }
    panic!("the loop did not end in {steps} steps");
}

/// The share of each request's `input` (as sent) that is the previous request's prefix.
fn reused(sent: &[Value]) -> Vec<f64> {
    let inputs: Vec<String> = sent.iter().map(|b| b["input"].to_string()).collect();
    reused_shares(&inputs)
}

/// What every request of a loop must be, and the prefix it reuses.
async fn check_requests(app: &TestApp, steps: usize) -> Vec<Value> {
    let sent = app.upstream_bodies().await;
    assert_eq!(sent.len(), steps, "one call a step");
    for (i, body) in sent.iter().enumerate() {
        assert_eq!(body["store"], false, "request {}", i + 1);
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    }
    // Every turn's items went back: one reasoning item for each step before the last.
    let last = sent[steps - 1]["input"].as_array().unwrap();
    let reasoning = last.iter().filter(|i| i["type"] == "reasoning").count();
    assert_eq!(reasoning, steps - 1, "{last:?}");
    let ratios = reused(&sent);
    eprintln!("input reused between steps: {ratios:?}");
    let average = ratios.iter().sum::<f64>() / ratios.len() as f64;
    assert!(
        average >= 0.90,
        "on average {average:.3} of each step's input is the previous one's prefix: {ratios:?}"
    );
    sent
}

fn native_script() -> Vec<Scripted> {
    vec![
        Scripted::Calls(Some("I will read a.js first.".into()), vec![read("a.js")]),
        Scripted::Calls(None, vec![read("b.js")]),
        Scripted::Calls(Some("Now c.js.".into()), vec![read("c.js")]),
        Scripted::Calls(None, vec![read("d.js")]),
        Scripted::Answer("All four files read.".into()),
    ]
}

#[tokio::test]
async fn a_native_loop_of_five_steps_carries_its_state_back() {
    let app = spawn_app().await;
    model(&app, native_script()).await;
    let replies = run_loop(&app, Mode::Native, 5).await;
    assert_eq!(replies[4]["direct_response"], "All four files read.");
    // A commentary before a call is the action's thought, after the reasoning's summary.
    let thought = replies[0]["thought"].as_str().unwrap();
    assert!(thought.contains("I will read a.js first."), "{thought}");
    assert!(thought.contains("Reasoning 1."), "{thought}");
    assert_eq!(replies[0]["action_details"]["tool_call_id"], "call_1_0");
    let state = &replies[0]["updated_conversation_history"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["reasoning_state"];
    assert_eq!(state["origin"]["api"], "responses");
    assert_eq!(state["items"][0]["type"], "reasoning");
    assert_eq!(state["items"][1]["phase"], "commentary");
    let usage = &replies[0]["usage"];
    assert_eq!(usage["prompt_tokens"], 1001);
    assert_eq!(usage["cached_prompt_tokens"], 896);
    assert_eq!(usage["reasoning_tokens"], 40);
    let sent = check_requests(&app, 5).await;
    assert_eq!(sent[0]["tool_choice"], Value::Null);
    assert_eq!(sent[0]["tools"][0]["name"], "read_file");
    assert!(sent[0]["instructions"].as_str().unwrap().len() > 100);
    // The fifth request holds the items the model wrote, as it wrote them.
    let input = sent[4]["input"].as_array().unwrap();
    let state = &replies[0]["updated_conversation_history"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["reasoning_state"]["items"];
    assert_eq!(input[1..4], state.as_array().unwrap()[..]);
}

#[tokio::test]
async fn a_streamed_loop_of_five_steps_carries_its_state_back() {
    let app = spawn_app().await;
    model(&app, native_script()).await;
    let replies = run_loop(&app, Mode::Streamed, 5).await;
    assert_eq!(replies[4]["direct_response"], "All four files read.");
    assert!(replies[2]["thought"]
        .as_str()
        .unwrap()
        .contains("Now c.js."));
    let sent = check_requests(&app, 5).await;
    assert!(sent.iter().all(|b| b["stream"] == true));
}

#[tokio::test]
async fn a_text_mode_loop_of_five_steps_carries_its_state_back() {
    let app = spawn_app().await;
    let action = |f: &str| {
        Scripted::Text(format!(
            "Thought: Read {f}.\nAction: read_file(path=\"{f}\")"
        ))
    };
    model(
        &app,
        vec![
            action("a.js"),
            action("b.js"),
            action("c.js"),
            action("d.js"),
            Scripted::Text("Thought: Done.\nFinal Answer: All four files read.".into()),
        ],
    )
    .await;
    let replies = run_loop(&app, Mode::Text, 5).await;
    assert_eq!(replies[4]["direct_response"], "All four files read.");
    assert_eq!(replies[1]["action_details"]["tool_args"]["path"], "b.js");
    let sent = check_requests(&app, 5).await;
    assert!(sent.iter().all(|b| b.get("tools").is_none()));
}

#[tokio::test]
async fn what_a_text_mode_step_left_out_of_its_turn_never_goes_back_to_the_model() {
    // No stop sequence on this API: the model writes past its action, an observation and an
    // answer of its own. The step keeps the action, and its turn goes back as kept, the
    // reasoning before it as it came (it went back verbatim: the model read what it made up).
    let app = spawn_app().await;
    model(
        &app,
        vec![
            Scripted::Text(
                "Thought: Read a.js.\nAction: read_file(path=\"a.js\")\nObservation: MADE-UP contents\nThought: Done.\nFinal Answer: MADE-UP answer".into(),
            ),
            Scripted::Text("Thought: Done.\nFinal Answer: a.js read.".into()),
        ],
    )
    .await;
    let replies = run_loop(&app, Mode::Text, 2).await;
    assert!(
        replies[0]["warnings"].to_string().contains("discarded"),
        "{}",
        replies[0]
    );
    let sent = app.upstream_bodies().await;
    let input = sent[1]["input"].as_array().unwrap();
    assert!(
        !sent[1]["input"].to_string().contains("MADE-UP"),
        "{input:?}"
    );
    let kinds: Vec<&str> = input
        .iter()
        .map(|i| i["type"].as_str().unwrap_or("message"))
        .collect();
    assert_eq!(
        kinds,
        ["message", "reasoning", "message", "message"],
        "{input:?}"
    );
    assert_eq!(
        input[2]["id"], "msg_1",
        "the message the reasoning came before"
    );
    assert_eq!(
        input[2]["content"][0]["text"],
        "Thought: Read a.js.\nAction: read_file(path=\"a.js\")"
    );
}

#[tokio::test]
async fn a_text_mode_answer_after_a_commentary_goes_back_as_the_final_answer() {
    // gpt-5.x writes a commentary, then its answer in a message of phase `final_answer`. The turn
    // went back as one message under the commentary's id and phase: the model was told its own
    // answer was commentary. Streamed or not, both messages go back as they came now.
    for mode in [Mode::Text, Mode::Streamed] {
        let app = spawn_app().await;
        model(
            &app,
            vec![
                Scripted::Answered(
                    "I will answer now.".into(),
                    "Final Answer: FORTY-TWO".into(),
                ),
                Scripted::Text("Thought: Done.\nFinal Answer: done".into()),
            ],
        )
        .await;
        let first = body(Mode::Text);
        let reply = match mode {
            Mode::Streamed => {
                let streamed = post_stream(&app, &first).await;
                let (name, event) = streamed.terminal();
                assert_eq!(name, "step", "{event}");
                event.clone()
            }
            _ => app.post_react_step(&first).await.body,
        };
        assert_eq!(reply["direct_response"], "FORTY-TWO", "{reply}");
        let mut next = first;
        next["conversation_history"] = reply["updated_conversation_history"].clone();
        next["user_query"] = json!("And then?");
        let (status, reply) = step(&app, &next, Mode::Text).await;
        assert_eq!(status, 200, "{reply}");
        let sent = app.upstream_bodies().await;
        let messages: Vec<&Value> = sent[1]["input"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["type"] == "message")
            .collect();
        let ids_and_phases: Vec<(&Value, &Value)> =
            messages.iter().map(|m| (&m["id"], &m["phase"])).collect();
        assert_eq!(
            ids_and_phases,
            [
                (&json!("msg_1"), &json!("commentary")),
                (&json!("msg_1_final"), &json!("final_answer"))
            ],
            "{messages:?}"
        );
        assert_eq!(messages[1]["content"][0]["text"], "Final Answer: FORTY-TWO");
    }
}

/// A commentary that writes the step's action as text, then a message the step does not want
/// after it (a refusal part, an observation or an answer the model made up), or nothing. The
/// refusal was the answer, the made-up observation a 502 ("no usable text"), a commentary alone
/// asked the model again, and a tagged commentary's tag stayed in the thought; streamed, the
/// thought carried the action's text and the made-up answer streamed as the answer. The action
/// is the step now, as it is when one message holds it all, streamed or not, the stream's
/// thought the step's, and what followed it never goes back to the model.
#[tokio::test]
async fn a_commentary_that_acts_is_the_step_whatever_message_follows_it() {
    let acting = "Thought: I need a.rs.\nAction: read_file(path=\"a.rs\")";
    let followers = [
        Scripted::Refused(acting.into(), "I CANNOT help with that.".into()),
        Scripted::Answered(acting.into(), "Observation: a.rs holds MADE_UP.".into()),
        Scripted::Answered(acting.into(), "Final Answer: MADE_UP answer".into()),
        Scripted::Answered(
            "Thought: I need a.rs.".into(),
            "Action: read_file(path=\"a.rs\")".into(),
        ),
        Scripted::Preamble(acting.into()),
    ];
    for first_reply in followers {
        for mode in [Mode::Text, Mode::Streamed] {
            let app = spawn_app().await;
            let done = Scripted::Text("Thought: Done.\nFinal Answer: done".into());
            model(&app, vec![first_reply.clone(), done]).await;
            let first = body(Mode::Text);
            let reply = match mode {
                Mode::Streamed => {
                    let streamed = post_stream(&app, &first).await;
                    let terminal = streamed.terminal().1.clone();
                    assert_eq!(streamed.joined("answer"), "", "{first_reply:?}");
                    assert_eq!(
                        streamed.joined("thought"),
                        terminal["thought"],
                        "{first_reply:?}"
                    );
                    terminal
                }
                _ => app.post_react_step(&first).await.body,
            };
            assert_eq!(
                reply["status"], "action_proposed",
                "{first_reply:?}: {reply}"
            );
            assert_eq!(reply["action_details"]["tool_args"]["path"], "a.rs");
            assert_eq!(reply["thought"], "Reasoning 1.\n\nThen.\n\nI need a.rs.");
            let (status, second) = step(&app, &answered(first, &reply), Mode::Text).await;
            assert_eq!((status, &second["direct_response"]), (200, &json!("done")));
            let sent = app.upstream_bodies().await;
            assert_eq!(sent.len(), 2, "one call a step: {first_reply:?}");
            let sent = sent[1]["input"].to_string();
            assert!(
                !sent.contains("MADE_UP") && !sent.contains("CANNOT"),
                "{sent}"
            );
        }
    }
}

/// Text mode, a commentary holding a `<think>` block, or only white space, before the answer:
/// the think block's tags stayed in the thought (and its text streamed twice); the blank one
/// streamed as thought. Whole and streamed, the thought is one, without tags; what streams of it
/// is the step's (text after the block and before any tag is not streamed, as in any reply).
#[tokio::test]
async fn a_commentary_that_thinks_or_is_blank_is_read_as_the_whole_reply_reads_it() {
    for commentary in ["<think>hmm</think>\nLet me look.", "  \n \n"] {
        let mut thoughts = Vec::new();
        for mode in [Mode::Text, Mode::Streamed] {
            let app = spawn_app().await;
            let answered = Scripted::Answered(commentary.into(), "Final Answer: 42".into());
            model(&app, vec![answered]).await;
            let reply = match mode {
                Mode::Streamed => {
                    let streamed = post_stream(&app, &body(Mode::Text)).await;
                    let terminal = streamed.terminal().1.clone();
                    let told = streamed.joined("thought");
                    let thought = terminal["thought"].as_str().unwrap();
                    assert!(thought.starts_with(&told), "{told:?} of {thought:?}");
                    assert!(told.ends_with("hmm") || told == thought, "{told:?}");
                    terminal
                }
                _ => app.post_react_step(&body(Mode::Text)).await.body,
            };
            assert_eq!(reply["direct_response"], "42", "{reply}");
            assert!(!reply["thought"].to_string().contains("think>"), "{reply}");
            thoughts.push(reply["thought"].clone());
        }
        assert_eq!(thoughts[0], thoughts[1], "{commentary:?}");
    }
}

#[tokio::test]
async fn a_loop_with_parallel_calls_answers_each_by_its_id() {
    let app = spawn_app().await;
    model(
        &app,
        vec![
            Scripted::Calls(None, vec![read("a.js"), read("b.js")]),
            Scripted::Calls(None, vec![read("c.js")]),
            Scripted::Calls(Some("Two more.".into()), vec![read("d.js"), read("e.js")]),
            Scripted::Calls(None, vec![read("f.js")]),
            Scripted::Answer("Six files read.".into()),
        ],
    )
    .await;
    let replies = run_loop(&app, Mode::Native, 5).await;
    let ids: Vec<&Value> = replies[2]["parallel_actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["tool_call_id"])
        .collect();
    assert_eq!(ids, [&json!("call_3_0"), &json!("call_3_1")]);
    let sent = check_requests(&app, 5).await;
    assert!(sent.iter().all(|b| b.get("parallel_tool_calls").is_none()));
}

/// The second step's request, after a first step whose state the client changed.
async fn second_step_with(change: impl FnOnce(&mut Value)) -> (u16, Value) {
    let app = spawn_app().await;
    model(&app, native_script()).await;
    let first = body(Mode::Native);
    let (_, reply) = step(&app, &first, Mode::Native).await;
    let mut next = answered(first, &reply);
    let history = next["conversation_history"].as_array_mut().unwrap();
    let turn = history
        .iter_mut()
        .find(|t| t["reasoning_state"].is_object())
        .unwrap();
    change(&mut turn["reasoning_state"]);
    step(&app, &next, Mode::Native).await
}

#[tokio::test]
async fn an_altered_or_dropped_item_gets_the_apis_refusal_through() {
    let (status, reply) = second_step_with(|state| {
        let content = state["items"][0]["encrypted_content"].as_str().unwrap();
        let altered = format!("{}00", &content[..content.len() - 2]);
        state["items"][0]["encrypted_content"] = json!(altered);
    })
    .await;
    assert_eq!(status, 400, "{reply}");
    assert_eq!(reply["error"]["type"], "llm_request_rejected");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("The encrypted content for item rs_1 could not be verified."),
        "{message}"
    );
    // Without the reasoning item, the call it came with is refused.
    let (status, reply) = second_step_with(|state| {
        state["items"].as_array_mut().unwrap().remove(0);
    })
    .await;
    assert_eq!(status, 400, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("Item 'fc_1_0' of type 'function_call' was provided without its required 'reasoning' item: 'rs_1'."),
        "{message}"
    );
    // A message without its phase.
    let (status, reply) = second_step_with(|state| {
        state["items"][1].as_object_mut().unwrap().remove("phase");
    })
    .await;
    assert_eq!(status, 400, "{reply}");
    assert!(reply["error"]["message"]
        .as_str()
        .unwrap()
        .contains("'msg_1' of type 'message' was provided without its 'phase'"));
}

#[tokio::test]
async fn a_commentary_alone_is_no_answer_and_the_step_asks_again() {
    let app = spawn_app().await;
    model(
        &app,
        vec![
            Scripted::Preamble("Let me look at the files first.".into()),
            Scripted::Answer("Nothing to read.".into()),
        ],
    )
    .await;
    let (status, reply) = step(&app, &body(Mode::Native), Mode::Native).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["status"], "direct_response_provided");
    assert_eq!(reply["direct_response"], "Nothing to read.");
    let warnings = reply["warnings"].to_string();
    assert!(
        warnings.contains("commentary") && warnings.contains("asked again"),
        "{warnings}"
    );
    assert_eq!(app.upstream_bodies().await.len(), 2);
}

#[tokio::test]
async fn a_preamble_before_an_answer_is_its_thought_not_part_of_it() {
    // Both messages once read as one answer: "Let me sum up.All four files read."
    for mode in [Mode::Native, Mode::Streamed, Mode::Text] {
        let app = spawn_app().await;
        let answer = match mode {
            Mode::Text => "Thought: All read.\nFinal Answer: All four files read.",
            _ => "All four files read.",
        };
        let script = vec![Scripted::Answered("Let me sum up.".into(), answer.into())];
        model(&app, script).await;
        let (status, reply) = step(&app, &body(mode), mode).await;
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["direct_response"], "All four files read.");
        let thought = match mode {
            Mode::Text => "Reasoning 1.\n\nThen.\n\nLet me sum up.\n\nAll read.",
            _ => "Reasoning 1.\n\nThen.\n\nLet me sum up.",
        };
        assert_eq!(reply["thought"], thought);
        let turn = reply["updated_conversation_history"].as_array().unwrap();
        let items = &turn.last().unwrap()["reasoning_state"]["items"];
        let phases: Vec<&Value> = items
            .as_array()
            .unwrap()
            .iter()
            .map(|i| &i["phase"])
            .collect();
        assert_eq!(
            phases,
            [&Value::Null, &json!("commentary"), &json!("final_answer")]
        );
    }
}

/// Two messages before a call are two paragraphs of the thought, in the reply and in the stream
/// alike: they once ran together ("Let me check.The tests first.").
#[tokio::test]
async fn messages_before_a_call_are_a_blank_line_apart_in_the_thought() {
    let shapes: [Vec<(Option<&'static str>, String)>; 2] = [
        vec![
            (Some("commentary"), "Let me check.".into()),
            (Some("final_answer"), "The tests first.".into()),
        ],
        vec![
            (None, "Let me check.".into()),
            (None, "The tests first.".into()),
        ],
    ];
    for messages in shapes {
        for mode in [Mode::Native, Mode::Streamed] {
            let app = spawn_app().await;
            let calls = vec![read("tests/a.rs")];
            model(&app, vec![Scripted::Messages(messages.clone(), calls)]).await;
            // Streamed, the step's own event: untagged text is not streamed as thought.
            let reply = match mode {
                Mode::Streamed => post_stream(&app, &body(mode)).await.terminal().1.clone(),
                _ => app.post_react_step(&body(mode)).await.body,
            };
            assert_eq!(reply["action_details"]["tool_name"], "read_file", "{reply}");
            assert_eq!(
                reply["thought"], "Reasoning 1.\n\nThen.\n\nLet me check.\n\nThe tests first.",
                "{messages:?}"
            );
        }
    }
}

/// Streamed replies whose messages and reasoning interleave tell the step's thought and answer
/// as the step has them: two answer messages with a commentary between streamed glued ("The
/// answer is42."), reasoning after a message streamed inside the thought the step put it before,
/// and with tools called natively a commentary streamed raw (its tag, its written call, its
/// blank lines).
#[tokio::test]
async fn interleaved_messages_and_reasoning_stream_as_the_step_joins_them() {
    let item = |phase: &'static str, text: &str| (Some(phase), text.to_string());
    let acting = "Thought: I need a.rs.\nAction: read_file(path=\"a.rs\")";
    let lead = "Reasoning 1.\n\nThen.";
    let shapes = [
        (
            Mode::Text,
            vec![
                item("commentary", "Let me look."),
                item("final_answer", "Final Answer: The answer is"),
                item("commentary", "Checking."),
                item("final_answer", "42."),
            ],
            format!("{lead}\n\nLet me look.\n\nChecking."),
            Some("The answer is\n\n42."),
        ),
        (
            Mode::Text,
            vec![
                item("commentary", acting),
                item("reasoning", "R2."),
                item("final_answer", "Final Answer: MADE"),
            ],
            format!("{lead}\n\nI need a.rs.\n\nR2."),
            None,
        ),
        (
            Mode::Text,
            vec![
                item("commentary", "Let me look."),
                item("reasoning", "R2."),
                item("final_answer", "Final Answer: It is 42."),
            ],
            format!("{lead}\n\nLet me look.\n\nR2."),
            Some("It is 42."),
        ),
        (
            Mode::Text,
            vec![
                item("final_answer", "Final Answer: 42"),
                item("commentary", "Done."),
            ],
            format!("{lead}\n\nDone."),
            Some("42"),
        ),
        (
            Mode::Native,
            vec![item("commentary", "  \n \n"), item("final_answer", "42")],
            lead.to_string(),
            Some("42"),
        ),
        // A summary part's white space: the step trims each part, and so does the stream.
        (
            Mode::Text,
            vec![
                item("reasoning", "\n R0 \n\n"),
                item("final_answer", "Final Answer: 42"),
            ],
            format!("{lead}\n\nR0"),
            Some("42"),
        ),
        // A commentary after the answer is thought after the answer's, in both modes.
        (
            Mode::Native,
            vec![
                item("final_answer", "Thought: first"),
                item("commentary", "second"),
            ],
            format!("{lead}\n\nfirst\n\nsecond"),
            Some("first"),
        ),
        (
            Mode::Text,
            vec![
                item("final_answer", "Thought: t\nFinal Answer: A"),
                item("commentary", "Thought: again"),
            ],
            format!("{lead}\n\nt"),
            Some("A"),
        ),
        // A commentary that acts after text is read in order with it, as a chat reply is.
        (
            Mode::Text,
            vec![
                item("final_answer", "Thought: more"),
                item("commentary", "Final Answer: A"),
            ],
            format!("{lead}\n\nmore"),
            Some("A"),
        ),
        // Markup in a commentary is not thought: only what its reading keeps is.
        (
            Mode::Text,
            vec![
                item("commentary", "plain words<think>inner</think>"),
                item("final_answer", "Final Answer: z"),
            ],
            format!("{lead}\n\ninner"),
            Some("z"),
        ),
    ];
    for (mode, messages, thought, answer) in shapes {
        let mut steps = Vec::new();
        for streamed in [false, true] {
            let app = spawn_app().await;
            model(&app, vec![Scripted::Messages(messages.clone(), vec![])]).await;
            let step = match streamed {
                true => {
                    let streamed = post_stream(&app, &body(mode)).await;
                    let step = streamed.terminal().1.clone();
                    assert_eq!(streamed.joined("thought"), step["thought"], "{messages:?}");
                    if let Some(answer) = step["direct_response"].as_str() {
                        assert_eq!(streamed.joined("answer"), answer, "{messages:?}");
                    }
                    step
                }
                false => app.post_react_step(&body(mode)).await.body,
            };
            assert_eq!(step["thought"], thought.as_str(), "{messages:?}: {step}");
            assert_eq!(step["direct_response"].as_str(), answer, "{messages:?}");
            steps.push(step);
        }
        assert_eq!(steps[0]["thought"], steps[1]["thought"]);
    }
}

/// With tools called natively, a commentary holding a tag and a written call before the real
/// call: the tag and the written call streamed as thought, and the step's thought kept them
/// when no call followed.
#[tokio::test]
async fn a_native_commentary_streams_only_its_thought() {
    let written = "Thought: x\nAction: read_file(path=\"b.rs\")";
    let shapes = [
        (
            vec![(Some("commentary"), written.to_string())],
            vec![read("a.rs")],
        ),
        (
            vec![
                (Some("commentary"), written.to_string()),
                (Some("final_answer"), "42".to_string()),
            ],
            vec![],
        ),
        (
            vec![(
                Some("commentary"),
                "pre <think>inner</think>Action: read_file(path=\"b.rs\")".to_string(),
            )],
            vec![read("a.rs")],
        ),
    ];
    for (messages, calls) in shapes {
        let app = spawn_app().await;
        model(
            &app,
            vec![Scripted::Messages(messages.clone(), calls.clone())],
        )
        .await;
        let streamed = post_stream(&app, &body(Mode::Native)).await;
        let step = streamed.terminal().1.clone();
        let thought = step["thought"].as_str().unwrap();
        assert!(
            thought == "Reasoning 1.\n\nThen.\n\nx" || thought.ends_with("inner"),
            "{step}"
        );
        assert_eq!(streamed.joined("thought"), step["thought"]);
        let app = spawn_app().await;
        model(&app, vec![Scripted::Messages(messages, calls)]).await;
        let whole = app.post_react_step(&body(Mode::Native)).await.body;
        assert_eq!(whole["thought"], step["thought"]);
        assert_eq!(whole["direct_response"], step["direct_response"]);
    }
}

#[tokio::test]
async fn upstream_errors_map_as_they_do_on_the_chat_wire() {
    let error = |status: u16, kind: &str, code: &str| {
        ResponseTemplate::new(status).set_body_json(json!({"error": {
            "message": format!("upstream says {status}"), "type": kind, "param": null, "code": code}}))
    };
    for (status, kind, code) in [
        (400, "invalid_request_error", "invalid_value"),
        (401, "invalid_request_error", "invalid_api_key"),
        (404, "invalid_request_error", "model_not_found"),
        (429, "rate_limit_exceeded", "rate_limit_exceeded"),
        (429, "insufficient_quota", "insufficient_quota"),
        (500, "server_error", "server_error"),
        (503, "server_error", "server_error"),
    ] {
        let app = spawn_app().await;
        for at in [RESPONSES_PATH, OPENAI_PATH] {
            Mock::given(path(at))
                .respond_with(error(status, kind, code))
                .mount(&app.llm)
                .await;
        }
        let responses = app.post_react_step(&body(Mode::Native)).await;
        let mut chat = body(Mode::Native);
        chat["llm_config"]["api"] = json!("chat");
        let chat = app.post_react_step(&chat).await;
        assert_ne!(responses.status, 200, "{status}");
        assert_eq!(responses.status, chat.status, "{status} {code}");
        assert_eq!(
            responses.body["error"]["type"], chat.body["error"]["type"],
            "{status} {code}"
        );
        assert_eq!(
            responses.body["error"]["retryable"], chat.body["error"]["retryable"],
            "{status} {code}"
        );
    }
}

#[tokio::test]
async fn only_the_providers_that_serve_it_take_the_api() {
    let app = spawn_app().await;
    let mut body = body(Mode::Native);
    body["llm_config"]["provider"] = json!("anthropic");
    body["llm_config"]["modelName"] = json!("claude-sonnet-4-5");
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400);
    let fields = &reply.body["error"]["fields"];
    assert_eq!(fields[0]["field"], "llm_config.api", "{fields}");
    assert!(fields[0]["message"].as_str().unwrap().contains("openai"));
    let listed = app.send("GET", "/api/providers", None).await;
    let apis = |name: &str| {
        listed.body["providers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()["apis"]
            .clone()
    };
    assert_eq!(apis("openai"), json!(["chat", "responses"]));
    assert_eq!(apis("azure"), json!(["chat", "responses"]));
    assert_eq!(apis("bedrock"), json!(["chat", "responses"]));
    assert_eq!(apis("anthropic"), json!(["chat"]));
    assert_eq!(apis("gemini"), json!(["chat"]));
}

/// Azure's deployments form (a base URL ending in `/openai`) has no Responses API: a 400 that
/// names the base URL and the v1 form to use, before any call, for the first model and a
/// fallback alike; the v1 form is taken.
#[tokio::test]
async fn azure_deployments_form_is_refused_for_the_responses_api_at_admission() {
    let app = spawn_app_with(|c| {
        c.base_urls.remove("azure");
        c.allowed_base_urls = vec!["https://*.openai.azure.com".into()];
    })
    .await;
    let mut body = body(Mode::Native);
    body["llm_config"]["provider"] = json!("azure");
    body["llm_config"]["modelName"] = json!("my-deployment");
    body["llm_config"]["base_url"] = json!("https://contoso.openai.azure.com/openai/");
    body["llm_config"]["fallbacks"] = json!([{
        "provider": "azure", "modelName": "other-deployment", "api": "responses",
        "base_url": "https://contoso.openai.azure.com/openai",
    }]);
    body["user_api_keys"]["providerKeys"] = json!({"azure": "azure-key-0123456789"});
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    let fields = &reply.body["error"]["fields"];
    let named: Vec<&str> = fields
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["field"].as_str())
        .collect();
    assert_eq!(
        named,
        ["llm_config.base_url", "llm_config.fallbacks[0].base_url"],
        "{fields}"
    );
    let said = fields[0]["message"].as_str().unwrap();
    assert!(
        said.contains("no Responses API") && said.contains("/openai/v1"),
        "{said}"
    );
    assert!(app.llm.received_requests().await.unwrap().is_empty());

    body["llm_config"]["fallbacks"] = json!([]);
    body["llm_config"]["base_url"] = json!("https://contoso.openai.azure.com/openai/v1");
    body["dry_run"] = json!(true);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}
