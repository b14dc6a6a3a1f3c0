//! Canaries for the ways an upstream can echo the key other than whole: past the 500-character
//! cut, split across JSON fields, by spaces, dots or newlines, in `type` and `code`, with its
//! dashes or every byte percent-encoded, in upper or lower case, in rot13 and a mix of these, in
//! a reply that is not the documented JSON, in a finish reason and in an error inside a stream.
//! The real binary runs at `trace`; no piece of the key of 8 or more characters may reach a
//! response or a log line, read as is or with every character but letters and digits taken out,
//! in any case, in rot13 or percent-decoded.

use serde_json::{json, Value};
use wiremock::matchers::{body_string_contains, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::binary::RunningBinary;
use crate::support::requests::request;
use crate::support::upstream::{openai_reply, OPENAI_PATH};

/// Mixed case and digits, so no log figure or word can hold a piece of it by chance.
pub const CANARY: &str = "sk-proj-Qz7Xv3Lm9Wd2Kf8Hn4Tr6Yb1Pc5Gj0Ae3Ui7Oy";

/// Panics if `text` holds any 8 consecutive characters of the canary, as is or with everything
/// but letters and digits removed from both; in any case, in rot13, and with `%XX` decoded.
pub fn assert_no_fragment(what: &str, text: &str) {
    let alnum = |s: &str| -> String { s.chars().filter(char::is_ascii_alphanumeric).collect() };
    let decoded = percent_decoded(text);
    for text in [text, decoded.as_str()] {
        let (lower, stripped) = (text.to_ascii_lowercase(), alnum(&text.to_ascii_lowercase()));
        for key in [
            CANARY.to_ascii_lowercase(),
            rot13(&CANARY.to_ascii_lowercase()),
        ] {
            for (whole, within) in [(key.clone(), &lower), (alnum(&key), &stripped)] {
                for piece in whole.as_bytes().windows(8) {
                    let piece = std::str::from_utf8(piece).unwrap();
                    assert!(!within.contains(piece), "{what} holds {piece:?}:\n{text}");
                }
            }
        }
    }
}

fn rot13(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            'a'..='z' => char::from((c as u8 - b'a' + 13) % 26 + b'a'),
            'A'..='Z' => char::from((c as u8 - b'A' + 13) % 26 + b'A'),
            _ => c,
        })
        .collect()
}

