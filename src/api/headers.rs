//! Request headers kept at the size they need. actix-http parses every request into a header map
//! made with room for 16 headers (6.7 KiB); a step holds its request for as long as the model
//! takes to answer, so with thousands of steps waiting that room is tens of MiB. Rebuilding the
//! map to fit what was sent (a few headers, under 2 KiB) frees it before the step starts.

use actix_web::http::header::HeaderMap;

/// The same headers, in a map no larger than they need.
pub fn fit(headers: &mut HeaderMap) {
    let sent = std::mem::take(headers);
    let mut fitted = HeaderMap::with_capacity(sent.len_keys());
    for (name, value) in sent {
        fitted.append(name, value);
    }
    *headers = fitted;
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    fn header(name: &'static str, value: &'static str) -> (HeaderName, HeaderValue) {
        (
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        )
    }

    #[test]
    fn every_value_survives_in_order() {
        let mut headers = HeaderMap::with_capacity(16);
        for (name, value) in [
            header("content-type", "application/json"),
            header("x-forwarded-for", "10.0.0.1"),
            header("x-forwarded-for", "10.0.0.2"),
            header("authorization", "Bearer t"),
        ] {
            headers.append(name, value);
        }
        fit(&mut headers);
        assert_eq!(headers.len(), 4);
        assert_eq!(headers.len_keys(), 3);
        let forwarded: Vec<_> = headers.get_all("x-forwarded-for").collect();
        assert_eq!(forwarded, ["10.0.0.1", "10.0.0.2"]);
        assert_eq!(
            headers.get("authorization").map(|v| v.as_bytes()),
            Some(&b"Bearer t"[..])
        );
    }

    #[test]
    fn the_map_shrinks_to_what_was_sent() {
        let mut headers = HeaderMap::with_capacity(16);
        headers.append(
            HeaderName::from_static("host"),
            HeaderValue::from_static("localhost"),
        );
        let before = headers.capacity();
        fit(&mut headers);
        assert!(
            headers.capacity() < before,
            "{} is not below {before}",
            headers.capacity()
        );
        assert_eq!(
            headers.get("host").map(|v| v.as_bytes()),
            Some(&b"localhost"[..])
        );
    }
}
