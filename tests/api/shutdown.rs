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

/// Steps still running when the grace period ends (the model never finishes): each gets an
/// answer before its connection goes, `shutting_down`, retryable, so the client tries again
/// elsewhere. Before, the plain step got no status and the stream no terminal event.
#[tokio::test]
async fn steps_the_grace_period_cannot_hold_are_answered_shutting_down() {
    use crate::disconnect::{next, upstream, Seen, Upstream};
    let (uri, mut seen) = upstream(Upstream::StreamThenHold).await;
    let grace = [("REACTSTEP_SHUTDOWN_GRACE_SECS", "2")];
    let server = RunningBinary::start_with(&uri, "info", &grace).await;
    let base = format!("http://127.0.0.1:{}/api/agent", server.port);
    let post = |path: &str| {
        reqwest::Client::new()
            .post(format!("{base}/{path}"))
            .json(&request("gpt-4o", "q"))
            .send()
    };
    let plain = tokio::spawn(post("react_step"));
    let streamed = tokio::spawn(post("react_step/stream"));
    assert_eq!(next(&mut seen).await, Seen::Arrived);
    assert_eq!(next(&mut seen).await, Seen::Arrived);
    server.terminate().await;

    let plain = plain.await.unwrap().unwrap();
    assert_eq!(plain.status(), 503);
    assert_eq!(plain.headers()["retry-after"], "1");
    let body: Value = plain.json().await.unwrap();
    assert_eq!(body["error"]["type"], "shutting_down", "{body}");
    assert_eq!(body["error"]["retryable"], true, "{body}");
    crate::support::spec::assert_conforms("POST", "/api/agent/react_step", 503, &body);

    let streamed = streamed.await.unwrap().unwrap();
    assert_eq!(streamed.status(), 200);
    let events = streamed.text().await.unwrap();
    assert!(events.contains("event: thought"), "{events}");
    let terminal = events.trim_end().rsplit("\n\n").next().unwrap();
    assert!(terminal.starts_with("event: error\ndata: "), "{events}");
    let error: Value = serde_json::from_str(&terminal["event: error\ndata: ".len()..]).unwrap();
    assert_eq!(error["error"]["type"], "shutting_down", "{error}");
    let (exit, log) = server.exited().await;
    assert!(exit.success(), "{exit:?}\n{log}");
}
