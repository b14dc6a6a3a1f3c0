//! Sending a provider's request: the shared connection pools, retries within the step's
//! deadline, the per-attempt timeout, the reply size cap, and classifying failures. What goes on
//! the wire is each provider's ([`ProviderApi`]); how it travels is the same for all.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::Either;
use reqwest::header::{HeaderName, HeaderValue};
use tracing::Instrument as _;

use super::bounded::MAX_REPLY_BYTES;
use super::provider::{Outgoing, ProviderApi, Target};
use super::{pools, ApiKey, ChatRequest, Completion, CompletionStream, LlmError, Provider};
use super::{RetryPolicy, WireError};
use crate::runtime::memory_budget::{Held, MemoryBudget};
use crate::telemetry::traces;

/// Where each provider lives and how long a call may take.
#[derive(Debug, Clone)]
pub struct LlmSettings {
    /// Each provider's base URL, by name; a provider missing here uses its default.
    pub base_urls: HashMap<&'static str, String>,
    /// Headers the operator configured for every call to a provider, by name.
    pub headers: HashMap<&'static str, Vec<(HeaderName, HeaderValue)>>,
    /// For one attempt.
    pub timeout: Duration,
    pub retry: RetryPolicy,
    /// Certificate authorities trusted besides the built-in web roots.
    pub extra_roots: Vec<reqwest::Certificate>,
    /// Connection pools the calls are spread over (see [`pools`]).
    pub pools: usize,
    /// What replies are held against while they are read.
    pub memory: Arc<MemoryBudget>,
}

/// Idle connections each pool keeps to one host. Over HTTP/1.1 every call in flight holds its
/// own connection (about 25 KiB of buffers), and after a burst of thousands they would all sit
/// idle for the 90 s idle timeout; over HTTP/2 a pool needs only one or two.
const IDLE_CONNECTIONS_PER_HOST: usize = 64;

/// The HTTP clients every request shares, plus where each provider lives.
#[derive(Debug)]
pub struct LlmClients {
    pools: pools::Pools,
    settings: LlmSettings,
}

impl LlmClients {
    pub fn new(settings: LlmSettings) -> Result<Self, reqwest::Error> {
        let build = || {
            let mut builder = reqwest::Client::builder()
                .connect_timeout(settings.timeout.min(Duration::from_secs(10)))
                .pool_idle_timeout(Duration::from_secs(90))
                .pool_max_idle_per_host(IDLE_CONNECTIONS_PER_HOST)
                // A redirect would carry the user's key to wherever the upstream points; the
                // provider APIs never redirect, so a 3xx is an error, not a hop.
                .redirect(reqwest::redirect::Policy::none())
                // The service's own policy retries, with backoff, whatever failed to connect
                // or was refused (an HTTP/2 stream refused included). reqwest's own retry
                // would keep a copy of every request's headers and body for as long as its
                // reply takes, even with nothing to retry.
                .retry(reqwest::retry::never().max_retries_per_request(0))
                .connector_layer(super::first_connect::FirstConnectLayer::default())
                .user_agent(concat!("reactstep/", env!("CARGO_PKG_VERSION")));
            for root in &settings.extra_roots {
                builder = builder.add_root_certificate(root.clone());
            }
            builder.build()
        };
        let pools = pools::Pools::new(settings.pools, build)?;
        Ok(Self { pools, settings })
    }

    /// Where calls to `provider` go unless a request names another (allowed) base URL.
    pub fn base_url(&self, provider: Provider) -> &str {
        self.settings
            .base_urls
            .get(provider.name())
            .map_or(provider.facts().default_base_url, String::as_str)
    }

    /// One completion, retried as the policy allows, never past `deadline`. The span names no
    /// model: the request's span around it does, without the key a client may have pasted in.
    #[tracing::instrument(name = "llm call", skip_all, fields(provider = %provider))]
    pub async fn complete(
        &self,
        provider: Provider,
        request: &ChatRequest,
        key: Option<&ApiKey>,
        deadline: tokio::time::Instant,
    ) -> Result<Completion, LlmError> {
        self.retried(provider, request, key, deadline, |timeout| {
            self.complete_once(provider, request, key, timeout)
        })
        .await
    }

