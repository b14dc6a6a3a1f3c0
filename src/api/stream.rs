//! `POST /api/agent/react_step/stream`: the same step, answered as server-sent events. The
//! thought (`event: thought`) and a direct answer (`event: answer`) arrive as the model writes
//! them; one terminal event carries the complete response (`event: step`, identical to what
//! `react_step` returns) or the error (`event: error`). Until the provider has accepted the call,
//! a failure keeps its HTTP status; a comment line (every `REACTSTEP_STREAM_HEARTBEAT_SECS`)
//! keeps the connection alive while the model thinks. A client that goes away ends the step and its upstream call at once.

use crate::telemetry::timing::PhaseTimes;
use actix_web::HttpMessage;
use actix_web::{web, HttpRequest, HttpResponse};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tracing_actix_web::RequestId;

use super::admission::{at_capacity, prepare};
use super::error::{describe, ApiError, Echo};
use super::fallback_report;
use super::state::AppState;
use super::tasks::Endpoint;
use crate::runtime::memory_budget::{Held, MemoryBudget};
use crate::step::{Live, Outcome, StepError, StepErrorKind, StepOutput};

/// Events buffered between the step and the connection.
const BUFFERED_EVENTS: usize = 64;

type StepResult = Result<StepOutput, StepError>;

/// The step's task, stopped when the response is dropped (the client went away): dropping the
/// task drops its upstream request, which closes that connection.
struct StepTask(Option<actix_web::rt::task::JoinHandle<StepResult>>);

impl StepTask {
    async fn result(&mut self) -> StepResult {
        match self.0.take() {
            Some(handle) => handle.await.unwrap_or_else(|e| {
                Err(StepErrorKind::Internal(format!("the step task failed: {e}")).into())
            }),
            None => Err(StepErrorKind::Internal("the step was already answered".into()).into()),
        }
    }
}

impl Drop for StepTask {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            handle.abort();
        }
    }
}

struct Connection {
    events: mpsc::Receiver<Live>,
    task: StepTask,
    heartbeat: tokio::time::Interval,
    echo: Echo,
    /// Deltas that arrived before the response started.
    early: Option<Live>,
    done: bool,
    /// Resolves when the client leaves: the stream ends, and with it the step, even while the
    /// model is quiet and nothing is written that could fail.
    gone: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>,
    memory: Arc<MemoryBudget>,
    /// The terminal event's bytes, counted against the budget until the stream is dropped: the
    /// connection no longer asks for more once its buffer is full, so a client that does not
    /// read keeps it (and the body's hold in `echo`) alive.
    terminal: Option<Held>,
    /// The step's phases, for the terminal event's `server_timing`.
    timings: Option<Arc<PhaseTimes>>,
    /// Answer text was streamed (since the last `retry`): an answer that was not is sent as one
    /// `answer` event once the step is read, before the `step` event.
    answered: bool,
    /// The terminal event, when an `answer` event went before it.
    after: Option<Bytes>,
    /// Resolves when the service is stopping and the step must be answered
    /// (`runtime::stopping`): the terminal event is then `shutting_down`.
    cut: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>,
}

/// `POST /api/agent/react_step/stream`, `/plan/stream` and `/evaluate/stream`: the endpoint's
/// task on one step, answered as server-sent events.
pub async fn streamed(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    request_id: RequestId,
    endpoint: Endpoint,
) -> HttpResponse {
    let opened = crate::runtime::cpu::scoped(
        crate::runtime::cpu::Job::default(),
        open_stream(req, payload, state, request_id, endpoint),
    );
    match opened.await {
        Ok(response) => response,
        // Boxed, as in `handlers::answer`: not the state a stream waits in.
        Err(error) => Box::pin(error.render()).await,
    }
}

