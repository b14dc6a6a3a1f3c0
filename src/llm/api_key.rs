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

    /// Replaces every occurrence of the key in text that came from elsewhere (an upstream error
    /// message), so that it cannot be echoed back.
    pub fn redact_from(&self, text: &str) -> String {
        text.replace(self.expose(), "[REDACTED]")
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
}
