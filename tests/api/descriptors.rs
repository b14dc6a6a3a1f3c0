//! The descriptor limit: the real binary started with few open files allowed, and more slow steps
//! at once than fit in them, against an upstream that holds every answer until the test lets it
//! go. The steps that fit run; the others get the documented 503 `at_capacity` (not a 502 for an
//! upstream connection that could not be opened), and `/healthz` still answers meanwhile.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

use crate::support::app::spawn_app_with;
use crate::support::binary::RunningBinary;
use crate::support::requests::request;
use crate::support::spec::assert_conforms;
use crate::support::upstream::openai_reply;

/// An OpenAI-style upstream over plain HTTP/1.1 that counts the calls it gets and answers none
/// until `release` is sent.
struct HeldUpstream {
    uri: String,
    arrived: Arc<AtomicUsize>,
    release: tokio::sync::watch::Sender<bool>,
}

async fn held_upstream() -> HeldUpstream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}", listener.local_addr().unwrap());
    let arrived = Arc::new(AtomicUsize::new(0));
    let (release, released) = tokio::sync::watch::channel(false);
    let reply = Bytes::from(openai_reply("Thought: done\nFinal Answer: 42").to_string());
    let counter = arrived.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (counter, released, reply) = (counter.clone(), released.clone(), reply.clone());
            let service = service_fn(move |_request| {
                counter.fetch_add(1, Ordering::SeqCst);
                let (mut released, reply) = (released.clone(), reply.clone());
                async move {
                    let _ = released.wait_for(|go| *go).await;
                    let response = hyper::Response::builder()
                        .header("content-type", "application/json")
                        .body(Full::new(reply))
                        .unwrap();
                    Ok::<_, Infallible>(response)
                }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service),
            );
        }
    });
    HeldUpstream {
        uri,
        arrived,
        release,
    }
}

/// Polls `condition` until it holds, for at most a minute.
async fn until(what: &str, condition: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within a minute"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn past_what_the_descriptor_limit_holds_steps_get_503_and_healthz_answers() {
    const STEPS: usize = 400;
    const DESCRIPTORS: u64 = 600;
    let upstream = held_upstream().await;
    let mut server = RunningBinary::start_with_fd_limit(
        &upstream.uri,
        "info",
        &[("REACTSTEP_UPSTREAM_POOLS", "1")],
        DESCRIPTORS,
    )
    .await;
    let line = server.logged_line("file descriptors").await;
    let budget: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(budget["soft_limit"], DESCRIPTORS, "{line}");
    let fit = usize::try_from(budget["steps_in_flight"].as_u64().unwrap()).unwrap();
    // Three descriptors per step: well under the 400 steps that will come at once.
    assert!(fit * 3 < DESCRIPTORS as usize && fit < STEPS / 2, "{line}");

    let url = format!("http://127.0.0.1:{}/api/agent/react_step", server.port);
    let refused = Arc::new(AtomicUsize::new(0));
    let client = reqwest::Client::new();
    let steps: Vec<_> = (0..STEPS)
        .map(|i| {
            let (client, url, refused) = (client.clone(), url.clone(), refused.clone());
            let mut body = request("gpt-4o", "What is the answer?");
            body["session_id"] = json!(format!("fd-{i}"));
            tokio::spawn(async move {
                let reply = client.post(url).json(&body).send().await.unwrap();
                let status = reply.status().as_u16();
                let retry_after = reply
                    .headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap().to_string());
                let body: Value = reply.json().await.unwrap();
                if status == 503 {
                    refused.fetch_add(1, Ordering::SeqCst);
                }
                (status, retry_after, body)
            })
        })
        .collect();

    // Every step that fits is held at the upstream, every other one answered.
    until(
        "the steps that fit reach the upstream, the rest are refused",
        || {
            upstream.arrived.load(Ordering::SeqCst) == fit
                && refused.load(Ordering::SeqCst) == STEPS - fit
        },
    )
    .await;
    let health = client
        .get(format!("http://127.0.0.1:{}/healthz", server.port))
        .send()
        .await
        .unwrap();
    assert_eq!(
        health.status(),
        200,
        "/healthz answers while the steps are held"
    );
    assert_eq!(
        upstream.arrived.load(Ordering::SeqCst),
        fit,
        "no step past the bound reached the upstream"
    );

    upstream.release.send(true).unwrap();
    let mut answered = Vec::new();
    for step in steps {
        answered.push(step.await.unwrap());
    }
    let ok = answered
        .iter()
        .filter(|(status, ..)| *status == 200)
        .count();
    assert_eq!(ok, fit, "every step admitted is answered");
    for (status, retry_after, body) in answered.iter().filter(|(status, ..)| *status != 200) {
        assert_eq!(*status, 503, "{body}");
        assert_eq!(body["error"]["type"], "at_capacity", "{body}");
        assert_eq!(body["error"]["retryable"], true);
        assert_eq!(retry_after.as_deref(), Some("1"));
        assert_conforms("post", "/api/agent/react_step", 503, body);
    }
    let log = server.stop().await;
    assert!(!log.contains("Too many open files"), "{log}");
}

#[tokio::test]
async fn the_operators_bound_refuses_both_endpoints_and_a_finished_step_gives_its_place_back() {
    let upstream = held_upstream().await;
    let uri = upstream.uri.clone();
    let app = spawn_app_with(move |c| {
        c.max_steps_in_flight = 1;
        c.openai_base_url = format!("{uri}/v1");
    })
    .await;
    let held = {
        let (client, url) = (
            app.client.clone(),
            format!("{}/api/agent/react_step", app.address),
        );
        let body = request("gpt-4o", "held");
        tokio::spawn(async move { client.post(url).json(&body).send().await.unwrap() })
    };
    until("the first step reaches the upstream", || {
        upstream.arrived.load(Ordering::SeqCst) == 1
    })
    .await;

    let refused = app.post_react_step(&request("gpt-4o", "second")).await;
    assert_eq!(refused.status, 503, "{}", refused.text);
    assert_eq!(refused.body["error"]["type"], "at_capacity");
    assert_eq!(refused.headers["retry-after"], "1");
    assert_eq!(refused.headers["connection"], "close");
    let streamed = app
        .send(
            "POST",
            "/api/agent/react_step/stream",
            Some(request("gpt-4o", "streamed").to_string()),
        )
        .await;
    assert_eq!(streamed.status, 503, "{}", streamed.text);
    assert_eq!(streamed.body["error"]["type"], "at_capacity");
    assert_eq!(upstream.arrived.load(Ordering::SeqCst), 1);

    upstream.release.send(true).unwrap();
    assert_eq!(held.await.unwrap().status(), 200);
    let again = app.post_react_step(&request("gpt-4o", "again")).await;
    assert_eq!(
        again.status, 200,
        "the place was given back: {}",
        again.text
    );
}
