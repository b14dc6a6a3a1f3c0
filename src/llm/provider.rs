//! The one trait every wire format implements, and what it works with.
//!
//! A provider is a [`ProviderApi`]: it builds the HTTP request for a [`ChatRequest`], decodes the
//! reply and the stream's events, and holds its static [`Facts`] (its name, where it lives, which
//! model names and keys are its, and what it can do: [`Capabilities`]). All of that is
//! synchronous; sending, retrying, the deadline and the body cap are the shared transport's
//! (`transport.rs`), so the futures stay unboxed. The providers are listed once, in the registry
//! (`registry.rs`); an OpenAI-compatible vendor is one entry in `openai/presets.rs`.

use std::fmt;

use super::stream_events::StreamDecoder;
use super::{ApiKey, ChatRequest, Completion, WireError};

/// What a provider can do, and how the service treats it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Capabilities {
    /// Tools can be sent through the provider's own tool calling.
    pub native_tools: bool,
    /// `tool_mode: auto` picks native tool calling here (the hosted models call tools reliably;
    /// small local models often do not).
    pub native_by_default: bool,
    /// The model may answer with several calls in one turn.
    pub parallel_tool_calls: bool,
    /// The provider caches repeated prompt prefixes.
    pub prompt_caching: bool,
    /// Reasoning models whose reasoning the provider reports.
    pub reasoning: bool,
    /// How prompts are counted: a public tokenizer, or an approximation with a margin.
    pub counting: Counting,
    /// A call without a key is refused (local servers ignore keys).
    pub requires_key: bool,
    /// Whether a timed-out attempt is tried again: a single-slot local server keeps generating
    /// the abandoned request, so a retry doubles its work.
    #[serde(skip)]
    pub retry_timeouts: bool,
    /// The highest `temperature` the API takes.
    #[serde(skip)]
    pub max_temperature: Temperature,
}

/// The highest temperature, in tenths (an `f64` would keep the struct from being `Eq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Temperature(pub u8);

impl Temperature {
    pub fn value(self) -> f64 {
        f64::from(self.0) / 10.0
    }
}

/// How a provider's prompts are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Counting {
    /// OpenAI models: tiktoken, exactly.
    #[serde(rename = "openai_tokenizer")]
    OpenAiTokenizer,
    /// OpenAI models exactly when the model name (after a `vendor/` prefix) is one, otherwise as
    /// [`Counting::Margin`] (a router of many vendors' models).
    ByModelVendor,
    /// `o200k_base` plus the calibrated margin of the model's family.
    Margin,
}

/// An HTTP request a provider built: where it goes, its headers (the key among them, marked
/// sensitive) and its JSON body.
pub struct Outgoing {
    pub url: String,
    pub headers: Vec<(reqwest::header::HeaderName, reqwest::header::HeaderValue)>,
    pub body: Vec<u8>,
}

impl Outgoing {
    /// A POST of `body` as JSON to `url`: serde_json's bytes, written faster (`crate::json`),
    /// in a buffer sized for about `text_bytes` of text.
    pub fn json(
        url: String,
        body: &impl serde::Serialize,
        text_bytes: usize,
    ) -> Result<Self, WireError> {
        let body = crate::json::to_vec_for(body, text_bytes)
            .map_err(|e| WireError::Shape(format!("the request could not be written: {e}")))?;
        Ok(Self {
            url,
            headers: Vec::new(),
            body,
        })
    }

    /// With the operator's headers for the provider.
    pub fn with_headers(mut self, target: &Target<'_>) -> Self {
        self.headers.extend(target.headers.iter().cloned());
        self
    }

    /// With a header that is not secret.
    pub fn with_header(mut self, name: &'static str, value: &'static str) -> Self {
        self.headers.push((
            reqwest::header::HeaderName::from_static(name),
            reqwest::header::HeaderValue::from_static(value),
        ));
        self
    }

    /// With the key in `header`, as `Bearer <key>` or as is, marked sensitive so that no log
    /// or debug output shows it.
    pub fn with_key(mut self, header: KeyHeader, key: Option<&ApiKey>) -> Result<Self, WireError> {
        let Some(key) = key else { return Ok(self) };
        let (name, text) = match header {
            KeyHeader::Bearer => (
                reqwest::header::AUTHORIZATION,
                format!("Bearer {}", key.expose()),
            ),
            KeyHeader::Named(name) => (
                reqwest::header::HeaderName::from_static(name),
                key.expose().to_string(),
            ),
        };
        let mut value =
            reqwest::header::HeaderValue::from_str(&text).map_err(|_| WireError::KeyNotHeader)?;
        value.set_sensitive(true);
        self.headers.push((name, value));
        Ok(self)
    }
}

/// How a provider takes the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyHeader {
    /// `Authorization: Bearer <key>`.
    Bearer,
    /// The key alone in a header of its own (`x-api-key`, Azure's `api-key`); lower case.
    Named(&'static str),
}

