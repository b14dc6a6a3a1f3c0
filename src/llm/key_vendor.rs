//! The vendor a key's own prefix names, and where such a key may go. Most vendors' keys say
//! whose they are (`sk-ant-`, `sk-or-`, `gsk_` …: each provider's `key_prefixes`); such a key sent to another vendor is a
//! mistake at best (a wrong provider, a model name inferred wrongly) and hands the user's secret
//! to a third party at worst, so the step is refused before any call.
//!
//! Only certain mismatches are refused: plain `sk-` is claimed by nobody (DeepSeek, Moonshot,
//! LiteLLM and many servers use it), a generic destination (Ollama, an OpenAI-compatible server)
//! may be a proxy that takes any key, and a request's own base URL is judged by its host.

use super::{ApiKey, Provider};

/// What OpenAI's legacy user keys hold after `sk-` and 20 characters: "OpenAI" in base64.
/// Other vendors' `sk-` + 48 keys (Moonshot's) lack it.
const OPENAI_LEGACY_MARK: &str = "T3BlbkFJ";

/// Destinations that may be anyone's server: a key of any vendor can be right there.
const GENERIC: &[&str] = &["ollama", "openai_compatible"];

impl ApiKey {
    /// The provider whose key this is, when its prefix says so (`sk-ant-`, `sk-or-` …).
    pub fn vendor(&self) -> Option<Provider> {
        vendor_of(self.expose())
    }
}

/// The provider whose key this is, when its shape says so.
pub fn vendor_of(key: &str) -> Option<Provider> {
    let by_prefix = Provider::all().find(|p| {
        let prefixes = p.facts().key_prefixes;
        prefixes.iter().any(|prefix| key.starts_with(prefix))
    });
    let legacy_openai = key.len() == 51
        && key.starts_with("sk-")
        && key.bytes().skip(3).all(|b| b.is_ascii_alphanumeric())
        && key.get(23..31) == Some(OPENAI_LEGACY_MARK);
    by_prefix.or(legacy_openai.then_some(Provider::OPENAI))
}

/// The vendor a call reaches: with a base URL of the request's own, the vendor whose API lives
/// at that host (none for any other host); otherwise the provider, unless it is generic.
/// The operator's base URL for a provider counts as that provider's.
fn destination(provider: Provider, base_url: Option<&str>) -> Option<Provider> {
    match base_url {
        Some(url) => {
            let host = host(url)?;
            Provider::all()
                .filter(|p| !GENERIC.contains(&p.name()))
                .find(|p| host_of_default(*p).is_some_and(|h| h == host))
        }
        None => (!GENERIC.contains(&provider.name())).then_some(provider),
    }
}

/// The host, as DNS compares it: in lower case, and without the root's trailing dot
/// (`api.openai.com.` is `api.openai.com`).
fn host(url: &str) -> Option<String> {
    let url = reqwest::Url::parse(url).ok()?;
    let host = url.host_str()?;
    Some(host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase())
}

fn host_of_default(provider: Provider) -> Option<String> {
    host(provider.facts().default_base_url)
}

/// Where a key of `owner` would go against its shape: the destination, when it is certainly
/// another vendor.
pub fn mismatch(owner: Provider, provider: Provider, base_url: Option<&str>) -> Option<Provider> {
    destination(provider, base_url).filter(|goes_to| *goes_to != owner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &str) -> Provider {
        Provider::named(name).unwrap_or_else(|| panic!("{name}"))
    }

    fn owner(key: &str) -> Option<&'static str> {
        vendor_of(key).map(Provider::name)
    }

    #[test]
    fn prefixes_name_their_vendor_and_plain_sk_names_none() {
        assert_eq!(owner("sk-ant-api03-abc"), Some("anthropic"));
        assert_eq!(owner("sk-or-v1-abc"), Some("openrouter"));
        assert_eq!(owner("sk-proj-abc"), Some("openai"));
        assert_eq!(owner("sk-svcacct-abc"), Some("openai"));
        assert_eq!(owner("sk-admin-abc"), Some("openai"));
        assert_eq!(owner("gsk_abc"), Some("groq"));
        assert_eq!(owner("xai-abc"), Some("xai"));
        assert_eq!(owner("AIzaSyabc"), Some("gemini"));
        // DeepSeek's keys (sk- and 32 hex), Moonshot's (sk- and 48 alphanumerics), anyone's.
        assert_eq!(owner("sk-0123456789abcdef0123456789abcdef"), None);
        assert_eq!(owner(&format!("sk-{}", "a1B2".repeat(12))), None);
        assert_eq!(owner("sk-test-SECRET-key-0123456789"), None);
        assert_eq!(owner("SK-ANT-abc"), None, "prefixes are exact");
        let legacy = format!(
            "sk-{}{OPENAI_LEGACY_MARK}{}",
            "a".repeat(20),
            "b".repeat(20)
        );
        assert_eq!(owner(&legacy), Some("openai"));
        assert_eq!(owner(&format!("{legacy}x")), None, "not the legacy length");
    }

    #[test]
    fn only_certain_mismatches_are_refused() {
        let refused = |key: &str, provider: &str, url: Option<&str>| {
            let owner = vendor_of(key)?;
            mismatch(owner, named(provider), url).map(|d| (owner.name(), d.name()))
        };
        assert_eq!(
            refused("sk-or-v1-x", "openai", None),
            Some(("openrouter", "openai"))
        );
        assert_eq!(
            refused("sk-proj-x", "anthropic", None),
            Some(("openai", "anthropic"))
        );
        assert_eq!(refused("sk-proj-x", "openai", None), None);
        assert_eq!(refused("sk-ant-x", "anthropic", None), None);
        assert_eq!(refused("sk-deepseek-or-any", "openai", None), None);
        // Generic servers take whatever key they were set up with.
        assert_eq!(refused("sk-ant-x", "openai_compatible", None), None);
        assert_eq!(refused("sk-proj-x", "ollama", None), None);
        // A request's base URL is judged by its host: OpenRouter through the OpenAI wire is
        // fine with an OpenRouter key, not with OpenAI's; an unknown host may be a proxy.
        let router = Some("https://openrouter.ai/api/v1");
        assert_eq!(refused("sk-or-v1-x", "openai", router), None);
        assert_eq!(
            refused("sk-proj-x", "openai_compatible", router),
            Some(("openai", "openrouter"))
        );
        let proxy = Some("https://llm-proxy.example.com/v1");
        assert_eq!(refused("sk-ant-x", "openai", proxy), None);
        assert_eq!(
            refused("sk-ant-x", "openai", Some("https://API.OpenAI.com/v1")),
            Some(("anthropic", "openai"))
        );
    }

    #[test]
    fn a_host_written_with_its_root_dot_is_the_same_host() {
        assert_eq!(
            host("https://API.openai.com./v1").as_deref(),
            Some("api.openai.com")
        );
        assert_eq!(
            host("https://api.openai.com:443/v1").as_deref(),
            Some("api.openai.com")
        );
    }
}
