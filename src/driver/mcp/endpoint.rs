//! Where an MCP server is: a command line started over stdio (`--mcp`), or a URL reached over
//! streamable HTTP (`--mcp-url`) with the headers and bearer token it needs. What is shown of an
//! endpoint (in messages, on stderr) never holds its token, headers or a password in its URL.

use std::collections::HashMap;
use std::fmt;

use reqwest::header::{HeaderName, HeaderValue};
use reqwest::Url;

use super::environment::ServerEnvironment;

pub enum Endpoint {
    Command {
        line: String,
        env: ServerEnvironment,
    },
    Url {
        url: Url,
        headers: HashMap<HeaderName, HeaderValue>,
        /// Sent as `Authorization: Bearer …`.
        token: Option<String>,
    },
}

impl Endpoint {
    /// An HTTP endpoint: `url` (http or https), `headers` each as `Name: value`.
    pub fn url(url: &str, headers: &[String], token: Option<String>) -> Result<Self, String> {
        // The URL is not repeated: it may hold a password or a token.
        let parsed = Url::parse(url).map_err(|e| format!("an --mcp-url cannot be read: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(format!(
                "the MCP URL {} is not an http or https URL",
                shown(&parsed)
            ));
        }
        let headers = headers
            .iter()
            .map(|h| header(h))
            .collect::<Result<HashMap<_, _>, _>>()?;
        Ok(Self::Url {
            url: parsed,
            headers,
            token,
        })
    }

    /// What must never be printed nor sent on: the token, every header's value, the URL's
    /// password and its query's values (of four bytes or more, so no common word is taken out).
    /// A stdio server's: the values given to it on the command line under a secret's name.
    pub fn secrets(&self) -> Vec<String> {
        let (url, headers, token) = match self {
            Self::Command { env, .. } => return env.given_secrets.clone(),
            Self::Url {
                url,
                headers,
                token,
            } => (url, headers, token),
        };
        let values = headers
            .values()
            .filter_map(|v| v.to_str().ok())
            .map(String::from);
        let query = url.query_pairs().map(|(_, v)| v.into_owned());
        token
            .iter()
            .cloned()
            .chain(values)
            .chain(password_forms(url))
            .chain(query)
            .filter(|secret| secret.len() >= 4)
            .collect()
    }

    /// A name for a server that gives none: its program's, or its host's.
    pub fn fallback_name(&self) -> String {
        match self {
            Self::Command { line, .. } => {
                let program = shlex::split(line)
                    .and_then(|words| words.into_iter().next())
                    .unwrap_or_default();
                program.rsplit('/').next().unwrap_or_default().to_string()
            }
            Self::Url { url, .. } => url.host_str().unwrap_or_default().to_string(),
        }
    }
}

/// The URL's password as written (percent-encoded), as meant, and inside the `Basic`
/// credential the HTTP client sends for the URL's user and password, which a server may echo.
fn password_forms(url: &Url) -> Vec<String> {
    use base64::Engine;
    let Some(written) = url.password() else {
        return Vec::new();
    };
    let decode = |text: &str| {
        percent_encoding::percent_decode_str(text)
            .decode_utf8_lossy()
            .into_owned()
    };
    let password = decode(written);
    let credential = format!("{}:{password}", decode(url.username()));
    let basic = base64::engine::general_purpose::STANDARD.encode(credential);
    let mut forms = vec![written.to_string(), password, basic];
    forms.dedup();
    forms
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Command { line, .. } => write!(f, "`{line}`"),
            Self::Url { url, .. } => f.write_str(&shown(url)),
        }
    }
}

/// A URL without its user name, password, query and fragment.
fn shown(url: &Url) -> String {
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_query(None);
    url.set_fragment(None);
    url.to_string()
}

/// `text` with every one of `secrets` taken out, as the service takes a key out of what it
/// shows: pieces of it too, however split, cased or encoded (`scrub.rs`).
pub fn redacted(text: &str, secrets: &[String]) -> String {
    secrets.iter().fold(text.to_string(), |text, secret| {
        crate::scrub::secret_fragments(secret, &text)
    })
}

