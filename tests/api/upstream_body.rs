//! The upstream request's body as the provider receives it. The service hands reqwest a body it
//! cannot copy (so that no copy is kept while the model thinks): these tests check that it still
//! arrives whole, with an exact `Content-Length` and never in chunks, over plain HTTP/1.1 and over
//! TLS in both HTTP versions, and again, whole, when a failed call is retried (also when the
//! upstream hung up halfway through reading it).

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::net::TcpListener;
use wiremock::MockServer;

use crate::support::app::spawn_app_with;
use crate::support::https_upstream::{self, Framing, HttpsUpstream};
use crate::support::requests::request;
use crate::support::upstream::{
    mount, openai_reply, read_request_upto, write_openai_reply, OPENAI_PATH,
};

const OUTPUT: &str = "Thought: It is known.\nFinal Answer: framed";
/// A file's lines, with characters JSON escapes.
const SOURCE: &str = "fn main() {\n    println!(\"{}\", \"é\\t\");\n}\n";

/// A request whose upstream body is large enough to span many TLS records and HTTP/2 frames.
fn large_request() -> serde_json::Value {
    let mut body = request("gpt-4o", "what does the file do?");
    body["llm_config"]["tokenLimit"] = serde_json::json!(200_000);
    body["explicit_context"] =
        serde_json::json!([{ "path": "src/main.rs", "content": SOURCE.repeat(2_000) }]);
    body
}

fn exact(framing: &Framing) -> bool {
    framing.content_length == Some(framing.received) && !framing.chunked && framing.received > 0
}

#[tokio::test]
async fn over_plain_http_the_body_has_an_exact_length_and_no_chunks() {
    let llm = MockServer::start().await;
    mount(&llm, OPENAI_PATH, 200, openai_reply(OUTPUT)).await;
    let uri = llm.uri();
    let app = spawn_app_with(move |c| c.openai_base_url = format!("{uri}/v1")).await;

    let reply = app.post_react_step(&large_request()).await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    let received = llm.received_requests().await.unwrap();
    assert_eq!(received.len(), 1);
    let sent = &received[0];
    let length = sent
        .headers
        .get("content-length")
        .map(|v| v.to_str().unwrap().to_string());
    assert_eq!(
        length,
        Some(sent.body.len().to_string()),
        "{:?}",
        sent.headers
    );
    assert!(
        sent.headers.get("transfer-encoding").is_none(),
        "{:?}",
        sent.headers
    );
    let body: serde_json::Value = serde_json::from_slice(&sent.body).unwrap();
    let file = SOURCE.repeat(2_000);
    let messages = body["messages"].as_array().unwrap();
    assert!(
        messages
            .iter()
            .any(|m| m["content"].as_str().is_some_and(|c| c.contains(&file))),
        "the file arrived whole"
    );
}

/// An HTTPS upstream offering `protocols` that answers 503 `failures` times, then the reply.
async fn https_failing(protocols: &[&[u8]], failures: usize) -> HttpsUpstream {
    let calls = Arc::new(AtomicUsize::new(0));
    https_upstream::start_offering(protocols, None, move |_body| {
        let call = calls.fetch_add(1, Ordering::SeqCst);
        async move {
            if call < failures {
                (
                    503,
                    r#"{"error":{"message":"overloaded","type":"server_error"}}"#.into(),
                )
            } else {
                (200, openai_reply(OUTPUT).to_string())
            }
        }
    })
    .await
}

/// A step against `upstream` (trusting its authority): its status and the framings it sent.
async fn step_over_tls(upstream: &HttpsUpstream) -> (u16, Vec<Framing>, Vec<hyper::Version>) {
    let mut ca = tempfile::NamedTempFile::new().unwrap();
    ca.write_all(upstream.ca_pem.as_bytes()).unwrap();
    let (base, ca_path) = (format!("{}/v1", upstream.uri), ca.path().to_path_buf());
    let app = spawn_app_with(move |c| {
        c.openai_base_url = base;
        c.upstream_ca_file = Some(ca_path);
        c.retry_base_ms = 1;
        c.retry_cap_ms = 5;
    })
    .await;
    let reply = app.post_react_step(&large_request()).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let framings = upstream.framings.lock().unwrap().clone();
    let versions = upstream.versions.lock().unwrap().clone();
    (reply.status, framings, versions)
}

#[tokio::test]
async fn over_http2_a_retried_call_sends_the_whole_body_again_with_its_length() {
    let upstream = https_failing(&[b"h2", b"http/1.1"], 2).await;

    let (_, framings, versions) = step_over_tls(&upstream).await;

    assert_eq!(
        versions,
        vec![hyper::Version::HTTP_2; 3],
        "two 503s, then the answer"
    );
    assert_eq!(framings.len(), 3);
    assert!(framings.iter().all(exact), "{framings:?}");
    assert!(
        framings.windows(2).all(|w| w[0].received == w[1].received),
        "every attempt sent the same body: {framings:?}"
    );
}

#[tokio::test]
async fn over_https_http1_a_retried_call_sends_the_whole_body_again_with_its_length() {
    let upstream = https_failing(&[b"http/1.1"], 1).await;

    let (_, framings, versions) = step_over_tls(&upstream).await;

    assert_eq!(versions, vec![hyper::Version::HTTP_11; 2]);
    assert_eq!(framings.len(), 2);
    assert!(framings.iter().all(exact), "{framings:?}");
    assert_eq!(framings[0].received, framings[1].received);
}

#[tokio::test]
async fn an_upstream_that_hangs_up_halfway_through_the_body_gets_it_whole_on_the_retry() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}", listener.local_addr().unwrap());
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        // The first connection is closed once 4 KB of the body are in; the next is answered.
        let mut first = true;
        while let Ok((mut socket, _)) = listener.accept().await {
            let (length, body) =
                read_request_upto(&mut socket, if first { 4096 } else { usize::MAX }).await;
            let _ = seen_tx.send((length, body.clone()));
            if std::mem::take(&mut first) {
                drop(socket);
                continue;
            }
            let _ = write_openai_reply(&mut socket, OUTPUT).await;
        }
    });
    let app = spawn_app_with(move |c| {
        c.openai_base_url = format!("{uri}/v1");
        c.retry_base_ms = 1;
        c.retry_cap_ms = 5;
    })
    .await;

    let reply = app.post_react_step(&large_request()).await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["direct_response"], "framed");
    let (cut_length, cut) = seen.recv().await.unwrap();
    assert!(
        cut.len() < cut_length,
        "the first attempt was cut: {} of {cut_length}",
        cut.len()
    );
    let (length, body) = seen.recv().await.unwrap();
    assert_eq!(length, cut_length, "the same request again");
    assert_eq!(body.len(), length, "whole this time");
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let file = SOURCE.repeat(2_000);
    assert!(body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["content"].as_str().is_some_and(|c| c.contains(&file))));
}
