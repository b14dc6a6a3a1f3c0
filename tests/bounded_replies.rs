//! An upstream reply under the byte cap that holds millions of tiny elements (`"tool_calls":
//! [{}, {}, …]`) once cost the server gigabytes: every element was built, then carried through
//! the step. Now a list is bounded while it is decoded, so a 15 MiB reply costs what its bytes
//! and its first 64 calls cost. Peak memory is read from the server's `/proc/<pid>/status`.
//! A test binary of its own: no other test's server shares the process being measured.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "api/helpers.rs"]
#[expect(dead_code, reason = "a few of the shared helpers are used")]
mod helpers;

use serde_json::{json, Value};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use helpers::{request, RunningBinary};

/// About 15 MiB of elements, under the 16 MiB reply cap.
const EMPTY_ELEMENTS: usize = 5_000_000;

fn call(i: usize) -> Value {
    json!({"id": format!("call_{i}"), "type": "function",
           "function": {"name": "read_file", "arguments": format!("{{\"path\":\"f{i}.js\"}}")}})
}

/// 64 whole calls, then millions of `{}`, as one JSON array's text.
fn calls_then_empties(indexed: bool) -> String {
    let mut calls: Vec<String> = (0..64)
        .map(|i| {
            let mut c = call(i);
            if indexed {
                c["index"] = json!(i);
            }
            c.to_string()
        })
        .collect();
    calls.push("{}".repeat(EMPTY_ELEMENTS).replace("}{", "},{"));
    format!("[{}]", calls.join(","))
}

fn reply(stream: bool) -> ResponseTemplate {
    if stream {
        let event = format!(
            r#"{{"choices":[{{"index":0,"delta":{{"content":"Thought: read.","tool_calls":{}}}}}]}}"#,
            calls_then_empties(true)
        );
        let body = format!(
            "data: {event}\n\ndata: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"tool_calls\"}}]}}\n\ndata: [DONE]\n\n"
        );
        return ResponseTemplate::new(200).set_body_raw(body, "text/event-stream");
    }
    let body = format!(
        r#"{{"choices":[{{"index":0,"finish_reason":"tool_calls","message":{{"role":"assistant","content":"Thought: read.","tool_calls":{}}}}}]}}"#,
        calls_then_empties(false)
    );
    ResponseTemplate::new(200).set_body_raw(body, "application/json")
}

fn body(mode: &str) -> Value {
    let mut body = request("gpt-4o", "Read them all");
    body["llm_config"]["tool_mode"] = json!(mode);
    body["available_tools_prompt_segment"] = Value::Null;
    body["tools"] = json!([{"name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]);
    body
}

fn peak_rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status");
    kib / 1024
}

/// The step's answer: 200 with the first 64 calls and a warning that names the rest.
fn assert_bounded(answer: &Value, what: &str) {
    let (calls, warnings) = (&answer["parallel_actions"], answer["warnings"].to_string());
    assert_eq!(calls.as_array().map(Vec::len), Some(64), "{what}");
    let made = 64 + EMPTY_ELEMENTS;
    assert!(
        warnings.contains(&format!("the model made {made} tool calls")),
        "{what}: {warnings}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_of_millions_of_tiny_calls_costs_its_bytes_not_gigabytes() {
    let client = reqwest::Client::new();
    for (mode, stream) in [("native", false), ("text", false), ("native", true)] {
        let upstream = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(reply(stream))
            .mount(&upstream)
            .await;
        let server = RunningBinary::start(&upstream.uri(), "info").await;
        let pid = server.child.id().unwrap();
        let path = if stream {
            "/api/agent/react_step/stream"
        } else {
            "/api/agent/react_step"
        };
        let url = format!("http://127.0.0.1:{}{path}", server.port);
        let before = peak_rss_mib(pid);
        let response = client.post(&url).json(&body(mode)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{mode} stream={stream}");
        let text = response.text().await.unwrap();
        let answer: Value = if stream {
            let data = text
                .split("\n\n")
                .find(|e| e.starts_with("event: step"))
                .and_then(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
                .unwrap_or_else(|| panic!("a step event: {}", &text[..text.len().min(2000)]));
            serde_json::from_str(data).unwrap()
        } else {
            serde_json::from_str(&text).unwrap()
        };
        assert_bounded(&answer, &format!("{mode} stream={stream}"));
        let grew = peak_rss_mib(pid) - before;
        // The reply's 15 MiB are read whole (the buffer doubles as it grows) and decoded once;
        // before the bound, 1 MiB of `{}` alone cost 109 MiB and the whole reply 2.3 GB.
        eprintln!("{mode} stream={stream}: peak grew by {grew} MiB");
        assert!(
            grew < 128,
            "{mode} stream={stream}: peak memory grew by {grew} MiB"
        );
        server.stop().await;
    }
}
