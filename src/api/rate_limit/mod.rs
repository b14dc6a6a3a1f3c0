//! Optional rate limits, per client address and per `session_id`: token buckets (GCRA) that
//! refill at the configured rate per minute and allow a burst of the same size. A request over
//! its limit gets 429 `rate_limited` with the seconds until it would pass. Off by default.
//!
//! The buckets live in this process (`local`), or, with `REACTSTEP_REDIS_URL`, in Redis
//! (`shared`), so that every replica behind a load balancer counts against the same ones. When
//! Redis cannot answer, the operator's choice decides: let the request through (fail open, the
//! default) or refuse it with 503 `rate_limiter_unavailable`.

mod local;
mod shared;

use std::net::IpAddr;
use std::time::Duration;

pub use shared::SharedSettings;

/// Why a request may not go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Over the limit: it would pass after this long.
    Wait(Duration),
    /// The shared limiter did not answer, and the operator chose to fail closed.
    Unavailable,
}

pub struct RateLimits {
    buckets: Buckets,
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
    /// Limits in requests per minute, held in this process; 0 turns a limit off.
    pub fn new(per_client_per_minute: u32, per_session_per_minute: u32) -> Self {
        let local = local::LocalLimits::new(per_client_per_minute, per_session_per_minute);
        Self {
            buckets: Buckets::Local(local),
        }
    }

    /// The same limits, held in Redis for every replica that names it.
    pub fn shared(
        per_client_per_minute: u32,
        per_session_per_minute: u32,
        settings: SharedSettings,
    ) -> Result<Self, String> {
        Ok(Self {
            buckets: Buckets::Shared {
                redis: shared::SharedLimits::new(settings)?,
                per_client_per_minute,
                per_session_per_minute,
            },
        })
    }

    pub async fn check_client(&self, ip: IpAddr) -> Result<(), Refusal> {
        match &self.buckets {
            Buckets::Local(local) => local.check_client(ip).map_err(Refusal::Wait),
            Buckets::Shared {
                redis,
                per_client_per_minute,
                ..
            } => {
                let key = ip.to_string();
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
