//! Upstream failures, classified once from the provider's status, headers and error body so that
//! the API layer can give the client a status and a retry hint it can act on.

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::StatusCode;
use serde_json::Value;

use super::{ApiKey, Provider, WireError};

/// Upstream error messages are passed on, but never at unbounded length.
const MAX_UPSTREAM_MESSAGE_CHARS: usize = 500;

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The provider refused the key (401/403): `llmKey`, or on a fallback the provider's own slot.
    #[error("the {provider} API rejected the API key (HTTP {status}): check {}", key_field(*.provider, *.fallback))]
    Auth {
        provider: Provider,
        status: u16,
        fallback: bool,
    },
    /// The provider does not know the model, or the key may not use it (404).
    #[error("the {provider} API does not offer this model (HTTP 404): {message}")]
    ModelNotFound { provider: Provider, message: String },
    /// 429: a rate limit (retry later) or an exhausted quota (retrying does not help).
    #[error("the {provider} API is rate limiting this key: {message}")]
    RateLimited {
        provider: Provider,
        message: String,
        retry_after: Option<Duration>,
        retryable: bool,
    },
    /// Any other 4xx: the provider refused the request as formed (context too long, bad parameter).
    #[error("the {provider} API rejected the request (HTTP {status}): {message}")]
    Rejected {
        provider: Provider,
        status: u16,
        message: String,
    },
    /// The provider refused the prompt as longer than the model's window, with its own count of
    /// the prompt and the window when it said them.
    #[error("the {provider} API refused the prompt as too long for the model: {message}")]
    ContextTooLong {
        provider: Provider,
        message: String,
        prompt_tokens: Option<u64>,
        window: Option<u64>,
    },
    /// A 200 whose reply held nothing at all (an event stream with no event): how some local
    /// servers fail a prompt longer than their window.
    #[error("the {provider} API ended its reply without any content; a local server does this when the prompt is longer than its context window (see context_report)")]
    EmptyReply { provider: Provider },
    /// 5xx, 529, or no connection at all.
    #[error("the {provider} API is unavailable: {message}")]
    Unavailable { provider: Provider, message: String },
    /// The upstream's TLS certificate was refused: the operator's to fix, not a retry's.
    #[error("the {provider} API could not be reached: its TLS certificate is not trusted")]
    Untrusted { provider: Provider },
    /// A reply that is not what the provider's API documents.
    #[error("the {provider} API sent a reply that could not be used: {message}")]
    BadResponse { provider: Provider, message: String },
    /// A 3xx: never followed, since the key would go along to wherever it points.
    #[error("the {provider} API answered with a redirect (HTTP {status}), which is never followed: check the base URL")]
    Redirected { provider: Provider, status: u16 },
    /// The reply arrived while the service held as many bodies and replies as its memory budget
    /// allows (`REACTSTEP_MEMORY_BUDGET_MIB`): the service's own overload, not the provider's.
    #[error("the service is holding as much request and reply data as its memory budget allows; the {provider} reply was not read: retry after 1 s")]
    Overloaded { provider: Provider },
    /// The model declined to answer, or the provider's filter stopped it (a finish reason such
    /// as `content_filter` or `refusal`): a failure only while the step has a fallback model
    /// left to ask (otherwise the reply is answered as it is, with a warning).
    #[error("the {provider} model refused to answer (finish reason: {reason})")]
    Refused { provider: Provider, reason: String },
    /// No complete answer within the configured timeout.
    #[error("the {provider} API did not answer within {} s", .timeout.as_secs())]
    Timeout {
        provider: Provider,
        timeout: Duration,
    },
}

/// The request's field that held a key the provider refused: a fallback is sent only its
/// provider's own key (`providerKeys`), never `llmKey`.
fn key_field(provider: Provider, fallback: bool) -> String {
    match fallback {
        true => format!("user_api_keys.providerKeys.{}", provider.name()),
        false => "user_api_keys.llmKey".into(),
    }
}

