//! Which provider a call goes to: every provider the service speaks to, listed once in
//! [`REGISTRY`], and [`Provider`], a handle on one of them that requests name and errors carry.

use std::fmt;

use super::provider::{Capabilities, Facts, ProviderApi};
use super::wire_api::WireApi;

/// A provider, by its entry in the registry: cheap to copy, compared by name.
#[derive(Clone, Copy)]
pub struct Provider(&'static dyn ProviderApi);

impl Provider {
    pub const OPENAI: Self = Self(&super::openai::OPENAI);
    pub const ANTHROPIC: Self = Self(&super::anthropic::ANTHROPIC);
    pub const OLLAMA: Self = Self(&super::ollama::OLLAMA);

    pub fn api(self) -> &'static dyn ProviderApi {
        self.0
    }

    /// Its static facts: name, default base URL, model and key prefixes, headers, capabilities.
    pub fn facts(self) -> &'static Facts {
        self.0.facts()
    }

    pub fn name(self) -> &'static str {
        self.facts().name
    }

    pub fn capabilities(self) -> Capabilities {
        self.facts().capabilities
    }

    /// Whether this provider refuses a call without a key (local servers ignore it).
    pub fn requires_key(self) -> bool {
        self.capabilities().requires_key
    }

    /// The provider named `name` in a request.
    pub fn named(name: &str) -> Option<Self> {
        all().find(|p| p.name() == name)
    }

    /// Every provider, in the order the registry lists them.
    pub fn all() -> impl Iterator<Item = Self> {
        all()
    }

    /// The provider a model name implies, when the request names none: the longest matching
    /// prefix. A guess sends the user's key to that vendor, so it is made only where the name is
    /// unmistakably the vendor's own: a name holding `:` (an Ollama tag such as
    /// `deepseek-r1:8b`; OpenAI's `ft:gpt-…` excepted) or `/` (a Hugging Face path, a router's
    /// id) is no hosted vendor's model, and a `vendor/model` id is OpenRouter's only when it is
    /// written as OpenRouter writes its ids (lower case) and the key is an OpenRouter key
    /// (`sk-or-`): Groq and other routers serve the same ids.
    pub fn infer(model: &str, key: Option<&str>) -> Option<Self> {
        let m = model.to_ascii_lowercase();
        let routed = m.contains('/');
        let router_key = |k: &str| {
            let prefixes = super::openai::presets::OPENROUTER.facts.key_prefixes;
            prefixes.iter().any(|prefix| k.starts_with(prefix))
        };
        if routed && (m != model || !key.is_some_and(router_key)) {
            return None;
        }
        all()
            .flat_map(|p| {
                p.facts()
                    .model_prefixes
                    .iter()
                    .map(move |prefix| (p, *prefix))
            })
            .filter(|(_, prefix)| m.starts_with(prefix))
            .filter(|(_, prefix)| prefix.contains('/') == routed)
            .filter(|(_, prefix)| !m.contains(':') || prefix.contains(':'))
            .max_by_key(|(_, prefix)| prefix.len())
            .map(|(p, _)| p)
    }

    /// The provider speaking `api`: itself for `chat`; its Responses API wire, where it serves
    /// one, for `responses`.
    pub fn with_api(self, api: WireApi) -> Option<Self> {
        match api {
            WireApi::Chat => Some(self),
            WireApi::Responses => super::responses::of(self.name()).map(|r| Self(r)),
        }
    }

    /// The wire format it speaks.
    pub fn wire_api(self) -> WireApi {
        self.0.wire_api()
    }

    /// Why a call to `base_url` cannot be made on this provider's wire, if it cannot.
    pub fn base_url_refusal(self, base_url: &str) -> Option<String> {
        self.0.base_url_refusal(base_url)
    }

    /// The environment variable that overrides the provider's base URL.
    pub fn base_url_variable(self) -> String {
        format!("REACTSTEP_{}_BASE_URL", self.name().to_ascii_uppercase())
    }
}

fn all() -> impl Iterator<Item = Provider> {
    REGISTRY.iter().map(|api| Provider(*api))
}

/// Every provider the service speaks to. A provider with its own wire format is a module plus
/// one line here; an OpenAI-compatible vendor is a preset (`openai/presets.rs`) plus one line.
static REGISTRY: &[&dyn ProviderApi] = &[
    &super::openai::OPENAI,
    &super::anthropic::ANTHROPIC,
    &super::ollama::OLLAMA,
    &super::openai::presets::GEMINI,
    &super::openai::presets::OPENROUTER,
    &super::openai::presets::DEEPSEEK,
    &super::openai::presets::MISTRAL,
    &super::openai::presets::GROQ,
    &super::openai::presets::XAI,
    &super::openai::presets::AZURE,
    &super::openai::presets::BEDROCK,
    &super::openai::presets::OPENAI_COMPATIBLE,
];

impl PartialEq for Provider {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Provider {}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for Provider {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Provider {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        static NAMES: std::sync::LazyLock<Vec<&'static str>> =
            std::sync::LazyLock::new(|| all().map(Provider::name).collect());
        let name = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        Self::named(&name).ok_or_else(|| serde::de::Error::unknown_variant(&name, &NAMES[..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_imply_their_provider() {
        let inferred = |m| Provider::infer(m, None).map(Provider::name);
        assert_eq!(inferred("gpt-4o-mini"), Some("openai"));
        assert_eq!(inferred("o3-mini"), Some("openai"));
        assert_eq!(inferred("chatgpt-4o-latest"), Some("openai"));
        assert_eq!(inferred("claude-sonnet-4-5"), Some("anthropic"));
        assert_eq!(inferred("gemini-2.5-flash"), Some("gemini"));
        assert_eq!(inferred("deepseek-chat"), Some("deepseek"));
        assert_eq!(inferred("codestral-latest"), Some("mistral"));
        assert_eq!(inferred("mistral-large-latest"), Some("mistral"));
        assert_eq!(inferred("grok-4"), Some("xai"));
        assert_eq!(inferred("llama3.1:8b"), None);
        assert_eq!(inferred("ft:gpt-4o-mini:acme::abc123"), Some("openai"));
        for local in [
            "deepseek-r1:8b",
            "mistral-nemo:12b",
            "deepseek-ai/DeepSeek-V3",
        ] {
            assert_eq!(inferred(local), None, "{local}");
        }
        let routed = |m, k| Provider::infer(m, Some(k)).map(Provider::name);
        assert_eq!(
            routed("anthropic/claude-sonnet-4.5", "sk-or-v1-abc"),
            Some("openrouter")
        );
        assert_eq!(routed("anthropic/claude-sonnet-4.5", "gsk_abc"), None);
        assert_eq!(
            routed("Qwen/Qwen2.5-Coder-7B-Instruct", "sk-or-v1-abc"),
            None
        );
        assert_eq!(inferred("anthropic/claude-sonnet-4.5"), None);
    }

    #[test]
    fn names_are_unique_and_read_back() {
        let names: Vec<&str> = Provider::all().map(Provider::name).collect();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        for name in names {
            let json = format!("\"{name}\"");
            let read: Provider = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(read.name(), name);
            assert_eq!(serde_json::to_string(&read).ok(), Some(json));
        }
        let unknown = serde_json::from_str::<Provider>("\"nope\"").map(|_| ());
        assert!(unknown.is_err_and(|e| e.to_string().contains("`gemini`")));
    }

    #[test]
    fn base_url_variables_follow_the_name() {
        assert_eq!(
            Provider::named("openai_compatible").map(Provider::base_url_variable),
            Some("REACTSTEP_OPENAI_COMPATIBLE_BASE_URL".into())
        );
    }
}
