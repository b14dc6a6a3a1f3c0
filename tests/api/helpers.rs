//! Starts the real server on a loopback port with a wiremock server standing in for every LLM
//! provider, and checks every response body against the schema `openapi.yaml` documents for its
//! path, method and status, so that the spec cannot drift from the code.

use std::sync::OnceLock;

use reactstep::config::Config;
use reactstep::startup::Application;
use serde_json::Value;
use wiremock::MockServer;

pub const KEY: &str = "sk-test-SECRET-key-0123456789";

/// Where each provider without a flag of its own answers in the tests (under the mock's URI).
pub const MOCK_BASES: &[(&str, &str)] = &[
    ("gemini", "/gemini/v1beta/openai"),
    ("openrouter", "/openrouter/api/v1"),
    ("deepseek", "/deepseek/v1"),
    ("mistral", "/mistral/v1"),
    ("groq", "/groq/openai/v1"),
    ("xai", "/xai/v1"),
    ("azure", "/azure/openai/v1"),
    ("openai_compatible", "/compat/v1"),
];

pub struct TestApp {
    pub address: String,
    pub client: reqwest::Client,
    pub llm: MockServer,
}

pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
    pub body: Value,
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// Starts the app with the test's changes to the configuration.
pub async fn spawn_app_with(tweak: impl FnOnce(&mut Config)) -> TestApp {
    let llm = MockServer::start().await;
    let mut config = Config::defaults();
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.openai_base_url = format!("{}/v1", llm.uri());
    config.anthropic_base_url = llm.uri();
    config.ollama_base_url = format!("{}/ollama", llm.uri());
    for (name, base) in MOCK_BASES {
        config
            .base_urls
            .insert(name.to_string(), format!("{}{base}", llm.uri()));
    }
    config.workers = 1;
    // Retries as in production, but with waits too short to slow the suite.
    config.retry_base_ms = 1;
    config.retry_cap_ms = 5;
    tweak(&mut config);
    let app = Application::build(&config).expect("the app builds");
    let address = format!("http://127.0.0.1:{}", app.port());
    tokio::spawn(app.run_until_stopped());
    TestApp {
        address,
        client: reqwest::Client::new(),
        llm,
    }
}

impl TestApp {
    pub async fn post_react_step(&self, body: &Value) -> Reply {
        self.send("POST", "/api/agent/react_step", Some(body.to_string()))
            .await
    }

    /// Any request; the reply must conform to the spec.
    pub async fn send(&self, method: &str, path: &str, body: Option<String>) -> Reply {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self
            .client
            .request(method.clone(), format!("{}{path}", self.address));
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        let response = request.send().await.expect("the server answers");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        if headers
            .get("content-type")
            .is_some_and(|c| c.to_str().unwrap().starts_with("application/json"))
        {
            assert_conforms(method.as_str(), path, status, &body);
        }
        Reply {
            status,
            headers,
            text,
            body,
        }
    }

    /// The JSON bodies the service sent upstream, in order; each must say it is JSON, as the
    /// providers require.
    pub async fn upstream_bodies(&self) -> Vec<Value> {
        self.llm
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .map(|r| {
                assert_eq!(
                    r.headers.get("content-type").map(|v| v.as_bytes()),
                    Some(&b"application/json"[..]),
                    "the upstream request's Content-Type"
                );
                serde_json::from_slice(&r.body).expect("upstream bodies are JSON")
            })
            .collect()
    }
}

/// A minimal valid request for a model; tests change what they examine.
pub fn request(model: &str, query: &str) -> Value {
    serde_json::json!({
        "project_id": "4b1e6f0e-0000-4000-8000-000000000001",
        "session_id": "5c2f7a1f-0000-4000-8000-000000000002",
        "user_query": query,
        "conversation_history": [],
        "explicit_context_paths": [],
        "pinned_item_ids_to_include": [],
        "implicit_context": {"last_focused_file_path": null},
        "vector_search_results_to_include": [],
        "available_tools_prompt_segment": "You have access to: code_search(query), read_file(path)",
        "llm_config": {"modelName": model, "tokenLimit": 8192, "reservedOutputTokens": 1000, "temperature": 0.2},
        "user_api_keys": {"llmKey": KEY},
        "max_iterations_left": 3
    })
}

/// The `context_report` entry for an item or turn id.
pub fn report_item<'a>(body: &'a Value, id: &str) -> &'a Value {
    body["context_report"]["items"]
        .as_array()
        .expect("a context report")
        .iter()
        .find(|i| i["id"] == id)
        .unwrap_or_else(|| panic!("{id} is not in the report"))
}

/// The top-level field names of a JSON object, sorted.
pub fn sorted_keys(body: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    keys
}

fn spec() -> &'static Value {
    static SPEC: OnceLock<Value> = OnceLock::new();
    SPEC.get_or_init(|| {
        let yaml =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml")).unwrap();
        serde_yaml::from_str(&yaml).expect("openapi.yaml is valid YAML")
    })
}

fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// Panics unless `body` matches the schema the spec gives for this path, method and status.
/// Paths the spec does not list answer with its documented error shape.
pub fn assert_conforms(method: &str, path: &str, status: u16, body: &Value) {
    let spec = spec();
    let method = method.to_ascii_lowercase();
    let pointer = match spec["paths"].get(path) {
        Some(item) if item.get(&method).is_some() => {
            let response = item[&method]["responses"]
                .get(status.to_string())
                .unwrap_or_else(|| {
                    panic!(
                        "{method} {path} answered {status}, which openapi.yaml does not document"
                    )
                });
            let base = match response.get("$ref").and_then(Value::as_str) {
                Some(r) => r.to_string(),
                None => format!("#/paths/{}/{method}/responses/{status}", escape(path)),
            };
            format!("{base}/content/application~1json/schema")
        }
        _ => "#/components/schemas/ErrorResponse".to_string(),
    };
    validate_at(&pointer, body, &format!("{method} {path} {status}"));
}

/// Validates the data of a streamed event against a schema of `components/schemas`.
pub fn assert_conforms_to_schema(name: &str, body: &Value) {
    validate_at(&format!("#/components/schemas/{name}"), body, name);
}

fn validate_at(pointer: &str, body: &Value, what: &str) {
    let spec = spec();
    let mut root = spec.clone();
    root["$ref"] = Value::String(pointer.to_string());
    let validator = jsonschema::draft202012::options()
        .build(&root)
        .unwrap_or_else(|e| panic!("schema {pointer} does not compile: {e}"));
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} does not conform to {pointer}:\n{}\nbody: {body:#}",
        errors.join("\n")
    );
}

#[path = "../support/binary.rs"]
pub mod binary;
pub use binary::RunningBinary;

/// Runs the binary with `env` on a setting that must stop start-up: it has to exit by itself,
/// so a server that started anyway fails the test at the guard. Its exit status and stderr.
pub async fn start_up_with(env: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_reactstep"))
        .envs(env.iter().copied())
        .env("REACTSTEP_BIND", "127.0.0.1:0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(30), run)
        .await
        .unwrap_or_else(|_| panic!("{env:?}: the server started"))
        .unwrap();
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
