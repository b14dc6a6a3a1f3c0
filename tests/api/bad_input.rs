//! Hostile and malformed input: each is a 400 that names what is wrong (or a 413), and the
//! server goes on serving.

use serde_json::{json, Value};

use crate::support::app::{spawn_app, Reply, TestApp};
use crate::support::requests::{request, KEY};
use crate::support::spec::assert_conforms;

const PATH: &str = "/api/agent/react_step";

async fn post_bytes(app: &TestApp, content_type: Option<&str>, body: Vec<u8>) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{}{PATH}", app.address))
        .body(body);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let response = req.send().await.unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_conforms("post", PATH, status, &body);
    (status, body)
}

fn fields(body: &Value) -> Vec<String> {
    body["error"]["fields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["field"].as_str().map(str::to_string))
        .collect()
}

fn offline(query: &str) -> Value {
    let mut body = request("gpt-4o", query);
    body["mock_response"] = json!("Thought: t\nFinal Answer: a");
    body
}

async fn still_serving(app: &TestApp) {
    let reply: Reply = app.post_react_step(&offline("still there?")).await;
    assert_eq!(reply.status, 200);
}

#[tokio::test]
async fn a_body_that_is_not_json_typed_is_refused() {
    let app = spawn_app().await;
    let body = serde_json::to_vec(&offline("q")).unwrap();
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let (status, reply) = post_bytes(&app, Some(ct), body.clone()).await;
        assert_eq!(status, 400, "{ct}");
        assert_eq!(fields(&reply), ["Content-Type"], "{ct}");
    }
    for ct in [
        Some("application/json; charset=utf-8"),
        Some("application/vnd.api+json"),
        None,
    ] {
        let (status, _) = post_bytes(&app, ct, body.clone()).await;
        assert_eq!(status, 200, "{ct:?}");
    }
}

#[tokio::test]
async fn bodies_that_are_not_utf8_json_are_400s() {
    let app = spawn_app().await;
    let mut not_utf8 = serde_json::to_vec(&offline("q")).unwrap();
    let at = not_utf8.windows(3).position(|w| w == b"\"q\"").unwrap();
    not_utf8[at + 1] = 0xff;
    // In a field the contract does not know, which is skipped unread: still not UTF-8 JSON.
    let mut unknown_not_utf8 = serde_json::to_vec(&offline("q")).unwrap();
    unknown_not_utf8.pop();
    unknown_not_utf8.extend_from_slice(b",\"zz\":\"\xff\xfe\"}");
    for body in [
        unknown_not_utf8,
        not_utf8,
        Vec::new(),
        b"   ".to_vec(),
        b"null".to_vec(),
        b"[]".to_vec(),
    ] {
        let (status, reply) = post_bytes(&app, Some("application/json"), body.clone()).await;
        assert_eq!(status, 400, "{:?}", String::from_utf8_lossy(&body));
        assert_eq!(reply["error"]["type"], "invalid_request");
    }
    still_serving(&app).await;
}

/// A key pasted as the name of a field the contract does not know, deep in the body, where
/// the refusal names the field by its path: the path does not show it (the log line of the
/// refusal: `logging.rs`), and a name of megabytes is cut.
#[tokio::test]
async fn a_key_used_as_a_nested_fields_name_is_not_repeated() {
    let app = spawn_app().await;
    let huge = "n".repeat(2_000_000);
    type Place = fn(&mut Value, &str);
    let places: [(&str, Place); 3] = [
        ("llm_config.fallbacks[0].", |body, name| {
            body["llm_config"]["fallbacks"] =
                json!([{"provider": "anthropic", "modelName": "claude-sonnet-4-5", name: 1}]);
        }),
        ("react.clear_tool_results.", |body, name| {
            body["react"] = json!({"clear_tool_results": {name: 1}});
        }),
        ("conversation_history[0].reasoning_state.", |body, name| {
            body["conversation_history"] = json!([{"role": "assistant", "content": "c",
                "reasoning_state": {"provider": "openai", name: 1}}]);
        }),
    ];
    // After the keys, what makes a refused body harder to read again: bytes that are not
    // UTF-8, and the keys given a second time.
    let tails: [&[u8]; 3] = [
        b"}",
        b",\"zz\":\"\xff\"}",
        b",\"user_api_keys\":{\"llmKey\":\"another-key-0123\"}}",
    ];
    for ((path, place), tail) in places.into_iter().zip(tails) {
        for name in [KEY, "hunterhunterhunter2", huge.as_str()] {
            let mut body = offline("q");
            body["user_api_keys"]["providerKeys"] = json!({"anthropic": "hunterhunterhunter2"});
            place(&mut body, name);
            let mut bytes = serde_json::to_vec(&body).unwrap();
            bytes.pop();
            bytes.extend_from_slice(tail);
            let (status, reply) = post_bytes(&app, Some("application/json"), bytes).await;
            assert_eq!(status, 400, "{path}");
            let text = reply.to_string();
            assert!(
                !text.contains(KEY) && !text.contains("hunterhunter"),
                "{text}"
            );
            assert!(text.len() < 4_000, "{path}: {} bytes", text.len());
            assert!(fields(&reply)[0].starts_with(path), "{reply}");
        }
    }
    still_serving(&app).await;
}

