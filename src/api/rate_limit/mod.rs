//! Optional rate limits, per client address and per `session_id`: token buckets (GCRA) that
//! refill at the configured rate per minute and allow a burst of the same size. A request over
//! its limit gets 429 `rate_limited` with the seconds until it would pass. Off by default.
//!
//! The buckets live in this process (`local`), or, with `REACTSTEP_REDIS_URL`, in Redis
//! (`shared`), so that every replica behind a load balancer counts against the same ones. When
//! Redis cannot answer, the operator's choice decides: let the request through (fail open, the
//! default) or refuse it with 503 `rate_limiter_unavailable`.
//!
//! An IPv6 client counts by its network (a /64 unless the operator says otherwise): one host is
//! given a whole /64 and can pick any address in it for each request.

mod client_key;
mod local;
mod refusal;
mod shared;

use super::client_address::Client;
use client_key::ClientKey;

pub use refusal::Refusal;
pub use shared::SharedSettings;

pub struct RateLimits {
    buckets: Buckets,
    ipv6_prefix: u8,
}

enum Buckets {
    /// The governor buckets know their own rates.
    Local(local::LocalLimits),
    /// Redis is told the rate with every check.
    Shared {
        redis: shared::SharedLimits,
        per_client_per_minute: u32,
        per_session_per_minute: u32,
    },
}

impl RateLimits {
    /// Limits in requests per minute, held in this process; 0 turns a limit off. IPv6 clients
    /// count by their first `ipv6_prefix` bits (1 to 128).
    pub fn new(per_client_per_minute: u32, per_session_per_minute: u32, ipv6_prefix: u8) -> Self {
        let local = local::LocalLimits::new(per_client_per_minute, per_session_per_minute);
        Self {
            buckets: Buckets::Local(local),
            ipv6_prefix,
        }
    }

    /// The same limits, held in Redis for every replica that names it.
    pub fn shared(
        per_client_per_minute: u32,
        per_session_per_minute: u32,
        ipv6_prefix: u8,
        settings: SharedSettings,
    ) -> Result<Self, String> {
        Ok(Self {
            buckets: Buckets::Shared {
                redis: shared::SharedLimits::new(settings)?,
                per_client_per_minute,
                per_session_per_minute,
            },
            ipv6_prefix,
        })
    }

    /// Whether a step can be served: false only while a limiter that fails closed has not yet
    /// heard from Redis since start.
    pub fn ready(&self) -> bool {
        match &self.buckets {
            Buckets::Local(_) => true,
            Buckets::Shared { redis, .. } => redis.ready(),
        }
    }

    pub async fn check_client(&self, client: Client) -> Result<(), Refusal> {
        let key = ClientKey::new(client, self.ipv6_prefix);
        match &self.buckets {
            Buckets::Local(local) => local.check_client(key).map_err(Refusal::Wait),
            Buckets::Shared {
                redis,
                per_client_per_minute,
                ..
            } => {
                let key = key.to_string();
                redis.check("client", &key, *per_client_per_minute).await
            }
        }
    }

    pub async fn check_session(&self, session: &str) -> Result<(), Refusal> {
        match &self.buckets {
            Buckets::Local(local) => local.check_session(session).map_err(Refusal::Wait),
            Buckets::Shared {
                redis,
                per_session_per_minute,
                ..
            } => {
                redis
                    .check("session", session, *per_session_per_minute)
                    .await
            }
        }
    }
}
