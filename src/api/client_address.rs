//! The client's address, for the per-client rate limit. Behind a load balancer every request
//! comes from the balancer, so the address the limit counts is the one it passes on in
//! `X-Forwarded-For` — believed only when the operator named the balancer in
//! `REACTSTEP_TRUSTED_PROXIES`, since any client can write that header.

use std::net::IpAddr;

use actix_web::HttpRequest;
use ipnet::IpNet;

/// The proxies whose `X-Forwarded-For` is believed: addresses or ranges (`10.0.0.0/8`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(pub Vec<IpNet>);

impl std::str::FromStr for TrustedProxies {
    type Err = String;

    fn from_str(list: &str) -> Result<Self, Self::Err> {
        let mut nets = Vec::new();
        for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let net = match item.parse::<IpAddr>() {
                Ok(ip) => IpNet::from(ip),
                Err(_) => item.parse::<IpNet>().map_err(|_| {
                    format!("{item:?} is neither an IP address nor a range such as 10.0.0.0/8")
                })?,
            };
            nets.push(net);
        }
        Ok(Self(nets))
    }
}

impl TrustedProxies {
    fn trust(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The peer's address; when the peer is a trusted proxy, the nearest address in
    /// `X-Forwarded-For` (read from the right, as each proxy appends) that is not one. An entry
    /// that is not an address ends the walk: what lies beyond it cannot be believed.
    pub fn client_of(&self, req: &HttpRequest) -> Option<IpAddr> {
        let peer = req.peer_addr()?.ip();
        if self.0.is_empty() || !self.trust(peer) {
            return Some(peer);
        }
        let values: Vec<&str> = req
            .headers()
            .get_all("x-forwarded-for")
            .map(|v| v.to_str().unwrap_or(""))
            .collect();
        let mut client = peer;
        for entry in values.iter().rev().flat_map(|v| v.rsplit(',')) {
            let Ok(ip) = entry.trim().parse::<IpAddr>() else {
                break;
            };
            client = ip;
            if !self.trust(ip) {
                break;
            }
        }
        Some(client)
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    fn client(trusted: &str, peer: &str, forwarded: &[&str]) -> IpAddr {
        let peer = std::net::SocketAddr::new(ip(peer), 5000);
        let mut req = TestRequest::default().peer_addr(peer);
        for value in forwarded {
            req = req.append_header(("x-forwarded-for", *value));
        }
        let proxies: TrustedProxies = trusted.parse().unwrap();
        proxies.client_of(&req.to_http_request()).unwrap()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn only_a_trusted_peer_is_believed() {
        assert_eq!(client("", "10.0.0.5", &["1.2.3.4"]), ip("10.0.0.5"));
        assert_eq!(client("10.0.0.9", "10.0.0.5", &["1.2.3.4"]), ip("10.0.0.5"));
        assert_eq!(
            client("10.0.0.0/24", "10.0.0.5", &["1.2.3.4"]),
            ip("1.2.3.4")
        );
    }

    #[test]
    fn a_client_cannot_choose_its_address_by_writing_the_header_itself() {
        // The client wrote 9.9.9.9; the balancer appended the address it saw.
        let seen = client("10.0.0.5", "10.0.0.5", &["9.9.9.9, 1.2.3.4"]);
        assert_eq!(seen, ip("1.2.3.4"));
        let seen = client("10.0.0.5", "10.0.0.5", &["9.9.9.9", "1.2.3.4"]);
        assert_eq!(seen, ip("1.2.3.4"), "the last header is the nearest hop");
    }

    #[test]
    fn trusted_hops_are_skipped_and_garbage_ends_the_walk() {
        let chain = ["1.2.3.4, 10.0.0.7"];
        assert_eq!(client("10.0.0.0/8", "10.0.0.5", &chain), ip("1.2.3.4"));
        assert_eq!(
            client("10.0.0.0/8", "10.0.0.5", &["unknown, 10.0.0.7"]),
            ip("10.0.0.7")
        );
        assert_eq!(client("10.0.0.5", "10.0.0.5", &[]), ip("10.0.0.5"));
        assert_eq!(client("::1", "::1", &["2001:db8::1"]), ip("2001:db8::1"));
    }

    #[test]
    fn a_list_that_is_not_addresses_is_refused() {
        assert!("10.0.0.1, 10.1.0.0/16, ::1"
            .parse::<TrustedProxies>()
            .is_ok());
        assert!("10.0.0.1, proxy.local".parse::<TrustedProxies>().is_err());
        assert!("10.0.0.0/33".parse::<TrustedProxies>().is_err());
    }
}