    async fn complete_once(
        &self,
        provider: Provider,
        request: &ChatRequest,
        key: Option<&ApiKey>,
        timeout: Duration,
    ) -> Result<Completion, LlmError> {
        let api = provider.api();
        let builder = self.prepare(provider, request, key, false)?;
        let raw = send(
            provider,
            builder,
            timeout,
            key,
            self.settings.memory.clone(),
        )
        .await?;
        let completion = api
            .decode(&raw.bytes)
            .map_err(|e| e.into_llm(provider, key))?;
        let most = super::bounded::MAX_TEXT_BYTES;
        super::bounded::fits("text", completion.text.len(), most)
            .and_then(|()| completion.fits_a_turn())
            .map_err(|e| e.into_llm(provider, key))?;
        if let Some(run) = super::repetition::run_in(&completion.text) {
            return Err(super::repetition::degenerate(provider, run));
        }
        Ok(completion)
    }

    /// The call with the answer streamed: returns once the provider has accepted it (an error
    /// status is returned here, before any byte of the answer).
    /// Opening the stream is retried like a call; once the answer flows, it is not.
    #[tracing::instrument(name = "llm stream", skip_all, fields(provider = %provider))]
    pub async fn stream(
        &self,
        provider: Provider,
        request: &ChatRequest,
        key: Option<&ApiKey>,
        deadline: tokio::time::Instant,
    ) -> Result<CompletionStream, LlmError> {
        self.retried(provider, request, key, deadline, |timeout| {
            self.stream_once(provider, request, key, timeout)
        })
        .await
    }

    /// One attempt (`once`, given the time it may take), retried as the policy allows and never
    /// past `deadline`, each attempt in a span of its own: a plain call and the opening of a
    /// stream alike.
    fn retried<'a, T: 'a, Attempt>(
        &'a self,
        provider: Provider,
        request: &'a ChatRequest,
        key: Option<&'a ApiKey>,
        deadline: tokio::time::Instant,
        mut once: impl FnMut(Duration) -> Attempt + 'a,
    ) -> impl Future<Output = Result<T, LlmError>> + 'a
    where
        Attempt: Future<Output = Result<T, LlmError>> + 'a,
    {
        let per_attempt = self.settings.timeout;
        self.settings.retry.run(
            (provider, request.retry_timeouts),
            per_attempt,
            deadline,
            move |timeout, retry| {
                upstream_attempt(provider, &request.model, key, retry, once(timeout))
            },
        )
    }

    async fn stream_once(
        &self,
        provider: Provider,
        request: &ChatRequest,
        key: Option<&ApiKey>,
        timeout: Duration,
    ) -> Result<CompletionStream, LlmError> {
        let builder = self.prepare(provider, request, key, true)?;
        let memory = &self.settings.memory;
        let response = open_stream(provider, builder, timeout, key, memory).await?;
        let held = memory
            .hold(0)
            .map_err(|_| LlmError::Overloaded { provider })?;
        Ok(CompletionStream::new(provider, response, timeout, held))
    }

    /// The provider's own count of the prompt's tokens, or `None` when it has no endpoint for
    /// it. One attempt, never past `deadline`: a failed count only means the margin stays.
    pub async fn count_tokens(
        &self,
        provider: Provider,
        request: &ChatRequest,
        key: Option<&ApiKey>,
        deadline: tokio::time::Instant,
    ) -> Result<Option<u64>, LlmError> {
        let api = provider.api();
        let target = self.target(provider, request);
        let Some(outgoing) = api.count_request(&target, request, key) else {
            return Ok(None);
        };
        let outgoing = outgoing.map_err(|e| e.into_llm(provider, key))?;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let timeout = self.settings.timeout.min(left);
        let memory = self.settings.memory.clone();
        let outgoing = builder(self.pools.next(), outgoing);
        let raw = send(provider, outgoing, timeout, key, memory).await?;
        api.decode_count(&raw.bytes)
            .map(Some)
            .map_err(|e| e.into_llm(provider, key))
    }