/// Where a call goes and what the operator configured for the provider.
pub struct Target<'a> {
    pub base_url: &'a str,
    /// Headers the operator set for every call to this provider (OpenRouter's attribution).
    pub headers: &'a [(reqwest::header::HeaderName, reqwest::header::HeaderValue)],
}

/// How the events of a streamed reply are framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Server-sent events (`data: …`).
    Sse,
    /// One JSON object per line (Ollama's native API).
    JsonLines,
}

/// What is true of a provider whatever the request: who it is, where it lives, which model names
/// and keys are its, and what it can do. One value per provider; what is the same for every
/// provider of a wire format (the stream's framing, the token counter) is the wire format's
/// ([`ProviderApi`]'s methods).
#[derive(Debug)]
pub struct Facts {
    /// The name requests use in `llm_config.provider` (and the `<NAME>` of its
    /// `REACTSTEP_<NAME>_BASE_URL`).
    pub name: &'static str,
    /// Where the provider lives when the operator configured nothing else; empty where there is
    /// no such place (a request must then name its own).
    pub default_base_url: &'static str,
    /// Lower-case prefixes of the model names that imply this provider.
    pub model_prefixes: &'static [&'static str],
    /// How the provider's own keys begin, where they say whose they are (`sk-ant-`): such a key
    /// is never sent to another vendor.
    pub key_prefixes: &'static [&'static str],
    /// Environment variables whose values become headers on every call (header, variable).
    pub configured_headers: &'static [(&'static str, &'static str)],
    pub capabilities: Capabilities,
}

/// One provider's wire format and behaviour.
pub trait ProviderApi: Sync + fmt::Debug {
    /// The provider's static facts.
    fn facts(&self) -> &Facts;
    /// The request for one completion, streamed or not.
    fn build(
        &self,
        target: &Target<'_>,
        request: &ChatRequest,
        key: Option<&ApiKey>,
        stream: bool,
    ) -> Result<Outgoing, WireError>;
    /// A 2xx reply's body as a completion; a body of another shape is [`WireError::Shape`].
    fn decode(&self, body: &[u8]) -> Result<Completion, WireError>;
    /// Makes the request one this provider accepts (a setting it refuses in this combination is
    /// changed or left out); returns a warning for each change.
    fn adjust(&self, _request: &mut ChatRequest) -> Vec<String> {
        Vec::new()
    }
    /// Output tokens the request takes beyond `max_output_tokens` (a thinking budget), which
    /// the prompt must leave room for.
    fn output_reserve(&self, _effort: Option<super::ReasoningEffort>) -> u32 {
        0
    }
    /// The call ids the provider takes back in a request; others are rewritten
    /// ([`super::call_ids`]).
    fn call_ids(&self) -> super::call_ids::IdRule {
        super::call_ids::IdRule::Any
    }
    /// The prompt cache lifetimes the provider takes (`llm_config.prompt_cache_ttl`); any other
    /// is refused before the call.
    fn cache_ttls(&self) -> &'static [super::CacheTtl] {
        &[]
    }
    /// Whether the provider clears old tool results itself when asked
    /// (`ChatRequest::clear_tool_uses`).
    fn clears_tool_results(&self) -> bool {
        false
    }
    /// Whether a tool's result goes as plain text: a failure said in it
    /// ([`super::ChatMessage::text_as_sent`]), and a user message that continues a turn of
    /// results (`ChatMessage::in_turn`) inside the last of them ([`super::in_turn_folded`]).
    /// Not Anthropic's: a result there has a failure flag, and the text a block of its own.
    fn tool_results_are_plain_text(&self) -> bool {
        false
    }
    /// The wire format: `chat` for every provider but the Responses API's.
    fn wire_api(&self) -> super::WireApi {
        super::WireApi::Chat
    }
    /// Why a call to `base_url` (trimmed of its last `/`) cannot be made on this wire, judged
    /// before the request is accepted: Azure's deployments form has no Responses API.
    fn base_url_refusal(&self, _base_url: &str) -> Option<String> {
        None
    }
    /// A fresh decoder for the events of one streamed reply.
    fn stream_decoder(&self) -> Box<dyn StreamDecoder>;
    fn framing(&self) -> Framing {
        Framing::Sse
    }
    /// The name of the provider's own prompt counter (its endpoint), in a context report.
    fn counter_name(&self) -> Option<&'static str> {
        None
    }
    /// The request for the provider's own count of a prompt's tokens, when it has an endpoint
    /// for it.
    fn count_request(
        &self,
        _target: &Target<'_>,
        _request: &ChatRequest,
        _key: Option<&ApiKey>,
    ) -> Option<Result<Outgoing, WireError>> {
        None
    }
    /// The count in a 2xx reply of that endpoint.
    fn decode_count(&self, _body: &[u8]) -> Result<u64, WireError> {
        Err(WireError::Shape(
            "this provider has no token counting endpoint".into(),
        ))
    }
}
