//! The caller's bearer token, as `Authorization: Bearer` carries it: the operator's token that
//! admits a request, and a secret that nothing the service sends on may hold.

use actix_web::http::header::{HeaderMap, AUTHORIZATION};

/// The token of `Authorization: Bearer <token>`, trimmed. The scheme's name is read in any case
/// (RFC 9110, 11.1: `bearer`, `BEARER`).
pub fn token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}
