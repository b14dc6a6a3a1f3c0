//! Whether a step is taken on, and its input: the operator's token, the client's and the
//! session's rate limits, then the body read, decoded and converted into the step's input, with
//! what an error must echo.

use crate::telemetry::timing::{Phase, PhaseTimes};
use actix_web::HttpMessage;
use actix_web::{web, HttpRequest};
use futures_util::FutureExt;
use tracing_actix_web::RequestId;

use super::body;
use super::client_address::Client;
use super::convert::{self, Conversion, DEFAULT_MAX_ITERATIONS};
use super::error::{ApiError, Echo, EchoedHistory, ErrorKind};
use super::rate_limit::Refusal;
use super::raw_keys;
use super::request::ReactStepRequest;
use super::request_log;
use super::response::FieldError;
use super::state::AppState;
use super::tasks::Endpoint;
use super::unknown_fields::Unknown;
use crate::runtime::cpu;
use crate::runtime::memory_budget::Held;
use crate::step::{timestamp_now, Turn};
use crate::step::{StepError, StepErrorKind, StepInput, Task};

/// The refusal of a step when as many are in flight as fit (taken before anything else).
pub fn at_capacity(req: &HttpRequest, state: &AppState, request_id: RequestId) -> ApiError {
    let echo = Echo {
        request_id: request_log::request_id_of(req, request_id),
        ..Echo::default()
    };
    let limit = state.step_slots.limit();
    ApiError::new(ErrorKind::AtCapacity { limit }, echo)
}

/// Reads, decodes and validates the body into a step's input for the endpoint's task, with
/// what an error must echo.
pub async fn prepare(
    req: &HttpRequest,
    payload: web::Payload,
    state: &AppState,
    request_id: RequestId,
    endpoint: Endpoint,
) -> Result<(Box<StepInput>, Echo), ApiError> {
    // Not entered: the request's span stays the current one, which the fields below go to.
    let _decode = crate::telemetry::traces::phase(
        || tracing::trace_span!(target: crate::telemetry::traces::TARGET, "decode"),
    );
    // Kept with the request for its `Server-Timing`, whatever answers it.
    let times = std::sync::Arc::new(PhaseTimes::default());
    req.extensions_mut().insert(times.clone());
    let decode_time = times.timer(Phase::Decode);
    let request_id = super::request_log::request_id_of(req, request_id);
    let received_at = timestamp_now();
    let (bytes, held) = admit_body(req, payload, state, &request_id).await?;
    withhold_keyed_tracestate(req, &bytes);
    let large = bytes.len() > cpu::INLINE_BYTES;
    let (dto, unknown) = decode(&bytes, large, state, &request_id, endpoint).await?;
    let task = endpoint.task(&bytes).map_err(|(message, fields)| {
        ApiError::invalid(message, fields, echo_from_raw(&bytes, &request_id))
    })?;

    admit_session(state, dto.session_id.as_deref(), &request_id).await?;
    let session_id = dto
        .session_id
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let echo = Echo {
        request_id: request_id.clone(),
        session_id: convert::session_id_is_valid(&session_id).then(|| session_id.clone()),
        // Not copied: decoded again from the body if an error needs it.
        history: if dto.conversation_history.is_empty() {
            EchoedHistory::None
        } else {
            EchoedHistory::InBody(bytes.clone())
        },
        iterations_left: Some(dto.max_iterations_left.unwrap_or(DEFAULT_MAX_ITERATIONS)),
        // Known once the input is checked.
        price: None,
        chain_prices: Vec::new(),
        body_held: Some(std::sync::Arc::new(held)),
    };
    let how = Conversion {
        settings: state.settings.clone(),
        destinations: state.destinations.clone(),
        session_id,
        received_at,
        unknown,
    };
    // Declared tools mean schemas to compile: bounded, yet not a worker's job.
    let heavy = large || dto.tools.as_ref().is_some_and(|t| !t.is_empty());
    let converted = off_worker_if(heavy, state.settings.step_timeout, move || {
        convert::step_input(*dto, how).map(Box::new)
    })
    .await
    .map_err(|e| ApiError::new(e.into(), echo.clone()))?;
    match converted {
        Ok(mut input) => {
            if let Some((message, fields)) = refusal(task, &mut input) {
                return Err(ApiError::invalid(message, fields, echo));
            }
            drop(decode_time);
            input.timings = times;
            record_model(&input);
            let echo = priced(&input, state, echo);
            Ok((input, echo))
        }
        Err(fields) => Err(ApiError::invalid(
            convert::invalid_fields(&fields),
            fields,
            echo,
        )),
    }
}

/// The input set for the endpoint's task; else the 400's message and the field it cannot take.
fn refusal(task: Task, input: &mut StepInput) -> Option<(String, Vec<FieldError>)> {
    let (field, message) = task.shape(input).err()?;
    let fields = vec![FieldError {
        field: field.into(),
        message,
    }];
    Some((convert::invalid_fields(&fields), fields))
}

