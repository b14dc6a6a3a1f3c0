//! What the operator controls: bearer tokens on the API, the base URLs a request may name,
//! browser origins, and readiness.

use serde_json::{json, Value};
use wiremock::MockServer;

use crate::support::app::{spawn_app, spawn_app_with};
use crate::support::requests::request;
use crate::support::spec::assert_conforms;
use crate::support::upstream::{mount, openai_reply, OPENAI_PATH};

const TOKEN: &str = "operator-token-0123456789";

fn offline() -> Value {
    let mut body = request("gpt-4o", "q");
    body["mock_response"] = json!("Thought: t\nFinal Answer: a");
    body
}

async fn post_with(
    address: &str,
    path: &str,
    auth: Option<&str>,
    body: &Value,
) -> (u16, Value, reqwest::header::HeaderMap) {
    let mut req = reqwest::Client::new()
        .post(format!("{address}{path}"))
        .json(body);
    if let Some(auth) = auth {
        req = req.header("authorization", auth);
    }
    let response = req.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    (status, body, headers)
}

#[tokio::test]
async fn with_operator_tokens_the_api_needs_one() {
    let app = spawn_app_with(|c| c.api_tokens = Some(TOKEN.parse().unwrap())).await;
    let path = "/api/agent/react_step";
    for auth in [
        None,
        Some("Bearer wrong-token-0123456789"),
        Some(TOKEN),
        Some("Basic abc"),
    ] {
        let (status, body, headers) = post_with(&app.address, path, auth, &offline()).await;
        assert_eq!(status, 401, "{auth:?}");
        assert_eq!(body["error"]["type"], "unauthorized");
        assert_eq!(headers["www-authenticate"], "Bearer");
        assert_conforms("post", path, 401, &body);
    }
    // The scheme's name in any case (RFC 9110, 11.1); the token itself exactly.
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let bearer = format!("{scheme} {TOKEN}");
        let (status, _, _) = post_with(&app.address, path, Some(&bearer), &offline()).await;
        assert_eq!(status, 200, "{scheme}");
    }
    let shouted = format!("Bearer {}", TOKEN.to_uppercase());
    let (status, _, _) = post_with(&app.address, path, Some(&shouted), &offline()).await;
    assert_eq!(status, 401);
    let (status, _, _) = post_with(
        &app.address,
        "/api/agent/react_step/stream",
        None,
        &offline(),
    )
    .await;
    assert_eq!(status, 401);
    // Health and the contract stay open.
    assert_eq!(app.send("GET", "/healthz", None).await.status, 200);
    assert_eq!(app.send("GET", "/readyz", None).await.status, 200);
}

#[tokio::test]
async fn short_tokens_are_refused_at_start() {
    assert!("short".parse::<reactstep::config::ApiTokens>().is_err());
    assert_eq!(
        format!(
            "{:?}",
            TOKEN.parse::<reactstep::config::ApiTokens>().unwrap()
        ),
        "ApiTokens(1 set)"
    );
}

#[tokio::test]
async fn a_request_may_name_only_an_allowed_base_url() {
    let elsewhere = MockServer::start().await;
    mount(
        &elsewhere,
        OPENAI_PATH,
        200,
        openai_reply("Thought: t\nFinal Answer: from elsewhere"),
    )
    .await;
    let allowed = format!("{}/v1", elsewhere.uri());
    let allowed_for_app = allowed.clone();
    let app =
        spawn_app_with(move |c| c.allowed_base_urls = vec![format!("{allowed_for_app}/")]).await;

    let mut body = request("gpt-4o", "q");
    body["llm_config"]["base_url"] = json!(allowed);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["direct_response"], "from elsewhere");
    assert!(
        app.upstream_bodies().await.is_empty(),
        "the default upstream was not called"
    );

    for url in [
        "http://127.0.0.1:1/v1",
        "http://localhost:9200",
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.1/v1",
        "http://192.168.1.1/v1",
        "http://[::1]:8080/v1",
        "https://api.openai.com/v1",
    ] {
        body["llm_config"]["base_url"] = json!(url);
        let reply = app.post_react_step(&body).await;
        assert_eq!(reply.status, 400, "{url}");
        assert_eq!(
            reply.body["error"]["fields"][0]["field"], "llm_config.base_url",
            "{url}"
        );
    }
    // With no allowlist at all, no URL is accepted.
    let closed = spawn_app().await;
    body["llm_config"]["base_url"] = json!(allowed);
    assert_eq!(closed.post_react_step(&body).await.status, 400);
}

