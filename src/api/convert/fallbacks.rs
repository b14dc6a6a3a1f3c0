//! `llm_config.fallbacks`: the models a step falls back to, each checked as the first model is
//! (its provider, limits, API, temperature, base URL), each with its own key from
//! `user_api_keys.providerKeys`, and never another provider's.

use std::collections::BTreeMap;

use super::llm::{deployment_name, place, temperature_refused, wire, wire_refuses};
use crate::api::base_urls::Destinations;
use crate::api::request::{FallbackDto, LlmConfigDto};
use crate::llm::{ApiKey, Provider, RawApiKey};
use crate::step::{Fallback, LlmConfig};

/// At most this many models after the first: each failure costs the step time and the user
/// money, and the step has one deadline for all of them.
pub const MAX_FALLBACKS: usize = 4;
/// More key slots than there are providers is no request's: refused whole, unread.
const MAX_PROVIDER_KEYS: usize = 32;
/// The first model's bounds (`LlmConfigDto`), for the fallbacks' fields.
const MODEL_NAME_CHARS: std::ops::RangeInclusive<usize> = 1..=256;
const TOKEN_LIMIT: std::ops::RangeInclusive<u32> = 1..=10_000_000;
const RESERVED_OUTPUT_TOKENS: std::ops::RangeInclusive<u32> = 1..=1_000_000;
const BASE_URL_CHARS: std::ops::RangeInclusive<usize> = 1..=2048;
/// How much of a slot's name a message quotes.
const QUOTED_NAME_CHARS: usize = 64;

/// What the fallbacks are checked with: the request's first model (whose settings they share)
/// and where calls may go.
pub struct Chain<'a> {
    pub first: &'a LlmConfigDto,
    pub mocked: bool,
    pub destinations: &'a Destinations,
}

/// The fallbacks as the step takes them; what is wrong with any of them goes to `fail`, naming
/// `llm_config.fallbacks[i].…` or the key's slot `user_api_keys.providerKeys.<provider>`.
pub fn check(
    list: Option<Vec<FallbackDto>>,
    keys: Option<BTreeMap<String, RawApiKey>>,
    chain: &Chain<'_>,
    fail: &mut impl FnMut(&str, String),
) -> Vec<Fallback> {
    let keys = key_slots(keys.unwrap_or_default(), fail);
    let list = list.unwrap_or_default();
    if list.len() > MAX_FALLBACKS {
        fail(
            "llm_config.fallbacks",
            format!("length must be at most {MAX_FALLBACKS}"),
        );
        return Vec::new();
    }
    let mut bad_keys = Vec::new();
    let mut checked = Vec::with_capacity(list.len());
    for (i, dto) in list.into_iter().enumerate() {
        let mut keyed = Keyed {
            keys: &keys,
            bad_keys: &mut bad_keys,
        };
        if let Some(fallback) = one(i, dto, chain, &mut keyed, fail) {
            checked.push(fallback);
        }
    }
    checked
}

/// The key slots, each named for a provider; a name that is no provider's is refused (a
/// misspelt slot would otherwise leave its fallback without a key, or worse, unnoticed).
fn key_slots(
    keys: BTreeMap<String, RawApiKey>,
    fail: &mut impl FnMut(&str, String),
) -> BTreeMap<String, RawApiKey> {
    let field = "user_api_keys.providerKeys";
    if keys.len() > MAX_PROVIDER_KEYS {
        fail(
            field,
            format!("holds at most {MAX_PROVIDER_KEYS} keys, one per provider"),
        );
        return BTreeMap::new();
    }
    for name in keys.keys().filter(|name| Provider::named(name).is_none()) {
        // The slot's name is the client's text: nothing shaped like a key is quoted.
        let quoted: String = crate::llm::redact_key_shapes(name)
            .chars()
            .take(QUOTED_NAME_CHARS)
            .collect();
        fail(
            field,
            format!(
                "`{quoted}` is not a provider: name each key for its provider (GET /api/providers)"
            ),
        );
    }
    keys
}

/// The key slots and those already found wrong (said once, however many fallbacks use them).
struct Keyed<'a> {
    keys: &'a BTreeMap<String, RawApiKey>,
    bad_keys: &'a mut Vec<&'static str>,
}

