//! Every failure the API can answer with, and its status table. The body is the response shape
//! with `status: "error"`, what the request still told us (session, history, iterations) so the
//! client loses nothing, and `error {type, message, retryable}`.

use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};

use super::fallback_report;
use super::response::{ErrorBody, FieldError, ReactStepResponse, Status, UsageDto};
use crate::llm::LlmError;
use crate::step::Turn;
use crate::step::{StepError, StepErrorKind};

#[derive(Debug, thiserror::Error)]
pub enum ErrorKind {
    /// 400 `invalid_request`: malformed JSON, a wrong type, a missing or out-of-range field.
    #[error("{message}")]
    InvalidRequest {
        message: String,
        fields: Vec<FieldError>,
    },
    /// 401 `unauthorized`: the operator's bearer token is missing or wrong.
    #[error("this server needs an API token: send Authorization: Bearer <token>")]
    Unauthorized,
    /// 429 `rate_limited`: this client or session is over the operator's rate limit.
    #[error("too many requests from this {what}: retry after {retry_after} s")]
    RateLimited {
        what: &'static str,
        retry_after: u64,
    },
    /// 503 `rate_limiter_unavailable`: the shared rate limiter (Redis) did not answer and the
    /// operator chose to fail closed (`REACTSTEP_REDIS_FAIL_OPEN=false`).
    #[error("the rate limiter is unavailable: retry after 1 s")]
    RateLimiterUnavailable,
    /// 503 `at_capacity`: as many steps are in flight as the service can hold (bounded by its
    /// file descriptor limit, or `REACTSTEP_MAX_STEPS_IN_FLIGHT`).
    #[error("the service is running as many steps as it can ({limit}): retry after 1 s")]
    AtCapacity { limit: usize },
    /// 503 `overloaded`: the bodies and replies held at once reached the memory budget
    /// (`REACTSTEP_MEMORY_BUDGET_MIB`); retry after 1 s.
    #[error("the service is holding as much request and reply data as its memory budget allows: retry after 1 s")]
    Overloaded,
    /// 413 `payload_too_large`.
    #[error("the request body is larger than the limit of {limit} bytes")]
    PayloadTooLarge { limit: u64 },
    /// 408 `request_timeout`: the request (its body, or its head) did not arrive within
    /// `REACTSTEP_CLIENT_TIMEOUT_SECS`; the connection is closed after the answer.
    #[error("the request {what} did not arrive within {seconds} s")]
    RequestTimeout { what: &'static str, seconds: u64 },
    /// 431 `headers_too_large`: the request head is over what the HTTP layer reads (answered by
    /// the connection, see `protocol.rs`).
    #[error("the request head is larger than 128 KiB or has more than 96 header fields")]
    HeadersTooLarge,
    /// 404 `not_found`.
    #[error("there is no endpoint at {0}")]
    NotFound(String),
    /// 405 `method_not_allowed`, with the method the endpoint takes (the `Allow` header).
    #[error("{method} is not allowed on this endpoint; it takes {allowed}")]
    MethodNotAllowed {
        method: String,
        allowed: &'static str,
    },
    /// 422, 401, 400, 429, 502, 504 or 500 by the step's failure; see [`ErrorKind::status`].
    #[error(transparent)]
    Step(#[from] StepError),
}

/// What the failed request still told us, echoed so that the client can retry as it was.
#[derive(Debug, Default, Clone)]
pub struct Echo {
    pub request_id: String,
    pub session_id: Option<String>,
    pub history: EchoedHistory,
    pub iterations_left: Option<u32>,
    /// The price of the request's model in the operator's table, to put a figure on `usage`.
    pub price: Option<crate::prices::Price>,
    /// With `llm_config.fallbacks`: the price of each of its models (the first's included).
    pub chain_prices: Vec<(String, Option<crate::prices::Price>)>,
    /// The body's bytes held against the memory budget: given back when the last echo (the
    /// request's answer, or the stream that answers it) is gone.
    pub body_held: Option<std::sync::Arc<crate::runtime::memory_budget::Held>>,
}

/// The turns an error answers with. A step that succeeds never needs them, so the turns of a
/// body that decoded are not copied at every step: they are decoded from the body again when an
/// error needs them.
#[derive(Debug, Default, Clone)]
pub enum EchoedHistory {
    #[default]
    None,
    Turns(Vec<Turn>),
    /// A body that decoded as a request: its `conversation_history`, when every turn is valid.
    InBody(bytes::Bytes),
}

impl EchoedHistory {
    /// The turns, decoded from the body if need be.
    pub fn turns(&self) -> Vec<Turn> {
        match self {
            Self::None => Vec::new(),
            Self::Turns(turns) => turns.clone(),
            Self::InBody(body) => turns_in(body),
        }
    }

    /// Decoded ahead of [`Self::turns`], on the CPU pool when the body is large.
    pub async fn resolved(self) -> Self {
        match self {
            Self::InBody(body) if body.len() > crate::runtime::cpu::INLINE_BYTES => {
                let kept = body.clone();
                crate::runtime::cpu::run(move || Self::Turns(turns_in(&body)))
                    .await
                    .unwrap_or_else(|_| Self::Turns(turns_in(&kept)))
            }
            Self::InBody(body) => Self::Turns(turns_in(&body)),
            other => other,
        }
    }
}

/// The `conversation_history` of a body that decoded as a request, or none when a turn is not
/// valid (an error response must itself conform to the contract).
fn turns_in(body: &[u8]) -> Vec<Turn> {
    #[derive(serde::Deserialize)]
    struct History {
        #[serde(default)]
        conversation_history: Vec<Turn>,
    }
    serde_json::from_slice::<History>(body)
        .map(|h| h.conversation_history)
        .ok()
        .filter(|turns| super::convert::history_is_valid(turns))
        .unwrap_or_default()
}

#[derive(Debug, thiserror::Error)]
#[error("{kind}")]
pub struct ApiError {
    pub kind: ErrorKind,
    pub echo: Echo,
}

impl ErrorKind {
    /// The status, the `error.type` and whether retrying the same request can help.
    pub fn status(&self) -> (StatusCode, &'static str, bool) {
        use StatusCode as S;
        match self {
            Self::InvalidRequest { .. } => (S::BAD_REQUEST, "invalid_request", false),
            Self::PayloadTooLarge { .. } => (S::PAYLOAD_TOO_LARGE, "payload_too_large", false),
            Self::Unauthorized => (S::UNAUTHORIZED, "unauthorized", false),
            Self::RateLimited { .. } => (S::TOO_MANY_REQUESTS, "rate_limited", true),
            Self::RateLimiterUnavailable => {
                (S::SERVICE_UNAVAILABLE, "rate_limiter_unavailable", true)
            }
            Self::AtCapacity { .. } => (S::SERVICE_UNAVAILABLE, "at_capacity", true),
            Self::Overloaded => (S::SERVICE_UNAVAILABLE, "overloaded", true),
            Self::NotFound(_) => (S::NOT_FOUND, "not_found", false),
            // A client on a slow link may well make it on another try.
            Self::RequestTimeout { .. } => (S::REQUEST_TIMEOUT, "request_timeout", true),
            Self::HeadersTooLarge => (
                S::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "headers_too_large",
                false,
            ),
            Self::MethodNotAllowed { .. } => (S::METHOD_NOT_ALLOWED, "method_not_allowed", false),
            Self::Step(error) => step_status(&error.kind),
        }
    }

    /// Seconds a client should wait before retrying a rate-limited call: the upstream's figure,
    /// or one second when it gave none.
    fn retry_after_seconds(&self) -> Option<u64> {
        match self {
            Self::RateLimited { retry_after, .. } => return Some(*retry_after),
            Self::RateLimiterUnavailable | Self::AtCapacity { .. } | Self::Overloaded => {
                return Some(1)
            }
            _ => {}
        }
        let Self::Step(error) = self else {
            return None;
        };
        match &error.kind {
            StepErrorKind::Llm(LlmError::Overloaded { .. }) | StepErrorKind::ShuttingDown => {
                Some(1)
            }
            StepErrorKind::Llm(LlmError::RateLimited {
                retry_after,
                retryable: true,
                ..
            }) => Some(
                retry_after
                    .map_or(1, |d| d.as_secs_f64().ceil() as u64)
                    .max(1),
            ),
            _ => None,
        }
    }

    /// Internal failures keep their detail in the log, not in the response.
    fn public_message(&self) -> String {
        match self {
            Self::Step(error) => describe(error).1,
            other => other.to_string(),
        }
    }
}

impl ApiError {
    pub fn new(kind: ErrorKind, echo: Echo) -> Self {
        Self { kind, echo }
    }

    pub fn invalid(message: impl Into<String>, fields: Vec<FieldError>, echo: Echo) -> Self {
        Self::new(
            ErrorKind::InvalidRequest {
                message: message.into(),
                fields,
            },
            echo,
        )
    }

    fn step_error(&self) -> Option<&StepError> {
        match &self.kind {
            ErrorKind::Step(error) => Some(error),
            _ => None,
        }
    }

    /// The error response body (also the data of a stream's `error` event).
    pub fn body(&self) -> ReactStepResponse {
        let (_, kind, retryable) = self.kind.status();
        let fields = match &self.kind {
            ErrorKind::InvalidRequest { fields, .. } => fields
                .iter()
                .map(|f| FieldError {
                    field: f.field.clone(),
                    message: f.message.clone(),
                })
                .collect(),
            _ => Vec::new(),
        };
        ReactStepResponse {
            plan: None,
            evaluation: None,
            session_id: self.echo.session_id.clone(),
            request_id: self.echo.request_id.clone(),
            thought: None,
            action_details: None,
            parallel_actions: Vec::new(),
            direct_response: None,
            direct_response_json: None,
            forced_final: false,
            answer_left_out: false,
            server_timing: None,
            updated_conversation_history: self.echo.history.turns(),
            iterations_remaining: self.echo.iterations_left,
            status: Status::Error,
            termination_reason: None,
            // What the step's calls spent before it failed: billed all the same.
            usage: self.usage_spent(),
            warnings: Vec::new(),
            context_report: self
                .step_error()
                .and_then(|error| error.context_report.as_deref())
                .cloned(),
            conversation_summary: None,
            prompt: None,
            loop_guard: match self.step_error().map(|error| &error.kind) {
                Some(StepErrorKind::LoopDetected(report)) => Some((**report).clone()),
                _ => None,
            },
            error: Some(ErrorBody {
                kind,
                message: self.kind.public_message(),
                retryable,
                retry_after_seconds: self.kind.retry_after_seconds(),
                fields,
                raw_output: match self.step_error().map(|error| &error.kind) {
                    Some(StepErrorKind::InvalidOutput { raw_output, .. }) => {
                        Some(raw_output.clone())
                    }
                    _ => None,
                },
            }),
            model_used: None,
            fallback_attempts: self.step_error().map_or_else(Vec::new, |error| {
                let failed = &error.fallback_attempts;
                fallback_report::attempts(failed, Some(error), &self.echo.chain_prices, describe)
            }),
        }
    }

    /// What the failed step's calls spent, priced per model when several were asked.
    fn usage_spent(&self) -> Option<UsageDto> {
        let error = self.step_error()?;
        let mut usage = UsageDto::new(*error.usage.as_deref()?, self.echo.price);
        if !error.fallback_attempts.is_empty() {
            let parts = error.fallback_attempts.iter();
            let parts = parts.map(|a| (a.model.as_str(), a.usage));
            usage.cost_usd = fallback_report::chain_cost(parts, &self.echo.chain_prices);
        }
        Some(usage)
    }
}

/// A step's failure as an answer names it: its `error.type` and message.
pub fn describe(error: &StepError) -> (&'static str, String) {
    let message = match error.kind {
        StepErrorKind::Internal(_) => {
            "an internal error occurred; the request id identifies it in the service's logs".into()
        }
        _ => error.to_string(),
    };
    (step_status(&error.kind).1, message)
}

impl ApiError {
    pub fn log(&self) {
        let (status, kind, _) = self.kind.status();
        tracing::Span::current().record("error_type", kind);
        // Load shed on purpose is a refusal, not a failure: under load every refused request
        // would otherwise be an ERROR line.
        let shed = matches!(
            &self.kind,
            ErrorKind::AtCapacity { .. }
                | ErrorKind::Overloaded
                // A bare overload: one that met a fitted prompt carries its report, and is
                // logged as a failure.
                | ErrorKind::Step(StepError {
                    kind: StepErrorKind::Llm(LlmError::Overloaded { .. }),
                    usage: None,
                    context_report: None,
                    ..
                })
        );
        if status.is_server_error() && !shed {
            // Display, never Debug: the step's error may hold the model's output. An invalid
            // action's reason quotes what the model wrote (a tool name, an argument): not logged.
            let error: &dyn std::fmt::Display = match &self.kind {
                ErrorKind::Step(step)
                    if matches!(step.kind, StepErrorKind::InvalidOutput { .. }) =>
                {
                    &"the model's action stayed invalid after the repair rounds"
                }
                kind => kind,
            };
            tracing::error!(request_id = %self.echo.request_id, error.type = kind, error = %error, "request failed");
        } else {
            tracing::warn!(request_id = %self.echo.request_id, error.type = kind, error = %self.kind, "request refused");
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.kind.status().0
    }

    fn error_response(&self) -> HttpResponse {
        self.log();
        self.head().json(self.body())
    }
}

impl ApiError {
    /// The response, with a large body written off the worker (see
    /// [`ReactStepResponse::into_json`]).
    pub async fn render(self) -> HttpResponse {
        self.log();
        let this = self.with_history().await;
        let mut head = this.head();
        let body_held = this.echo.body_held.clone();
        let json = this.body().into_json().await;
        head.content_type("application/json")
            .body(super::held_body::HeldBody::keeping(json, body_held))
    }

    /// With the echoed turns decoded (see [`EchoedHistory::resolved`]).
    pub async fn with_history(mut self) -> Self {
        self.echo.history = std::mem::take(&mut self.echo.history).resolved().await;
        self
    }

    /// The status and the headers of the error's response.
    fn head(&self) -> actix_web::HttpResponseBuilder {
        let (status, _, _) = self.kind.status();
        let mut response = HttpResponse::build(status);
        response.insert_header(("x-request-id", self.echo.request_id.as_str()));
        if let ErrorKind::Unauthorized = &self.kind {
            response.insert_header((header::WWW_AUTHENTICATE, "Bearer"));
        }
        if let ErrorKind::MethodNotAllowed { allowed, .. } = &self.kind {
            response.insert_header((header::ALLOW, *allowed));
        }
        if let Some(seconds) = self.kind.retry_after_seconds() {
            response.insert_header((header::RETRY_AFTER, seconds.to_string()));
        }
        let stopping = matches!(&self.kind, ErrorKind::Step(e) if matches!(e.kind, StepErrorKind::ShuttingDown));
        if stopping
            || matches!(
                &self.kind,
                ErrorKind::RequestTimeout { .. } | ErrorKind::AtCapacity { .. }
            )
        {
            // The rest of a slow body is not worth waiting for; a client refused for capacity
            // gives its connection (a descriptor) back; a stopping service closes them all.
            response.force_close();
        }
        response
    }
}

/// The status, the `error.type` and whether retrying can help, for a step's failure.
fn step_status(error: &StepErrorKind) -> (StatusCode, &'static str, bool) {
    use StatusCode as S;
    match error {
        StepErrorKind::ContextOverflow(_) => (S::UNPROCESSABLE_ENTITY, "context_overflow", false),
        // The same request would meet the same loop: the client must change course.
        StepErrorKind::LoopDetected(_) => (S::UNPROCESSABLE_ENTITY, "loop_detected", false),
        StepErrorKind::EmptyOutput(_) => (S::BAD_GATEWAY, "llm_bad_response", true),
        // Another sample of the model may well be valid.
        StepErrorKind::InvalidOutput { .. } => (S::BAD_GATEWAY, "invalid_model_output", true),
        StepErrorKind::Internal(_) => (S::INTERNAL_SERVER_ERROR, "internal_error", true),
        StepErrorKind::Deadline(_) => (S::GATEWAY_TIMEOUT, "llm_timeout", true),
        // Never sent: the client is gone. Logged as what it is.
        StepErrorKind::ClientGone => (S::BAD_REQUEST, "client_disconnected", false),
        StepErrorKind::ShuttingDown => (S::SERVICE_UNAVAILABLE, "shutting_down", true),
        StepErrorKind::Llm(e) => {
            let retryable = e.is_retryable();
            match e {
                LlmError::Auth { .. } => (S::UNAUTHORIZED, "llm_auth", retryable),
                LlmError::ModelNotFound { .. } => {
                    (S::BAD_REQUEST, "llm_model_not_found", retryable)
                }
                LlmError::RateLimited { .. } => {
                    (S::TOO_MANY_REQUESTS, "llm_rate_limited", retryable)
                }
                LlmError::Rejected { .. } => (S::BAD_REQUEST, "llm_request_rejected", retryable),
                LlmError::ContextTooLong { .. } => {
                    (S::UNPROCESSABLE_ENTITY, "context_overflow", retryable)
                }
                LlmError::Unavailable { .. } | LlmError::Untrusted { .. } => {
                    (S::BAD_GATEWAY, "llm_unavailable", retryable)
                }
                LlmError::BadResponse { .. }
                | LlmError::Refused { .. }
                | LlmError::Redirected { .. }
                | LlmError::EmptyReply { .. } => (S::BAD_GATEWAY, "llm_bad_response", retryable),
                LlmError::Timeout { .. } => (S::GATEWAY_TIMEOUT, "llm_timeout", retryable),
                LlmError::Overloaded { .. } => (S::SERVICE_UNAVAILABLE, "overloaded", retryable),
            }
        }
    }
}
