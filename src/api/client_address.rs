//! The client's address, for the per-client rate limit. Behind a load balancer every request
//! comes from the balancer, so the address the limit counts is the one it passes on in
//! `X-Forwarded-For` — believed only when the operator named the balancer in
//! `REACTSTEP_TRUSTED_PROXIES`, since any client can write that header.
//!
//! Entries are read as proxies write them: `1.2.3.4`, `1.2.3.4:5678`, `2001:db8::1`,
//! `[2001:db8::1]` and `[2001:db8::1]:443` are addresses. Anything else (`unknown`, an
//! obfuscated `_hidden` name, garbage) that a trusted hop passed on names the client without an
//! address: it becomes that client's own key, never the proxy's, so that such clients do not
//! all share the proxy's bucket. Only the right-most entry not written by a trusted hop counts:
//! what a client writes itself lies further left and is never read.

use std::net::IpAddr;

use actix_web::HttpRequest;
use ipnet::IpNet;

/// The longest name kept from an entry that is not an address: a proxy's obfuscated names are
/// short, and a longer entry costs the bucket map no more than this.
const MAX_NAME_BYTES: usize = 64;

/// Whom a request counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Client {
    /// An address; an IPv4-mapped IPv6 address (`::ffff:1.2.3.4`) is its IPv4 address.
    Addr(IpAddr),
    /// What a trusted proxy wrote for a client it gave no address (`unknown`, `_hidden`): its
    /// first [`MAX_NAME_BYTES`] bytes, bytes other than printable ASCII as `?`.
    Named(Box<str>),
}

/// The proxies whose `X-Forwarded-For` is believed: addresses or ranges (`10.0.0.0/8`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    pub fn new(networks: Vec<IpNet>) -> Self {
        Self(networks)
    }

    fn trust(&self, client: &Client) -> bool {
        match client {
            Client::Addr(ip) => self.0.iter().any(|net| net.contains(ip)),
            Client::Named(_) => false,
        }
    }

    /// The peer; when the peer is a trusted proxy, the nearest entry in `X-Forwarded-For` (read
    /// from the right, as each proxy appends) that is not one. The walk ends at the first entry
    /// that is not a trusted proxy's address: what lies beyond it cannot be believed.
    pub fn client_of(&self, req: &HttpRequest) -> Option<Client> {
        let peer = Client::Addr(req.peer_addr()?.ip().to_canonical());
        if self.0.is_empty() || !self.trust(&peer) {
            return Some(peer);
        }
        let values: Vec<&[u8]> = req
            .headers()
            .get_all("x-forwarded-for")
            .map(|v| v.as_bytes())
            .collect();
        let mut client = peer;
        // An empty entry (`a, , b`, a trailing comma) names no one: it is skipped, so that
        // clients a proxy listed that way do not all share one bucket.
        // A header of nothing but empty entries still names a client: one nobody named, not
        // the proxy.
        let entries = values.iter().rev().flat_map(|v| v.rsplit(|&b| b == b','));
        let mut named = entries
            .filter(|raw| !raw.trim_ascii().is_empty())
            .peekable();
        if !values.is_empty() && named.peek().is_none() {
            return Some(entry(b""));
        }
        for raw in named {
            client = entry(raw);
            if !self.trust(&client) {
                break;
            }
        }
        Some(client)
    }
}

/// One entry, as an address when it is one in any of the forms proxies write.
fn entry(raw: &[u8]) -> Client {
    let raw = raw.trim_ascii();
    match std::str::from_utf8(raw).ok().and_then(address) {
        Some(ip) => Client::Addr(ip.to_canonical()),
        None => Client::Named(name(raw)),
    }
}

/// `1.2.3.4`, `1.2.3.4:port`, `2001:db8::1`, `[2001:db8::1]` or `[2001:db8::1]:port`.
fn address(text: &str) -> Option<IpAddr> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = text.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        if !after.is_empty() && !after.strip_prefix(':').is_some_and(is_port) {
            return None;
        }
        return v6.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6);
    }
    let (v4, port) = text.split_once(':')?;
    is_port(port)
        .then(|| v4.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4))
        .flatten()
}

/// Digits that fit a port, or an obfuscated port as RFC 7239 writes one (`_abc`).
fn is_port(text: &str) -> bool {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let obfuscated = text.strip_prefix('_').is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    });
    (digits && text.parse::<u16>().is_ok()) || obfuscated
}