/// The echo with the prices of the step's model and, with fallbacks, of each model of the chain.
fn priced(input: &StepInput, state: &AppState, echo: Echo) -> Echo {
    let price = state.prices.get(&input.llm.model);
    let chain_prices = match input.fallbacks.is_empty() {
        true => Vec::new(),
        false => std::iter::once(&input.llm)
            .chain(input.fallbacks.iter().map(|f| &f.llm))
            .map(|llm| (llm.model.clone(), state.prices.get(&llm.model)))
            .collect(),
    };
    Echo {
        price,
        chain_prices,
        ..echo
    }
}

/// The request's admission up to its body: the operator's token, the client's rate limit, the
/// content type, then the body read whole (and held against the memory budget), by which the
/// request takes its place on the CPU pool.
async fn admit_body(
    req: &HttpRequest,
    payload: web::Payload,
    state: &AppState,
    request_id: &str,
) -> Result<(web::Bytes, Held), ApiError> {
    let bare_echo = || Echo {
        request_id: request_id.to_string(),
        ..Echo::default()
    };
    if !authorized(req, &state.settings.api_tokens) {
        return Err(ApiError::new(ErrorKind::Unauthorized, bare_echo()));
    }
    // Who sent it, read once: for its rate limit and its share of the CPU pool.
    let client = state.trusted_proxies.client_of(req);
    admit_client(client.clone(), state, request_id).await?;
    body::check_content_type(req).map_err(|kind| ApiError::new(kind, bare_echo()))?;
    let (limit, timeout) = (state.settings.max_body_bytes, state.settings.client_timeout);
    let mut read = std::pin::pin!(body::read(req, payload, limit, timeout, &state.memory));
    // A body still coming when the service stops is answered before its connection goes; one
    // already here (most are) is read without a wait on the stop.
    let read = match read.as_mut().now_or_never() {
        Some(read) => read,
        None => state
            .stopping
            .before_cut(read)
            .await
            .unwrap_or_else(|| Err(StepError::from(StepErrorKind::ShuttingDown).into())),
    };
    let (bytes, held) = read.map_err(|kind| ApiError::new(kind, bare_echo()))?;
    cpu::classify(cpu::Job {
        client: client_digest(req, state, client.as_ref()),
        large: bytes.len() >= cpu::LARGE_BODY_BYTES,
    });
    Ok((bytes, held))
}

/// The body decoded (on the CPU pool when it is `large`), with its fields the contract does not
/// name; a body that does not decode echoes what it still holds.
async fn decode(
    bytes: &web::Bytes,
    large: bool,
    state: &AppState,
    request_id: &str,
    endpoint: Endpoint,
) -> Result<(Box<ReactStepRequest>, Unknown), ApiError> {
    let decoded = off_worker_if(large, state.settings.step_timeout, {
        let bytes = bytes.clone();
        // Boxed, as is the input below: the handler's future keeps room for its largest state
        // for as long as the step waits on the model.
        move || {
            let own = endpoint.own_fields();
            body::decode_knowing::<ReactStepRequest>(&bytes, own)
                .map(|(dto, unknown)| (Box::new(dto), unknown))
        }
    })
    .await
    .map_err(|e| {
        let echo = Echo {
            request_id: request_id.to_string(),
            ..Echo::default()
        };
        ApiError::new(e.into(), echo)
    })?;
    decoded.map_err(|(message, fields)| {
        let (message, fields) = without_raw_keys(&raw_keys::in_body(bytes), message, fields);
        ApiError::invalid(message, fields, echo_from_raw(bytes, request_id))
    })
}

/// A `tracestate` the request's spans carry that holds a piece of a key the body carries
/// (however written: `scrub::secret_fragments`) is left out of them: the collector sees every
/// span's state.
fn withhold_keyed_tracestate(req: &HttpRequest, bytes: &[u8]) {
    if !crate::telemetry::traces::on() {
        return;
    }
    let extensions = req.extensions();
    let Some(request_log::CarriedState(state)) = extensions.get() else {
        return;
    };
    let keys = raw_keys::in_body(bytes);
    if keys
        .iter()
        .any(|key| crate::scrub::secret_fragments(key, state) != *state)
    {
        crate::telemetry::traces::withhold_tracestate();
    }
}

/// A refusal's message and fields without any of `keys` (the body's own): a name the client
/// wrote is quoted in a path, and a client may have pasted its key as one.
fn without_raw_keys(
    keys: &[String],
    mut message: String,
    mut fields: Vec<FieldError>,
) -> (String, Vec<FieldError>) {
    for secret in keys {
        let scrub = |text: &str| crate::scrub::secret_fragments(secret, text);
        message = scrub(&message);
        for field in &mut fields {
            field.field = scrub(&field.field);
            field.message = scrub(&field.message);
        }
    }
    (message, fields)
}

