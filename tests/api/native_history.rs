//! In native mode the loop goes back to the provider as its own structure: earlier calls as
//! OpenAI `tool_calls` answered by `tool` messages, or Anthropic `tool_use` blocks answered by
//! `tool_result` blocks; every call answered before anything follows it. The mocks refuse a
//! request that breaks the pairing, as the real APIs do.

use serde_json::{json, Value};
use wiremock::{Mock, Request, Respond, ResponseTemplate};

use crate::support::app::spawn_app;
use crate::support::provider_rules::pairing_refusal;
use crate::support::requests::request;
use crate::support::upstream::{anthropic_reply, openai_reply, ANTHROPIC_PATH, OPENAI_PATH};

struct Strict {
    anthropic: bool,
    reply: Value,
}

impl Respond for Strict {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        pairing_refusal(self.anthropic, &body)
            .unwrap_or_else(|| ResponseTemplate::new(200).set_body_json(self.reply.clone()))
    }
}

fn native(model: &str) -> Value {
    let mut body = request(model, "");
    body["llm_config"]["tool_mode"] = json!("native");
    body["tools"] = json!([{"name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]);
    body
}

fn history(ids: bool, answered: bool) -> Value {
    let id = |s: &str| if ids { json!(s) } else { Value::Null };
    let mut turns = vec![
        json!({"role": "user", "content": "Compare a.js and b.js"}),
        json!({"role": "assistant", "content": "I will read both.",
          "toolCall": {"id": id("call_A"), "name": "read_file", "parameters": {"path": "a.js"}},
          "toolCalls": [
            {"id": id("call_A"), "name": "read_file", "parameters": {"path": "a.js"}},
            {"id": id("call_B"), "name": "read_file", "parameters": {"path": "b.js"}}]}),
        json!({"role": "tool_observation", "content": "40 lines", "tool_call_id": id("call_A")}),
    ];
    if answered {
        turns.push(json!({"role": "tool_observation", "content": "ENOENT", "tool_call_id": id("call_B"), "is_error": true}));
    }
    Value::Array(turns)
}

async fn sent_after(
    model: &str,
    anthropic: bool,
    turns: Value,
    query: &str,
) -> (u16, Value, Value) {
    let app = spawn_app().await;
    let (path, reply) = if anthropic {
        (
            ANTHROPIC_PATH,
            anthropic_reply("Final Answer: a.js is longer"),
        )
    } else {
        (OPENAI_PATH, openai_reply("Final Answer: a.js is longer"))
    };
    Mock::given(wiremock::matchers::path(path))
        .respond_with(Strict { anthropic, reply })
        .mount(&app.llm)
        .await;
    let mut body = native(model);
    body["conversation_history"] = turns;
    body["user_query"] = json!(query);
    let reply = app.post_react_step(&body).await;
    let sent = app.upstream_bodies().await.pop().unwrap_or_default();
    (reply.status, reply.body, sent)
}

#[tokio::test]
async fn openai_gets_its_own_calls_and_tool_messages_back() {
    let (status, body, sent) = sent_after("gpt-4o", false, history(true, true), "").await;
    assert_eq!(status, 200, "{body}");
    let messages = sent["messages"].as_array().unwrap();
    let assistant = messages.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(assistant["tool_calls"][1]["id"], "call_B");
    assert_eq!(
        assistant["tool_calls"][1]["function"]["arguments"],
        "{\"path\":\"b.js\"}"
    );
    let tools: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tools.len(), 2);
    assert_eq!(tools[0]["tool_call_id"], "call_A");
    assert_eq!(tools[0]["content"], "40 lines");
    assert_eq!(tools[1]["content"], "[the tool failed] ENOENT");
    assert!(
        !sent["messages"].to_string().contains("Action:"),
        "no ReAct text in native mode"
    );
}

#[tokio::test]
async fn anthropic_gets_tool_use_blocks_answered_by_tool_results() {
    let (status, body, sent) =
        sent_after("claude-sonnet-4-5", true, history(true, true), "And c.js?").await;
    assert_eq!(status, 200, "{body}");
    let messages = sent["messages"].as_array().unwrap();
    let assistant = messages.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(assistant["content"][1]["type"], "tool_use");
    assert_eq!(assistant["content"][2]["id"], "call_B");
    let results = messages.last().unwrap()["content"].as_array().unwrap();
    assert_eq!(results[0]["type"], "tool_result");
    assert_eq!(results[1]["tool_use_id"], "call_B");
    assert_eq!(results[1]["is_error"], true);
    assert_eq!(results[2], json!({"type": "text", "text": "And c.js?"}));
}

#[tokio::test]
async fn a_call_the_client_never_answered_gets_a_placeholder_not_a_400() {
    for (model, anthropic) in [("gpt-4o", false), ("claude-sonnet-4-5", true)] {
        let (status, body, sent) =
            sent_after(model, anthropic, history(true, false), "Go on").await;
        assert_eq!(status, 200, "{model}: {body}");
        let text = sent["messages"].to_string();
        assert!(
            text.contains("no result: the client sent none"),
            "{model}: {text}"
        );
    }
}

#[tokio::test]
async fn blank_turns_leave_no_prefill_and_a_blank_failure_says_so() {
    // A blank last user turn once left the answer before it last: a prefill (which thinking
    // and the newest models refuse, and any with its trailing whitespace); a blank first one
    // left the assistant first; a blank failed result went as empty, which Anthropic refuses.
    let answered = json!([{"role": "user", "content": " "}, {"role": "assistant", "content": "42.\n"},
        {"role": "user", "content": "Why?"}, {"role": "assistant", "content": "The answer is 42.\n"},
        {"role": "user", "content": " \n"}]);
    let (status, body, sent) = sent_after("claude-sonnet-4-5", true, answered, "").await;
    assert_eq!(status, 200, "{body}");
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages.first().unwrap()["role"], "user");
    assert_eq!(messages.last().unwrap()["role"], "user");
    let mut failed = history(true, true);
    failed[3]["content"] = json!("  \n");
    let (status, body, sent) = sent_after("claude-sonnet-4-5", true, failed, "").await;
    assert_eq!(status, 200, "{body}");
    assert!(sent.to_string().contains("(the tool returned no output)"));
}

#[tokio::test]
async fn ids_another_model_made_go_as_each_provider_takes_them() {
    // Kimi K2's ids (`functions.read_file:0`) and a client's long one went as they were:
    // Anthropic refuses all but letters, digits, `_` and `-`; OpenAI ids over 40 characters.
    let long = format!("call_{}", "x".repeat(40));
    for (model, anthropic) in [("claude-sonnet-4-5", true), ("gpt-4o", false)] {
        let mut turns = history(true, true);
        for (at, id) in [(1, "functions.read_file:0"), (2, long.as_str())] {
            turns[1]["toolCalls"][at - 1]["id"] = json!(id);
        }
        turns[1]["toolCall"]["id"] = json!("functions.read_file:0");
        turns[2]["tool_call_id"] = json!("functions.read_file:0");
        turns[3]["tool_call_id"] = json!(long);
        let (status, body, sent) = sent_after(model, anthropic, turns, "").await;
        assert_eq!(status, 200, "{model}: {body}");
        let text = sent["messages"].to_string();
        let refused = if anthropic {
            "functions.read_file:0"
        } else {
            long.as_str()
        };
        assert!(!text.contains(refused), "{text}");
        // The history the client gets back keeps its own ids.
        let back = body["updated_conversation_history"].to_string();
        assert!(back.contains("functions.read_file:0") && back.contains(&long));
    }
}

#[tokio::test]
async fn an_id_given_on_the_wire_is_never_one_the_history_already_holds() {
    // A first request shows which id Anthropic is given for Kimi's `functions.read_file:0`; a
    // later turn of the next request holds that very id as its own (any id is the client's).
    let mut turns = history(true, true);
    turns[1]["toolCall"]["id"] = json!("functions.read_file:0");
    turns[1]["toolCalls"][0]["id"] = json!("functions.read_file:0");
    turns[2]["tool_call_id"] = json!("functions.read_file:0");
    let (status, body, sent) = sent_after("claude-sonnet-4-5", true, turns.clone(), "").await;
    assert_eq!(status, 200, "{body}");
    let given = sent["messages"][1]["content"]
        .as_array()
        .and_then(|blocks| blocks.iter().find(|b| b["type"] == "tool_use"))
        .map(|b| b["id"].clone())
        .unwrap_or_default();
    assert!(
        given
            .as_str()
            .is_some_and(|id| id != "functions.read_file:0"),
        "{sent}"
    );
    turns.as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": "", "toolCall": {"id": given, "name": "read_file", "parameters": {"path": "c.js"}}}),
        json!({"role": "tool_observation", "content": "12 lines", "tool_call_id": given}),
    ]);
    // The mock refuses one id twice, as Anthropic does.
    let (status, body, sent) = sent_after("claude-sonnet-4-5", true, turns, "").await;
    assert_eq!(status, 200, "{body}");
    let text = sent["messages"].to_string();
    assert_eq!(text.matches(&given.to_string()).count(), 2, "{text}");
}

