//! Prometheus metrics for operators (`GET /metrics`, OpenMetrics text): requests by endpoint and
//! status, steps in flight, step and upstream latency, retries, tokens, parse outcomes and context
//! fates. One registry per process; the families are cheap to update from anywhere.

use std::borrow::Cow;
use std::sync::OnceLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Borrowed: one of the known paths, or `other`.
    pub endpoint: Cow<'static, str>,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabels {
    /// Borrowed: the provider's name, a constant.
    pub provider: Cow<'static, str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// Borrowed: a step counts a dozen kinds, and an owned label was an allocation each.
    pub kind: Cow<'static, str>,
}

pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    /// Steps begun and not yet answered: each holds its client connection and memory (about
    /// 35 KiB over HTTPS, `docs/benchmarks.md`) until it is.
    pub steps_in_flight: Gauge,
    pub step_seconds: Histogram,
    pub upstream_seconds: Family<ProviderLabels, Histogram>,
    pub retries: Family<ProviderLabels, Counter>,
    /// `kind` is `prompt` or `completion`.
    pub tokens: Family<KindLabels, Counter>,
    /// Prompt tokens read from and written to the providers' caches.
    pub prompt_cache_tokens: Family<KindLabels, Counter>,
    /// `kind`: `action`, `answer`, `unstructured`, `repair`, `invalid`, `command`.
    pub parse_outcomes: Family<KindLabels, Counter>,
    /// `kind`: included, truncated, dropped, unresolved.
    pub context_items: Family<KindLabels, Counter>,
    /// Token counts asked of the process-wide cache; `kind` is `hit` or `miss`.
    pub token_cache_lookups: Family<KindLabels, Counter>,
    /// Bytes the cache's entries take (at most `REACTSTEP_TOKEN_CACHE_MIB`).
    pub token_cache_bytes: Gauge,
    /// Rate-limit checks the shared limiter (Redis) did not answer; `kind` is what the operator's
    /// choice made of the request: `admitted` (fail open) or `refused` (fail closed).
    pub rate_limiter_unanswered: Family<KindLabels, Counter>,
}

fn latency() -> Histogram {
    // 5 ms to about 164 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 16))
}

impl Metrics {
    fn new() -> Self {
        let mut metrics = Self {
            registry: Registry::with_prefix("reactstep"),
            requests: Family::<RequestLabels, Counter>::default(),
            steps_in_flight: Gauge::default(),
            step_seconds: latency(),
            upstream_seconds: Family::<ProviderLabels, Histogram>::new_with_constructor(latency),
            retries: Family::<ProviderLabels, Counter>::default(),
            tokens: Family::<KindLabels, Counter>::default(),
            prompt_cache_tokens: Family::<KindLabels, Counter>::default(),
            parse_outcomes: Family::<KindLabels, Counter>::default(),
            context_items: Family::<KindLabels, Counter>::default(),
            token_cache_lookups: Family::<KindLabels, Counter>::default(),
            token_cache_bytes: Gauge::default(),
            rate_limiter_unanswered: Family::<KindLabels, Counter>::default(),
        };
        metrics.register();
        metrics
    }

    /// Every family in the registry, in the order `/metrics` lists them.
    fn register(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "rate_limiter_unanswered",
            "Rate-limit checks the shared limiter (Redis) did not answer, by what became of the request (admitted, refused)",
            self.rate_limiter_unanswered.clone(),
        );
        registry.register(
            "token_cache_lookups",
            "Token counts asked of the cache, by kind (hit, miss)",
            self.token_cache_lookups.clone(),
        );
        registry.register(
            "token_cache_bytes",
            "Bytes the token-count cache's entries take",
            self.token_cache_bytes.clone(),
        );
        registry.register(
            "requests",
            "HTTP requests answered, by endpoint and status",
            self.requests.clone(),
        );
        registry.register(
            "steps_in_flight",
            "Steps begun and not yet answered",
            self.steps_in_flight.clone(),
        );
        registry.register(
            "step_seconds",
            "Time to answer a step, from request to response",
            self.step_seconds.clone(),
        );
        registry.register(
            "upstream_seconds",
            "Time of one upstream attempt, by provider",
            self.upstream_seconds.clone(),
        );
        registry.register(
            "upstream_retries",
            "Upstream attempts retried, by provider",
            self.retries.clone(),
        );
        registry.register(
            "tokens",
            "Tokens the providers reported, prompt and completion",
            self.tokens.clone(),
        );
        registry.register(
            "prompt_cache_tokens",
            "Prompt tokens the providers reported read from (read) or written to (write) their caches",
            self.prompt_cache_tokens.clone(),
        );
        registry.register(
            "parse_outcomes",
            "What model outputs were read as",
            self.parse_outcomes.clone(),
        );
        registry.register(
            "context_items",
            "Context items and turns by their fate in the prompt",
            self.context_items.clone(),
        );
    }

    pub fn count(family: &Family<KindLabels, Counter>, kind: &'static str, by: u64) {
        family
            .get_or_create(&KindLabels {
                kind: Cow::Borrowed(kind),
            })
            .inc_by(by);
    }

    /// The OpenMetrics text of every metric.
    pub fn render(&self) -> String {
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            text.clear();
        }
        text
    }
}

/// Counts a step in flight for as long as it lives, however it ends (answered, failed, or
/// dropped when its client goes away).
pub struct InFlight(());

impl InFlight {
    pub fn enter() -> Self {
        global().steps_in_flight.inc();
        Self(())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        global().steps_in_flight.dec();
    }
}

/// One answer counted in `reactstep_requests_total`: `endpoint` one of the contract's paths, or
/// `other`.
pub fn count_request(endpoint: &'static str, status: u16) {
    let labels = RequestLabels {
        endpoint: Cow::Borrowed(endpoint),
        status,
    };
    global().requests.get_or_create(&labels).inc();
}

pub fn global() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}
