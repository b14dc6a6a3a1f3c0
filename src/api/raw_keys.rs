//! The keys a request body holds, read from its text as far as it can be read: a refusal quotes
//! names the client wrote (an unknown field's, in its path), and a client may have pasted its key
//! as one. The body being refused, it may not be valid JSON or UTF-8 past the keys, or may give
//! `user_api_keys` twice; every key seen before anything unreadable is found all the same.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

/// `llmKey` and every `providerKeys` value of each `user_api_keys` in `body`.
pub fn in_body(body: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(body);
    let mut keys = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_str(&text);
    // What was found before a failure is kept: the failure is why the body is refused.
    let _ = deserializer.deserialize_map(Body(&mut keys));
    keys
}

/// The top-level object: `user_api_keys` read, the rest skipped.
struct Body<'a>(&'a mut Vec<String>);

impl<'de> Visitor<'de> for Body<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a request body")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(name) = map.next_key::<Cow<'de, str>>()? {
            match name.as_ref() {
                "user_api_keys" => map.next_value_seed(Keys(&mut *self.0))?,
                _ => map.next_value::<IgnoredAny>().map(drop)?,
            }
        }
        Ok(())
    }
}

/// One `user_api_keys` object's keys, each pushed as soon as it is read.
struct Keys<'a>(&'a mut Vec<String>);

impl<'de> DeserializeSeed<'de> for Keys<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Keys<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("user_api_keys")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(name) = map.next_key::<Cow<'de, str>>()? {
            let value: Value = map.next_value()?;
            let found: Vec<&Value> = match (name.as_ref(), &value) {
                ("llmKey", key) => vec![key],
                ("providerKeys", Value::Object(keys)) => keys.values().collect(),
                _ => Vec::new(),
            };
            self.0.extend(
                found
                    .into_iter()
                    .filter_map(|k| k.as_str().map(str::to_string)),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::in_body;

    #[test]
    fn every_key_is_found_however_the_body_goes_wrong_after_it() {
        let body = br#"{"user_api_keys":{"llmKey":"first","providerKeys":{"anthropic":"second"}},"#;
        for tail in [&b"\"x\":1}"[..], b"\"zz\":\"\xff\"}", b"\"x\":[1,", b"}}}"] {
            let whole = [&body[..], tail].concat();
            assert_eq!(in_body(&whole), ["first", "second"], "{tail:?}");
        }
        let twice = br#"{"user_api_keys":{"llmKey":"a"},"q":1,"user_api_keys":{"llmKey":"b"}}"#;
        assert_eq!(in_body(twice), ["a", "b"]);
        assert!(in_body(b"[1,2]").is_empty());
        assert!(in_body(br#"{"user_api_keys":"k"}"#).is_empty());
        assert!(in_body(b"").is_empty());
    }
}