async fn open_stream(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    request_id: RequestId,
    endpoint: Endpoint,
) -> Result<HttpResponse, ApiError> {
    let Some(slot) = state.step_slots.take() else {
        return Err(at_capacity(&req, &state, request_id));
    };
    // Boxed: reading the body is not the state the handler waits for the first event in.
    let (input, echo) = Box::pin(prepare(&req, payload, &state, request_id, endpoint)).await?;
    let timings = req.extensions().get::<Arc<PhaseTimes>>().cloned();
    let (sender, mut events) = mpsc::channel(BUFFERED_EVENTS);
    let step_state = state.clone();
    // The place is the step's, which may outlive this handler.
    let job = crate::runtime::cpu::current();
    let step = crate::runtime::cpu::scoped(job, async move {
        let _slot = slot;
        crate::step::run(input, &step_state.llm, Some(sender)).await
    });
    // Traced, the step's spans belong under the request's, which a spawned task would not be in.
    let task = if crate::telemetry::traces::on() {
        actix_web::rt::spawn(tracing::Instrument::in_current_span(step))
    } else {
        actix_web::rt::spawn(step)
    };
    let mut task = StepTask(Some(task));

    // Before the provider accepts the call, an error is still an ordinary HTTP error.
    let first = match first_event(&req, &state, &mut events).await {
        Ok(first) => first,
        Err(kind) => return Err(ApiError::new(StepError::from(kind).into(), echo)),
    };
    let early = match first {
        Some(Live::Started) => None,
        Some(delta) => Some(delta),
        None => match task.result().await {
            Err(err) => return Err(ApiError::new(err.into(), echo)),
            Ok(output) => {
                let frame = Box::pin(step_frame(Ok(output), &echo, timings.as_deref())).await;
                let kept = (held_frame(&state.memory, &frame), echo.body_held.clone());
                let frames = futures_util::stream::iter([Ok(frame)]).map(move |f| {
                    let _kept = &kept;
                    f
                });
                return Ok(event_stream(&echo, frames));
            }
        },
    };
    let every = state.settings.stream_heartbeat;
    let connection = Connection {
        events,
        task,
        heartbeat: tokio::time::interval_at(tokio::time::Instant::now() + every, every),
        echo: echo.clone(),
        early,
        done: false,
        gone: Box::pin(super::client_gone::gone(&req)),
        memory: state.memory.clone(),
        terminal: None,
        timings,
        answered: false,
        after: None,
        cut: Box::pin(state.stopping.clone().cut()),
    };
    let frames = futures_util::stream::unfold(connection, |mut c| async move {
        let frame = next_frame(&mut c).await?;
        Some((Ok::<_, actix_web::Error>(frame), c))
    });
    Ok(event_stream(&echo, frames))
}

/// The step's first event (`None` when it ended without one), or why none will come: the
/// client left, or the service is stopping.
async fn first_event(
    req: &HttpRequest,
    state: &AppState,
    events: &mut mpsc::Receiver<Live>,
) -> Result<Option<Live>, StepErrorKind> {
    let first = std::pin::pin!(events.recv());
    let first = std::pin::pin!(state.stopping.before_cut(first));
    match super::client_gone::unless_gone(req, first).await {
        None => Err(StepErrorKind::ClientGone),
        Some(None) => Err(StepErrorKind::ShuttingDown),
        Some(Some(first)) => Ok(first),
    }
}

fn event_stream(
    echo: &Echo,
    frames: impl futures_util::Stream<Item = Result<Bytes, actix_web::Error>> + 'static,
) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("cache-control", "no-cache"))
        .insert_header(("x-accel-buffering", "no"))
        .insert_header(("x-request-id", echo.request_id.as_str()))
        .streaming(frames)
}

/// The next bytes for the client, or `None` once the terminal event has been sent.
async fn next_frame(c: &mut Connection) -> Option<Bytes> {
    if c.done {
        return c.after.take();
    }
    if let Some(delta) = c.early.take() {
        if let Some(frame) = c.delta_frame(delta) {
            return Some(frame);
        }
    }
    loop {
        tokio::select! {
            event = c.events.recv() => match event {
                Some(delta) => {
                    if let Some(frame) = c.delta_frame(delta) {
                        return Some(frame);
                    }
                }
                None => {
                    c.done = true;
                    // Boxed: the terminal event is written once, and unboxed its room (and the
                    // step's result) would be held by every stream through all its waits.
                    return Some(Box::pin(terminal(c)).await);
                }
            },
            _ = c.heartbeat.tick() => return Some(Bytes::from_static(b": heartbeat\n\n")),
            () = &mut c.cut => {
                c.done = true;
                // Dropping the task stops the step and its upstream call.
                drop(std::mem::replace(&mut c.task, StepTask(None)));
                let stopping = Err(StepErrorKind::ShuttingDown.into());
                let frame = Box::pin(step_frame(stopping, &c.echo, c.timings.as_deref())).await;
                return Some(frame);
            }
            () = &mut c.gone => {
                tracing::info!("the client disconnected; its step was stopped");
                return None;
            }
        }
    }
}