#[tokio::test]
async fn browsers_are_let_in_from_configured_origins_only() {
    let preflight = |address: String, origin: &'static str| async move {
        reqwest::Client::new()
            .request(
                reqwest::Method::OPTIONS,
                format!("{address}/api/agent/react_step"),
            )
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            // A plugin that traces its calls sends the W3C headers too.
            .header(
                "access-control-request-headers",
                "content-type, traceparent, tracestate",
            )
            .send()
            .await
            .unwrap()
    };
    let app = spawn_app_with(|c| c.cors_origins = vec!["vscode-webview://abc".into()]).await;
    let allowed = preflight(app.address.clone(), "vscode-webview://abc").await;
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "vscode-webview://abc"
    );
    let refused = preflight(app.address.clone(), "https://evil.example").await;
    assert!(refused
        .headers()
        .get("access-control-allow-origin")
        .is_none());

    let closed = spawn_app().await;
    let none = preflight(closed.address.clone(), "vscode-webview://abc").await;
    assert!(none.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn readiness_says_ready_once_the_encoders_are_loaded() {
    let app = spawn_app().await;
    let reply = app.send("GET", "/readyz", None).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, json!({"status": "ready"}));
    assert_conforms("get", "/readyz", 200, &reply.body);
}

#[tokio::test]
async fn rate_limits_per_client_and_per_session_answer_429_with_retry_after() {
    let app = spawn_app_with(|c| c.rate_limit_per_session = 2).await;
    let mut body = offline();
    body["session_id"] = json!("busy-session");
    for _ in 0..2 {
        assert_eq!(app.post_react_step(&body).await.status, 200);
    }
    let limited = app.post_react_step(&body).await;
    assert_eq!(limited.status, 429, "{}", limited.text);
    assert_eq!(limited.body["error"]["type"], "rate_limited");
    assert_eq!(limited.body["error"]["retryable"], true);
    assert_eq!(limited.body["session_id"], "busy-session");
    let wait: u64 = limited.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=30).contains(&wait), "{wait}");
    assert_eq!(limited.body["error"]["retry_after_seconds"], wait);
    body["session_id"] = json!("another-session");
    assert_eq!(app.post_react_step(&body).await.status, 200);

    let app = spawn_app_with(|c| c.rate_limit_per_client = 3).await;
    for _ in 0..3 {
        assert_eq!(app.post_react_step(&offline()).await.status, 200);
    }
    let limited = app.post_react_step(&offline()).await;
    assert_eq!(limited.status, 429);
    assert_eq!(limited.body["error"]["type"], "rate_limited");
    assert!(limited.headers.contains_key("retry-after"));
}

#[tokio::test]
async fn a_token_list_that_holds_no_token_stops_start_up() {
    for empty in ["", ",", "   ", " , "] {
        let (status, stderr) =
            crate::support::binary::start_up_with(&[("REACTSTEP_API_TOKENS", empty)]).await;
        assert!(!status.success(), "{empty:?}");
        assert!(
            stderr.contains("api-tokens") && stderr.contains("holds no token"),
            "{empty:?}: {stderr}"
        );
    }
}

/// A token list refused at start is not quoted back: it is the operator's secrets, and stderr
/// is the container's log.
#[tokio::test]
async fn a_refused_token_list_is_not_quoted_back() {
    let list = "prodToken_7f3a9c1e5b2d4f60,short";
    let (status, stderr) =
        crate::support::binary::start_up_with(&[("REACTSTEP_API_TOKENS", list)]).await;
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("at least 16 characters"), "{stderr}");
    assert!(
        !stderr.contains("prodToken") && !stderr.contains("short"),
        "{stderr}"
    );
}

