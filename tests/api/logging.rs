//! The log a production server writes (JSON, `info`): one line per request with its id, status,
//! latency, provider, model and tokens, and no request content.

use serde_json::{json, Value};

use crate::support::requests::request;
use crate::support::upstream::binary_answering;

const MARKER: &str = "CONTENT-MARKER-7f3a9c";

#[tokio::test]
async fn one_line_per_request_with_its_figures_and_no_content() {
    let (_llm, server) = binary_answering("Thought: t\nFinal Answer: a").await;
    let url = format!("http://127.0.0.1:{}/api/agent/react_step", server.port);
    let client = reqwest::Client::new();

    let mut body = request("gpt-4o", &format!("Where is {MARKER}?"));
    body["conversation_history"] =
        json!([{"role": "user", "content": format!("earlier {MARKER}")}]);
    let ok = client
        .post(&url)
        .header("x-request-id", "client-req-42")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.headers()["x-request-id"], "client-req-42");
    let ok: Value = ok.json().await.unwrap();
    assert_eq!(ok["request_id"], "client-req-42");

    body["llm_config"]["tokenLimit"] = json!(-1);
    let bad = client
        .post(&url)
        .header("x-request-id", "not a usable id!")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let generated = bad.headers()["x-request-id"].to_str().unwrap().to_string();
    assert_ne!(generated, "not a usable id!");

    let log = server.stop().await;
    assert!(
        !log.contains(MARKER),
        "request content reached the log:\n{log}"
    );
    let answered: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["message"] == "request answered")
        .collect();
    assert_eq!(answered.len(), 2, "{log}");
    let span = |e: &Value| e["span"].clone();
    let first = span(&answered[0]);
    assert_eq!(first["request_id"], "client-req-42");
    assert_eq!(first["status"], 200);
    assert_eq!(first["provider"], "openai");
    assert_eq!(first["model"], "gpt-4o");
    assert_eq!(first["prompt_tokens"], 412);
    assert_eq!(first["completion_tokens"], 37);
    assert!(first["latency_ms"].as_f64().is_some(), "{first}");
    let second = span(&answered[1]);
    assert_eq!(second["request_id"], generated.as_str());
    assert_eq!(second["status"], 400);
    assert_eq!(second["error_type"], "invalid_request");
}

/// A key pasted as the name of a field deep in the body is refused by the field's path, and the
/// refusal's log line does not hold it (`bad_input.rs` checks the answer).
#[tokio::test]
async fn a_key_used_as_a_fields_name_does_not_reach_the_log() {
    let (_llm, server) = binary_answering("Thought: t\nFinal Answer: a").await;
    let url = format!("http://127.0.0.1:{}/api/agent/react_step", server.port);
    let mut body = request("gpt-4o", "q");
    let key = body["user_api_keys"]["llmKey"]
        .as_str()
        .unwrap()
        .to_string();
    body["llm_config"]["fallbacks"] =
        json!([{"provider": "openai", "modelName": "m", key.as_str(): 1}]);
    let refused = reqwest::Client::new()
        .post(&url)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let log = server.stop().await;
    assert!(log.contains("llm_config.fallbacks[0]"), "{log}");
    assert!(!log.contains(&key), "the key reached the log:\n{log}");
}