#[tokio::test]
async fn a_turn_that_gives_only_its_tool_calls_goes_with_them_and_repeated_ids_go_apart() {
    // `toolCalls` without `toolCall`: the calls were dropped and the results sent as text.
    let mut turns = history(true, true);
    turns[1].as_object_mut().unwrap().remove("toolCall");
    // A later turn whose server numbered its call `call_A` again, answered.
    turns.as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": "", "toolCall": {"id": "call_A", "name": "read_file", "parameters": {"path": "c.js"}}}),
        json!({"role": "tool_observation", "content": "12 lines", "tool_call_id": "call_A"}),
    ]);
    for (model, anthropic) in [("gpt-4o", false), ("claude-sonnet-4-5", true)] {
        let (status, body, sent) = sent_after(model, anthropic, turns.clone(), "").await;
        assert_eq!(status, 200, "{model}: {body}");
        let text = sent["messages"].to_string();
        assert!(
            !text.contains("Result of an earlier tool call"),
            "{model}: {text}"
        );
        assert_eq!(text.matches("\"call_A\"").count(), 2, "{model}: {text}");
    }
}

#[tokio::test]
async fn a_history_without_ids_is_paired_in_order() {
    for (model, anthropic) in [("gpt-4o", false), ("claude-sonnet-4-5", true)] {
        let (status, body, sent) = sent_after(model, anthropic, history(false, true), "").await;
        assert_eq!(status, 200, "{model}: {body}");
        assert!(sent["messages"].to_string().contains("40 lines"), "{model}");
    }
}

