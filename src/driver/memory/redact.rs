//! What is saved is never a secret: the model's key, a provider's key, an MCP server's token or
//! header values. Every text of a run is scrubbed before it is written (`crate::scrub`: pieces
//! of a secret too, however split, cased or encoded), the JSON's keys and strings one by one so
//! that what is left is still JSON.

use serde_json::{Map, Value};

/// A secret found only by its variable's name is taken out from this length up: a short value
/// (`1`, `true`) would take out common words.
const SHORTEST_FOUND: usize = 8;
/// A secret named by the caller is taken out from this length up, as MCP secrets are.
const SHORTEST_NAMED: usize = 4;

/// The secrets the process knows of: `named` (the model's key, MCP tokens and header values),
/// and the values of the environment's `*_API_KEY`, `*_TOKEN`, `*_SECRET` and `*_PASSWORD`
/// variables. Longest first, so a secret holding another is taken out whole.
pub fn secrets(named: impl IntoIterator<Item = String>) -> Vec<String> {
    let found = std::env::vars_os().filter_map(|(name, value)| {
        let name = name.to_str()?.to_ascii_uppercase();
        let secret = ["_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD"]
            .iter()
            .any(|end| name.ends_with(end));
        let value = value.into_string().ok()?;
        (secret && value.len() >= SHORTEST_FOUND).then_some(value)
    });
    let mut all: Vec<String> = named
        .into_iter()
        .filter(|s| s.len() >= SHORTEST_NAMED)
        .chain(found)
        .collect();
    all.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    all.dedup();
    all
}

/// `text` with every piece of every secret taken out.
pub fn scrubbed_text(text: &str, secrets: &[String]) -> String {
    secrets.iter().fold(text.to_string(), |text, secret| {
        crate::scrub::secret_fragments(secret, &text)
    })
}

/// `value` with every piece of every secret taken out of its strings and keys.
pub fn scrubbed(value: Value, secrets: &[String]) -> Value {
    if secrets.is_empty() {
        return value;
    }
    match value {
        Value::String(text) => Value::String(scrubbed_text(&text, secrets)),
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|v| scrubbed(v, secrets)).collect())
        }
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(k, v)| (scrubbed_text(&k, secrets), scrubbed(v, secrets)))
                .collect::<Map<String, Value>>(),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_key_is_taken_out_of_every_string_and_key_and_the_json_stays_json() {
        let key = "sk-proj-Zq8vT3xWm9Lk2Rb7Yp4N".to_string();
        let report = json!({
            "steps": [{"observation": format!("OPENAI_API_KEY=\"{key}\"\n"), "args": {key.clone(): 1}}],
            "answer": format!("the key is {}", key.to_uppercase()),
            "n": 3
        });
        let clean = scrubbed(report, std::slice::from_ref(&key));
        let text = clean.to_string();
        assert!(
            !text.to_lowercase().contains(&key.to_lowercase()[3..]),
            "{text}"
        );
        assert!(text.contains(crate::scrub::MARK), "{text}");
        assert_eq!(clean["n"], 3);
    }

    #[test]
    fn short_named_secrets_are_kept_out_but_nothing_shorter_than_four() {
        let all = secrets([
            "abc".to_string(),
            "abcd".to_string(),
            "abcdefgh".to_string(),
        ]);
        let at = |s: &str| all.iter().position(|x| x == s);
        assert!(
            at("abcdefgh") < at("abcd") && at("abcd").is_some(),
            "{all:?}"
        );
        assert_eq!(at("abc"), None);
    }
}
