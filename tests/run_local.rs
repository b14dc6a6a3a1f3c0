//! `reactstep run` pointed at a local model server: the real binary, its in-process service and
//! a mock llama.cpp or Ollama on loopback that says its window the way the real ones do
//! (llama.cpp at `/props`, Ollama at `/api/show`). The window it says is the step's
//! `tokenLimit`, a quarter of a small one is kept for the answer, and the flags win over both.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use support::stream_upstream::openai_stream;
use support::workspace::workspace;

const ANSWER: &str = "Thought: nothing to look up\nFinal Answer: 42";

/// Runs `reactstep run` with `env` set; exit code, the JSON report and stderr.
async fn run(env: &[(&str, String)], extra: &[&str]) -> (i32, Value, String) {
    let ws = workspace();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_reactstep"));
    command
        .args([
            "run",
            "What is the answer?",
            "--output",
            "json",
            "--workspace",
        ])
        .arg(ws.path())
        .args(extra)
        .env_remove("OPENAI_API_KEY")
        .env_remove("REACTSTEP_OLLAMA_BASE_URL")
        .env_remove("REACTSTEP_OPENAI_COMPATIBLE_BASE_URL");
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().await.unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    let report = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (output.status.code().unwrap_or(-1), report, stderr)
}

/// llama.cpp's server: `/props` says `n_ctx` (when `window` is given), chat answers `ANSWER`
/// as a stream.
async fn llama_cpp(window: Option<u32>) -> MockServer {
    let server = MockServer::start().await;
    if let Some(n_ctx) = window {
        let props = json!({
            "default_generation_settings": {"n_ctx": n_ctx, "params": {"temperature": 0.8}},
            "total_slots": 1, "model_path": "qwen2.5-coder-0.5b-q4_k_m.gguf",
            "chat_template": "{%- if tools %}…", "build_info": "b7000"
        });
        Mock::given(method("GET"))
            .and(path("/props"))
            .respond_with(ResponseTemplate::new(200).set_body_json(props))
            .mount(&server)
            .await;
    }
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(openai_stream(&[ANSWER], "stop"), "text/event-stream"),
        )
        .mount(&server)
        .await;
    server
}

/// The bodies of the chat requests `server` received.
async fn chats(server: &MockServer, at: &str) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.url.path() == at)
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

fn compatible_env(server: &MockServer) -> Vec<(&'static str, String)> {
    vec![(
        "REACTSTEP_OPENAI_COMPATIBLE_BASE_URL",
        format!("{}/v1", server.uri()),
    )]
}

#[tokio::test]
async fn llama_cpps_window_is_the_steps_token_limit_and_a_quarter_is_kept_for_the_answer() {
    let server = llama_cpp(Some(4096)).await;
    let (code, report, stderr) = run(
        &compatible_env(&server),
        &[
            "--provider",
            "openai_compatible",
            "--model",
            "qwen2.5-coder",
        ],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["answer"], "42");
    assert!(
        stderr.contains("a window of 4096 tokens (llama.cpp's /props)"),
        "{stderr}"
    );
    let sent = chats(&server, "/v1/chat/completions").await;
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0]["max_tokens"], 1024,
        "a quarter of 4,096: {}",
        sent[0]
    );
    assert!(
        sent[0].get("temperature").is_none(),
        "no temperature unless asked"
    );
}