impl Keyed<'_> {
    /// The provider's own key, or why there is none where one is needed.
    fn key_for(
        &mut self,
        p: Provider,
        needed: bool,
        i: usize,
        fail: &mut impl FnMut(&str, String),
    ) -> Option<ApiKey> {
        let field = slot(p);
        let Some(raw) = self.keys.get(p.name()) else {
            if needed && !self.bad_keys.contains(&p.name()) {
                self.bad_keys.push(p.name());
                fail(
                    &field,
                    format!("is required for llm_config.fallbacks[{i}] (provider {p}): a fallback is never sent another provider's key, nor llmKey"),
                );
            }
            return None;
        };
        match ApiKey::parse(raw.0.clone()) {
            Ok(key) => Some(key),
            Err(why) => {
                if !self.bad_keys.contains(&p.name()) {
                    self.bad_keys.push(p.name());
                    fail(&field, why.into());
                }
                None
            }
        }
    }
}

/// The field of a provider's key.
fn slot(p: Provider) -> String {
    format!("user_api_keys.providerKeys.{}", p.name())
}

/// One fallback, checked as the first model is; `None` when it cannot be made.
fn one(
    i: usize,
    dto: FallbackDto,
    chain: &Chain<'_>,
    keyed: &mut Keyed<'_>,
    fail: &mut impl FnMut(&str, String),
) -> Option<Fallback> {
    let at = |field: &str| format!("llm_config.fallbacks[{i}].{field}");
    let first = chain.first;
    let (token_limit, reserved) = limits(&dto, first, &at, fail);
    if !MODEL_NAME_CHARS.contains(&dto.model_name.chars().count()) {
        fail(&at("modelName"), "length must be between 1 and 256".into());
    }
    if dto
        .base_url
        .as_ref()
        .is_some_and(|u| !BASE_URL_CHARS.contains(&u.chars().count()))
    {
        fail(&at("base_url"), "length must be between 1 and 2048".into());
    }
    let Some(named) = dto.provider else {
        fail(
            &at("provider"),
            "is required: name each fallback's provider (GET /api/providers); its key is user_api_keys.providerKeys.<provider>".into(),
        );
        return None;
    };
    deployment_name(named, &dto.model_name, &at("modelName"), fail);
    if let Some(why) = temperature_refused(first.temperature, named) {
        fail(
            &at("provider"),
            format!(
                "takes no llm_config.temperature of {}: it {why}",
                first.temperature.unwrap_or_default()
            ),
        );
    }
    let provider = wire(dto.api, named, &at("api"), fail);
    let key = keyed.key_for(named, named.requires_key() && !chain.mocked, i, fail);
    let fields = [at("base_url"), slot(named)];
    let base_url = place(
        dto.base_url.as_deref(),
        Some(named),
        key.as_ref(),
        chain.destinations,
        [&fields[0], &fields[1]],
        fail,
    );
    wire_refuses(provider, base_url.as_deref(), &fields[0], fail);
    Some(Fallback {
        llm: LlmConfig {
            provider: provider?,
            model: dto.model_name,
            token_limit,
            reserved_output_tokens: reserved,
            temperature: first.temperature,
            // The first model's tokenizer and cache lifetime are that model's and provider's.
            tokenizer: None,
            tool_mode: first.tool_mode.unwrap_or_default(),
            base_url,
            reasoning_effort: first.reasoning_effort,
            prompt_cache: first.prompt_cache.unwrap_or(true),
            prompt_cache_ttl: None,
            strict_tools: first.strict_tools.unwrap_or(false),
        },
        key,
    })
}

/// The fallback's window and output reserve, the first model's where it names none.
fn limits(
    dto: &FallbackDto,
    first: &LlmConfigDto,
    at: &impl Fn(&str) -> String,
    fail: &mut impl FnMut(&str, String),
) -> (u32, u32) {
    let token_limit = dto.token_limit.unwrap_or(first.token_limit);
    let reserved = dto
        .reserved_output_tokens
        .unwrap_or(first.reserved_output_tokens);
    if !TOKEN_LIMIT.contains(&token_limit) {
        fail(&at("tokenLimit"), "must be between 1 and 10000000".into());
    }
    if !RESERVED_OUTPUT_TOKENS.contains(&reserved) {
        fail(
            &at("reservedOutputTokens"),
            "must be between 1 and 1000000".into(),
        );
    } else if reserved >= token_limit {
        fail(
            &at("reservedOutputTokens"),
            format!("must be less than its tokenLimit ({token_limit}), or no token is left for the prompt"),
        );
    }
    (token_limit, reserved)
}
