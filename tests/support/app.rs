//! The real server started in the test's process on a loopback port, with a wiremock server
//! standing in for every LLM provider; every JSON reply is checked against `openapi.yaml`.

use reactstep::config::Config;
use reactstep::startup::Application;
use serde_json::Value;
use wiremock::MockServer;

use super::spec::assert_conforms;
use super::upstream::{mount, mount_sequence};

/// Where each provider without a flag of its own answers in the tests (under the mock's URI).
pub const MOCK_BASES: &[(&str, &str)] = &[
    ("gemini", "/gemini/v1beta/openai"),
    ("openrouter", "/openrouter/api/v1"),
    ("deepseek", "/deepseek/v1"),
    ("mistral", "/mistral/v1"),
    ("groq", "/groq/openai/v1"),
    ("xai", "/xai/v1"),
    ("azure", "/azure/openai/v1"),
    ("bedrock", "/bedrock/openai/v1"),
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

/// The app, its mock answering every POST to `at` with `status` and `body`: the set-up of a
/// test whose upstream says one thing.
pub async fn spawn_app_answering(at: &str, status: u16, body: Value) -> TestApp {
    let app = spawn_app().await;
    mount(&app.llm, at, status, body).await;
    app
}

/// The app, its mock answering the POSTs to `at` with `replies` in turn, one per call.
pub async fn spawn_app_answering_in_turn(at: &str, replies: Vec<Value>) -> TestApp {
    let app = spawn_app().await;
    mount_sequence(&app.llm, at, replies).await;
    app
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

    /// The JSON bodies the service sent to one upstream path, in order.
    pub async fn bodies_sent_to(&self, path: &str) -> Vec<Value> {
        let requests = self.llm.received_requests().await.unwrap_or_default();
        requests
            .iter()
            .filter(|r| r.url.path() == path)
            .map(|r| serde_json::from_slice(&r.body).expect("upstream bodies are JSON"))
            .collect()
    }
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

/// Posts `body` to `route`: the status and the body (a string where it is not JSON), or why the
/// server gave no answer at all (a panic in a worker drops the connection).
pub async fn try_post(app: &TestApp, route: &str, body: &Value) -> Result<(u16, Value), String> {
    let response = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .unwrap()
        .post(format!("{}{route}", app.address))
        .json(body)
        .send()
        .await
        .map_err(|e| format!("no answer: {e:?}"))?;
    let status = response.status().as_u16();
    let text = response
        .text()
        .await
        .map_err(|e| format!("the answer broke off: {e:?}"))?;
    Ok((
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

/// The same for a step.
pub async fn try_step(app: &TestApp, body: &Value) -> Result<(u16, Value), String> {
    try_post(app, "/api/agent/react_step", body).await
}
