//! One log line per request: its id (the client's `X-Request-Id` when it sent a usable one),
//! method, path, status, latency, and for steps the provider, model and token counts. Never a
//! body, a history or a key: errors are logged by their type and message only, and the method
//! and path without anything shaped like a key.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::HeaderMap;
use actix_web::{Error, HttpMessage, HttpRequest};
use tracing::field::Empty;
use tracing::Span;
use tracing_actix_web::{RequestId, RootSpanBuilder};

/// When the request arrived, kept in its extensions for the latency.
struct Arrived(std::time::Instant);

/// The id to log and answer with: the client's `X-Request-Id` when it is a plain token of at most
/// 128 characters that is not shaped like a key (a key pasted there would reach every log line
/// of the request), else the generated one.
pub fn request_id(headers: &HeaderMap, generated: RequestId) -> String {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|id| {
            !id.is_empty()
                && id.len() <= 128
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
                && crate::llm::redact_key_shapes(id) == *id
        })
        .map_or_else(|| generated.to_string(), str::to_string)
}

/// The id of a request being handled (the same one its log line carries).
pub fn request_id_of(req: &HttpRequest, generated: RequestId) -> String {
    request_id(req.headers(), generated)
}

pub struct RequestLog;

impl RootSpanBuilder for RequestLog {
    fn on_request_start(request: &ServiceRequest) -> Span {
        request
            .extensions_mut()
            .insert(Arrived(std::time::Instant::now()));
        let generated = request.extensions().get::<RequestId>().copied();
        let id = generated.map_or_else(String::new, |g| request_id(request.headers(), g));
        let span = tracing::info_span!(
            "request",
            request_id = %id,
            // Anything shaped like a key is taken out: a client can put one in either.
            method = %crate::llm::redact_key_shapes(request.method().as_str()),
            path = %crate::llm::redact_key_shapes(request.path()),
            status = Empty,
            latency_ms = Empty,
            provider = Empty,
            model = Empty,
            prompt_tokens = Empty,
            completion_tokens = Empty,
            error_type = Empty,
        );
        crate::traces::continue_trace(&span, request.headers());
        span
    }

    fn on_request_end<B: MessageBody>(span: Span, outcome: &Result<ServiceResponse<B>, Error>) {
        let Ok(response) = outcome else {
            span.in_scope(|| tracing::warn!("request failed before a response"));
            return;
        };
        let status = response.status().as_u16();
        // As an i64: a trace keeps only signed integers as numbers.
        span.record("status", i64::from(status));
        let path = response.request().path();
        let endpoint = match path {
            "/api/agent/react_step"
            | "/api/agent/react_step/stream"
            | "/healthz"
            | "/readyz"
            | "/metrics"
            | "/openapi.yaml" => path,
            // Unknown paths are one label, so a scanner cannot grow the metrics without bound.
            _ => "other",
        };
        crate::metrics::global()
            .requests
            .get_or_create(&crate::metrics::RequestLabels {
                endpoint: endpoint.to_string(),
                status,
            })
            .inc();
        if let Some(arrived) = response.request().extensions().get::<Arrived>() {
            span.record("latency_ms", arrived.0.elapsed().as_secs_f64() * 1000.0);
        }
        span.in_scope(|| {
            if status >= 500 {
                tracing::warn!("request answered");
            } else {
                tracing::info!("request answered");
            }
        });
    }
}
