//! A streamed step read as a client reads it: the events decoded with the service's own SSE
//! decoder, each checked against openapi.yaml.

use reactstep::llm::sse::SseDecoder;
use serde_json::Value;

use super::app::TestApp;
use super::spec::{assert_conforms, assert_conforms_to_schema};

pub const STREAM_PATH: &str = "/api/agent/react_step/stream";

pub struct Streamed {
    pub status: u16,
    pub content_type: String,
    pub headers: reqwest::header::HeaderMap,
    /// `(event name, data)` in order.
    pub events: Vec<(String, Value)>,
    pub heartbeats: usize,
}

impl Streamed {
    pub fn joined(&self, name: &str) -> String {
        self.events
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, d)| d["delta"].as_str().unwrap_or_default())
            .collect()
    }

    pub fn terminal(&self) -> &(String, Value) {
        let terminals: Vec<_> = self
            .events
            .iter()
            .filter(|(n, _)| n == "step" || n == "error")
            .collect();
        assert_eq!(terminals.len(), 1, "{:?}", self.events);
        let last = self.events.last().unwrap();
        assert!(
            std::ptr::eq(terminals[0], last),
            "the terminal event must come last"
        );
        last
    }
}

pub async fn post_stream(app: &TestApp, body: &Value) -> Streamed {
    post_stream_to(app, STREAM_PATH, body).await
}

/// A body sent to one of the streaming endpoints (`/api/agent/plan/stream` …).
pub async fn post_stream_to(app: &TestApp, path: &str, body: &Value) -> Streamed {
    let response = reqwest::Client::new()
        .post(format!("{}{path}", app.address))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let headers = response.headers().clone();
    let bytes = response.bytes().await.unwrap();
    let mut events = Vec::new();
    if content_type.starts_with("text/event-stream") {
        let mut decoder = SseDecoder::default();
        for event in decoder.push(&bytes).unwrap() {
            let name = event.event.unwrap_or_default();
            let data: Value = serde_json::from_str(&event.data).unwrap();
            let schema = match name.as_str() {
                "thought" | "answer" => "StreamDelta",
                "retry" => "StreamRetry",
                "step" => "StepSuccess",
                "error" => "ErrorResponse",
                other => panic!("undocumented event {other}"),
            };
            assert_conforms_to_schema(schema, &data);
            events.push((name, data));
        }
        assert!(
            decoder.is_between_events(),
            "the stream ended inside an event"
        );
    } else {
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        assert_conforms("post", path, status, &body);
        events.push(("json".into(), body));
    }
    let heartbeats = bytes.windows(11).filter(|w| w == b": heartbeat").count();
    Streamed {
        status,
        content_type,
        headers,
        events,
        heartbeats,
    }
}
