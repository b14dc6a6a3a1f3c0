//! Provider clients behind one entry point. Each provider is a module that turns a
//! [`ChatRequest`] into its wire format and its reply into a [`Completion`]; the quirks of each
//! provider (which parameters a model rejects) live next to it. Dispatch is a plain `match` over
//! [`Provider`]: three providers, no boxing, and a new one is a new module plus one arm.

mod anthropic;
mod api_key;
mod error;
mod openai;
mod pools;
mod retry;
pub mod sse;
mod stream;

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use api_key::{redact_key_shapes, ApiKey, RawApiKey};
pub use error::{scrub_upstream, LlmError};
pub use retry::RetryPolicy;
pub use stream::CompletionStream;

/// The API family a request is sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    #[serde(rename = "openai")]
    OpenAi,
    Anthropic,
    /// Any OpenAI-compatible server (Ollama, llama.cpp, vLLM) at the configured base URL.
    Ollama,
}

impl Provider {
    /// The provider a model name implies, when the request does not name one.
    pub fn infer_from_model(model: &str) -> Option<Self> {
        let m = model.to_ascii_lowercase();
        let openai_prefixes = ["gpt-", "chatgpt-", "o1", "o3", "o4", "ft:gpt-"];
        if openai_prefixes.iter().any(|p| m.starts_with(p)) {
            Some(Self::OpenAi)
        } else if m.starts_with("claude-") {
            Some(Self::Anthropic)
        } else {
            None
        }
    }

    /// Whether this provider refuses a call without a key (local servers ignore it).
    pub fn requires_key(self) -> bool {
        !matches!(self, Self::Ollama)
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
            Self::Ollama => "ollama",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatRole {
    User,
    Assistant,
}

impl ChatRole {
    /// The role's name on the wire of every provider (and in a dry run's prompt).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: ChatRole,
    pub content: String,
}

/// One chat completion, in provider-neutral terms.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    pub model: String,
    pub system: String,
    pub messages: Vec<ChatMessage>,
    pub max_output_tokens: u32,
    pub temperature: Option<f64>,
    /// Stop sequences wanted; a provider drops them for models that reject them.
    pub stop: Vec<String>,
    /// Tools offered through the provider's own tool calling (empty in text mode).
    pub tools: Vec<ToolSpec>,
    /// With tools: the model must call one.
    pub require_tool: bool,
    /// Instead of the operator's base URL for the provider (already checked against the
    /// operator's allowlist).
    pub base_url: Option<String>,
}

/// A tool as the client declared it: a name, what it does, and a JSON Schema for its arguments.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// A call the model made through the provider's tool calling.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeCall {
    pub name: String,
    /// The arguments object, or the text the model wrote when it is not a JSON object.
    pub arguments: Result<serde_json::Map<String, serde_json::Value>, String>,
}

