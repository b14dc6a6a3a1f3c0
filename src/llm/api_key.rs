//! The user's own LLM key. It is used for one upstream call and nothing else: Debug and Display
//! print a mask, it cannot be serialised, and only the header call site exposes it.

use std::fmt;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer};

pub struct ApiKey(SecretString);

impl ApiKey {
    /// Keys are printable ASCII without spaces (every provider's keys are); anything else would
    /// be an invalid HTTP header value or a pasted mistake.
    pub fn parse(raw: String) -> Result<Self, &'static str> {
        if raw.is_empty() {
            return Err("must not be empty");
        }
        if raw.len() > 4096 {
            return Err("must be at most 4096 characters");
        }
        if !raw.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("must be printable ASCII without spaces or control characters");
        }
        Ok(Self(SecretString::from(raw)))
    }

    /// The only way to read the key: at the call site that puts it into a header.
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }

    /// Removes the key from text that came from elsewhere (an upstream error message): every
    /// piece of it of 8 or more characters, also split by spaces, dots, newlines or JSON
    /// punctuation (see [`crate::scrub::secret_fragments`]). Run it on the whole text, before any
    /// cut: a cut through the key would leave a piece too short to be found whole.
    pub fn redact_from(&self, text: &str) -> String {
        crate::scrub::secret_fragments(self.expose(), text)
    }

    /// As [`ApiKey::redact_from`], for a short text every step of a loop repeats (the session
    /// id): remembered per thread (see [`crate::scrub::secret_fragments_remembered`]).
    pub fn redact_from_repeated(&self, text: &str) -> String {
        crate::scrub::secret_fragments_remembered(self.expose(), text)
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([REDACTED])")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

/// Text fit to show or log (a model name, an upstream's message, a field error): without the
/// request's key in any piece of 8 or more characters, then without anything else shaped like a
/// key. The key goes first: only whole text shows its pieces.
pub fn redact_secrets(text: &str, key: Option<&ApiKey>) -> String {
    match key {
        Some(key) => redact_key_shapes(&key.redact_from(text)),
        None => redact_key_shapes(text),
    }
}

/// Replaces anything shaped like a secret in text from elsewhere: tokens with a key prefix
/// (`sk-`, `sk-ant-`, `AIza`, `ghp_` …) and long runs mixing letters and digits. An upstream may
/// echo another key, or a proxy a bearer token; none of it should reach a client or a log.
pub fn redact_key_shapes(text: &str) -> String {
    let is_token_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(is_token_char) {
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let end = rest.find(|c: char| !is_token_char(c)).unwrap_or(rest.len());
        let token = &rest[..end];
        out.push_str(if looks_like_key(token) {
            "[REDACTED]"
        } else {
            token
        });
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

fn looks_like_key(token: &str) -> bool {
    const PREFIXES: [&str; 8] = ["sk-", "sk_", "pk-", "rk-", "AIza", "ghp_", "xoxb-", "xoxp-"];
    let prefixed = token.len() >= 20 && PREFIXES.iter().any(|p| token.starts_with(p));
    let long_mixed = token.len() >= 32
        && token.bytes().any(|b| b.is_ascii_digit())
        && token.bytes().any(|b| b.is_ascii_alphabetic());
    prefixed || long_mixed
}

/// Deserialises from a JSON string without checking it: the API layer validates it with
/// [`ApiKey::parse`] so that a bad key is reported with its field name like any other field.
pub struct RawApiKey(pub String);

impl fmt::Debug for RawApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RawApiKey([REDACTED])")
    }
}

impl<'de> Deserialize<'de> for RawApiKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(RawApiKey)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_never_show_the_key() {
        let Ok(key) = ApiKey::parse("sk-secret-123".into()) else {
            panic!("valid key")
        };
        assert!(!format!("{key:?}").contains("secret"));
        assert!(!format!("{key}").contains("secret"));
        let raw = RawApiKey("sk-secret-123".into());
        assert!(!format!("{raw:?}").contains("secret"));
    }

    #[test]
    fn keys_with_spaces_or_newlines_are_refused() {
        assert!(ApiKey::parse("sk-a b".into()).is_err());
        assert!(ApiKey::parse("sk-a\r\nX-Evil: 1".into()).is_err());
        assert!(ApiKey::parse(String::new()).is_err());
    }

    #[test]
    fn redaction_removes_every_occurrence() {
        let Ok(key) = ApiKey::parse("sk-abc".into()) else {
            panic!("valid key")
        };
        assert_eq!(
            key.redact_from("bad key sk-abc, sk-abc"),
            "bad key [REDACTED], [REDACTED]"
        );
    }

    #[test]
    fn anything_shaped_like_a_key_is_redacted() {
        let text = "Incorrect API key provided: sk-proj-AbCdEf0123456789AbCdEf. Also sk-ant-api03-xyz0123456789abcdefghij, token 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08; model claude-sonnet-4-5-20250929, limit 40000 tokens.";
        let clean = redact_key_shapes(text);
        assert_eq!(
            clean,
            "Incorrect API key provided: [REDACTED]. Also [REDACTED], token [REDACTED]; model claude-sonnet-4-5-20250929, limit 40000 tokens."
        );
    }
}