impl WireError {
    /// The error as the transport reports it: naming the provider, with the key scrubbed from
    /// what the provider said.
    pub(crate) fn into_llm(self, provider: Provider, key: Option<&ApiKey>) -> LlmError {
        match self {
            Self::Shape(message) => LlmError::BadResponse { provider, message },
            Self::InStream(data) => LlmError::in_stream(provider, data.as_bytes(), key),
            Self::KeyNotHeader => LlmError::Auth {
                provider,
                status: 401,
                fallback: false,
            },
        }
    }
}

impl LlmError {
    /// Builds the error for a non-success reply, from its status, headers and body.
    pub(crate) fn from_reply(
        provider: Provider,
        status: StatusCode,
        headers: &HeaderMap,
        body: &[u8],
        key: Option<&ApiKey>,
    ) -> Self {
        let (message, code) = upstream_message(body);
        let message = scrub_upstream(&message, key, MAX_UPSTREAM_MESSAGE_CHARS);
        let status_code = status.as_u16();
        if matches!(status_code, 400 | 413 | 422 | 500) {
            if let Some(sizes) = super::overflow::read(&message, code.as_deref(), body) {
                return Self::ContextTooLong {
                    provider,
                    message,
                    prompt_tokens: sizes.prompt_tokens,
                    window: sizes.window,
                };
            }
        }
        match status_code {
            401 | 403 => Self::Auth {
                provider,
                status: status_code,
                fallback: false,
            },
            404 => Self::ModelNotFound { provider, message },
            429 => {
                let quota = code.as_deref() == Some("insufficient_quota");
                Self::RateLimited {
                    provider,
                    message,
                    retry_after: if quota { None } else { retry_after(headers) },
                    retryable: !quota,
                }
            }
            408 | 500..=599 => Self::Unavailable {
                provider,
                message: format!("HTTP {status_code}: {message}"),
            },
            400..=499 => Self::Rejected {
                provider,
                status: status_code,
                message,
            },
            300..=399 => Self::Redirected {
                provider,
                status: status_code,
            },
            _ => Self::BadResponse {
                provider,
                message: format!("unexpected HTTP {status_code}"),
            },
        }
    }

    /// An `error` the provider sent inside a stream that had started with 200.
    pub(crate) fn in_stream(provider: Provider, data: &[u8], key: Option<&ApiKey>) -> Self {
        let (message, _) = upstream_message(data);
        let message = scrub_upstream(&message, key, MAX_UPSTREAM_MESSAGE_CHARS);
        Self::Unavailable {
            provider,
            message: format!("the stream reported an error: {message}"),
        }
    }

    /// Classifies a transport failure (connect, timeout, broken body).
    pub(crate) fn from_transport(
        provider: Provider,
        err: &reqwest::Error,
        timeout: Duration,
    ) -> Self {
        if err.is_timeout() {
            Self::Timeout { provider, timeout }
        } else if err.is_connect() && refused_certificate(err) {
            Self::Untrusted { provider }
        } else if err.is_connect() {
            Self::Unavailable {
                provider,
                message: "could not connect to the API".into(),
            }
        } else {
            Self::Unavailable {
                provider,
                message: format!("the connection failed: {}", without_url(err)),
            }
        }
    }

    /// Whether the service itself should try again: connection failures, timeouts, 5xx, 529,
    /// and rate limits that are not an exhausted quota. Not 4xx, and not a malformed reply.
    pub fn is_worth_retrying(&self) -> bool {
        match self {
            Self::Unavailable { .. } | Self::Timeout { .. } => true,
            Self::RateLimited { retryable, .. } => *retryable,
            Self::Auth { .. }
            | Self::ModelNotFound { .. }
            | Self::Rejected { .. }
            | Self::ContextTooLong { .. }
            | Self::EmptyReply { .. }
            | Self::Untrusted { .. }
            | Self::Redirected { .. }
            // Another call now would be billed and refused alike; the client retries later.
            | Self::Overloaded { .. }
            // The same model asked again refuses again: another model may not.
            | Self::Refused { .. }
            | Self::BadResponse { .. } => false,
        }
    }