/// Settings that once started a service that could not work, or panicked, stop start-up with
/// a message naming them: an origin no browser sends (a trailing `/`, no scheme, `*`), more
/// HTTP workers than actix runs, an export queue that would take gigabytes at start, a
/// collector's URL holding a password.
#[tokio::test]
async fn settings_that_cannot_work_stop_start_up_saying_which() {
    for (name, value, says) in [
        (
            "REACTSTEP_CORS_ORIGINS",
            "https://app.example.com/",
            "not an origin",
        ),
        ("REACTSTEP_CORS_ORIGINS", "app.example.com", "not an origin"),
        ("REACTSTEP_CORS_ORIGINS", "*", "* is not taken"),
        // Origins a browser writes otherwise: they would never match.
        (
            "REACTSTEP_CORS_ORIGINS",
            "https://App.Example.com",
            "not an origin",
        ),
        (
            "REACTSTEP_CORS_ORIGINS",
            "https://app.example.com:443",
            "not an origin",
        ),
        (
            "REACTSTEP_CORS_ORIGINS",
            "http://[0:0::1]:3000",
            "not an origin",
        ),
        (
            "REACTSTEP_CORS_ORIGINS",
            "https://bücher.example",
            "not an origin",
        ),
        (
            "REACTSTEP_CORS_ORIGINS",
            "https://app.example.com\\",
            "not an origin",
        ),
        ("REACTSTEP_WORKERS", "513", "0 (one per CPU core) to 512"),
        ("REACTSTEP_WORKERS", "18446744073709551615", "to 512"),
        // It overflowed the clock at SIGTERM: a panic, and the service stopped hearing signals.
        (
            "REACTSTEP_SHUTDOWN_GRACE_SECS",
            "18446744073709551615",
            "0..=86400",
        ),
        ("REACTSTEP_SHUTDOWN_GRACE_SECS", "86401", "0..=86400"),
    ] {
        let (status, stderr) = crate::support::binary::start_up_with(&[(name, value)]).await;
        assert_eq!(status.code(), Some(2), "{name}={value}: {stderr}");
        assert!(stderr.contains(says), "{name}={value}: {stderr}");
    }
    let otlp = [
        (
            "REACTSTEP_OTLP_ENDPOINT",
            "http://user:s3cret-pass@127.0.0.1:9",
        ),
        ("REACTSTEP_OTLP_ENDPOINT", "http://127.0.0.1:9"),
    ];
    let (status, stderr) = crate::support::binary::start_up_with(&otlp[..1]).await;
    assert!(
        !status.success() && stderr.contains("OTEL_EXPORTER_OTLP_HEADERS"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");
    let queue = [otlp[1], ("OTEL_BSP_MAX_QUEUE_SIZE", "100000000")];
    let (status, stderr) = crate::support::binary::start_up_with(&queue).await;
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.starts_with("error: OTEL_BSP_MAX_QUEUE_SIZE"),
        "{stderr}"
    );
    // What the SDK would read as unset or as its default without a word: the collector's key
    // not sent, every span sampled, a 10 s timeout.
    for (name, value, says) in [
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key:s3cret", "entry 1"),
        (
            "OTEL_EXPORTER_OTLP_TIMEOUT",
            "-5",
            "whole number of milliseconds",
        ),
        ("OTEL_TRACES_SAMPLER", "sometimes", "builds always_on"),
    ] {
        let (status, stderr) =
            crate::support::binary::start_up_with(&[otlp[1], (name, value)]).await;
        assert!(!status.success(), "{name}={value}: {stderr}");
        assert!(stderr.starts_with(&format!("error: {name}")), "{stderr}");
        assert!(
            stderr.contains(says) && !stderr.contains("s3cret"),
            "{stderr}"
        );
    }
}

/// A provider's base URL that is no http or https URL with a host: every call to it would have
/// failed, and the service started without a word. Start-up stops, the URL not quoted.
#[tokio::test]
async fn a_base_url_that_is_no_url_stops_start_up() {
    for (name, value) in [
        ("REACTSTEP_OPENAI_BASE_URL", "not a url"),
        (
            "REACTSTEP_ANTHROPIC_BASE_URL",
            "ftp://user:s3cret@files.example",
        ),
        ("REACTSTEP_MISTRAL_BASE_URL", "https://"),
        ("REACTSTEP_OLLAMA_BASE_URL", "127.0.0.1:11434"),
        // The API's path would go into the query: `/v1?api-version=2024/chat/completions`.
        (
            "REACTSTEP_OPENAI_BASE_URL",
            "http://127.0.0.1:9/v1?api-version=2024",
        ),
        (
            "REACTSTEP_AZURE_BASE_URL",
            "https://x.openai.azure.com/#s3cret",
        ),
    ] {
        let (status, stderr) = crate::support::binary::start_up_with(&[(name, value)]).await;
        assert!(!status.success(), "{name}={value}: {stderr}");
        let says = format!("{name} is not an http or https URL");
        assert!(
            stderr.contains(&says) && !stderr.contains("s3cret"),
            "{stderr}"
        );
    }
}

/// Bytes that are not UTF-8, in a provider's base URL or on the command line: start-up stops
/// saying so. Before, the URL was taken for unset (the calls went to the default host) and the
/// argument panicked.
#[tokio::test]
async fn bytes_that_are_not_utf8_stop_start_up_saying_so() {
    use std::os::unix::ffi::OsStrExt as _;
    let latin1 =
        std::ffi::OsStr::from_bytes(b"https://bedrock-runtime.eu-west-1.amazonaws.com/\xe9");
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_reactstep"));
    command
        .env("REACTSTEP_BIND", "127.0.0.1:0")
        .env("REACTSTEP_BEDROCK_BASE_URL", latin1);
    let (code, stderr) = exit_of(command).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("REACTSTEP_BEDROCK_BASE_URL is not UTF-8"),
        "{stderr}"
    );
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_reactstep"));
    command.arg(std::ffi::OsStr::from_bytes(b"--bind=\xff"));
    let (code, stderr) = exit_of(command).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// How `command` (a start of the service that should stop at once) exits, and its stderr.
async fn exit_of(mut command: tokio::process::Command) -> (Option<i32>, String) {
    let output = command.kill_on_drop(true).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), stderr)
}

/// `--help` shows where each setting comes from, never a secret's value: the Redis URL holds
/// its password.
#[tokio::test]
async fn help_never_shows_the_redis_password() {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_reactstep"))
        .arg("--help")
        .env(
            "REACTSTEP_REDIS_URL",
            "redis://:Redis-Pass-91f2@127.0.0.1:6379",
        )
        .env("REACTSTEP_API_TOKENS", "operator-token-0123456789")
        .env(
            "REACTSTEP_OTLP_ENDPOINT",
            "http://otel:S3cretPw@collector:4318",
        )
        .output()
        .await
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(help.contains("REACTSTEP_REDIS_URL"), "{help}");
    assert!(
        !help.contains("Redis-Pass") && !help.contains("operator-token"),
        "{help}"
    );
    assert!(!help.contains("S3cretPw"), "{help}");
}
