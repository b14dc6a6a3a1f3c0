//! HTTP handlers: thin, each delegating to the body reader, the conversion and the step.

use actix_web::{web, HttpMessage as _, HttpRequest, HttpResponse};
use tracing_actix_web::RequestId;

use super::admission::{at_capacity, authorized, prepare};
use super::error::{describe, ApiError, Echo, ErrorKind};
use super::fallback_report;
use super::held_body::HeldBody;
use super::request_log::TokenCounts;
use super::state::AppState;
use super::tasks::Endpoint;
use crate::runtime::cpu;
use crate::step::{StepError, StepErrorKind};

/// The contract, compiled in so that the served spec is always the one the binary implements.
pub const OPENAPI_YAML: &str = include_str!("../../openapi.yaml");

pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

/// Ready to serve: the token encoders are loaded, and a rate limiter that fails closed has heard
/// from Redis (before that, every step would get 503).
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let waiting_for = if !crate::step::encoders_warm() {
        "encoder"
    } else if !state.rate_limits.ready() {
        "rate_limiter"
    } else {
        return HttpResponse::Ok().json(serde_json::json!({"status": "ready"}));
    };
    HttpResponse::ServiceUnavailable()
        .json(serde_json::json!({"status": "starting", "waiting_for": waiting_for}))
}

/// Prometheus metrics, as OpenMetrics text.
pub async fn metrics() -> HttpResponse {
    crate::step::publish_token_cache_metrics();
    HttpResponse::Ok()
        .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
        .body(crate::telemetry::metrics::global().render())
}

/// Every provider the service speaks to: where the operator sends its calls (the host only) and
/// what it can do. Never a key, never a path that could hold one.
pub async fn providers(
    req: HttpRequest,
    id: RequestId,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    if !authorized(&req, &state.settings.api_tokens) {
        let echo = Echo {
            request_id: super::request_log::request_id_of(&req, id),
            ..Echo::default()
        };
        return Err(ApiError::new(ErrorKind::Unauthorized, echo));
    }
    let providers: Vec<serde_json::Value> = crate::llm::Provider::all()
        .map(|p| {
            let host = reqwest::Url::parse(state.llm.base_url(p))
                .ok()
                .and_then(|u| u.host_str().map(str::to_string));
            serde_json::json!({
                "name": p.name(),
                "base_url_host": host,
                "capabilities": p.capabilities(),
                "model_prefixes": p.facts().model_prefixes,
                "apis": apis(p),
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "providers": providers })))
}

/// The values of `llm_config.api` the provider takes.
fn apis(p: crate::llm::Provider) -> Vec<&'static str> {
    use crate::llm::WireApi;
    [WireApi::Chat, WireApi::Responses]
        .into_iter()
        .filter(|api| p.with_api(*api).is_some())
        .map(WireApi::as_str)
        .collect()
}

pub async fn openapi() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/yaml")
        .body(OPENAPI_YAML)
}

/// `POST /api/agent/react_step`, `/plan` and `/evaluate`: the endpoint's task on one step,
/// answered as JSON.
pub async fn answer(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    request_id: RequestId,
    endpoint: Endpoint,
) -> HttpResponse {
    let answered = cpu::scoped(
        cpu::Job::default(),
        answer_step(req, payload, state, request_id, endpoint),
    );
    match answered.await {
        Ok(response) => response,
        // Boxed: rendering is not the state a step waits in, and unboxed its room (larger
        // than the wait's) would be held by every step in flight.
        Err(error) => Box::pin(error.render()).await,
    }
}

async fn answer_step(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    request_id: RequestId,
    endpoint: Endpoint,
) -> Result<HttpResponse, ApiError> {
    let Some(_slot) = state.step_slots.take() else {
        return Err(at_capacity(&req, &state, request_id));
    };
    // Boxed, and the step's future held only while it runs: a future keeps room for the
    // largest of its states, and reading the body is not the state thousands of steps wait in.
    let (input, echo) = Box::pin(prepare(&req, payload, &state, request_id, endpoint)).await?;
    // The result boxed too: its room would be reserved through the wait.
    let result = {
        let step = std::pin::pin!(crate::step::run(input, &state.llm, None));
        let step = std::pin::pin!(state.stopping.before_cut(step));
        super::client_gone::unless_gone(&req, step)
            .await
            .map(Box::new)
    };
    let Some(result) = result else {
        return Err(ApiError::new(
            StepError::from(StepErrorKind::ClientGone).into(),
            echo,
        ));
    };
    let output = match *result {
        Some(Ok(output)) => output,
        Some(Err(err)) => return Err(ApiError::new(err.into(), echo)),
        None => {
            let stopping = StepError::from(StepErrorKind::ShuttingDown);
            return Err(ApiError::new(stopping.into(), echo));
        }
    };
    let (request_id, price) = (echo.request_id, echo.price);
    if let Some(usage) = &output.usage {
        // Signed: a trace keeps only those as numbers (the log line is the same).
        let signed = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        req.extensions_mut().insert(TokenCounts {
            prompt: signed(usage.prompt_tokens),
            completion: signed(usage.completion_tokens),
        });
    }
    let prices = &echo.chain_prices;
    let body = fallback_report::success(output, request_id.clone(), price, prices, describe);
    let json = body.into_json().await;
    Ok(HttpResponse::Ok()
        .insert_header(("x-request-id", request_id.as_str()))
        .content_type("application/json")
        .body(HeldBody::new(json, &state.memory, echo.body_held)))
}

pub async fn not_found(req: HttpRequest, request_id: RequestId) -> Result<HttpResponse, ApiError> {
    Err(ApiError::new(
        // A path or a method can hold anything, a pasted key included.
        ErrorKind::NotFound(crate::llm::redact_key_shapes(req.path())),
        echo(&req, request_id),
    ))
}

pub async fn method_not_allowed(
    req: HttpRequest,
    request_id: RequestId,
    allowed: &'static str,
) -> Result<HttpResponse, ApiError> {
    Err(ApiError::new(
        ErrorKind::MethodNotAllowed {
            method: crate::llm::redact_key_shapes(req.method().as_str()),
            allowed,
        },
        echo(&req, request_id),
    ))
}

fn echo(req: &HttpRequest, request_id: RequestId) -> Echo {
    Echo {
        request_id: super::request_log::request_id_of(req, request_id),
        ..Echo::default()
    }
}

#[cfg(test)]
mod future_size {
    /// The size of the future an async function of five arguments returns.
    fn future_of<A, B, C, D, E, R>(_: impl Fn(A, B, C, D, E) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    #[test]
    fn a_step_waiting_on_the_model_holds_under_2_kib_of_future() {
        // Every step in flight holds one (5,000 in the burst benchmark): it was 5.3 KiB before
        // the states that are not the wait were boxed (2,080 bytes with an error's rendering
        // unboxed, 1,528 now), and grows back silently when a new local lives across the call
        // or an `async fn` takes a large argument by value.
        let size = future_of(super::answer);
        assert!(
            size <= 2 * 1024,
            "the step handler's future is {size} bytes"
        );
    }

    #[test]
    fn a_stream_waiting_for_its_first_event_holds_under_2_kib_of_future() {
        // Held until the model's first event: writing the terminal event and reading the body
        // inline made it 4,320 bytes in a debug build (1,784 now).
        let size = future_of(super::super::stream::streamed);
        assert!(
            size <= 2 * 1024,
            "the stream handler's future is {size} bytes"
        );
    }
}