    /// The kind of failure, as a short name (a trace's `error.type`): never its message.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Auth { .. } => "auth",
            Self::ModelNotFound { .. } => "model_not_found",
            Self::RateLimited { .. } => "rate_limited",
            Self::Rejected { .. } => "rejected",
            Self::ContextTooLong { .. } => "context_too_long",
            Self::EmptyReply { .. } => "empty_reply",
            Self::Unavailable { .. } => "unavailable",
            Self::Untrusted { .. } => "untrusted",
            Self::BadResponse { .. } => "bad_response",
            Self::Redirected { .. } => "redirected",
            Self::Timeout { .. } => "timeout",
            Self::Overloaded { .. } => "overloaded",
            Self::Refused { .. } => "refused",
        }
    }

    /// The wait the provider asked for, if it named one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Auth { .. }
            | Self::ModelNotFound { .. }
            | Self::Rejected { .. }
            | Self::ContextTooLong { .. }
            | Self::EmptyReply { .. }
            | Self::Redirected { .. }
            | Self::Untrusted { .. } => false,
            Self::RateLimited { retryable, .. } => *retryable,
            Self::Unavailable { .. }
            | Self::BadResponse { .. }
            | Self::Refused { .. }
            | Self::Timeout { .. }
            | Self::Overloaded { .. } => true,
        }
    }
}

/// The message and code of an error body in any of the shapes providers use:
/// OpenAI `{"error":{message,code}}`, Anthropic `{"type":"error","error":{type,message}}`,
/// and old vLLM's flat `{"object":"error","message",code}`, each also wrapped in an array (as
/// Gemini's OpenAI-compatible endpoint sends them). `code` may be a string or a number.
fn upstream_message(body: &[u8]) -> (String, Option<String>) {
    let Ok(mut value) = serde_json::from_slice::<Value>(body) else {
        let text = String::from_utf8_lossy(body);
        let text = text.trim();
        return (
            if text.is_empty() {
                "no error details".into()
            } else {
                text.to_string()
            },
            None,
        );
    };
    if let Value::Array(items) = &mut value {
        let first = items.drain(..).next();
        value = first.unwrap_or_default();
    }
    let inner = value
        .get("error")
        .filter(|e| e.is_object())
        .unwrap_or(&value);
    let message = match inner.get("message") {
        Some(Value::String(s)) => s.clone(),
        _ => match value.get("error") {
            Some(Value::String(s)) => s.clone(),
            _ => "no error details".into(),
        },
    };
    let code = inner
        .get("code")
        .or_else(|| inner.get("type"))
        .and_then(|c| match c {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        });
    (message, code)
}

/// `retry-after-ms` (OpenAI's, preferred), then `retry-after` in seconds; a date form or a value
/// that is not a number is ignored rather than guessed at.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    // Past what a `Duration` holds (`1e20`), `from_secs_f64` panics: any wait that long is
    // "not within this step", so it is held at 136 years, as far as any use of it goes.
    let wait = |secs: f64| Duration::from_secs_f64(secs.min(f64::from(u32::MAX)));
    number("retry-after-ms")
        .map(|ms| wait(ms / 1000.0))
        .or_else(|| number("retry-after").map(wait))
}

/// Upstream text made fit to show and log: the user's key in any piece of 8 or more characters,
/// and anything shaped like another key, are removed from the whole text first, and only then is
/// it cut to `max_chars`. Cutting first could split a key into pieces neither rule recognises.
pub fn scrub_upstream(text: &str, key: Option<&ApiKey>, max_chars: usize) -> String {
    truncate(&super::api_key::redact_secrets(text, key), max_chars)
}

