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

mod local;
mod shared;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use ipnet::Ipv6Net;

use super::client_address::Client;

pub use shared::SharedSettings;

/// The network an IPv6 client is given: a /64 is the smallest a site is assigned.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

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
    ipv6_prefix: u8,
}

/// The bucket a client counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ClientKey {
    V4(Ipv4Addr),
    /// The client's network, its host bits zeroed.
    V6(Ipv6Net),
    /// A client a trusted proxy named without an address.
    Named(Box<str>),
}

impl ClientKey {
    /// An IPv6 address counts by its first `ipv6_prefix` bits (1 to 128; beyond, 128).
    pub fn new(client: Client, ipv6_prefix: u8) -> Self {
        match client {
            Client::Addr(IpAddr::V4(v4)) => Self::V4(v4),
            Client::Addr(IpAddr::V6(v6)) => {
                let net = Ipv6Net::new(v6, ipv6_prefix.min(128)).unwrap_or_else(|_| v6.into());
                Self::V6(net.trunc())
            }
            Client::Named(name) => Self::Named(name),
        }
    }
}

/// Redis's key: an address, a network, or a name that no address or network reads as.
impl std::fmt::Display for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::V4(v4) => write!(f, "{v4}"),
            Self::V6(net) => write!(f, "{net}"),
            Self::Named(name) => write!(f, "name={name}"),
        }
    }
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
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
        }
    }

    /// IPv6 clients count by their first `bits` bits (1 to 128).
    pub fn with_ipv6_prefix(mut self, bits: u8) -> Self {
        self.ipv6_prefix = bits;
        self
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
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key(addr: &str, bits: u8) -> String {
        let ip: IpAddr = addr.parse().unwrap_or_else(|e| panic!("{addr}: {e}"));
        ClientKey::new(Client::Addr(ip), bits).to_string()
    }

    #[test]
    fn ipv6_clients_count_by_their_network() {
        assert_eq!(key("2001:db8:1:2:aaaa::1", 64), "2001:db8:1:2::/64");
        assert_eq!(key("2001:db8:1:2:ffff::9", 64), "2001:db8:1:2::/64");
        assert_eq!(key("2001:db8:1:3::1", 64), "2001:db8:1:3::/64");
        assert_eq!(key("2001:db8:1:2::1", 128), "2001:db8:1:2::1/128");
        assert_eq!(key("2001:db8:1:2::1", 48), "2001:db8:1::/48");
        assert_eq!(key("2001:db8::1", 1), "::/1");
        assert_eq!(key("1.2.3.4", 64), "1.2.3.4");
        let named = ClientKey::new(Client::Named("1.2.3.4".into()), 64);
        assert_eq!(
            named.to_string(),
            "name=1.2.3.4",
            "a name never reads as an address"
        );
    }
}
