//! `GET /metrics`: the Prometheus figures move when steps run. The registry is the process's,
//! shared by every test here, so the checks are for presence and growth, not exact counts.

use serde_json::json;

use crate::support::app::spawn_app_answering;
use crate::support::binary::RunningBinary;
use crate::support::requests::request;
use crate::support::upstream::{binary_answering, held_upstream, openai_reply, OPENAI_PATH};

/// What the server at `base` says on `GET /metrics`.
async fn metrics_text(client: &reqwest::Client, base: &str) -> String {
    client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of the first sample line that starts with `prefix`.
fn sample(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn steps_move_the_metrics() {
    let app = spawn_app_answering(
        OPENAI_PATH,
        200,
        openai_reply("Thought: t\nFinal Answer: a"),
    )
    .await;
    let before = app.send("GET", "/metrics", None).await.text;
    let mut body = request("gpt-4o", "q");
    body["explicit_context"] = json!([{"path": "src/a.rs", "content": "fn main() {}"}]);
    let reply = app.post_react_step(&body).await;
    assert_eq!(reply.status, 200);
    let mut bad = request("gpt-4o", "q");
    bad["llm_config"]["tokenLimit"] = json!(0);
    assert_eq!(app.post_react_step(&bad).await.status, 400);
    // Every endpoint of the contract is counted as itself (these were "other"), however its
    // path was written.
    assert_eq!(app.send("GET", "/api/providers", None).await.status, 200);
    let encoded = reqwest::get(format!("{}/%68ealthz", app.address)).await;
    assert_eq!(encoded.unwrap().status(), 200);
    assert_eq!(
        app.send("POST", "/api/agent/plan", Some("{}".into()))
            .await
            .status,
        400
    );

    let metrics = app.send("GET", "/metrics", None).await;
    assert_eq!(metrics.status, 200);
    assert!(metrics.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/openmetrics-text"));
    let text = metrics.text;
    assert!(text.ends_with("# EOF\n"), "{text}");
    for (prefix, at_least) in [
        (
            "reactstep_requests_total{endpoint=\"/api/agent/react_step\",status=\"200\"}",
            1.0,
        ),
        (
            "reactstep_requests_total{endpoint=\"/api/agent/react_step\",status=\"400\"}",
            1.0,
        ),
        (
            "reactstep_requests_total{endpoint=\"/api/providers\",status=\"200\"}",
            1.0,
        ),
        (
            "reactstep_requests_total{endpoint=\"/healthz\",status=\"200\"}",
            1.0,
        ),
        (
            "reactstep_requests_total{endpoint=\"/api/agent/plan\",status=\"400\"}",
            1.0,
        ),
        ("reactstep_step_seconds_count", 1.0),
        ("reactstep_upstream_seconds_count{provider=\"openai\"}", 1.0),
        ("reactstep_tokens_total{kind=\"prompt\"}", 412.0),
        ("reactstep_parse_outcomes_total{kind=\"answer\"}", 1.0),
        ("reactstep_context_items_total{kind=\"included\"}", 1.0),
    ] {
        let value = sample(&text, prefix);
        assert!(value >= at_least, "{prefix} is {value}:\n{text}");
        assert!(
            value > sample(&before, prefix) || at_least > 1.0,
            "{prefix} did not grow"
        );
    }
}

/// A gauge needs a process of its own: the other tests here run steps in this one.
#[tokio::test]
async fn a_step_is_in_flight_until_it_is_answered() {
    let (uri, arrived, go) = held_upstream("Thought: t\nFinal Answer: a").await;
    let server = RunningBinary::start(&uri, "info").await;
    let base = format!("http://127.0.0.1:{}", server.port);
    let client = reqwest::Client::new();
    let in_flight = || async {
        let text = metrics_text(&client, &base).await;
        assert!(text.contains("\nreactstep_steps_in_flight "), "{text}");
        sample(&text, "reactstep_steps_in_flight ")
    };
    assert_eq!(in_flight().await, 0.0, "nothing sent yet");

    let step = tokio::spawn({
        let client = client.clone();
        let url = format!("{base}/api/agent/react_step");
        async move {
            let reply = client
                .post(url)
                .json(&request("gpt-4o", "q"))
                .send()
                .await
                .unwrap();
            reply.status().as_u16()
        }
    });
    arrived.await.unwrap();
    assert_eq!(in_flight().await, 1.0, "the step waits on its upstream");
    go.send(()).unwrap();
    assert_eq!(step.await.unwrap(), 200);
    assert_eq!(in_flight().await, 0.0, "the step was answered");
    server.stop().await;
}

/// The same step twice through a process of its own: the second one's counts come from the
/// token-count cache, which the metrics show; with the cache turned off nothing is looked up.
#[tokio::test]
async fn a_repeated_step_counts_from_the_token_cache() {
    for (mib, hits_expected) in [("64", true), ("0", false)] {
        let server = RunningBinary::start_with(
            "http://127.0.0.1:9",
            "info",
            &[("REACTSTEP_TOKEN_CACHE_MIB", mib)],
        )
        .await;
        let base = format!("http://127.0.0.1:{}", server.port);
        let client = reqwest::Client::new();
        let mut body = request("gpt-4o", "Why does login fail?");
        body["explicit_context"] =
            json!([{"path": "src/a.rs", "content": "fn login() { check(); }\n".repeat(40)}]);
        body["mock_response"] = json!("Thought: t\nFinal Answer: a");
        let metrics = || async {
            let text = metrics_text(&client, &base).await;
            (
                sample(&text, "reactstep_token_cache_lookups_total{kind=\"hit\"}"),
                sample(&text, "reactstep_token_cache_lookups_total{kind=\"miss\"}"),
                sample(&text, "reactstep_token_cache_bytes "),
            )
        };
        let step = || async {
            let reply = client
                .post(format!("{base}/api/agent/react_step"))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(reply.status().as_u16(), 200);
        };
        step().await;
        let (hits_first, misses_first, bytes) = metrics().await;
        step().await;
        let (hits, misses, _) = metrics().await;
        if hits_expected {
            assert!(
                misses_first >= 1.0 && bytes > 0.0,
                "{misses_first} misses, {bytes} bytes"
            );
            assert!(
                hits > hits_first,
                "the second step hit nothing: {hits_first} → {hits}"
            );
            assert_eq!(misses, misses_first, "the second step counted text again");
        } else {
            assert_eq!((hits, misses, bytes), (0.0, 0.0, 0.0), "the cache is off");
        }
        server.stop().await;
    }
}

/// Context fates are counted once per item, however they are summed on the way: in a process of
/// its own, the counters equal the fates the step's report gives.
#[tokio::test]
async fn context_items_are_counted_once_each_by_fate() {
    let (_llm, server) = binary_answering("Thought: t\nFinal Answer: a").await;
    let base = format!("http://127.0.0.1:{}", server.port);
    let mut body = request("gpt-4o", "q");
    body["explicit_context"] = json!([
        {"path": "src/a.rs", "content": "fn a() {}"},
        {"path": "src/b.rs", "content": "fn b() {}"},
        {"path": "src/a.rs", "content": "fn a() {}"},
        {"path": "src/huge.rs", "content": "x ".repeat(40_000)},
    ]);
    body["llm_config"]["tokenLimit"] = json!(4000);
    let client = reqwest::Client::new();
    let reply: serde_json::Value = client
        .post(format!("{base}/api/agent/react_step"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut fates = std::collections::BTreeMap::<String, f64>::new();
    for item in reply["context_report"]["items"].as_array().unwrap() {
        *fates
            .entry(item["fate"].as_str().unwrap().to_string())
            .or_default() += 1.0;
    }
    assert!(fates.len() >= 2, "more than one fate to count: {reply}");
    assert!(
        fates.values().any(|&n| n > 1.0),
        "a fate given twice: {reply}"
    );
    let text = metrics_text(&client, &base).await;
    for (fate, n) in &fates {
        let line = format!("reactstep_context_items_total{{kind=\"{fate}\"}}");
        assert_eq!(sample(&text, &line), *n, "{line}:\n{text}");
    }
    server.stop().await;
}
