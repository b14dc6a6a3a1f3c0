//! Mistral's reasoning models (Magistral; Small 4 and Medium 3.5 asked to reason) answer with
//! `content` as a list of chunks, thinking then text, in a reply and in each streamed delta.
//! Every such reply was a 502 ("invalid type: sequence, expected a string").

use serde_json::{json, Value};
use wiremock::matchers::path;
use wiremock::{Mock, ResponseTemplate};

use crate::support::app::spawn_app;
use crate::support::requests::request;
use crate::support::stream::post_stream;

const PATH: &str = "/mistral/v1/chat/completions";

fn chunks(thinking: &str, text: &str) -> Value {
    json!([{"type": "thinking", "thinking": [{"type": "text", "text": thinking}]},
           {"type": "text", "text": text}])
}

fn body() -> Value {
    let mut body = request("magistral-medium-latest", "Where is the login code?");
    body["llm_config"]["provider"] = json!("mistral");
    body
}

const OUTPUT: &str = "Thought: Search for it.\nAction: code_search(query=\"login\")";

#[tokio::test]
async fn a_magistral_reply_is_read_its_thinking_the_thought() {
    let app = spawn_app().await;
    let reply = json!({"id": "c", "object": "chat.completion", "model": "magistral-medium-latest",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": chunks("The user wants the login code.", OUTPUT)}}],
        "usage": {"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320}});
    Mock::given(path(PATH))
        .respond_with(ResponseTemplate::new(200).set_body_json(reply))
        .mount(&app.llm)
        .await;
    let step = app.post_react_step(&body()).await;
    assert_eq!(step.status, 200, "{}", step.body);
    assert_eq!(step.body["action_details"]["tool_name"], "code_search");
    assert_eq!(
        step.body["thought"],
        "The user wants the login code.\n\nSearch for it."
    );
}

#[tokio::test]
async fn a_streamed_magistral_reply_streams_its_thinking_as_thought() {
    let app = spawn_app().await;
    let delta = |content: Value| {
        let chunk = json!({"id": "c", "object": "chat.completion.chunk", "model": "magistral-medium-latest",
            "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]});
        format!("data: {chunk}\n\n")
    };
    let thinking =
        |t: &str| json!([{"type": "thinking", "thinking": [{"type": "text", "text": t}]}]);
    let mut sse = delta(thinking("The user wants "));
    sse += &delta(thinking("the login code."));
    sse += &delta(json!([{"type": "text", "text": OUTPUT}]));
    let end = json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320}});
    sse += &format!("data: {end}\n\ndata: [DONE]\n\n");
    Mock::given(path(PATH))
        .respond_with(ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream"))
        .mount(&app.llm)
        .await;
    let streamed = post_stream(&app, &body()).await;
    let (name, step) = streamed.terminal();
    assert_eq!(name, "step", "{step}");
    assert_eq!(step["action_details"]["tool_name"], "code_search");
    assert_eq!(
        streamed.joined("thought"),
        step["thought"].as_str().unwrap()
    );
    assert!(streamed
        .joined("thought")
        .starts_with("The user wants the login code.\n\n"));
}
