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

/// A step's token counts, kept in its request's extensions until the request ends: they are
/// recorded into the span with the status and latency, in one record.
#[derive(Clone, Copy)]
pub struct TokenCounts {
    pub prompt: i64,
    pub completion: i64,
}

/// Records `values` (those that are `Some`) into `span` at once. Each record makes the log layer
/// merge the span's formatted fields again, so fields known together go in one record.
/// `Span::record_all` is what `Span::record` and tracing's macros call: hidden from its docs
/// because macros use it, stable all the same.
pub fn record<const N: usize>(span: &Span, values: [(&str, Option<&dyn tracing::Value>); N]) {
    let Some(meta) = span.metadata() else {
        return;
    };
    let fields = meta.fields();
    let Some(keys) = values
        .iter()
        .map(|(name, _)| fields.field(name))
        .collect::<Option<Vec<_>>>()
    else {
        // A field the span does not declare: recorded one by one, which ignores it.
        for (name, value) in values.into_iter() {
            if let Some(value) = value {
                span.record(name, value);
            }
        }
        return;
    };
    let pairs: [(&tracing::field::Field, Option<&dyn tracing::Value>); N] =
        std::array::from_fn(|i| (&keys[i], values[i].1));
    span.record_all(&fields.value_set(&pairs));
}

/// A field's value as [`record`] takes it.
pub fn value<T: tracing::Value>(v: &T) -> &dyn tracing::Value {
    v
}

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

/// Characters of a path a request's span (its log line, its trace) keeps.
const MAX_PATH: usize = 256;

/// `text` cut to at most `max` bytes, on a character boundary, with `…` when cut.
fn at_most(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let end = (0..=max)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}…", &text[..end]).into()
}

/// The endpoints the contract names, each a label of its own in `reactstep_requests_total`.
const ENDPOINTS: [&str; 11] = [
    "/api/agent/react_step",
    "/api/agent/react_step/stream",
    "/api/agent/plan",
    "/api/agent/plan/stream",
    "/api/agent/evaluate",
    "/api/agent/evaluate/stream",
    "/api/providers",
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.yaml",
];

/// The `tracestate` a request's spans carry, for the check its body's keys make of it
/// (`admission::withhold_keyed_tracestate`).
pub struct CarriedState(pub String);

/// The caller's trace continued, its `tracestate` without the entries that hold a secret.
fn continue_trace(span: &Span, request: &ServiceRequest) {
    let state = request.app_data::<actix_web::web::Data<super::AppState>>();
    let configured = state.iter().flat_map(|s| s.settings.api_tokens.0.iter());
    let presented = super::bearer::token(request.headers());
    let tokens: Vec<&str> = presented
        .into_iter()
        .chain(configured.map(String::as_str))
        .collect();
    let carried = crate::telemetry::traces::continue_trace(span, request.headers(), |member| {
        holds_secret(member, &tokens)
    });
    if let Some(carried) = carried {
        request.extensions_mut().insert(CarriedState(carried));
    }
}

/// Whether a `tracestate` entry holds a piece of an operator token (the presented one, or any
/// configured) or anything shaped like a key (a client may put its model key there): the
/// collector sees every span's. A key of another shape is found once the body is read
/// (`admission::withhold_keyed_tracestate`).
fn holds_secret(member: &str, tokens: &[&str]) -> bool {
    let fragment = |token: &&str| crate::scrub::secret_fragments(token, member) != member;
    tokens.iter().any(fragment) || crate::llm::redact_key_shapes(member) != member
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
            // Anything shaped like a key is taken out: a client can put one in either. Cut,
            // since the head may be 128 KiB and the span is kept until it is exported.
            method = %at_most(&crate::llm::redact_key_shapes(request.method().as_str()), 32),
            path = %at_most(&crate::llm::redact_key_shapes(request.path()), MAX_PATH),
            status = Empty,
            latency_ms = Empty,
            provider = Empty,
            model = Empty,
            prompt_tokens = Empty,
            completion_tokens = Empty,
            error_type = Empty,
        );
        if crate::telemetry::traces::on() {
            continue_trace(&span, request);
        }
        span
    }

    fn on_request_end<B: MessageBody>(span: Span, outcome: &Result<ServiceResponse<B>, Error>) {
        let Ok(response) = outcome else {
            span.in_scope(|| tracing::warn!("request failed before a response"));
            return;
        };
        let status = response.status().as_u16();
        // The path as the router matched it (`/%68ealthz` is `/healthz`).
        let path = response.request().match_info().as_str();
        // Unknown paths are one label, so a scanner cannot grow the metrics without bound.
        let endpoint = ENDPOINTS
            .into_iter()
            .find(|known| *known == path)
            .unwrap_or("other");
        crate::telemetry::metrics::count_request(endpoint, status);
        let extensions = response.request().extensions();
        let latency_ms = extensions
            .get::<Arrived>()
            .map(|arrived| arrived.0.elapsed().as_secs_f64() * 1000.0);
        let tokens = extensions.get::<TokenCounts>().copied();
        drop(extensions);
        // Integers as i64: a trace keeps only signed ones as numbers.
        record(
            &span,
            [
                ("status", Some(&i64::from(status))),
                ("latency_ms", latency_ms.as_ref().map(value)),
                ("prompt_tokens", tokens.as_ref().map(|t| value(&t.prompt))),
                (
                    "completion_tokens",
                    tokens.as_ref().map(|t| value(&t.completion)),
                ),
            ],
        );
        span.in_scope(|| {
            if status >= 500 {
                tracing::warn!("request answered");
            } else {
                tracing::info!("request answered");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_endpoint_of_the_contract_is_a_label_of_its_own() {
        let spec = include_str!("../../openapi.yaml");
        let mut paths: Vec<&str> = spec
            .lines()
            .filter_map(|line| line.strip_prefix("  /"))
            .filter_map(|path| path.strip_suffix(':'))
            .collect();
        let mut known: Vec<&str> = ENDPOINTS.iter().map(|e| &e[1..]).collect();
        paths.sort_unstable();
        known.sort_unstable();
        assert_eq!(paths, known);
    }

    #[test]
    fn a_long_path_is_cut_on_a_character_boundary() {
        assert_eq!(at_most("/healthz", MAX_PATH), "/healthz");
        let long = format!("/{}", "é".repeat(300));
        let cut = at_most(&long, MAX_PATH);
        assert!(
            cut.len() <= MAX_PATH + '…'.len_utf8() && cut.ends_with('…'),
            "{cut}"
        );
        assert!(long.starts_with(cut.trim_end_matches('…')));
    }
}