/// A large terminal event held against the memory budget (see [`Connection::terminal`]).
fn held_frame(memory: &Arc<MemoryBudget>, frame: &Bytes) -> Option<Held> {
    (frame.len() >= super::held_body::COUNTED_FROM).then(|| memory.hold_anyway(frame.len()))
}

/// The terminal event, after the `answer` event of an answer no delta carried.
async fn terminal(c: &mut Connection) -> Bytes {
    let result = c.task.result().await;
    let unsent = unsent_answer(&result, c.answered);
    let frame = step_frame(result, &c.echo, c.timings.as_deref()).await;
    c.terminal = held_frame(&c.memory, &frame);
    match unsent {
        Some(answer) => {
            // Sent next: copied after the answer, a large step event would be held twice.
            c.after = Some(frame);
            answer
        }
        None => frame,
    }
}

impl Connection {
    /// The event of a delta, noting whether answer text has been sent.
    fn delta_frame(&mut self, delta: Live) -> Option<Bytes> {
        match &delta {
            Live::Answer(text) if !text.is_empty() => self.answered = true,
            Live::Retry(_) => self.answered = false,
            _ => {}
        }
        delta_frame(delta)
    }
}

/// The `answer` event of a step's answer that no delta streamed: text before any tag (a tagless
/// answer, the usual one with tools called natively), an answer under `final_answer_schema`.
fn unsent_answer(result: &StepResult, answered: bool) -> Option<Bytes> {
    let Ok(StepOutput {
        outcome: Outcome::Answer { text, .. },
        ..
    }) = result
    else {
        return None;
    };
    (!answered && !text.is_empty()).then(|| delta_frame(Live::Answer(text.clone())))?
}

fn delta_frame(delta: Live) -> Option<Bytes> {
    let (name, data) = match delta {
        Live::Started => return None,
        Live::Thought(text) => ("thought", serde_json::json!({ "delta": text })),
        Live::Answer(text) => ("answer", serde_json::json!({ "delta": text })),
        Live::Retry(reason) => ("retry", serde_json::json!({ "reason": reason })),
    };
    let json = serde_json::to_vec(&data);
    Some(frame(name, &json.unwrap_or_else(|_| b"{}".to_vec())))
}

/// The terminal event: the whole response, or the error body (written off the worker when
/// large, like any response).
async fn step_frame(result: StepResult, echo: &Echo, timings: Option<&PhaseTimes>) -> Bytes {
    let (name, mut body) = match result {
        Ok(output) => {
            let (id, prices) = (echo.request_id.clone(), &echo.chain_prices);
            let body = fallback_report::success(output, id, echo.price, prices, describe);
            ("step", body)
        }
        Err(err) => {
            let error = ApiError::new(err.into(), echo.clone());
            error.log();
            let error = error.with_history().await;
            ("error", error.body())
        }
    };
    // The headers left before the step ran: the whole of it is told here.
    body.server_timing = timings.map(PhaseTimes::summary);
    frame(name, &body.into_json().await)
}

/// One event, its data the JSON given.
fn frame(name: &str, json: &[u8]) -> Bytes {
    let mut frame = Vec::with_capacity(json.len() + name.len() + 16);
    frame.extend_from_slice(format!("event: {name}\ndata: ").as_bytes());
    frame.extend_from_slice(json);
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}

#[cfg(test)]
mod future_size {
    fn future_of<A, R>(_: impl Fn(A) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    #[test]
    fn a_stream_waiting_for_its_next_event_holds_under_512_bytes_of_future() {
        // A stream holds this while its step waits on the model (thousands at once in a burst).
        // Writing the terminal event inline made it 2,904 bytes in a debug build (160 now): a
        // future keeps room for the largest of its states. The handler's: `handlers.rs`.
        let size = future_of(super::next_frame);
        assert!(size <= 512, "a stream's next-frame future is {size} bytes");
    }
}
