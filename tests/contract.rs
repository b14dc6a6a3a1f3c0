//! Contract testing with schemathesis: it reads openapi.yaml, generates valid and invalid
//! requests for every operation, sends them to the live server, and checks that no answer is a
//! server error (beyond the documented 502 `invalid_model_output`), that every status is
//! documented, and that every response conforms to the spec. The upstream is a wire-exact mock
//! that always answers, so what is tested is the service alone.
//!
//! schemathesis comes from PyPI into a virtualenv under the target directory, installed by the
//! first run and reused after it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;

use reactstep::config::Config;
use reactstep::startup::Application;
use serde_json::json;
use wiremock::matchers::{body_string_contains, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

#[path = "support/venv.rs"]
mod venv;

const SCHEMATHESIS: &str = "schemathesis==4.32.5";

/// The virtualenv's `st`, installed when missing.
async fn schemathesis() -> PathBuf {
    let made = || {
        venv::ready(
            "contract-venv",
            SCHEMATHESIS.as_bytes(),
            &[&["--quiet", SCHEMATHESIS]],
        )
    };
    tokio::task::spawn_blocking(made)
        .await
        .expect("the venv is made")
        .join("st")
}

/// An upstream that answers every provider, streamed or not, with a valid final answer.
async fn upstream() -> MockServer {
    let llm = MockServer::start().await;
    let text = "Thought: The answer is known.\nFinal Answer: In src/auth.js.";
    let openai_sse = format!(
        "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
        json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
               "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": null}]}),
        json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
               "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    );
    let anthropic_sse = [
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "model": "claude", "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 12}}),
        json!({"type": "message_stop"}),
    ]
    .iter()
    .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
    .collect::<String>();
    let openai = json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": null}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 12, "total_tokens": 112}});
    let anthropic = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 100, "output_tokens": 12}});
    for at in ["/v1/chat/completions", "/ollama/v1/chat/completions"] {
        Mock::given(method("POST"))
            .and(path(at))
            .and(body_string_contains("\"stream\":true"))
            .respond_with(
                ResponseTemplate::new(200).set_body_raw(openai_sse.clone(), "text/event-stream"),
            )
            .with_priority(1)
            .mount(&llm)
            .await;
        Mock::given(method("POST"))
            .and(path(at))
            .respond_with(ResponseTemplate::new(200).set_body_json(&openai))
            .with_priority(2)
            .mount(&llm)
            .await;
    }
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(body_string_contains("\"stream\":true"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(anthropic_sse, "text/event-stream"))
        .with_priority(1)
        .mount(&llm)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(200).set_body_json(&anthropic))
        .with_priority(2)
        .mount(&llm)
        .await;
    llm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error_and_no_response_off_the_contract() {
    let st = schemathesis().await;
    let llm = upstream().await;
    let mut config = Config::defaults();
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.openai_base_url = format!("{}/v1", llm.uri());
    config.anthropic_base_url = llm.uri();
    config.ollama_base_url = format!("{}/ollama/v1", llm.uri());
    // Every other provider speaks Chat Completions: the same mock answers them all, so a
    // fuzzed `provider` never reaches a real host.
    for provider in reactstep::llm::Provider::all() {
        let name = provider.name();
        if !["openai", "anthropic", "ollama"].contains(&name) {
            config
                .base_urls
                .insert(name.to_string(), format!("{}/v1", llm.uri()));
        }
    }
    config.workers = 2;
    let app = Application::build(&config).unwrap();
    let url = format!("http://127.0.0.1:{}", app.port());
    tokio::spawn(app.run_until_stopped());

    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = tokio::process::Command::new(&st)
        .arg("--config-file")
        .arg(here.join("tests/contract/schemathesis.toml"))
        .arg("run")
        .arg(here.join("openapi.yaml"))
        .args(["--url", &url, "--checks", "all", "--max-examples", "60"])
        .args(["--exclude-checks", "positive_data_acceptance"])
        .args(["--seed", "20261122", "--workers", "1", "--no-color"])
        // No examples kept from earlier runs: the seed alone decides what is sent, here as on
        // a clean clone.
        .args(["--generation-database", "none"])
        // Its cache and reports go to the target directory, not the repository.
        .current_dir(env!("CARGO_TARGET_TMPDIR"))
        .env("SCHEMATHESIS_HOOKS", "hooks")
        .env("PYTHONPATH", here.join("tests/contract"))
        .stdin(Stdio::null())
        .output()
        .await
        .expect("schemathesis runs");
    let report = String::from_utf8_lossy(&output.stdout);
    let summary: String = report
        .lines()
        .skip_while(|l| !l.contains("SUMMARY"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        output.status.success(),
        "schemathesis found problems:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Count the spec's operations, so that a new endpoint cannot go untested.
    let spec: serde_yaml::Value =
        serde_yaml::from_str(reactstep::api::OPENAPI_YAML).expect("the spec parses");
    let operations: usize = spec["paths"].as_mapping().map_or(0, |paths| {
        paths
            .values()
            .map(|p| p.as_mapping().map_or(0, |m| m.len()))
            .sum()
    });
    let tested = summary
        .split("Tested:")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse::<usize>().ok());
    assert_eq!(
        tested,
        Some(operations),
        "not every operation was tested:\n{summary}"
    );
}