    /// Where a call goes, and the operator's headers for it.
    fn target<'a>(&'a self, provider: Provider, request: &'a ChatRequest) -> Target<'a> {
        Target {
            base_url: request
                .base_url
                .as_deref()
                .unwrap_or_else(|| self.base_url(provider)),
            headers: self
                .settings
                .headers
                .get(provider.name())
                .map_or(&[], Vec::as_slice),
        }
    }

    /// The provider's request for this call, on the next pool.
    fn prepare(
        &self,
        provider: Provider,
        request: &ChatRequest,
        key: Option<&ApiKey>,
        stream: bool,
    ) -> Result<reqwest::RequestBuilder, LlmError> {
        let api: &dyn ProviderApi = provider.api();
        let target = self.target(provider, request);
        let outgoing = api
            .build(&target, request, key, stream)
            .map_err(|e: WireError| e.into_llm(provider, key))?;
        Ok(builder(self.pools.next(), outgoing))
    }
}

/// The request as reqwest sends it, its body in an allocation of exactly its size, handed over
/// as a body that cannot be cloned: reqwest keeps a copy of a clonable body (for redirects and
/// its own retries, both off here) until the call is answered, so every step waiting on the
/// model held its request twice. Sent once, the body is freed as soon as it is written; it still
/// goes with its `Content-Length`, its size being exact. A retry builds the request again.
fn builder(http: &reqwest::Client, outgoing: Outgoing) -> reqwest::RequestBuilder {
    let mut builder = match parsed(&outgoing.url) {
        Some(url) => http.post(url),
        // reqwest parses it again and reports why it is not a URL.
        None => http.post(outgoing.url),
    }
    .header(reqwest::header::CONTENT_TYPE, "application/json");
    for (name, value) in outgoing.headers {
        builder = builder.header(name, value);
    }
    let body = bytes::Bytes::from(outgoing.body.into_boxed_slice());
    builder.body(reqwest::Body::wrap(http_body_util::Full::new(body)))
}

/// `url` parsed, remembered per worker: every step of a loop calls the same URL, and parsing it
/// (with IDNA for the host) is about 1 % of a step.
fn parsed(url: &str) -> Option<reqwest::Url> {
    thread_local! {
        static URLS: std::cell::RefCell<crate::runtime::memo::Memo<Option<reqwest::Url>>> =
            const { std::cell::RefCell::new(crate::runtime::memo::Memo::new()) };
    }
    crate::runtime::memo::remembered(&URLS, &[url], || reqwest::Url::parse(url).ok())
}

/// Sends a streaming request: the response, still unread, once its status is a success.
async fn open_stream(
    provider: Provider,
    builder: reqwest::RequestBuilder,
    timeout: Duration,
    key: Option<&ApiKey>,
    memory: &Arc<MemoryBudget>,
) -> Result<reqwest::Response, LlmError> {
    let response = dispatch(provider, builder, timeout).await?;
    if response.status().is_success() {
        Ok(response)
    } else {
        Err(Box::pin(failure(provider, response, timeout, key, memory)).await)
    }
}

/// Sends a prepared request and returns the body of a 2xx reply, or the classified error.
/// Not an `async fn`: that would keep the request builder for as long as the reply takes.
fn send<'k>(
    provider: Provider,
    builder: reqwest::RequestBuilder,
    timeout: Duration,
    key: Option<&'k ApiKey>,
    memory: Arc<MemoryBudget>,
) -> impl std::future::Future<Output = Result<HeldBytes, LlmError>> + 'k {
    let dispatched = dispatch(provider, builder, timeout);
    async move {
        let response = dispatched.await?;
        // Boxed: reading the reply is a larger state than waiting for it, and a future keeps
        // room for its largest state all the while thousands of calls wait.
        Box::pin(async move {
            if response.status().is_success() {
                read_capped(provider, response, timeout, &memory).await
            } else {
                Err(failure(provider, response, timeout, key, &memory).await)
            }
        })
        .await
    }
}

