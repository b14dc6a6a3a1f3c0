//! Provider clients behind one entry point. The types they share are provider-neutral: a
//! [`ChatRequest`] in (`chat.rs`), a [`Completion`] out (`completion.rs`). Each provider is a
//! [`ProviderApi`] (`provider.rs`) in a module of its own (its typed wire structs, quirks and their
//! tests), registered once in `registry.rs`; the transport that sends, retries and classifies is
//! shared (`transport.rs`). This file only declares the modules and names what the crate uses.

mod anthropic;
mod api_key;
pub mod bounded;
pub mod call_ids;
mod chat;
mod completion;
mod error;
mod first_connect;
pub mod key_vendor;
mod ollama;
mod openai;
mod overflow;
mod pools;
mod provider;
mod reasoning;
mod registry;
mod repetition;
mod responses;
mod retry;
pub mod sse;
mod stream;
mod stream_events;
pub mod strict_schema;
mod transport;
mod wire_api;
mod wire_error;
pub mod wire_names;

pub use api_key::{redact_key_shapes, redact_secrets, ApiKey, RawApiKey};
pub use chat::{
    in_turn_folded, with_appended, CacheTtl, ChatMessage, ChatRequest, ChatRole, PromptCache,
    ToolSpec, ToolUse, FAILED_TOOL, MESSAGE_JOIN,
};
pub(crate) use completion::nonzero;
pub use completion::{Completion, FinishReason, NativeCall, Usage, MESSAGES_APART};
pub use error::{scrub_upstream, LlmError};
pub use provider::{Capabilities, Counting, ProviderApi};
pub use reasoning::{
    layout_of, thought_parts, CallSignature, ReasoningEffort, ReasoningState, Slot, StateOrigin,
    ThinkingBlock,
};
pub use registry::Provider;
pub use retry::RetryPolicy;
pub use stream::CompletionStream;
pub use stream_events::Piece;
pub use transport::{LlmClients, LlmSettings};
pub use wire_api::WireApi;
pub use wire_error::WireError;
