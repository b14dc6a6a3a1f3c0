//! The buckets of one process, for a service that runs alone (or whose replicas may each admit
//! the whole limit).

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

use super::client_key::ClientKey;

/// How often, in checks, buckets that have refilled completely are forgotten, so that the
/// number of keys held stays bounded by the recent ones.
const SWEEP_EVERY: u64 = 4096;

pub struct LocalLimits {
    per_client: Option<DefaultKeyedRateLimiter<ClientKey>>,
    per_session: Option<DefaultKeyedRateLimiter<String>>,
    checks: AtomicU64,
    clock: DefaultClock,
}

impl LocalLimits {
    /// Limits in requests per minute; 0 turns a limit off.
    pub fn new(per_client_per_minute: u32, per_session_per_minute: u32) -> Self {
        Self {
            per_client: limiter(per_client_per_minute),
            per_session: limiter(per_session_per_minute),
            checks: AtomicU64::new(0),
            clock: DefaultClock::default(),
        }
    }

    /// `Err(wait)` when the client is over its limit.
    pub fn check_client(&self, key: ClientKey) -> Result<(), Duration> {
        self.sweep();
        match &self.per_client {
            Some(limiter) => limiter
                .check_key(&key)
                .map_err(|not_until| not_until.wait_time_from(self.clock.now())),
            None => Ok(()),
        }
    }

    /// `Err(wait)` when the session is over its limit.
    pub fn check_session(&self, session: &str) -> Result<(), Duration> {
        self.sweep();
        match &self.per_session {
            Some(limiter) => limiter
                .check_key(&session.to_string())
                .map_err(|not_until| not_until.wait_time_from(self.clock.now())),
            None => Ok(()),
        }
    }

    fn sweep(&self) {
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            if let Some(l) = &self.per_client {
                l.retain_recent();
            }
            if let Some(l) = &self.per_session {
                l.retain_recent();
            }
        }
    }
}

fn limiter<K: std::hash::Hash + Eq + Clone>(per_minute: u32) -> Option<DefaultKeyedRateLimiter<K>> {
    NonZeroU32::new(per_minute).map(|n| DefaultKeyedRateLimiter::keyed(Quota::per_minute(n)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_the_rest_waits() {
        let limits = LocalLimits::new(3, 0);
        let ip = ClientKey::V4([127, 0, 0, 1].into());
        for _ in 0..3 {
            assert!(limits.check_client(ip.clone()).is_ok());
        }
        let Err(wait) = limits.check_client(ip) else {
            panic!("the fourth request is over the limit")
        };
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(20),
            "{wait:?}"
        );
        assert!(
            limits
                .check_client(ClientKey::V4([127, 0, 0, 2].into()))
                .is_ok(),
            "another client"
        );
        assert!(limits.check_session("s").is_ok(), "session limit off");
    }
}
