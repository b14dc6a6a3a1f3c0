//! The service's answer to a step, read within bounds: a stream event by event (each piece of
//! the thought to the watcher as it forms, a repair round said), or a plain answer whole. A
//! stream may not go quiet past its idle bound (bytes that end no block, a byte a second, do
//! not keep it alive), and neither may pass a size far beyond any answer the service gives:
//! a hostile `--server` cannot hold the loop or fill the driver's memory.

use std::time::Duration;

use serde_json::Value;

use super::watcher::Watcher;
use crate::llm::sse::SseDecoder;

/// How long a stream may go without a whole block (none: a plain answer, which comes with the
/// step), how long the whole answer may take, and the most bytes it may take.
pub struct Bounds {
    pub idle: Option<Duration>,
    /// A stream kept alive by heartbeats alone, or a plain answer never given, ends here.
    pub whole: Duration,
    pub bytes: usize,
}

/// The longest a step's answer takes from a `reactstep` service by default: its own step
/// timeout (`REACTSTEP_STEP_TIMEOUT_SECS`) is at most an hour, and the answer follows at once.
pub const DEFAULT_STEP_CEILING: Duration = Duration::from_secs(3600 + 30);

/// The most an answer may take, with requests of at most `max_request_bytes`: it echoes the
/// history it was sent and adds a turn (its text at most 1 MiB), and a stream sends the thought
/// before the step, escaped, again for each repair round. Four requests' worth holds all that.
pub fn most_bytes(max_request_bytes: usize) -> usize {
    max_request_bytes.saturating_mul(4).max(16 * 1024 * 1024)
}

/// The answer to the request `sent`: the step (or the service's error) as the plain endpoint
/// gives it, or why there was none.
pub async fn read(
    sent: impl std::future::Future<Output = reqwest::Result<reqwest::Response>>,
    bounds: &Bounds,
    iteration: u32,
    watcher: &mut dyn Watcher,
) -> Result<Value, String> {
    tokio::time::timeout(bounds.whole, read_within(sent, bounds, iteration, watcher))
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "the service did not give the step's answer within {} s (--step-timeout)",
                bounds.whole.as_secs_f64()
            ))
        })
}

/// [`read`] within every bound but the whole answer's.
async fn read_within(
    sent: impl std::future::Future<Output = reqwest::Result<reqwest::Response>>,
    bounds: &Bounds,
    iteration: u32,
    watcher: &mut dyn Watcher,
) -> Result<Value, String> {
    // A stream's head comes at once; a plain answer only with the step.
    let sent = match bounds.idle {
        Some(idle) => tokio::time::timeout(idle, sent)
            .await
            .map_err(|_| went_quiet(idle))?,
        None => sent.await,
    };
    let response = sent.map_err(|e| format!("the service did not answer: {e}"))?;
    if response.status().is_redirection() {
        return Err(format!(
            "the service answered with a redirect (HTTP {}), which is not followed: the request \
             holds the model's key",
            response.status().as_u16()
        ));
    }
    let streamed = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let mut reader = Reader::new(response, bounds);
    if streamed {
        return reader.events(iteration, watcher).await;
    }
    let body = reader.whole().await?;
    answer_of(&body)
}

/// A response read a chunk at a time, against its deadline and its byte bound.
struct Reader<'a> {
    response: reqwest::Response,
    bounds: &'a Bounds,
    deadline: Option<tokio::time::Instant>,
    read: usize,
}

impl<'a> Reader<'a> {
    fn new(response: reqwest::Response, bounds: &'a Bounds) -> Self {
        let deadline = bounds.idle.map(|idle| tokio::time::Instant::now() + idle);
        Self {
            response,
            bounds,
            deadline,
            read: 0,
        }
    }

    /// The next chunk; `None` at the end.
    async fn chunk(&mut self) -> Result<Option<bytes::Bytes>, String> {
        let next = self.response.chunk();
        let chunk = match (self.deadline, self.bounds.idle) {
            (Some(deadline), Some(idle)) => tokio::time::timeout_at(deadline, next)
                .await
                .map_err(|_| went_quiet(idle))?,
            _ => next.await,
        };
        let chunk = chunk.map_err(|e| format!("the service's answer broke off: {e}"))?;
        self.read += chunk.as_ref().map_or(0, |c| c.len());
        if self.read > self.bounds.bytes {
            return Err(format!(
                "the service's answer passed {} MiB, more than any step's answer takes",
                self.bounds.bytes >> 20
            ));
        }
        Ok(chunk)
    }

    /// A whole block arrived: the quiet spell starts again.
    fn heard(&mut self) {
        if let Some(idle) = self.bounds.idle {
            self.deadline = Some(tokio::time::Instant::now() + idle);
        }
    }

    /// The whole body (a plain answer, or an error the service gave instead of a stream).
    async fn whole(&mut self) -> Result<Vec<u8>, String> {
        let mut body = Vec::new();
        while let Some(chunk) = self.chunk().await? {
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// The streamed step: each piece of the thought to the watcher, then the step's answer (the
    /// `step` event) or its error (the `error` event).
    async fn events(&mut self, iteration: u32, watcher: &mut dyn Watcher) -> Result<Value, String> {
        let mut decoder = SseDecoder::default();
        while let Some(chunk) = self.chunk().await? {
            let before = decoder.blocks_ended();
            let events = decoder
                .push(&chunk)
                .map_err(|_| "the service's stream is not text".to_string())?;
            if decoder.blocks_ended() > before {
                self.heard();
            }
            for event in events {
                let data = match event.event.as_deref() {
                    Some("step" | "error") => answer_of(event.data.as_bytes())?,
                    _ => serde_json::from_str(&event.data).unwrap_or(Value::Null),
                };
                let text = |field: &str| data[field].as_str().unwrap_or_default().to_string();
                match event.event.as_deref() {
                    Some("thought") => watcher.thought_piece(iteration, &text("delta")),
                    Some("retry") => watcher.repairing(iteration, &text("reason")),
                    Some("step" | "error") => return Ok(data),
                    _ => {}
                }
            }
        }
        Err("the service's stream ended without the step".into())
    }
}

/// The most JSON values an answer may hold. The service takes a history of at most 100,000
/// values in its calls and results; an answer echoes it with its turns' own fields and adds a
/// turn. Past this, an answer of a few MiB would take gigabytes once read.
const MOST_VALUES: usize = 1_000_000;

/// An answer's JSON, read within [`MOST_VALUES`].
fn answer_of(bytes: &[u8]) -> Result<Value, String> {
    crate::json::from_slice_within(bytes, MOST_VALUES)
        .map_err(|e| format!("the service's answer is not JSON an answer can be: {e}"))
}

/// Why a stream was given up: no whole event or heartbeat within `idle`.
fn went_quiet(idle: Duration) -> String {
    format!(
        "the service's stream went quiet: no whole event or heartbeat within {} s",
        idle.as_secs_f64()
    )
}
