//! Graceful shutdown: on SIGTERM or SIGINT the server stops accepting, lets the step in flight
//! finish, and exits cleanly.

use serde_json::Value;

use crate::support::binary::RunningBinary;
use crate::support::requests::request;
use crate::support::upstream::held_upstream;

#[tokio::test]
async fn sigterm_lets_the_step_in_flight_finish_then_exits() {
    stopped_gracefully_by("TERM").await;
}

/// SIGINT (Ctrl-C, `docker stop` with another signal) stops as gracefully: actix's own handling
/// dropped the step in flight at once.
#[tokio::test]
async fn sigint_lets_the_step_in_flight_finish_then_exits() {
    stopped_gracefully_by("INT").await;
}

async fn stopped_gracefully_by(signal: &str) {
    let (uri, arrived, go) =
        held_upstream("Thought: t\nFinal Answer: finished during shutdown").await;
    let mut server = RunningBinary::start(&uri, "info").await;
    let url = format!("http://127.0.0.1:{}/api/agent/react_step", server.port);
    let in_flight = tokio::spawn(async move {
        let reply = reqwest::Client::new()
            .post(url)
            .json(&request("gpt-4o", "q"))
            .send()
            .await
            .unwrap();
        (
            reply.status().as_u16(),
            reply.json::<Value>().await.unwrap(),
        )
    });
    arrived.await.unwrap();
    server.signal(signal).await;
    // Only once the server is shutting down does the upstream answer the step in flight.
    server.logged("graceful shutdown").await;
    go.send(()).unwrap();

    let (status, body) = in_flight.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["direct_response"], "finished during shutdown");
    let (exit, log) = server.exited().await;
    assert!(exit.success(), "{exit:?}\n{log}");
}
