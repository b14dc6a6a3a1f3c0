//! Who may use the page: it runs tools on the user's files, so a page of another site must not
//! reach it. A request whose `Host` is not this machine's loopback (or the address the page was
//! bound to) is refused, which defeats DNS rebinding (a hostile name pointed at 127.0.0.1); a
//! request that changes something (any method but GET and HEAD) must come from the page itself,
//! its `Origin` this server's, so another site's form or script cannot post a task. Neither stops
//! another program on this machine (any local user can reach a loopback port and send any
//! `Origin`), so every request of the page's API must also carry the page's token: random, made
//! at start and printed only in the page's address.

use std::net::IpAddr;

/// Why `host` (the `Host` header) is refused; `None` when it names this machine's loopback, or
/// the address `bound` (or, bound to every address, any address given as such).
pub fn refused_host(host: Option<&str>, bound: IpAddr) -> Option<String> {
    let Some(host) = host else {
        return Some("the request has no Host header".into());
    };
    let name = host_name(host);
    if name.eq_ignore_ascii_case("localhost") {
        return None;
    }
    match name.parse::<IpAddr>() {
        Ok(ip) if ip.is_loopback() || ip == bound || bound.is_unspecified() => None,
        _ => Some(format!(
            "this page is served to the loopback address only, not to the host {:?} (a name pointed at this machine by another site is refused)",
            host.chars().take(100).collect::<String>()
        )),
    }
}

/// Why a request that changes something is refused: its `Origin` is missing or another site's.
/// `host` has passed [`refused_host`].
pub fn refused_origin(origin: Option<&str>, host: &str) -> Option<String> {
    match origin {
        Some(origin) if origin.eq_ignore_ascii_case(&format!("http://{host}")) => None,
        Some(origin) => Some(format!(
            "a request from another origin ({:?}) is refused: only this page may run tasks",
            origin.chars().take(100).collect::<String>()
        )),
        None => Some(
            "a request without an Origin header is refused: only this page may run tasks".into(),
        ),
    }
}

/// The header the page sends its token in.
pub const TOKEN_HEADER: &str = "x-reactstep-token";

/// A new token for the page: 128 bits from the system's random source, as 32 hex digits.
pub fn new_token() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| format!("no random token for the page: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Why a request of the page's API is refused: it does not carry the page's `token`. Compared
/// in a time that does not depend on where the two differ.
pub fn refused_token(sent: Option<&[u8]>, token: &str) -> Option<String> {
    let token = token.as_bytes();
    let same = |sent: &[u8]| {
        sent.len() == token.len() && sent.iter().zip(token).fold(0, |d, (a, b)| d | (a ^ b)) == 0
    };
    match sent {
        Some(sent) if same(sent) => None,
        _ => Some(
            "the request does not carry the page's token: open the address reactstep ui printed (it ends in ?token=…)".into(),
        ),
    }
}

/// The name or address of a `Host` header, without its port (an IPv6 address in brackets, and
/// nothing after them but a port: `[::1].evil.example` is no loopback name).
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        let port = |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit());
        return match rest.split_once(']') {
            Some((address, "")) => address,
            Some((address, after)) if after.strip_prefix(':').is_some_and(port) => address,
            _ => host,
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOOPBACK: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn loopback_hosts_pass_and_others_are_refused() {
        for host in [
            "127.0.0.1:8765",
            "localhost:1",
            "LOCALHOST",
            "[::1]:80",
            "127.0.0.2",
        ] {
            assert_eq!(refused_host(Some(host), LOOPBACK), None, "{host}");
        }
        for host in [
            "evil.example:8765",
            "10.0.0.1:80",
            "localhost.evil.example",
            "[::2]:1",
            "[::1].evil.example",
            "[::1]evil.example:80",
            "[::1]@evil.example:80",
            "[::1]:",
            "[::1",
        ] {
            assert!(refused_host(Some(host), LOOPBACK).is_some(), "{host}");
        }
        assert!(refused_host(None, LOOPBACK).is_some());
        let bound: IpAddr = [192, 168, 1, 5].into();
        assert_eq!(refused_host(Some("192.168.1.5:80"), bound), None);
        let everywhere: IpAddr = [0, 0, 0, 0].into();
        assert_eq!(refused_host(Some("10.1.2.3:80"), everywhere), None);
        assert!(refused_host(Some("evil.example"), everywhere).is_some());
    }

    #[test]
    fn only_the_pages_own_origin_may_post() {
        assert_eq!(
            refused_origin(Some("http://127.0.0.1:5"), "127.0.0.1:5"),
            None
        );
        assert!(refused_origin(Some("http://127.0.0.1:6"), "127.0.0.1:5").is_some());
        assert!(refused_origin(Some("https://evil.example"), "127.0.0.1:5").is_some());
        assert!(refused_origin(Some("null"), "127.0.0.1:5").is_some());
        assert!(refused_origin(None, "127.0.0.1:5").is_some());
    }

    #[test]
    fn only_the_pages_own_token_passes() {
        let token = new_token().unwrap_or_default();
        assert_eq!(token.len(), 32);
        assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(new_token().unwrap_or_default(), token, "a token per start");
        assert_eq!(refused_token(Some(token.as_bytes()), &token), None);
        let mut other = token.clone().into_bytes();
        other[31] = if other[31] == b'0' { b'1' } else { b'0' };
        let longer = format!("{token}0");
        for sent in [
            Some(other.as_slice()),
            Some(&token.as_bytes()[..31]),
            Some(longer.as_bytes()),
            Some(b"".as_slice()),
            None,
        ] {
            assert!(refused_token(sent, &token).is_some(), "{sent:?}");
        }
    }
}
