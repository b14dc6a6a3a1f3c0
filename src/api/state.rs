//! What every handler shares, made once at start-up.

use std::sync::Arc;

use super::base_urls::Destinations;
use super::client_address::TrustedProxies;
use super::rate_limit::RateLimits;
use super::step_slots::StepSlots;
use crate::config::Settings;
use crate::llm::LlmClients;

/// What every handler shares: the operator's settings, the pooled LLM clients and the limits.
pub struct AppState {
    /// Made once from the flags; each request's conversion holds it too.
    pub settings: Arc<Settings>,
    pub llm: LlmClients,
    /// What bodies (and, through the LLM clients, replies) are held against.
    pub memory: Arc<crate::runtime::memory_budget::MemoryBudget>,
    pub rate_limits: RateLimits,
    /// Whose `X-Forwarded-For` names the client for its rate limit.
    pub trusted_proxies: TrustedProxies,
    /// Where a request may send its LLM call.
    pub destinations: Arc<Destinations>,
    /// The operator's prices, by model; empty without `REACTSTEP_PRICES_FILE`.
    pub prices: crate::prices::Prices,
    /// Steps in flight, bounded by what the descriptor limit allows.
    pub step_slots: Arc<StepSlots>,
    /// When a step still in flight must be answered, once the service is stopping.
    pub stopping: crate::runtime::stopping::Stopping,
}