impl NativeCall {
    /// Arguments that arrive as a JSON string (OpenAI) or a JSON value (Anthropic).
    pub fn new(name: String, arguments: serde_json::Value) -> Self {
        let arguments = match arguments {
            serde_json::Value::Object(map) => Ok(map),
            serde_json::Value::String(s) if s.trim().is_empty() => Ok(serde_json::Map::new()),
            serde_json::Value::String(s) => match serde_json::from_str(&s) {
                Ok(serde_json::Value::Object(map)) => Ok(map),
                _ => Err(s),
            },
            other => Err(other.to_string()),
        };
        Self { name, arguments }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// The model ended its turn or hit a stop sequence.
    Stop,
    /// The output cap was reached; the text may be cut.
    Length,
    /// Anything else the provider reported (content filter, refusal …), as it spelled it.
    Other(String),
}

#[derive(Debug, Clone)]
pub struct Completion {
    pub text: String,
    pub finish: FinishReason,
    pub usage: Option<Usage>,
    /// Tool calls made through the provider's tool calling, in order.
    pub calls: Vec<NativeCall>,
}

/// Where each provider lives and how long a call may take.
#[derive(Debug, Clone)]
pub struct LlmSettings {
    pub openai_base_url: String,
    pub anthropic_base_url: String,
    pub ollama_base_url: String,
    /// For one attempt.
    pub timeout: Duration,
    pub retry: RetryPolicy,
    /// Certificate authorities trusted besides the built-in web roots.
    pub extra_roots: Vec<reqwest::Certificate>,
    /// Connection pools the calls are spread over (see [`pools`]).
    pub pools: usize,
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
                .user_agent(concat!("reactstep/", env!("CARGO_PKG_VERSION")));
            for root in &settings.extra_roots {
                builder = builder.add_root_certificate(root.clone());
            }
            builder.build()
        };
        let pools = pools::Pools::new(settings.pools, build)?;
        Ok(Self { pools, settings })
    }

    /// One completion, retried as the policy allows, never past `deadline`.
    #[tracing::instrument(name = "llm call", skip_all, fields(provider = %provider, model = %request.model))]
    pub async fn complete(
        &self,
        provider: Provider,
        request: &ChatRequest,
        key: Option<&ApiKey>,
        deadline: tokio::time::Instant,
    ) -> Result<Completion, LlmError> {
        let policy = self.settings.retry;
        policy
            .run(provider, self.settings.timeout, deadline, |timeout| {
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
        let base = self.base_url(provider, request);
        match Self::dialect(provider) {
            Some(dialect) => {
                let call = openai::Call::new(provider, base, dialect, timeout);
                call.complete(self.pools.next(), request, key).await
            }
            None => anthropic::complete(self.pools.next(), base, timeout, request, key).await,
        }
    }

    /// Where the call goes: the request's (operator-allowed) base URL, or the operator's own for
    /// the provider.
    fn base_url<'a>(&'a self, provider: Provider, request: &'a ChatRequest) -> &'a str {
        let default = match provider {
            Provider::OpenAi => &self.settings.openai_base_url,
            Provider::Ollama => &self.settings.ollama_base_url,
            Provider::Anthropic => &self.settings.anthropic_base_url,
        };
        request.base_url.as_deref().unwrap_or(default)
    }

    /// The OpenAI wire flavour a provider speaks, or `None` for Anthropic's own API.
    fn dialect(provider: Provider) -> Option<openai::Dialect> {
        match provider {
            Provider::OpenAi => Some(openai::Dialect::OpenAi),
            Provider::Ollama => Some(openai::Dialect::Compatible),
            Provider::Anthropic => None,
        }
    }
}

impl LlmClients {
    /// The call with the answer streamed: returns once the provider has accepted it (an error
    /// status is returned here, before any byte of the answer).
    /// Opening the stream is retried like a call; once the answer flows, it is not.
    #[tracing::instrument(name = "llm stream", skip_all, fields(provider = %provider, model = %request.model))]
    pub async fn stream(
        &self,
        provider: Provider,
        request: &ChatRequest,
        key: Option<&ApiKey>,
        deadline: tokio::time::Instant,
    ) -> Result<CompletionStream, LlmError> {
        let policy = self.settings.retry;
        policy
            .run(provider, self.settings.timeout, deadline, |timeout| {
                self.stream_once(provider, request, key, timeout)
            })
            .await
    }

    async fn stream_once(
        &self,
        provider: Provider,
        request: &ChatRequest,
        key: Option<&ApiKey>,
        timeout: Duration,
    ) -> Result<CompletionStream, LlmError> {
        let base = self.base_url(provider, request);
        match Self::dialect(provider) {
            Some(dialect) => {
                let call = openai::Call::new(provider, base, dialect, timeout);
                call.stream(self.pools.next(), request, key).await
            }
            None => anthropic::stream(self.pools.next(), base, timeout, request, key).await,
        }
    }
}

/// Sends a streaming request: the response, still unread, once its status is a success.
async fn open_stream(
    provider: Provider,
    builder: reqwest::RequestBuilder,
    timeout: Duration,
    key: Option<&ApiKey>,
) -> Result<reqwest::Response, LlmError> {
    let response = dispatch(provider, builder, timeout).await?;
    if response.status().is_success() {
        Ok(response)
    } else {
        Err(Box::pin(failure(provider, response, timeout, key)).await)
    }
}

/// The request with `body` as JSON, held in an allocation of exactly its size: reqwest's `json`
/// keeps the spare room of the buffer it grew, and a call holds its body until it is answered.
fn with_json(
    builder: reqwest::RequestBuilder,
    body: &impl serde::Serialize,
) -> reqwest::RequestBuilder {
    match serde_json::to_vec(body) {
        Ok(json) => builder
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(bytes::Bytes::from(json.into_boxed_slice())),
        // Nothing the service sends fails to serialise; should it, reqwest reports it on send.
        Err(_) => builder.json(body),
    }
}

/// Sends a prepared request and returns the body of a 2xx reply, or the classified error.
async fn send(
    provider: Provider,
    builder: reqwest::RequestBuilder,
    timeout: Duration,
    key: Option<&ApiKey>,
) -> Result<bytes::Bytes, LlmError> {
    let response = dispatch(provider, builder, timeout).await?;
    // Boxed: reading the reply is a larger state than waiting for it, and a future keeps room
    // for its largest state all the while thousands of calls wait.
    Box::pin(async move {
        if response.status().is_success() {
            read_capped(provider, response, timeout).await
        } else {
            Err(failure(provider, response, timeout, key).await)
        }
    })
    .await
}

/// The reply's head, or the transport's failure classified. Not an `async fn`: the future of
/// one keeps its arguments for its whole life, so the request would be held twice.
fn dispatch(
    provider: Provider,
    builder: reqwest::RequestBuilder,
    timeout: Duration,
) -> impl std::future::Future<Output = Result<reqwest::Response, LlmError>> {
    use futures_util::FutureExt;
    builder
        .timeout(timeout)
        .send()
        .map(move |sent| sent.map_err(|e| LlmError::from_transport(provider, &e, timeout)))
}

/// What a reply that is not a success says went wrong, read from its status, headers and body.
async fn failure(
    provider: Provider,
    response: reqwest::Response,
    timeout: Duration,
    key: Option<&ApiKey>,
) -> LlmError {
    let status = response.status();
    let headers = response.headers().clone();
    match read_capped(provider, response, timeout).await {
        Ok(body) => LlmError::from_reply(provider, status, &headers, &body, key),
        Err(unread) => unread,
    }
}

/// No reply of a chat API comes near this; a body that does is refused, not held in memory.
const MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;

async fn read_capped(
    provider: Provider,
    mut response: reqwest::Response,
    timeout: Duration,
) -> Result<bytes::Bytes, LlmError> {
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
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| LlmError::from_transport(provider, &e, timeout))?
    {
        if body.len() + chunk.len() > MAX_REPLY_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// Parses a 2xx body as the provider's documented reply type.
fn decode<T: serde::de::DeserializeOwned>(provider: Provider, body: &[u8]) -> Result<T, LlmError> {
    serde_json::from_slice(body).map_err(|e| LlmError::BadResponse {
        provider,
        // Without the value serde would quote: a reply can hold anything, the key included.
        message: format!(
            "the reply is not the documented JSON ({})",
            crate::scrub::json_error(&e)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_imply_their_provider() {
        assert_eq!(
            Provider::infer_from_model("gpt-4o-mini"),
            Some(Provider::OpenAi)
        );
        assert_eq!(
            Provider::infer_from_model("o3-mini"),
            Some(Provider::OpenAi)
        );
        assert_eq!(
            Provider::infer_from_model("chatgpt-4o-latest"),
            Some(Provider::OpenAi)
        );
        assert_eq!(
            Provider::infer_from_model("claude-sonnet-4-5"),
            Some(Provider::Anthropic)
        );
        assert_eq!(Provider::infer_from_model("llama3.1:8b"), None);
    }
}
