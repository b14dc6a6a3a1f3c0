//! What every handler shares, made once at start-up.

use std::sync::Arc;

use super::base_urls::AllowedBaseUrls;
use super::client_address::TrustedProxies;
use super::rate_limit::RateLimits;
use super::step_slots::StepSlots;
use crate::llm::LlmClients;

/// What every handler shares: the pooled LLM clients and the request limits.
pub struct AppState {
    pub llm: LlmClients,
    pub max_body_bytes: u64,
    /// What bodies (and, through the LLM clients, replies) are held against.
    pub memory: Arc<crate::runtime::memory_budget::MemoryBudget>,
    pub allow_mock_response: bool,
    pub workspace: Option<Arc<crate::step::context::workspace::Workspace>>,
    pub approximation_margin_percent: Option<u32>,
    /// How long one step may take in all.
    pub step_timeout: std::time::Duration,
    /// Tokens a client must present; empty means none is asked for.
    pub api_tokens: crate::config::ApiTokens,
    pub rate_limits: RateLimits,
    /// Whose `X-Forwarded-For` names the client for its rate limit.
    pub trusted_proxies: TrustedProxies,
    /// Base URLs a request may name for its LLM call.
    pub allowed_base_urls: Arc<AllowedBaseUrls>,
    /// Providers the operator gave no base URL and that have no default (Azure).
    pub unplaced_providers: Arc<[crate::llm::Provider]>,
    /// Between comment lines on a quiet event stream.
    pub stream_heartbeat: std::time::Duration,
    /// The operator's prices, by model; empty without `REACTSTEP_PRICES_FILE`.
    pub prices: crate::prices::Prices,
    /// Steps in flight, bounded by what the descriptor limit allows.
    pub step_slots: Arc<StepSlots>,
}
