//! The model call: `llm_config` (the token limits, the provider named or inferred, the model,
//! the temperature), `mock_response`, `user_api_keys`, and where the call goes (its base URL,
//! and whether the key may go there).

use crate::api::base_urls::Destinations;
use crate::api::request::{LlmConfigDto, ReactStepRequest, UserApiKeys};
use crate::llm::{ApiKey, Provider};

/// The provider, named or inferred from the model and the key, with the checks that need it.
pub fn model(req: &ReactStepRequest, fail: &mut impl FnMut(&str, String)) -> Option<Provider> {
    let cfg = &req.llm_config;
    if cfg.reserved_output_tokens >= cfg.token_limit {
        fail(
            "llm_config.reservedOutputTokens",
            format!(
                "must be less than tokenLimit ({}), or no token is left for the prompt",
                cfg.token_limit
            ),
        );
    }
    let provider = cfg.provider.or_else(|| {
        let key = req.user_api_keys.as_ref().and_then(|k| k.llm_key.as_ref());
        Provider::infer(&cfg.model_name, key.map(|k| k.0.as_str()))
    });
    if provider.is_none() {
        fail(
            "llm_config.provider",
            "is required: the provider cannot be inferred from modelName; set it to one of GET /api/providers (openai, anthropic, ollama …)".into(),
        );
    }
    if let Some(p) = provider {
        deployment_name(p, &cfg.model_name, "llm_config.modelName", fail);
    }
    let provider = provider.and_then(|p| wire(cfg.api, p, "llm_config.api", fail));
    if let Some(p) = provider {
        cache_ttl(cfg, p, fail);
        if let Some(why) = temperature_refused(cfg.temperature, p) {
            fail("llm_config.temperature", why);
        }
    }
    provider
}

/// Why the temperature is out of the provider's range, if it is.
pub(super) fn temperature_refused(temperature: Option<f64>, p: Provider) -> Option<String> {
    let most = p.capabilities().max_temperature.value();
    // Beyond 2 the field's own range check has said so already.
    temperature
        .filter(|t| *t > most && *t <= 2.0)
        .map(|_| format!("must be between 0 and {most} for provider {p}"))
}

/// An Azure model name is a deployment name (see [`is_deployment_name`]).
pub(super) fn deployment_name(
    p: Provider,
    model: &str,
    field: &str,
    fail: &mut impl FnMut(&str, String),
) {
    if p.name() == "azure" && !is_deployment_name(model) {
        fail(
            field,
            "is an Azure deployment name here: 1 to 64 ASCII letters, digits, '-', '_' and '.', not only dots".into(),
        );
    }
}

/// The provider speaking the API the request asked for (`field`), where it has it.
pub(super) fn wire(
    api: Option<crate::llm::WireApi>,
    p: Provider,
    field: &str,
    fail: &mut impl FnMut(&str, String),
) -> Option<Provider> {
    let api = api.unwrap_or_default();
    let speaking = p.with_api(api);
    if speaking.is_none() {
        let serving: Vec<&str> = Provider::all()
            .filter(|q| q.with_api(api).is_some())
            .map(Provider::name)
            .collect();
        fail(
            field,
            format!(
                "provider {p} does not serve the {} API here; those that do: {}",
                api.as_str(),
                if serving.is_empty() {
                    "none yet".to_string()
                } else {
                    serving.join(", ")
                }
            ),
        );
    }
    speaking
}

/// A prompt cache lifetime the provider has.
fn cache_ttl(cfg: &LlmConfigDto, p: Provider, fail: &mut impl FnMut(&str, String)) {
    let Some(ttl) = cfg.prompt_cache_ttl else {
        return;
    };
    let takes = p.api().cache_ttls();
    if !takes.contains(&ttl) {
        let values: Vec<String> = takes
            .iter()
            .map(|t| format!("\"{}\"", t.as_str()))
            .collect();
        fail(
            "llm_config.prompt_cache_ttl",
            match values.is_empty() {
                true => format!(
                    "\"{}\" is not a lifetime provider {p} has: it takes none",
                    ttl.as_str()
                ),
                false => format!(
                    "\"{}\" is not a lifetime provider {p} has: it takes {}",
                    ttl.as_str(),
                    values.join(" or ")
                ),
            },
        );
    }
}

