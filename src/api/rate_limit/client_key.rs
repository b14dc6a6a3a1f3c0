//! The bucket a client counts against: an address, or an IPv6 client's network.

use std::net::{IpAddr, Ipv4Addr};

use ipnet::Ipv6Net;

use crate::api::client_address::Client;

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