#[tokio::test]
async fn the_flags_win_over_what_the_server_says_and_reach_the_model() {
    let server = llama_cpp(Some(4096)).await;
    let (code, _, stderr) = run(
        &compatible_env(&server),
        &[
            "--provider",
            "openai_compatible",
            "--model",
            "qwen2.5-coder",
            "--token-limit",
            "3000",
            "--reserved-output-tokens",
            "500",
            "--temperature",
            "0.7",
            "--tool-mode",
            "native",
        ],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    let props_asked = server.received_requests().await.unwrap_or_default();
    assert!(
        props_asked.iter().all(|r| r.url.path() != "/props"),
        "with --token-limit the server is not asked"
    );
    let sent = chats(&server, "/v1/chat/completions").await;
    assert_eq!(sent[0]["max_tokens"], 500);
    assert_eq!(sent[0]["temperature"], 0.7);
    assert!(
        sent[0]["tools"].as_array().is_some_and(|t| !t.is_empty()),
        "native mode sends the tools: {}",
        sent[0]
    );
}

#[tokio::test]
async fn a_server_that_does_not_say_gets_a_small_window_and_the_user_is_told() {
    let server = llama_cpp(None).await;
    let (code, _, stderr) = run(
        &compatible_env(&server),
        &["--provider", "openai_compatible", "--model", "local"],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("did not say its window"), "{stderr}");
    assert!(stderr.contains("--token-limit"), "{stderr}");
    let sent = chats(&server, "/v1/chat/completions").await;
    assert_eq!(
        sent[0]["max_tokens"], 2048,
        "a quarter of the assumed 8,192"
    );
}

#[tokio::test]
async fn vllms_model_list_names_the_window_when_props_is_not_there() {
    let server = llama_cpp(None).await;
    let models = json!({"object": "list", "data": [
        {"id": "Qwen/Qwen2.5-Coder-7B-Instruct", "object": "model", "owned_by": "vllm", "max_model_len": 16384},
        {"id": "other", "object": "model", "owned_by": "vllm", "max_model_len": 2048}
    ]});
    Mock::given(method("GET"))
        .and(path("/v1/models"))
        .respond_with(ResponseTemplate::new(200).set_body_json(models))
        .mount(&server)
        .await;
    let (code, _, stderr) = run(
        &compatible_env(&server),
        &[
            "--provider",
            "openai_compatible",
            "--model",
            "Qwen/Qwen2.5-Coder-7B-Instruct",
        ],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("a window of 16384 tokens"), "{stderr}");
    let sent = chats(&server, "/v1/chat/completions").await;
    assert_eq!(sent[0]["max_tokens"], 4000);
}

#[tokio::test]
async fn ollamas_own_num_ctx_is_the_window_it_is_asked_for() {
    let server = MockServer::start().await;
    let shown = json!({
        "modelfile": "FROM qwen2.5-coder:1.5b",
        "parameters": "num_ctx                        6144\nstop                           \"<|im_end|>\"",
        "template": "{{- if .Messages }}…",
        "details": {"family": "qwen2", "parameter_size": "1.5B", "quantization_level": "Q4_K_M"},
        "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768}
    });
    Mock::given(method("POST"))
        .and(path("/api/show"))
        .respond_with(ResponseTemplate::new(200).set_body_json(shown))
        .mount(&server)
        .await;
    let lines = [
        json!({"model": "qwen2.5-coder:1.5b", "created_at": "2026-11-26T10:00:00Z",
               "message": {"role": "assistant", "content": ANSWER}, "done": false}),
        json!({"model": "qwen2.5-coder:1.5b", "created_at": "2026-11-26T10:00:01Z",
               "message": {"role": "assistant", "content": ""}, "done": true,
               "done_reason": "stop", "prompt_eval_count": 900, "eval_count": 12}),
    ];
    let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
    Mock::given(method("POST"))
        .and(path("/api/chat"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, "application/x-ndjson"))
        .mount(&server)
        .await;
    let (code, report, stderr) = run(
        &[("REACTSTEP_OLLAMA_BASE_URL", server.uri())],
        &["--provider", "ollama", "--model", "qwen2.5-coder:1.5b"],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["answer"], "42");
    let sent = chats(&server, "/api/chat").await;
    assert_eq!(sent[0]["options"]["num_ctx"], 6144, "{}", sent[0]);
    assert_eq!(sent[0]["options"]["num_predict"], 1536);
}

#[tokio::test]
async fn an_answer_share_that_leaves_no_room_for_the_prompt_is_refused_at_start() {
    let (code, _, stderr) = run(
        &[],
        &[
            "--token-limit",
            "1000",
            "--reserved-output-tokens",
            "1000",
            "--mock-responses",
            "/nonexistent",
        ],
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--reserved-output-tokens 1000"), "{stderr}");
}

#[tokio::test]
async fn a_server_that_answers_too_much_or_nonsense_is_not_believed() {
    let hostile: [(&str, ResponseTemplate); 3] = [
        (
            "huge",
            ResponseTemplate::new(200).set_body_raw(vec![b' '; 8 << 20], "application/json"),
        ),
        (
            "not JSON",
            ResponseTemplate::new(200).set_body_raw("<html>", "text/html"),
        ),
        (
            "a negative window",
            ResponseTemplate::new(200).set_body_json(json!({"n_ctx": -5})),
        ),
    ];
    for (what, props) in hostile {
        let server = llama_cpp(None).await;
        Mock::given(method("GET"))
            .and(path("/props"))
            .respond_with(props)
            .mount(&server)
            .await;
        let (code, _, stderr) = run(
            &compatible_env(&server),
            &["--provider", "openai_compatible", "--model", "local"],
        )
        .await;
        assert_eq!(code, 0, "{what}: {stderr}");
        assert!(
            stderr.contains("did not say its window"),
            "{what}: {stderr}"
        );
        let sent = chats(&server, "/v1/chat/completions").await;
        assert_eq!(sent[0]["max_tokens"], 2048, "{what}: the assumed window");
    }
}

#[tokio::test]
async fn a_window_past_what_the_service_takes_is_cut_to_its_limit() {
    let server = llama_cpp(Some(4_000_000_000)).await;
    let (code, _, stderr) = run(
        &compatible_env(&server),
        &["--provider", "openai_compatible", "--model", "local"],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("a window of 10000000 tokens"), "{stderr}");
}

#[tokio::test]
async fn a_model_slower_than_llm_timeout_ends_the_loop_with_the_services_timeout() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(openai_stream(&[ANSWER], "stop"), "text/event-stream")
                .set_delay(std::time::Duration::from_secs(4)),
        )
        .mount(&server)
        .await;
    let (code, report, stderr) = run(
        &compatible_env(&server),
        &[
            "--provider",
            "openai_compatible",
            "--model",
            "local",
            "--token-limit",
            "4096",
            "--llm-timeout",
            "1",
        ],
    )
    .await;
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(report["termination_reason"], "failure");
    let answer = report["answer"].as_str().unwrap();
    assert!(
        answer.starts_with("llm_timeout:") && answer.contains("1 s"),
        "{answer}"
    );
}