#[tokio::test]
async fn a_result_whose_call_was_left_out_becomes_a_plain_observation() {
    let turns = json!([
        {"role": "user", "content": "Read a.js"},
        {"role": "tool_observation", "content": "40 lines", "tool_call_id": "call_gone"}
    ]);
    for (model, anthropic) in [("gpt-4o", false), ("claude-sonnet-4-5", true)] {
        let (status, body, sent) = sent_after(model, anthropic, turns.clone(), "").await;
        assert_eq!(status, 200, "{model}: {body}");
        let text = sent["messages"].to_string();
        assert!(
            text.contains("Result of an earlier tool call: 40 lines"),
            "{model}: {text}"
        );
    }
}

/// A result under an id no open call has (a client's slip) while calls are still open: it goes
/// after the results of those calls, which a user message between would break (a 400 on both
/// wires, which the strict mock answers as they do).
#[tokio::test]
async fn a_result_naming_no_open_call_goes_after_the_open_calls_results() {
    let mut slipped = history(true, true);
    slipped[2]["tool_call_id"] = json!("call_WRONG");
    for (model, anthropic) in [("gpt-4o", false), ("claude-sonnet-4-5", true)] {
        let (status, body, sent) = sent_after(model, anthropic, slipped.clone(), "").await;
        assert_eq!(status, 200, "{model}: {body}");
        let text = sent["messages"].to_string();
        let placeholder = text.find("no result: the client sent none").unwrap();
        let failed = text.find("ENOENT").unwrap();
        let stray = text
            .find("Result of an earlier tool call: 40 lines")
            .unwrap();
        assert!(placeholder < stray && failed < stray, "{model}: {text}");
    }
    // One call, answered under another id: its placeholder comes first.
    let single = json!([
        {"role": "user", "content": "Read a.js"},
        {"role": "assistant", "content": "I will read it.",
          "toolCall": {"id": "call_A", "name": "read_file", "parameters": {"path": "a.js"}}},
        {"role": "tool_observation", "content": "40 lines", "tool_call_id": "call_WRONG"}
    ]);
    for (model, anthropic) in [("gpt-4o", false), ("claude-sonnet-4-5", true)] {
        let (status, body, _) = sent_after(model, anthropic, single.clone(), "").await;
        assert_eq!(status, 200, "{model}: {body}");
    }
}