/// Every struct of a request is an object in the contract: serde would also read one from an
/// array of its fields in order, and took `["b.py", "text"]` as a file. Each is a 400 naming
/// the field, at any depth.
#[tokio::test]
async fn an_array_where_an_object_belongs_is_refused_by_its_field() {
    let app = spawn_app().await;
    type Place = fn(&mut Value);
    let cases: [(&str, Place); 7] = [
        ("explicit_context[0]", |b| {
            b["explicit_context"] = json!([["b.py", "EXPLICIT"]]);
        }),
        ("implicit_context", |b| {
            b["implicit_context"] = json!(["src/a.py", "IMPLICIT", 1]);
        }),
        ("conversation_history[0].toolResult", |b| {
            b["conversation_history"] = json!([{"role": "tool_observation", "content": "c",
                "toolResult": [true, "res"]}]);
        }),
        ("conversation_history[0]", |b| {
            b["conversation_history"] = json!([["user", "hi"]]);
        }),
        ("llm_config", |b| {
            b["llm_config"] = json!(["gpt-4o", 8192, 512]);
        }),
        ("react.clear_tool_results", |b| {
            b["react"] = json!({"clear_tool_results": [3]});
        }),
        ("conversation_history[1].reasoning_state.blocks[0]", |b| {
            b["conversation_history"] = json!([{"role": "user", "content": "hi"},
                {"role": "assistant", "content": "c",
                 "reasoning_state": {"blocks": [["thinking", "t", "s"]]}}]);
        }),
    ];
    for (field, place) in cases {
        let mut body = offline("q");
        place(&mut body);
        let (status, reply) = post_bytes(
            &app,
            Some("application/json"),
            serde_json::to_vec(&body).unwrap(),
        )
        .await;
        assert_eq!(status, 400, "{field}: {reply}");
        assert_eq!(fields(&reply), [field], "{reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("invalid type: sequence, expected an object"),
            "{message}"
        );
    }
    let whole = serde_json::to_vec(&json!(["q", "gpt-4o"])).unwrap();
    let (status, reply) = post_bytes(&app, Some("application/json"), whole).await;
    assert_eq!(
        (status, fields(&reply)),
        (400, vec!["body".to_string()]),
        "{reply}"
    );
    still_serving(&app).await;
}

#[tokio::test]
async fn deep_nesting_is_refused_or_skipped_without_harm() {
    let app = spawn_app().await;
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    // Kept fields (a turn's own fields are returned to the client) stop at a depth of 128.
    let mut text = serde_json::to_string(&offline("q")).unwrap();
    let history = "\"conversation_history\":[]";
    text = text.replace(
        history,
        &format!(
            "\"conversation_history\":[{{\"role\":\"user\",\"content\":\"hi\",\"meta\":{deep}}}]"
        ),
    );
    let (status, reply) = post_bytes(&app, Some("application/json"), text.into_bytes()).await;
    assert_eq!(status, 400);
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("recursion limit"),
        "{reply}"
    );
    // An unknown field is skipped without being built, however deep.
    let mut text = serde_json::to_string(&offline("q")).unwrap();
    text.pop();
    text.push_str(&format!(",\"extra\":{deep}}}"));
    let (status, _) = post_bytes(&app, Some("application/json"), text.into_bytes()).await;
    assert_eq!(status, 200);
    still_serving(&app).await;
}