/// The model writes an invalid step twice (the service's step and its repair round), so the
/// service answers `invalid_model_output`, which it says a retry can help: the driver sends the
/// step once more, the model answers, and the report says the failure was recovered from. A
/// model that stays invalid ends the loop after that one retry.
#[tokio::test]
async fn a_step_the_service_says_to_retry_is_sent_once_more() {
    let invalid = "Thought: let me look\nAction: no_such_tool(path=\"x\")";
    let reply = |text: &str| {
        ResponseTemplate::new(200).set_body_raw(openai_stream(&[text], "stop"), "text/event-stream")
    };
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(reply(invalid))
        .up_to_n_times(2)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(reply(ANSWER))
        .with_priority(2)
        .mount(&server)
        .await;
    let flags = [
        "--provider",
        "openai_compatible",
        "--model",
        "local",
        "--token-limit",
        "4096",
    ];
    let (code, report, stderr) = run(&compatible_env(&server), &flags).await;
    assert_eq!(code, 0, "{report}\n{stderr}");
    assert_eq!(report["answer"], "42");
    assert_eq!(report["iterations"], 1, "a retry is the same step");
    assert_eq!(chats(&server, "/v1/chat/completions").await.len(), 3);
    let errors = report["error_history"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{report}");
    assert!(errors[0]["error"]
        .as_str()
        .unwrap()
        .starts_with("invalid_model_output:"));
    assert_eq!(errors[0]["recovered"], true);
    // The failed try's streamed thought ends its line; the retry is said on one of its own.
    let lines: Vec<&str> = stderr.lines().collect();
    let retry = lines
        .iter()
        .position(|l| l.starts_with("[1] retry: invalid_model_output:"))
        .unwrap_or_else(|| panic!("no retry line: {stderr}"));
    assert!(
        lines[retry].ends_with("; the step is sent again in 1.0 s"),
        "{stderr}"
    );
    // Each attempt's thought on a line of its own: the step's, then its repair round's.
    assert_eq!(
        lines[retry - 3..retry],
        [
            "[1] thought: let me look",
            "[1] repair: there is no tool named 'no_such_tool'; the tools are: read_file, list_directory, grep_search, calculator, string_helper, submit_answer; the model is asked again",
            "[1] thought: let me look",
        ],
        "{stderr}"
    );
    assert!(
        lines.iter().all(|l| l.matches("thought:").count() <= 1),
        "{stderr}"
    );

    let stuck = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(reply(invalid))
        .mount(&stuck)
        .await;
    let (code, report, stderr) = run(&compatible_env(&stuck), &flags).await;
    assert_eq!(code, 1, "{report}\n{stderr}");
    assert_eq!(report["termination_reason"], "failure");
    assert_eq!(
        chats(&stuck, "/v1/chat/completions").await.len(),
        4,
        "two tries of two calls"
    );
    let recovered: Vec<&Value> = report["error_history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["recovered"])
        .collect();
    assert_eq!(recovered, [&json!(false), &json!(false)]);
}