/// The request's log line names the provider and the model.
fn record_model(input: &StepInput) {
    // The model name is the client's text: a key pasted into it stays out of the log.
    let model = crate::llm::redact_secrets(&input.llm.model, input.key.as_ref());
    request_log::record(
        &tracing::Span::current(),
        [
            (
                "provider",
                Some(&tracing::field::display(input.llm.provider)),
            ),
            ("model", Some(&model.as_str())),
        ],
    );
}

/// Runs `work` here, or on the CPU pool when it is `heavy`, there within `limit` (the step's
/// timeout: the deadline proper starts only once the input is ready). Not an `async fn`: the
/// heavy path is boxed, so that the handler's future does not keep room for it (and for a copy
/// of `work`) while the step waits on the model.
fn off_worker_if<T: Send + 'static>(
    heavy: bool,
    limit: std::time::Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> impl std::future::Future<Output = Result<T, StepError>> {
    use futures_util::future::Either;
    if !heavy {
        return Either::Left(std::future::ready(Ok(work())));
    }
    Either::Right(Box::pin(async move {
        tokio::time::timeout(limit, cpu::run(work))
            .await
            .map_err(|_| StepErrorKind::Deadline(limit))?
            .map_err(|why| StepErrorKind::Internal(why).into())
    }))
}

/// The client's rate limit, counted before the body is read.
async fn admit_client(
    client: Option<Client>,
    state: &AppState,
    request_id: &str,
) -> Result<(), ApiError> {
    let Some(client) = client else {
        return Ok(());
    };
    state
        .rate_limits
        .check_client(client)
        .await
        .map_err(|refusal| {
            let echo = Echo {
                request_id: request_id.to_string(),
                ..Echo::default()
            };
            ApiError::new(rate_limited("client", refusal), echo)
        })
}

/// The session's rate limit, once the body names a valid session; a refusal echoes it.
async fn admit_session(
    state: &AppState,
    session: Option<&str>,
    request_id: &str,
) -> Result<(), ApiError> {
    let Some(session) = session.filter(|s| convert::session_id_is_valid(s)) else {
        return Ok(());
    };
    state
        .rate_limits
        .check_session(session)
        .await
        .map_err(|refusal| {
            let echo = Echo {
                request_id: request_id.to_string(),
                session_id: Some(session.to_string()),
                ..Echo::default()
            };
            ApiError::new(rate_limited("session", refusal), echo)
        })
}

fn rate_limited(what: &'static str, refusal: Refusal) -> ErrorKind {
    match refusal {
        Refusal::Wait(wait) => ErrorKind::RateLimited {
            what,
            retry_after: wait.as_secs_f64().ceil().max(1.0) as u64,
        },
        Refusal::Unavailable => ErrorKind::RateLimiterUnavailable,
    }
}

/// Who sent the request, for a fair share of the CPU pool: its bearer token where the operator
/// asks for one, else its address.
fn client_digest(req: &HttpRequest, state: &AppState, client: Option<&Client>) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut hasher = foldhash::fast::FixedState::default().build_hasher();
    // The token as `authorized` reads it: spacing does not make one client several.
    match bearer_token(req).filter(|_| !state.settings.api_tokens.0.is_empty()) {
        Some(token) => token.hash(&mut hasher),
        None => client.hash(&mut hasher),
    }
    hasher.finish()
}

fn bearer_token(req: &HttpRequest) -> Option<&str> {
    super::bearer::token(req.headers())
}

/// With operator tokens configured, the request must carry one as `Authorization: Bearer`.
pub fn authorized(req: &HttpRequest, tokens: &crate::config::ApiTokens) -> bool {
    if tokens.0.is_empty() {
        return true;
    }
    let presented = bearer_token(req).unwrap_or_default();
    // Every token is compared in full, so the time taken says nothing about a near miss.
    tokens.0.iter().fold(false, |found, t| {
        found | same_bytes(t.as_bytes(), presented.as_bytes())
    })
}

fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// For a body that did not decode: whatever session and history it still holds, so that an
/// error does not lose them.
fn echo_from_raw(bytes: &[u8], request_id: &str) -> Echo {
    let raw: serde_json::Value = serde_json::from_slice(bytes).unwrap_or_default();
    Echo {
        request_id: request_id.to_string(),
        session_id: raw
            .get("session_id")
            .and_then(|s| s.as_str())
            .filter(|s| convert::session_id_is_valid(s))
            .map(str::to_string),
        history: EchoedHistory::Turns(
            raw.get("conversation_history")
                .and_then(|h| serde_json::from_value::<Vec<Turn>>(h.clone()).ok())
                .filter(|h| convert::history_is_valid(h))
                .unwrap_or_default(),
        ),
        iterations_left: raw
            .get("max_iterations_left")
            .and_then(|n| n.as_u64())
            .and_then(|n| u32::try_from(n).ok()),
        price: None,
        chain_prices: Vec::new(),
        body_held: None,
    }
}