/// `Name: value` as a header; the value never appears in the error.
fn header(text: &str) -> Result<(HeaderName, HeaderValue), String> {
    // Nothing of the text is repeated: without its colon, all of it may be the value.
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| "an --mcp-header must be `Name: value`; one has no colon".to_string())?;
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| format!("{:?} is not a header name", name.trim()))?;
    let value = HeaderValue::from_str(value.trim())
        .map_err(|_| format!("the value of the MCP header {name} is not a header value"))?;
    Ok((name, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_and_its_headers_are_read_and_shown_without_secrets() {
        let headers = ["X-Team: blue".to_string()];
        let endpoint = Endpoint::url(
            "https://me:pw@mcp.example/mcp",
            &headers,
            Some("tok".into()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(endpoint.to_string(), "https://mcp.example/mcp");
        assert_eq!(endpoint.fallback_name(), "mcp.example");
        let Endpoint::Url { headers, .. } = endpoint else {
            panic!("a URL")
        };
        let team = headers.get(&HeaderName::from_static("x-team"));
        assert_eq!(team.map(|v| v.as_bytes()), Some(&b"blue"[..]));
    }

    #[test]
    fn secrets_are_the_token_header_values_password_and_query_values() {
        let headers = ["X-Key: key-value-1".to_string(), "X-Short: ab".to_string()];
        let url = "https://u:pass-word@h.example/mcp?token=query-secret#frag";
        let endpoint = Endpoint::url(url, &headers, Some("the-token".into()))
            .unwrap_or_else(|e| panic!("{e}"));
        let mut secrets = endpoint.secrets();
        secrets.sort();
        // base64 of "u:pass-word", the Basic credential.
        assert_eq!(
            secrets,
            [
                "dTpwYXNzLXdvcmQ=",
                "key-value-1",
                "pass-word",
                "query-secret",
                "the-token"
            ]
        );
        assert_eq!(endpoint.to_string(), "https://h.example/mcp");
        let said = "401: Bearer the-token, X-Key key-value-1, ab";
        assert_eq!(
            redacted(said, &secrets),
            "401: Bearer [REDACTED], X-Key [REDACTED], ab"
        );
    }

    #[test]
    fn a_password_is_a_secret_as_meant_and_inside_the_basic_credential() {
        let url = "http://user:p%40ss%3Aw0rd%2FX@127.0.0.1:1/mcp";
        let endpoint = Endpoint::url(url, &[], None).unwrap_or_else(|e| panic!("{e}"));
        let secrets = endpoint.secrets();
        assert!(secrets.iter().any(|s| s == "p@ss:w0rd/X"), "{secrets:?}");
        assert!(secrets.iter().any(|s| s == "p%40ss%3Aw0rd%2FX"));
        // base64 of "user:p@ss:w0rd/X", as reqwest sends it.
        assert!(
            secrets.iter().any(|s| s == "dXNlcjpwQHNzOncwcmQvWA=="),
            "{secrets:?}"
        );
    }

    #[test]
    fn bad_urls_and_headers_are_refused_without_echoing_a_value() {
        let Err(why) = Endpoint::url("http://u:SECRETPW@[::1", &[], None) else {
            panic!("not a URL");
        };
        assert!(!why.contains("SECRETPW"), "{why}");
        let header = ["X-Api-Key=sk-live-SECRET".to_string()];
        let Err(why) = Endpoint::url("http://h/mcp", &header, None) else {
            panic!("a header without a colon");
        };
        assert!(!why.contains("SECRET"), "{why}");
        assert!(Endpoint::url("ftp://host/x", &[], None).is_err());
        assert!(Endpoint::url("not a url", &[], None).is_err());
        let Err(why) = Endpoint::url("http://h/mcp", &["Secret-less value".into()], None) else {
            panic!("a header without a colon");
        };
        assert!(why.contains("Name: value"), "{why}");
        let Err(why) = Endpoint::url("http://h/mcp", &["X-Key: sec\u{7f}ret".into()], None) else {
            panic!("a value with a control character");
        };
        assert!(!why.contains("sec"), "{why}");
        assert_eq!(
            Endpoint::Command {
                line: "node /srv/server.js .".into(),
                env: ServerEnvironment::default(),
            }
            .fallback_name(),
            "node"
        );
    }
}
