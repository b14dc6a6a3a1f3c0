//! Which base URLs a request may send its LLM call to (`llm_config.base_url`): the operator's
//! list of exact URLs and host patterns such as `https://*.openai.azure.com`, for providers where
//! every user has a host of their own. A pattern's `*` is one whole DNS label; it matches only
//! https, only a host name (never an IP address), and never a URL with a user, a port, a query
//! or a fragment, or one that is not already in its plain form.

use reqwest::Url;

use crate::llm::Provider;

/// Where a request may send its LLM call, made once at start-up: the base URLs it may name, and
/// the providers it must name one for (the operator gave them none and they have no default,
/// as Azure).
#[derive(Debug, Default)]
pub struct Destinations {
    pub allowed: AllowedBaseUrls,
    pub unplaced: Vec<Provider>,
}

#[derive(Debug, Default, Clone)]
pub struct AllowedBaseUrls {
    exact: Vec<String>,
    patterns: Vec<HostPattern>,
}

/// `https://*.{suffix}{path}`.
#[derive(Debug, Clone)]
struct HostPattern {
    /// `.openai.azure.com`, lower case.
    suffix: String,
    /// When the pattern names one, the only path allowed; otherwise any.
    path: Option<String>,
}

impl AllowedBaseUrls {
    /// The operator's list; a pattern that would allow more than one label of any host is
    /// refused, so a typo cannot open the service up.
    pub fn parse(entries: &[String]) -> Result<Self, String> {
        let mut allowed = Self::default();
        for entry in entries {
            let entry = entry.trim().trim_end_matches('/');
            if entry.is_empty() {
                continue;
            }
            if entry.contains('*') {
                allowed.patterns.push(HostPattern::parse(entry)?);
            } else {
                allowed.exact.push(entry.to_string());
            }
        }
        Ok(allowed)
    }

    /// Whether a request may send its call to `url` (trimmed, without a trailing `/`).
    pub fn allows(&self, url: &str) -> bool {
        self.exact.iter().any(|a| a == url) || self.patterns.iter().any(|p| p.matches(url))
    }
}

impl HostPattern {
    fn parse(entry: &str) -> Result<Self, String> {
        let refuse = || {
            format!("REACTSTEP_ALLOWED_BASE_URLS: {entry:?} is not a host pattern of the form https://*.example.com[/path]")
        };
        let rest = entry.strip_prefix("https://*.").ok_or_else(refuse)?;
        let (host, path) = match rest.find('/') {
            Some(slash) => (&rest[..slash], Some(rest[slash..].to_string())),
            None => (rest, None),
        };
        let labels: Vec<&str> = host.split('.').collect();
        let sound = labels.len() >= 2
            && labels.iter().all(|l| is_label(l))
            && !path.as_deref().is_some_and(|p| p.contains(['*', '?', '#']));
        if !sound {
            return Err(refuse());
        }
        Ok(Self {
            suffix: format!(".{}", host.to_ascii_lowercase()),
            path,
        })
    }

    fn matches(&self, raw: &str) -> bool {
        let Ok(url) = Url::parse(raw) else {
            return false;
        };
        // Only a URL already in its plain form: no escapes, dots or case for the parser to undo.
        let plain = url.as_str().trim_end_matches('/') == raw;
        let Some(host) = url.domain() else {
            return false;
        };
        let label = host.strip_suffix(self.suffix.as_str());
        plain
            && url.scheme() == "https"
            && url.username().is_empty()
            && url.password().is_none()
            && url.port().is_none()
            && url.query().is_none()
            && url.fragment().is_none()
            && label.is_some_and(is_label)
            && self
                .path
                .as_deref()
                .is_none_or(|p| url.path().trim_end_matches('/') == p)
    }
}

/// One DNS label: letters, digits and inner hyphens.
fn is_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(entries: &[&str]) -> AllowedBaseUrls {
        let entries: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
        AllowedBaseUrls::parse(&entries).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_wildcard_is_one_whole_label_of_an_https_host() {
        let list = allowed(&["https://*.openai.azure.com", "http://127.0.0.1:8000/v1"]);
        for good in [
            "https://myres.openai.azure.com/openai/v1",
            "https://my-res-2.openai.azure.com/openai",
            "https://x.openai.azure.com",
            "http://127.0.0.1:8000/v1",
        ] {
            assert!(list.allows(good), "{good}");
        }
        for bad in [
            "https://evil.com/.openai.azure.com",
            "https://x.openai.azure.com.evil.com/openai/v1",
            "https://openai.azure.com/openai/v1",
            "https://a.b.openai.azure.com/openai/v1",
            "https://user@x.openai.azure.com/openai/v1",
            "https://user:pw@x.openai.azure.com/openai/v1",
            "https://x.openai.azure.com@evil.com/openai/v1",
            "http://x.openai.azure.com/openai/v1",
            "https://x.openai.azure.com:8443/openai/v1",
            "https://1.2.3.4/openai/v1",
            "https://[::1]/openai/v1",
            "https://x.openai.azure.com/openai/v1?x=1",
            "https://x.openai.azure.com/openai/v1#f",
            "https://X.OPENAI.AZURE.COM/openai/v1",
            "https://x%2eopenai.azure.com/openai/v1",
            "https://evil.com\\.openai.azure.com/openai/v1",
            "https://-x.openai.azure.com",
            "https://x.openai.azure.com/openai/../../v1",
            "http://127.0.0.1:8000/v1/x",
        ] {
            assert!(!list.allows(bad), "{bad}");
        }
    }

    #[test]
    fn a_pattern_with_a_path_allows_only_that_path() {
        let list = allowed(&["https://*.openai.azure.com/openai/v1"]);
        assert!(list.allows("https://r.openai.azure.com/openai/v1"));
        assert!(!list.allows("https://r.openai.azure.com/openai"));
        assert!(!list.allows("https://r.openai.azure.com/other"));
    }

    #[test]
    fn patterns_that_would_widen_more_are_refused() {
        for bad in [
            "https://*.com",
            "http://*.openai.azure.com",
            "https://*openai.azure.com",
            "https://x.*.azure.com",
            "https://*.*.azure.com",
            "https://*.openai.azure.com/*",
            "*",
        ] {
            let entries = vec![bad.to_string()];
            assert!(AllowedBaseUrls::parse(&entries).is_err(), "{bad}");
        }
    }
}