#[tokio::test]
async fn out_of_range_and_unknown_values_name_their_field() {
    let app = spawn_app().await;
    let cases = [
        (json!({"user_query": "x".repeat(1_000_001)}), "user_query"),
        (
            json!({"llm_config": {"modelName": "gpt-4o", "tokenLimit": 8192, "reservedOutputTokens": 8192}}),
            "llm_config.reservedOutputTokens",
        ),
        (
            json!({"llm_config": {"modelName": "gpt-4o", "tokenLimit": 20_000_000, "reservedOutputTokens": 1}}),
            "llm_config.tokenLimit",
        ),
        (
            json!({"llm_config": {"modelName": "gpt-4o", "tokenLimit": 8192, "reservedOutputTokens": 100, "provider": "skynet"}}),
            "llm_config.provider",
        ),
        (
            json!({"llm_config": {"modelName": "gpt-4o", "tokenLimit": 8192, "reservedOutputTokens": 100, "temperature": 9}}),
            "llm_config.temperature",
        ),
        (json!({"max_iterations_left": 0}), "max_iterations_left"),
        // A turn's first call said two ways, or two calls of one id (no result could say
        // which it answers): the one was dropped, the other sent as a request providers refuse.
        (
            json!({"conversation_history": [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": "x", "toolCall": {"id": "c9", "name": "a", "parameters": {}},
                 "toolCalls": [{"id": "c1", "name": "a", "parameters": {}}, {"id": "c2", "name": "a", "parameters": {}}]}]}),
            "conversation_history[1].toolCall",
        ),
        (
            json!({"conversation_history": [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": "x",
                 "toolCalls": [{"id": "c1", "name": "a", "parameters": {}}, {"id": "c1", "name": "a", "parameters": {"n": 2}}]}]}),
            "conversation_history[1].toolCalls[1].id",
        ),
        // No question and a history of blank turns: nothing to send but a filler.
        (
            json!({"user_query": " ", "conversation_history": [{"role": "user", "content": ""},
                {"role": "assistant", "content": " \n"}]}),
            "user_query",
        ),
        (json!({"session_id": ""}), "session_id"),
        // A number or a list where one of a field's names goes: named too, not "not JSON".
        (
            json!({"llm_config": {"modelName": "gpt-4o", "tokenLimit": 8192, "reservedOutputTokens": 100, "tool_mode": 1}}),
            "llm_config.tool_mode",
        ),
        (
            json!({"conversation_history": [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": "x", "reasoning_state": {"layout": [1, 2]}}]}),
            "conversation_history[1].reasoning_state.layout[0]",
        ),
    ];
    for (change, field) in cases {
        let mut body = request("gpt-4o", "q");
        for (k, v) in change.as_object().unwrap() {
            body[k] = v.clone();
        }
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 400, "{field}: {}", reply.text);
        assert!(
            fields(&reply.body).contains(&field.to_string()),
            "{field}: {:?}",
            fields(&reply.body)
        );
        assert!(!reply.text.contains(KEY));
    }
    // 2^64 and -0 are numbers no integer field holds: said so, not called "floating point".
    for number in ["18446744073709551616", "-0", "1.5"] {
        let text = serde_json::to_string(&request("gpt-4o", "q"))
            .unwrap()
            .replace("\"tokenLimit\":8192", &format!("\"tokenLimit\":{number}"));
        let (status, reply) = post_bytes(&app, Some("application/json"), text.into_bytes()).await;
        assert_eq!(status, 400, "{number}");
        assert_eq!(fields(&reply), ["llm_config.tokenLimit"], "{reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(message.contains("not a whole number in range"), "{message}");
    }
}

#[tokio::test]
async fn unknown_fields_are_ignored() {
    let app = spawn_app().await;
    let mut body = offline("q");
    body["a_field_from_the_future"] = json!({"nested": [1, 2, 3]});
    body["llm_config"]["someNewSetting"] = json!(true);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

/// A list over its bound is refused before anything that grows with the list is done: the
/// checks that come after (here the token budget) are not reached, and 100 times the bound in
/// context items is refused like one item too many.
#[tokio::test]
async fn a_list_over_its_bound_stops_the_conversion_at_once() {
    let app = spawn_app().await;
    let mut body = request("gpt-4o", "q");
    body["llm_config"]["reservedOutputTokens"] = json!(9000);
    body["tools"] = Value::Array(
        (0..129)
            .map(|i| json!({"name": format!("t{i}"), "parameters": {"type": "object"}}))
            .collect(),
    );
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    let fields: Vec<&str> = reply.body["error"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["tools"]);

    let mut body = request("gpt-4o", "q");
    body["explicit_context"] = Value::Array(
        (0..100_000)
            .map(|i| json!({"path": format!("f{i}.rs"), "content": "x"}))
            .collect(),
    );
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.body["error"]["fields"][0]["field"],
        "explicit_context"
    );
}

/// Top-level fields the contract does not name are ignored, and the answer's first warning names
/// them: a misspelt `conversationHistory` would otherwise lose the history without a word. The
/// names are cut, counted past eight, and hold no key.
#[tokio::test]
async fn unknown_top_level_fields_are_named_in_a_warning() {
    let app = spawn_app().await;
    let mut body = offline("q");
    body["conversationHistory"] = json!([{"role": "user", "content": "lost?"}]);
    body["x".repeat(200)] = json!({"deep": [1, 2, {"a": null}]});
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let first = reply.body["warnings"][0].as_str().unwrap_or_default();
    assert!(first.contains("`conversationHistory`"), "{first}");
    assert!(first.contains(&format!("`{}`", "x".repeat(64))), "{first}");
    assert!(!first.contains(&"x".repeat(65)), "names are cut: {first}");
    // The history sent under the wrong name did not reach the step.
    assert_eq!(
        reply.body["updated_conversation_history"][0]["content"],
        "q"
    );

    let mut many = offline("q");
    // Sorted first in the body, so named: the key in it is not.
    many[format!("a_pasted_{KEY}")] = json!(true);
    for i in 0..12 {
        many[format!("field_{i:02}")] = json!(i);
    }
    let reply = app.post_react_step(&many).await;
    assert_eq!(reply.status, 200);
    let first = reply.body["warnings"][0].as_str().unwrap_or_default();
    assert!(first.contains("`a_pasted_[REDACTED]`"), "{first}");
    assert!(first.contains("`field_06`"), "{first}");
    assert!(!first.contains("field_07"), "eight are named: {first}");
    assert!(first.contains("and 5 more"), "{first}");
    assert!(!reply.text.contains("SECRET"), "{}", reply.text);

    // A body with none gets no such warning.
    let reply = app.post_react_step(&offline("q")).await;
    assert_eq!(reply.body["warnings"], json!([]));
    still_serving(&app).await;
}

/// `user_api_keys` is an object or null, as the contract says: a derived struct would also take
/// the array of its fields (`["sk-…"]`), which schemathesis sent and got a 200 for.
#[tokio::test]
async fn user_api_keys_as_an_array_or_a_string_is_refused() {
    let app = spawn_app().await;
    for keys in [json!([KEY]), json!(KEY), json!(3)] {
        let mut body = request("gpt-4o", "q");
        body["user_api_keys"] = keys.clone();
        body["mock_response"] = json!("Thought: t\nFinal Answer: a");
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 400, "{keys}: {}", reply.text);
        assert_conforms("POST", "/api/agent/react_step", 400, &reply.body);
        assert!(!reply.text.contains(KEY), "the key is never echoed");
    }
    for keys in [json!(null), json!({}), json!({"llmKey": KEY})] {
        let mut body = request("gpt-4o", "q");
        body["user_api_keys"] = keys.clone();
        body["mock_response"] = json!("Thought: t\nFinal Answer: a");
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 200, "{keys}: {}", reply.text);
    }
    let mut body = request("gpt-4o", "q");
    body.as_object_mut().unwrap().remove("user_api_keys");
    body["mock_response"] = json!("Thought: t\nFinal Answer: a");
    assert_eq!(app.post_react_step(&body).await.status, 200);
}