fn name(raw: &[u8]) -> Box<str> {
    raw.iter()
        .take(MAX_NAME_BYTES)
        .map(|&b| {
            if b.is_ascii_graphic() {
                char::from(b)
            } else {
                '?'
            }
        })
        .collect()
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    fn client(trusted: &str, peer: &str, forwarded: &[&str]) -> Client {
        let peer = std::net::SocketAddr::new(peer.parse().unwrap(), 5000);
        let mut req = TestRequest::default().peer_addr(peer);
        for value in forwarded {
            req = req.append_header(("x-forwarded-for", *value));
        }
        let networks: crate::config::Networks = trusted.parse().unwrap();
        let proxies = TrustedProxies::new(networks.0);
        proxies.client_of(&req.to_http_request()).unwrap()
    }

    fn ip(text: &str) -> Client {
        Client::Addr(text.parse().unwrap())
    }

    fn named(text: &str) -> Client {
        Client::Named(text.into())
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
        // Nor by writing a trusted hop, a name or a port to the left of the balancer's entry.
        let seen = client("10.0.0.0/8", "10.0.0.5", &["10.0.0.7, unknown, 1.2.3.4:80"]);
        assert_eq!(seen, ip("1.2.3.4"));
    }

    #[test]
    fn trusted_hops_are_skipped_and_a_name_is_the_client() {
        let chain = ["1.2.3.4, 10.0.0.7"];
        assert_eq!(client("10.0.0.0/8", "10.0.0.5", &chain), ip("1.2.3.4"));
        assert_eq!(
            client("10.0.0.0/8", "10.0.0.5", &["1.2.3.4, unknown, 10.0.0.7"]),
            named("unknown"),
            "what lies beyond a name is not believed"
        );
        assert_eq!(client("10.0.0.5", "10.0.0.5", &[]), ip("10.0.0.5"));
        assert_eq!(client("::1", "::1", &["2001:db8::1"]), ip("2001:db8::1"));
    }

    #[test]
    fn ports_and_brackets_are_read_as_proxies_write_them() {
        for (entry, seen) in [
            ("1.2.3.4:5678", ip("1.2.3.4")),
            ("[2001:db8::1]:443", ip("2001:db8::1")),
            ("[2001:db8::1]", ip("2001:db8::1")),
            ("2001:db8::1", ip("2001:db8::1")),
            ("  1.2.3.4:_obf  ", ip("1.2.3.4")),
            ("::ffff:1.2.3.4", ip("1.2.3.4")),
            ("[::ffff:1.2.3.4]:80", ip("1.2.3.4")),
            ("unknown", named("unknown")),
            ("_hidden", named("_hidden")),
            ("1.2.3.4:", named("1.2.3.4:")),
            ("1.2.3.4:99999", named("1.2.3.4:99999")),
            ("1.2.3.4:+80", named("1.2.3.4:+80")),
            ("[2001:db8::1]x", named("[2001:db8::1]x")),
            ("[1.2.3.4]:80", named("[1.2.3.4]:80")),
            ("", named("")),
        ] {
            assert_eq!(client("10.0.0.5", "10.0.0.5", &[entry]), seen, "{entry:?}");
        }
    }

    #[test]
    fn a_mapped_peer_is_trusted_by_its_ipv4_range() {
        assert_eq!(
            client("10.0.0.0/8", "::ffff:10.0.0.5", &["1.2.3.4"]),
            ip("1.2.3.4")
        );
        assert_eq!(client("", "::ffff:10.0.0.5", &[]), ip("10.0.0.5"));
    }

    #[test]
    fn hostile_names_are_bounded_and_long_chains_walked() {
        let long = "x".repeat(100_000);
        let Client::Named(kept) = client("10.0.0.5", "10.0.0.5", &[&long]) else {
            panic!("a name")
        };
        assert_eq!(kept.len(), MAX_NAME_BYTES);
        let odd = client("10.0.0.5", "10.0.0.5", &["a\u{e9}\tb"]);
        assert_eq!(odd, named("a???b"));
        let hops = vec!["10.0.0.9"; 5_000].join(",");
        let chain = format!("7.7.7.7, {hops}");
        assert_eq!(client("10.0.0.0/8", "10.0.0.5", &[&chain]), ip("7.7.7.7"));
    }

    #[test]
    fn an_empty_entry_is_skipped_not_taken_for_a_client() {
        let addr = |ip: &str| Client::Addr(ip.parse().unwrap());
        assert_eq!(
            client("10.0.0.0/8", "10.0.0.5", &["3.3.3.1,"]),
            addr("3.3.3.1")
        );
        assert_eq!(
            client("10.0.0.0/8", "10.0.0.5", &["3.3.3.2, ,10.0.0.7"]),
            addr("3.3.3.2")
        );
    }
}