fn truncate(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// Whether the connection failed because the upstream's certificate was refused, which no retry
/// fixes (the operator's REACTSTEP_UPSTREAM_CA_FILE does). rustls says so only in the text of an
/// error deep in the chain.
fn refused_certificate(err: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        if inner.to_string().contains("certificate") {
            return true;
        }
        source = inner.source();
    }
    false
}

/// reqwest's Display can name the URL; the base URL is configuration, not the client's business.
fn without_url(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    if let Some(url) = err.url() {
        text = text.replace(url.as_str(), "<upstream>");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn reply(status: u16, headers: &HeaderMap, body: &str) -> LlmError {
        let Ok(status) = StatusCode::from_u16(status) else {
            panic!("valid status")
        };
        LlmError::from_reply(Provider::OPENAI, status, headers, body.as_bytes(), None)
    }

    #[test]
    fn quota_exhaustion_is_a_429_that_retrying_does_not_fix() {
        let body = r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
        let err = reply(429, &HeaderMap::new(), body);
        assert!(matches!(
            err,
            LlmError::RateLimited {
                retryable: false,
                ..
            }
        ));
        assert!(!err.is_retryable());
    }

    #[test]
    fn retry_after_ms_wins_over_retry_after() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("20"));
        headers.insert("retry-after-ms", HeaderValue::from_static("1500"));
        let err = reply(
            429,
            &headers,
            r#"{"error":{"message":"slow down","code":"rate_limit_exceeded"}}"#,
        );
        let LlmError::RateLimited { retry_after, .. } = err else {
            panic!("expected a rate limit")
        };
        assert_eq!(retry_after, Some(Duration::from_millis(1500)));
    }

    /// A wait no `Duration` holds is read as the longest one kept, never a panic.
    #[test]
    fn a_wait_past_any_duration_is_held_not_a_panic() {
        for (name, value) in [
            ("retry-after", "1e20"),
            ("retry-after-ms", "1e30"),
            ("retry-after", "1.7976931348623157e308"),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(name, HeaderValue::from_static(value));
            let err = reply(429, &headers, r#"{"error":{"message":"slow"}}"#);
            assert_eq!(
                err.retry_after(),
                Some(Duration::from_secs(u64::from(u32::MAX))),
                "{name}: {value}"
            );
        }
    }

    #[test]
    fn integer_codes_and_flat_bodies_are_read() {
        let (message, code) = upstream_message(
            br#"{"object":"error","message":"Loading model","type":"x","code":503}"#,
        );
        assert_eq!(
            (message.as_str(), code.as_deref()),
            ("Loading model", Some("503"))
        );
    }

    #[test]
    fn anthropic_overload_529_is_retryable_unavailability() {
        let body = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_1"}"#;
        let err = reply(529, &HeaderMap::new(), body);
        assert!(matches!(err, LlmError::Unavailable { .. }) && err.is_retryable());
    }

    #[test]
    fn the_key_is_scrubbed_before_the_cut() {
        let Ok(key) = ApiKey::parse("sk-proj-Qz7Xv3Lm9Wd2Kf8Hn4Tr6Yb1Pc5Gj0".into()) else {
            panic!("valid key")
        };
        // The cut at 500 falls 13 characters into the key.
        let text = format!("{}{}", "x ".repeat(243), key.expose());
        let text = format!("{text} and {text}");
        let out = scrub_upstream(&text, Some(&key), MAX_UPSTREAM_MESSAGE_CHARS);
        assert!(!out.contains("sk-proj-Qz7X"), "{out}");
        assert!(out.contains("[REDACTED]"), "{out}");
    }

    #[test]
    fn another_key_cut_short_by_the_limit_is_still_a_key_shape() {
        let text = format!("{} sk-ant-api03-0123456789abcdefghij", "y".repeat(494));
        let out = scrub_upstream(&text, None, MAX_UPSTREAM_MESSAGE_CHARS);
        assert!(!out.contains("sk-an"), "{out}");
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let long = "é".repeat(600);
        assert_eq!(truncate(&long, 500).chars().count(), 501);
    }
}
