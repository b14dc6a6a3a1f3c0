//! Rate limits shared through Redis, when Redis is not there to share them: nothing listens, or
//! something listens and never answers. What the operator chose decides (fail open: the request
//! passes and a metric counts it; fail closed: 503 `rate_limiter_unavailable`), promptly, and
//! the URL's password is never shown. The limits with a real Redis are in `tests/fleet.rs`.

use std::time::Duration;

use reactstep::config::RedisUrl;
use serde_json::{json, Value};

use crate::support::app::{spawn_app_with, TestApp};
use crate::support::binary::{start_up_with, RunningBinary};
use crate::support::requests::request;

const PASSWORD: &str = "redis-password-7d1f9a";

fn offline(session: &str) -> Value {
    let mut body = request("gpt-4o", "q");
    body["mock_response"] = json!("Thought: t\nFinal Answer: a");
    body["session_id"] = json!(session);
    body
}

/// A loopback port where nothing listens.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

async fn app_with_redis(url: String, fail_open: bool) -> TestApp {
    spawn_app_with(move |c| {
        c.rate_limit_per_session = 2;
        c.redis_url = Some(RedisUrl(url));
        c.redis_fail_open = fail_open;
        c.redis_timeout_ms = 200;
    })
    .await
}

/// Answers within a bound however the limiter behaves: a hang is a failure, not a stuck suite.
async fn post(app: &TestApp, body: &Value) -> crate::support::app::Reply {
    tokio::time::timeout(Duration::from_secs(30), app.post_react_step(body))
        .await
        .expect("the service answers although Redis does not")
}

fn assert_unavailable(reply: &crate::support::app::Reply, session: &str) {
    assert_eq!(reply.status, 503, "{}", reply.text);
    assert_eq!(reply.body["error"]["type"], "rate_limiter_unavailable");
    assert_eq!(reply.body["error"]["retryable"], true);
    assert_eq!(reply.body["error"]["retry_after_seconds"], 1);
    assert_eq!(reply.headers["retry-after"], "1");
    assert_eq!(reply.body["session_id"], session, "the session is echoed");
    assert!(!reply.text.contains(PASSWORD), "{}", reply.text);
}

#[tokio::test]
async fn fail_closed_refuses_with_503_when_nothing_listens_at_the_redis_url() {
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}", closed_port());
    let app = app_with_redis(url, false).await;
    // The first check finds the port closed; the next ones come while Redis is left alone.
    for _ in 0..3 {
        assert_unavailable(&post(&app, &offline("closed-1")).await, "closed-1");
    }
}

#[tokio::test]
async fn fail_closed_refuses_with_503_when_redis_accepts_and_never_answers() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // Takes connections and reads nothing from them, as a wedged server would.
    let held = tokio::spawn(async move {
        let mut connections = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            connections.push(stream);
        }
    });
    let app = app_with_redis(format!("redis://127.0.0.1:{port}"), false).await;
    assert_unavailable(&post(&app, &offline("wedged-1")).await, "wedged-1");
    held.abort();
}

#[tokio::test]
async fn fail_open_lets_requests_through_past_the_limit_and_counts_them() {
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}", closed_port());
    let app = app_with_redis(url, true).await;
    // A limit of 2 would refuse the third: with no Redis to keep it, all pass.
    for _ in 0..4 {
        let reply = post(&app, &offline("open-1")).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    let metrics = app.send("GET", "/metrics", None).await.text;
    let admitted = metrics
        .lines()
        .find(|l| l.starts_with("reactstep_rate_limiter_unanswered_total{kind=\"admitted\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no admitted count in\n{metrics}"));
    assert!(admitted >= 4, "{admitted}");
}

#[tokio::test]
async fn the_redis_password_stays_out_of_the_log_and_a_bad_url_stops_start_up() {
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}", closed_port());
    let server = RunningBinary::start_with(
        "http://127.0.0.1:9",
        "debug",
        &[
            ("REACTSTEP_REDIS_URL", &url),
            ("REACTSTEP_RATE_LIMIT_PER_SESSION", "5"),
        ],
    )
    .await;
    let reply = reqwest::Client::new()
        .post(format!(
            "http://127.0.0.1:{}/api/agent/react_step",
            server.port
        ))
        .json(&offline("logged-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let log = server.stop().await;
    assert!(
        log.contains("the shared rate limiter (Redis) did not answer"),
        "{log}"
    );
    assert!(!log.contains(PASSWORD), "{log}");

    for bad in [
        format!("redis://:{PASSWORD}@127.0.0.1:not-a-port"),
        format!("rediss://:{PASSWORD}@127.0.0.1:6380"),
    ] {
        refused_at_start_up(&bad).await;
    }
}

/// A Redis URL the service cannot use stops it at once, without showing the password.
async fn refused_at_start_up(bad: &str) {
    let (status, stderr) = start_up_with(&[("REACTSTEP_REDIS_URL", bad)]).await;
    assert!(!status.success(), "{bad}");
    assert!(stderr.contains("REACTSTEP_REDIS_URL"), "{stderr}");
    assert!(!stderr.contains(PASSWORD), "{stderr}");
}
