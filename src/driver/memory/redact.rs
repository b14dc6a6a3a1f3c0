//! What is saved is never a secret: the model's key, a provider's key, an MCP server's token or
//! header values, the environment's keys and passwords (a URL's too), the store's own password.
//! Every text of a run is scrubbed before it is written (`crate::scrub`: pieces of a secret too,
//! however split, cased or encoded), the JSON's keys and strings one by one so that what is left
//! is still JSON; a session name holding one is refused.

use serde_json::{Map, Value};

/// A secret found only by its variable's name is taken out from this length up: a short value
/// (`1`, `true`) would take out common words.
const SHORTEST_FOUND: usize = 8;
/// A secret named by the caller is taken out from this length up, as MCP secrets are.
const SHORTEST_NAMED: usize = 4;

/// How the names of the environment's variables that hold a secret end: `OPENAI_API_KEY`,
/// `GITHUB_TOKEN`, `AWS_SECRET_ACCESS_KEY`, `DB_PASSWORD`, `PGPASSWORD` …
const SECRET_NAME_ENDS: [&str; 7] = [
    "_API_KEY",
    "_TOKEN",
    "_SECRET",
    "PASSWORD",
    "_SECRET_KEY",
    "_ACCESS_KEY",
    "_PRIVATE_KEY",
];

/// The secrets the process knows of: `named` (the model's key, MCP tokens and header values),
/// the values of the environment's `*_API_KEY`, `*_TOKEN`, `*_SECRET`, `*PASSWORD`,
/// `*_SECRET_KEY`, `*_ACCESS_KEY` and `*_PRIVATE_KEY` variables, and the password of any URL
/// the environment holds (`DATABASE_URL=postgres://me:PASSWORD@…`). Longest first, so a secret
/// holding another is taken out whole.
pub fn secrets(named: impl IntoIterator<Item = String>) -> Vec<String> {
    let found = std::env::vars_os().flat_map(|(name, value)| {
        let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else {
            return Vec::new();
        };
        let mut found = url_passwords(value);
        if names_a_secret(name) {
            found.push(value.to_string());
        }
        found.retain(|secret| secret.len() >= SHORTEST_FOUND);
        found
    });
    let all = named
        .into_iter()
        .filter(|s| s.len() >= SHORTEST_NAMED)
        .chain(found)
        .collect();
    longest_first(all)
}

/// Whether a variable called `name` holds a secret, by how its name ends (in any case), or by
/// being one of the endings alone (`TOKEN`, `API_KEY`).
pub fn names_a_secret(name: &str) -> bool {
    let name = name.to_ascii_uppercase();
    SECRET_NAME_ENDS
        .iter()
        .any(|end| name.ends_with(end) || name == end.trim_start_matches('_'))
}

/// `secrets` with `more` (named by the caller, as [`secrets`] takes them), longest first.
pub fn with(secrets: Vec<String>, more: impl IntoIterator<Item = String>) -> Vec<String> {
    let more = more.into_iter().filter(|s| s.len() >= SHORTEST_NAMED);
    longest_first(secrets.into_iter().chain(more).collect())
}

fn longest_first(mut all: Vec<String>) -> Vec<String> {
    all.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    all.dedup();
    all
}

/// The password of `text` when it is a URL with one (`scheme://user:PASSWORD@host/…`), as
/// written and percent-decoded.
fn url_passwords(text: &str) -> Vec<String> {
    if !text.contains("://") || !text.contains('@') {
        return Vec::new();
    }
    let Ok(url) = reqwest::Url::parse(text.trim()) else {
        return Vec::new();
    };
    let Some(written) = url.password() else {
        return Vec::new();
    };
    let decoded = percent_encoding::percent_decode_str(written)
        .decode_utf8_lossy()
        .into_owned();
    match decoded == written {
        true => vec![decoded],
        false => vec![decoded, written.to_string()],
    }
}

/// Whether `text` holds any of `secrets`, or a piece of one long enough to matter.
pub fn holds_secret(text: &str, secrets: &[String]) -> bool {
    scrubbed_text(text, secrets) != text
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
    fn a_urls_password_is_found_as_written_and_decoded() {
        assert_eq!(
            url_passwords("postgres://me:p%40ss-W0rd-Long@db.local:5432/app"),
            ["p@ss-W0rd-Long", "p%40ss-W0rd-Long"]
        );
        assert!(url_passwords("postgres://me@db.local/app").is_empty());
        assert!(url_passwords("not a url").is_empty());
    }

    #[test]
    fn a_name_holding_a_piece_of_a_secret_holds_it() {
        let secrets = vec!["sk-proj-Zq8vT3xWm9Lk2Rb7Yp4N".to_string()];
        assert!(holds_secret("proj sk-proj-Zq8vT3xWm9Lk2Rb7Yp4N", &secrets));
        assert!(holds_secret("work ZQ8VT3XWM9", &secrets));
        assert!(!holds_secret("work", &secrets));
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

    #[test]
    fn a_secrets_name_is_known_by_its_ending_or_by_the_ending_alone() {
        for name in [
            "OPENAI_API_KEY",
            "github_token",
            "DB_PASSWORD",
            "PGPASSWORD",
            "API_KEY",
            "TOKEN",
            "Secret",
            "SECRET_KEY",
            "ACCESS_KEY",
            "PRIVATE_KEY",
        ] {
            assert!(names_a_secret(name), "{name}");
        }
        for name in [
            "PATH",
            "TOKENIZER",
            "MY_TOKENS",
            "KEYBOARD",
            "SECRETARY",
            "HOME",
        ] {
            assert!(!names_a_secret(name), "{name}");
        }
    }
}