fn percent_encoded(text: &str, hex_case: fn(String) -> String) -> String {
    text.bytes()
        .map(|b| hex_case(format!("%{b:02X}")))
        .collect()
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let (mut out, mut i) = (Vec::new(), 0);
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A step request for `query` carrying the canary as its key.
pub fn canary_request(query: &str) -> Value {
    let mut body = request("gpt-4o", query);
    body["user_api_keys"]["llmKey"] = json!(CANARY);
    body
}

fn split(every: usize, by: &str) -> String {
    CANARY
        .as_bytes()
        .chunks(every)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join(by)
}

fn error_body(message: &str) -> String {
    json!({"error": {"message": message, "type": "invalid_request_error", "code": null}})
        .to_string()
}

/// Each case: the query that selects it, the upstream's status and body, and the status the
/// client gets.
fn cases() -> Vec<(&'static str, u16, String, u16)> {
    let (head, tail) = CANARY.split_at(14);
    vec![
        // 486 characters before the key: the cut at 500 falls 14 characters into it.
        (
            "past-the-cut",
            400,
            error_body(&format!("{}{CANARY} again {CANARY}", "ab ".repeat(162))),
            400,
        ),
        (
            "whole-past-the-cut",
            429,
            error_body(&format!("{}{CANARY}", "slow down ".repeat(60))),
            429,
        ),
        (
            "json-fields",
            400,
            format!(r#"{{"a":"{head}","b":"{tail}""#),
            400,
        ),
        (
            "json-in-message",
            404,
            error_body(&format!(r#"upstream said {{"a":"{head}","b":"{tail}"}}"#)),
            400,
        ),
        ("spaces", 400, error_body(&split(5, " ")), 400),
        ("dots", 400, error_body(&split(4, ".")), 400),
        ("newlines", 500, error_body(&split(6, "\n")), 502),
        (
            "type-and-code",
            400,
            json!({"error": {"message": "refused", "type": CANARY, "code": CANARY}}).to_string(),
            400,
        ),
        (
            "error-string",
            400,
            json!({"error": format!("bad key {}", split(9, "\\\""))}).to_string(),
            400,
        ),
        (
            "percent-encoded",
            400,
            error_body(&format!(
                "GET /v1/models?key={}",
                CANARY.replace('-', "%2D")
            )),
            400,
        ),
        (
            "upper-case",
            401,
            error_body(&CANARY.to_ascii_uppercase()),
            401,
        ),
        (
            "lower-case",
            403,
            error_body(&CANARY.to_ascii_lowercase()),
            401,
        ),
        (
            "rot13",
            400,
            error_body(&format!("key {} refused", rot13(CANARY))),
            400,
        ),
        (
            "percent-every-byte",
            400,
            error_body(&format!("GET /v1?key={}", percent_encoded(CANARY, |h| h))),
            400,
        ),
        (
            "percent-lower-hex",
            503,
            error_body(&percent_encoded(CANARY, |h| h.to_ascii_lowercase())),
            502,
        ),
        (
            "mixed-encodings",
            500,
            error_body(&format!(
                "{}{}{}",
                percent_encoded(&CANARY[..10], |h| h),
                rot13(&CANARY[10..30]).to_ascii_uppercase(),
                CANARY[30..].to_ascii_lowercase()
            )),
            502,
        ),
        (
            "not-the-documented-json",
            200,
            json!({"choices": CANARY}).to_string(),
            502,
        ),
    ]
}

#[tokio::test]
async fn no_piece_of_the_key_reaches_a_response_or_a_log_line() {
    let llm = MockServer::start().await;
    for (query, status, body, _) in cases() {
        Mock::given(method("POST"))
            .and(path(OPENAI_PATH))
            .and(body_string_contains(format!("\"content\":\"{query}\"")))
            .respond_with(
                ResponseTemplate::new(status)
                    .insert_header("content-type", "application/json")
                    .set_body_string(body),
            )
            .mount(&llm)
            .await;
    }
    let mut finished = openai_reply("Thought: t\nFinal Answer: a");
    finished["choices"][0]["finish_reason"] = json!(split(7, " "));
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .and(body_string_contains("\"content\":\"finish-reason\""))
        .respond_with(ResponseTemplate::new(200).set_body_json(finished))
        .mount(&llm)
        .await;
    let in_stream = format!(
        "data: {}\n\n",
        json!({"error": {"message": format!("bad key {}", split(5, " ")), "type": CANARY}})
    );
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .and(body_string_contains("\"content\":\"in-stream\""))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("content-type", "text/event-stream")
                .set_body_string(in_stream),
        )
        .mount(&llm)
        .await;

    let server = RunningBinary::start(&llm.uri(), "trace").await;
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{}/api/agent/react_step", server.port);
    let mut cases: Vec<(&str, u16)> = cases().iter().map(|c| (c.0, c.3)).collect();
    cases.push(("finish-reason", 200));
    for (query, expected) in cases {
        let reply = client
            .post(&url)
            .json(&canary_request(query))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status().as_u16(), expected, "{query}");
        let text = reply.text().await.unwrap();
        assert_no_fragment(query, &text);
    }
    let streamed = client
        .post(format!("{url}/stream"))
        .json(&canary_request("in-stream"))
        .send()
        .await
        .unwrap();
    let events = streamed.text().await.unwrap();
    assert!(events.contains("event: error"), "{events}");
    assert_no_fragment("the stream", &events);

    let log = server.stop().await;
    assert!(log.contains("request refused"), "errors are logged: {log}");
    assert_no_fragment("the log", &log);
}

/// The key pasted into fields where it does not belong: each is refused with the field named and
/// the value never repeated, in the response or the log.
#[tokio::test]
async fn a_key_in_the_wrong_field_is_refused_without_being_repeated() {
    let llm = MockServer::start().await;
    let server = RunningBinary::start(&llm.uri(), "trace").await;
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{}", server.port);
    let url = format!("{base}/api/agent/react_step");
    let cases: [(&str, Value); 12] = [
        // Over the 256-character limit: a session id that fails validation is not echoed.
        ("session_id", json!({"session_id": CANARY.repeat(20)})),
        (
            "llm_config.provider",
            json!({"llm_config": {"provider": CANARY}}),
        ),
        (
            "llm_config.tool_mode",
            json!({"llm_config": {"tool_mode": CANARY}}),
        ),
        (
            "llm_config.tokenizer",
            json!({"llm_config": {"tokenizer": CANARY}}),
        ),
        (
            "llm_config.tokenLimit",
            json!({"llm_config": {"tokenLimit": CANARY}}),
        ),
        (
            "llm_config.temperature",
            json!({"llm_config": {"temperature": CANARY}}),
        ),
        (
            "llm_config.provider",
            json!({"llm_config": {"modelName": CANARY}}),
        ),
        ("history_strategy", json!({"history_strategy": CANARY})),
        (
            "conversation_history[0].role",
            json!({"conversation_history": [{"role": CANARY, "content": "c"}]}),
        ),
        (
            "react.thought_tag",
            json!({"react": {"thought_tag": format!("{CANARY}!")}}),
        ),
        (
            "tools[1].name",
            json!({"tools": [{"name": CANARY.replace('-', "_")}, {"name": CANARY.replace('-', "_")}]}),
        ),
        (
            "tools[0].parameters",
            json!({"tools": [{"name": "t", "parameters": {"type": CANARY}}]}),
        ),
    ];
    let mut responses = String::new();
    for (field, change) in cases {
        let mut body = canary_request("q");
        merge(&mut body, &change);
        let reply = client.post(&url).json(&body).send().await.unwrap();
        assert_eq!(reply.status(), 400, "{field}");
        let reply: Value = reply.json().await.unwrap();
        let named: Vec<&str> = reply["error"]["fields"]
            .as_array()
            .unwrap_or_else(|| panic!("{field}: {reply}"))
            .iter()
            .map(|f| f["field"].as_str().unwrap())
            .collect();
        assert!(named.contains(&field), "{field}: {reply}");
        responses.push_str(&reply.to_string());
    }
    let typed = client
        .post(&url)
        .header("content-type", CANARY)
        .body(canary_request("q").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(typed.status(), 400);
    responses.push_str(&typed.text().await.unwrap());
    let pathed = client
        .get(format!("{base}/api/{CANARY}"))
        .send()
        .await
        .unwrap();
    assert_eq!(pathed.status(), 404);
    responses.push_str(&pathed.text().await.unwrap());
    let method = reqwest::Method::from_bytes(CANARY.as_bytes()).unwrap();
    let methoded = client.request(method, &url).send().await.unwrap();
    assert_eq!(methoded.status(), 405);
    responses.push_str(&methoded.text().await.unwrap());

    let log = server.stop().await;
    assert!(
        log.contains("request refused"),
        "refusals are logged: {log}"
    );
    assert_no_fragment("a response", &responses);
    assert_no_fragment("the log", &log);
}

/// Sets every leaf of `change` in `body`, leaving its other fields as they are.
fn merge(body: &mut Value, change: &Value) {
    match (body, change) {
        (Value::Object(body), Value::Object(change)) => {
            for (k, v) in change {
                match body.get_mut(k) {
                    Some(inner) if v.is_object() => merge(inner, v),
                    _ => {
                        body.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (body, change) => *body = change.clone(),
    }
}

/// The key where the client put it by mistake in what the log does carry: the model name (a
/// 200: the service does not judge names), the `X-Request-Id`, and the arguments of an action
/// that is refused (the ERROR line names the failure, not what the model wrote).
#[tokio::test]
async fn a_key_in_what_the_log_carries_stays_out_of_it() {
    let llm = MockServer::start().await;
    let server = RunningBinary::start(&llm.uri(), "info").await;
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{}/api/agent/react_step", server.port);

    let mut named = canary_request("q");
    named["llm_config"]["modelName"] = json!(format!("gpt-4o-{CANARY}"));
    named["mock_response"] = json!("Thought: t\nFinal Answer: a");
    let reply = client
        .post(&url)
        .header("x-request-id", CANARY)
        .json(&named)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let answered = reply.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_ne!(answered, CANARY, "a key-shaped request id is replaced");
    assert_no_fragment("the answer's request id", &answered);

    let mut refused = canary_request("q");
    refused["tools"] = json!([{"name": "t", "parameters": {"type": "object",
        "properties": {"a": {"type": "integer"}}}}]);
    refused["mock_response"] = json!(format!("Thought: t\nAction: t(a=\"{CANARY}\")"));
    let reply = client.post(&url).json(&refused).send().await.unwrap();
    assert_eq!(reply.status(), 502);

    let log = server.stop().await;
    assert!(
        log.contains("request failed"),
        "the refusal is logged: {log}"
    );
    assert_no_fragment("the log", &log);
}

/// A schema of the request's holding the key (in `required`, in an `enum`), and a model whose
/// answer or call fails it: the failure quotes the schema, and went out with the key in
/// `error.message`, in the repair round's warning and in the log.
#[tokio::test]
async fn a_key_in_a_schema_the_model_fails_stays_out_of_the_failure() {
    let llm = MockServer::start().await;
    let server = RunningBinary::start(&llm.uri(), "trace").await;
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{}/api/agent/react_step", server.port);
    let mut answer = canary_request("q");
    answer["react"] = json!({"final_answer_schema": {"type": "object", "required": [CANARY]}});
    answer["mock_response"] = json!("Thought: t\nFinal Answer: {}");
    let mut call = canary_request("q");
    call["tools"] = json!([{"name": "t", "parameters": {"type": "object",
        "properties": {"mode": {"enum": [CANARY]}}}}]);
    call["mock_response"] = json!("Thought: t\nAction: t(mode=\"x\")");
    let mut repaired = canary_request("q");
    repaired["tools"] = call["tools"].clone();
    repaired["max_repair_attempts"] = json!(1);
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(openai_reply("Thought: t\nAction: t(mode=\"x\")")),
        )
        .mount(&llm)
        .await;
    let mut responses = String::new();
    for body in [answer, call, repaired.clone()] {
        let reply = client.post(&url).json(&body).send().await.unwrap();
        assert_eq!(reply.status(), 502);
        let reply: Value = reply.json().await.unwrap();
        assert_eq!(reply["error"]["type"], "invalid_model_output", "{reply}");
        assert!(
            reply["error"]["message"]
                .as_str()
                .unwrap()
                .contains("[REDACTED]"),
            "the schema is still quoted: {reply}"
        );
        responses.push_str(&reply.to_string());
    }
    // A second call of the turn that fails the schema is left out with a warning, on a 200.
    let mut second = canary_request("q");
    second["tools"] = repaired["tools"].clone();
    second["mock_response"] = json!(format!(
        "Thought: t\nAction: t(mode=\"{CANARY}\")\nAction: t(mode=\"x\")"
    ));
    let reply = client.post(&url).json(&second).send().await.unwrap();
    assert_eq!(reply.status(), 200);
    let reply: Value = reply.json().await.unwrap();
    let warnings = reply["warnings"].to_string();
    assert!(
        warnings.contains("left out") && warnings.contains("[REDACTED]"),
        "{warnings}"
    );
    assert_no_fragment("a warning", &warnings);
    let asked = llm.received_requests().await.unwrap_or_default();
    assert_eq!(asked.len(), 2, "the repair round ran");
    let repair = String::from_utf8_lossy(&asked[1].body).to_string();
    assert!(
        repair.contains("is not one of [\\\"[REDACTED]\\\"]"),
        "{repair}"
    );
    let log = server.stop().await;
    assert_no_fragment("a response", &responses);
    assert_no_fragment("the log", &log);
}