/// The reply's head, or the transport's failure classified. Not an `async fn`: the future of
/// one keeps its arguments for its whole life, so the request would be held twice.
fn dispatch(
    provider: Provider,
    builder: reqwest::RequestBuilder,
    timeout: Duration,
) -> impl std::future::Future<Output = Result<reqwest::Response, LlmError>> {
    use futures_util::FutureExt;
    builder.timeout(timeout).send().map(move |sent| {
        let response = sent.map_err(|e| LlmError::from_transport(provider, &e, timeout))?;
        upstream_status(response.status().as_u16());
        Ok(response)
    })
}

/// What a reply that is not a success says went wrong, read from its status, headers and body.
async fn failure(
    provider: Provider,
    response: reqwest::Response,
    timeout: Duration,
    key: Option<&ApiKey>,
    memory: &Arc<MemoryBudget>,
) -> LlmError {
    let status = response.status();
    let headers = response.headers().clone();
    match read_capped(provider, response, timeout, memory).await {
        Ok(body) => LlmError::from_reply(provider, status, &headers, &body.bytes, key),
        Err(unread) => unread,
    }
}

/// A reply's bytes, held against the memory budget for as long as they live.
pub(super) struct HeldBytes {
    pub bytes: bytes::Bytes,
    _held: Held,
}

/// Reads the whole reply, each piece held against the budget as it arrives: past it, the rest
/// is not read.
async fn read_capped(
    provider: Provider,
    mut response: reqwest::Response,
    timeout: Duration,
    memory: &Arc<MemoryBudget>,
) -> Result<HeldBytes, LlmError> {
    let overloaded = |_| LlmError::Overloaded { provider };
    let too_large = || LlmError::BadResponse {
        provider,
        message: format!("the reply is larger than {MAX_REPLY_BYTES} bytes"),
    };
    if response
        .content_length()
        .is_some_and(|n| n > MAX_REPLY_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut held = memory.hold(0).map_err(overloaded)?;
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| LlmError::from_transport(provider, &e, timeout))?
    {
        if body.len() + chunk.len() > MAX_REPLY_BYTES {
            return Err(too_large());
        }
        held.grow_to((body.len() + chunk.len()).max(body.capacity()))
            .map_err(overloaded)?;
        body.extend_from_slice(&chunk);
    }
    Ok(HeldBytes {
        bytes: body.freeze(),
        _held: held,
    })
}

/// One upstream attempt (`retry` 0 for the first), in a span of its own while traces are on:
/// provider, model (as the log has it, without the key), attempt and retry numbers, then the
/// reply's status or the failure's kind. Off, the attempt is returned as it is.
fn upstream_attempt<'a, T: 'a>(
    provider: Provider,
    model: &str,
    key: Option<&ApiKey>,
    retry: u32,
    attempt: impl Future<Output = Result<T, LlmError>> + 'a,
) -> impl Future<Output = Result<T, LlmError>> + 'a {
    if !traces::on() {
        return Either::Left(attempt);
    }
    let span = tracing::trace_span!(
        target: traces::TARGET,
        "upstream attempt",
        provider = %provider,
        model = %super::redact_secrets(model, key),
        // Signed: a trace keeps only those as numbers.
        attempt = i64::from(retry) + 1,
        retry = i64::from(retry),
        http.response.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
    );
    Either::Right(Box::pin(async move {
        let outcome = attempt.instrument(span.clone()).await;
        if let Err(err) = &outcome {
            span.record("error.type", err.kind());
        }
        outcome
    }))
}

/// The status of the reply an upstream attempt got, on the attempt's span (the current one).
fn upstream_status(status: u16) {
    if traces::on() {
        tracing::Span::current().record("http.response.status_code", i64::from(status));
    }
}