/// The strict mock answering each call with the next reply.
struct StrictLoop {
    anthropic: bool,
    replies: Vec<ResponseTemplate>,
    calls: std::sync::atomic::AtomicUsize,
}

impl Respond for StrictLoop {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        if let Some(refusal) = pairing_refusal(self.anthropic, &body) {
            return refusal;
        }
        let call = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.replies[call.min(self.replies.len() - 1)].clone()
    }
}

#[tokio::test]
async fn a_native_loop_round_trips_its_ids_plain_and_streamed() {
    let openai_call =
        crate::support::upstream::openai_tool_reply(None, "read_file", "{\"path\":\"a.js\"}");
    let anthropic_call =
        crate::support::upstream::anthropic_tool_reply("", "read_file", json!({"path": "a.js"}));
    let streamed_answer =
        crate::support::stream_upstream::openai_stream(&["Final Answer: ", "done"], "stop");
    for (model, anthropic, first, second, stream) in [
        (
            "gpt-4o",
            false,
            openai_call.clone(),
            ResponseTemplate::new(200).set_body_json(openai_reply("Final Answer: done")),
            false,
        ),
        (
            "gpt-4o",
            false,
            openai_call,
            ResponseTemplate::new(200).set_body_raw(streamed_answer, "text/event-stream"),
            true,
        ),
        (
            "claude-sonnet-4-5",
            true,
            anthropic_call,
            ResponseTemplate::new(200).set_body_json(anthropic_reply("Final Answer: done")),
            false,
        ),
    ] {
        let app = spawn_app().await;
        let path = if anthropic {
            ANTHROPIC_PATH
        } else {
            OPENAI_PATH
        };
        Mock::given(wiremock::matchers::path(path))
            .respond_with(StrictLoop {
                anthropic,
                replies: vec![ResponseTemplate::new(200).set_body_json(first), second],
                calls: Default::default(),
            })
            .mount(&app.llm)
            .await;
        let mut body = native(model);
        body["user_query"] = json!("What is in a.js?");
        let step1 = app.post_react_step(&body).await;
        assert_eq!(step1.status, 200, "{model}: {}", step1.text);
        let id = step1.body["action_details"]["tool_call_id"].clone();
        let mut turns = step1.body["updated_conversation_history"].clone();
        turns.as_array_mut().unwrap().push(
            json!({"role": "tool_observation", "content": "export const a = 1;", "tool_call_id": id}),
        );
        body["conversation_history"] = turns;
        body["user_query"] = json!("");
        let answer = if stream {
            let streamed = crate::support::stream::post_stream(&app, &body).await;
            streamed.terminal().1["direct_response"].clone()
        } else {
            let step2 = app.post_react_step(&body).await;
            assert_eq!(step2.status, 200, "{model}: {}", step2.text);
            step2.body["direct_response"].clone()
        };
        assert_eq!(answer, "done", "{model} (stream: {stream})");
        let sent = app.upstream_bodies().await;
        let text = sent[1]["messages"].to_string();
        assert!(
            text.contains(id.as_str().unwrap()),
            "{model}: the id went back: {text}"
        );
    }
}