/// The model's output given by the client: only where the operator allows it, and not empty.
pub fn mock_response(mock: Option<&str>, allowed: bool, fail: &mut impl FnMut(&str, String)) {
    if mock.is_some() && !allowed {
        fail(
            "mock_response",
            "is disabled on this server (REACTSTEP_ALLOW_MOCK_RESPONSE=false)".into(),
        );
    }
    if mock.is_some_and(|m| m.trim().is_empty()) {
        fail("mock_response", "must not be empty".into());
    }
}

/// The client's key, where it is one, or why the provider needs one (a mocked step calls none).
pub fn key(
    keys: Option<UserApiKeys>,
    provider: Option<Provider>,
    mocked: bool,
    fail: &mut impl FnMut(&str, String),
) -> Option<ApiKey> {
    let raw_key = keys.and_then(|k| k.llm_key).map(|k| k.0);
    match raw_key.map(ApiKey::parse) {
        Some(Ok(key)) => Some(key),
        Some(Err(why)) => {
            fail("user_api_keys.llmKey", why.into());
            None
        }
        None => {
            let needs_key = provider.is_some_and(Provider::requires_key) && !mocked;
            if needs_key {
                fail(
                    "user_api_keys.llmKey",
                    format!(
                        "is required for provider {}",
                        provider.map_or(String::new(), |p| p.to_string())
                    ),
                );
            }
            None
        }
    }
}

/// The request's base URL, trimmed: required where the operator placed the provider nowhere,
/// one of the operator's allowed ones, and not where the key's vendor would not send it.
pub fn destination(
    cfg: &LlmConfigDto,
    provider: Option<Provider>,
    key: Option<&ApiKey>,
    destinations: &Destinations,
    fail: &mut impl FnMut(&str, String),
) -> Option<String> {
    let fields = ["llm_config.base_url", "user_api_keys.llmKey"];
    let base_url = place(
        cfg.base_url.as_deref(),
        provider,
        key,
        destinations,
        fields,
        fail,
    );
    wire_refuses(provider, base_url.as_deref(), fields[0], fail);
    base_url
}

/// The base URL (`fields[0]`) checked as [`destination`] says, the key (`fields[1]`) with it.
pub(super) fn place(
    base_url: Option<&str>,
    provider: Option<Provider>,
    key: Option<&ApiKey>,
    destinations: &Destinations,
    [url_field, key_field]: [&str; 2],
    fail: &mut impl FnMut(&str, String),
) -> Option<String> {
    let base_url = base_url.map(|u| u.trim().trim_end_matches('/').to_string());
    let unplaced = provider.filter(|p| destinations.unplaced.contains(p));
    if let (Some(p), None) = (unplaced, &base_url) {
        fail(
            url_field,
            format!(
                "is required for provider {p}: this server has no {} for it",
                p.base_url_variable()
            ),
        );
    }
    if let Some(url) = &base_url {
        if !destinations.allowed.allows(url) {
            fail(
                url_field,
                "is not one of this server's allowed base URLs (REACTSTEP_ALLOWED_BASE_URLS)"
                    .into(),
            );
        }
    }
    if let Some(why) = key_goes_elsewhere(key, provider, base_url.as_deref()) {
        fail(key_field, why);
    }
    base_url
}

/// A base URL the wire the provider speaks cannot be called at (Azure's deployments form on the
/// Responses API), refused at admission rather than failing the call.
pub(super) fn wire_refuses(
    provider: Option<Provider>,
    base_url: Option<&str>,
    field: &str,
    fail: &mut impl FnMut(&str, String),
) {
    if let Some(why) = provider
        .zip(base_url)
        .and_then(|(p, url)| p.base_url_refusal(url))
    {
        fail(field, why);
    }
}

/// A key whose prefix names its vendor goes to that vendor only: why this call would send it
/// elsewhere (the key's vendor and the destination, never the key).
fn key_goes_elsewhere(
    key: Option<&ApiKey>,
    provider: Option<Provider>,
    base_url: Option<&str>,
) -> Option<String> {
    let owner = key?.vendor()?;
    let goes_to = crate::llm::key_vendor::mismatch(owner, provider?, base_url)?;
    Some(format!(
        "is a key of {owner} (its prefix says so) and is sent only to {owner}, but this call goes to {goes_to}: send a key of {goes_to}, or send this one to {owner} (llm_config.provider)"
    ))
}

/// An Azure deployment name: it becomes a path segment of the deployments URL form, so `..`
/// (which a URL parser would resolve) and anything needing escapes are refused.
fn is_deployment_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !name.bytes().all(|b| b == b'.')
}
