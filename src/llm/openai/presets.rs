//! OpenAI-compatible vendors, one entry each: where the vendor lives, which model names are its,
//! how it takes the key, and what its models do differently. A new vendor is an entry here and
//! a line in the registry (`registry.rs`); docs/adding-a-provider.md has the whole list.

use super::{all, efforts, none, openai_reasoning, ChatCompletions, PathForm, Quirks};
use crate::llm::call_ids::IdRule;
use crate::llm::provider::{Capabilities, Counting, Facts, KeyHeader, Temperature};

/// A hosted vendor whose models call tools reliably.
const HOSTED: Capabilities = Capabilities {
    native_tools: true,
    native_by_default: true,
    parallel_tool_calls: true,
    prompt_caching: false,
    reasoning: false,
    counting: Counting::Margin,
    requires_key: true,
    retry_timeouts: true,
    max_temperature: Temperature(20),
};

/// A vendor with OpenAI's parameter rules and nothing else of its own.
const PLAIN: Quirks = Quirks {
    reasoning_model: none,
    rejects_stop: none,
    explicit_auto_tool_choice: true,
    takes_reasoning_effort: none,
    efforts: efforts::any,
    echoes_reasoning_content: false,
    takes_prompt_cache_key: false,
    strict_tools: false,
    signs_tool_calls: false,
    path: PathForm::ChatCompletions,
    call_ids: IdRule::Any,
};

pub const GEMINI: ChatCompletions = ChatCompletions {
    facts: Facts {
        name: "gemini",
        default_base_url: "https://generativelanguage.googleapis.com/v1beta/openai",
        model_prefixes: &["gemini-"],
        key_prefixes: &["AIza"],
        configured_headers: &[],
        capabilities: Capabilities {
            prompt_caching: true,
            reasoning: true,
            ..HOSTED
        },
    },
    key_header: KeyHeader::Bearer,
    quirks: Quirks {
        takes_reasoning_effort: all,
        efforts: efforts::gemini,
        signs_tool_calls: true,
        ..PLAIN
    },
};

pub const OPENROUTER: ChatCompletions = ChatCompletions {
    facts: Facts {
        name: "openrouter",
        default_base_url: "https://openrouter.ai/api/v1",
        // OpenRouter names every model `vendor/model`; these are the vendors it routes to most.
        model_prefixes: &[
            "openai/",
            "anthropic/",
            "google/",
            "meta-llama/",
            "mistralai/",
            "deepseek/",
            "qwen/",
            "x-ai/",
            "moonshotai/",
            "z-ai/",
            "openrouter/",
        ],
        key_prefixes: &["sk-or-"],
        configured_headers: &[
            ("http-referer", "REACTSTEP_OPENROUTER_REFERER"),
            ("x-title", "REACTSTEP_OPENROUTER_TITLE"),
        ],
        capabilities: Capabilities {
            counting: Counting::ByModelVendor,
            prompt_caching: true,
            reasoning: true,
            ..HOSTED
        },
    },
    key_header: KeyHeader::Bearer,
    quirks: Quirks {
        // `openai/o3` keeps OpenAI's rules through the router.
        reasoning_model: |m| m.strip_prefix("openai/").is_some_and(openai_reasoning),
        // The router passes it on to whichever vendor reasons.
        takes_reasoning_effort: all,
        ..PLAIN
    },
};

pub const DEEPSEEK: ChatCompletions = ChatCompletions {
    facts: Facts {
        name: "deepseek",
        default_base_url: "https://api.deepseek.com/v1",
        model_prefixes: &["deepseek-"],
        key_prefixes: &[],
        configured_headers: &[],
        capabilities: Capabilities {
            // deepseek-reasoner answers without parallel calls; its cache is automatic.
            prompt_caching: true,
            reasoning: true,
            ..HOSTED
        },
    },
    key_header: KeyHeader::Bearer,
    quirks: Quirks {
        echoes_reasoning_content: true,
        ..PLAIN
    },
};

pub const MISTRAL: ChatCompletions = ChatCompletions {
    facts: Facts {
        name: "mistral",
        default_base_url: "https://api.mistral.ai/v1",
        model_prefixes: &[
            "mistral-",
            "codestral-",
            "magistral-",
            "devstral-",
            "ministral-",
            "pixtral-",
            "open-mistral-",
            "open-mixtral-",
        ],
        key_prefixes: &[],
        configured_headers: &[],
        capabilities: Capabilities {
            max_temperature: Temperature(15),
            ..HOSTED
        },
    },
    key_header: KeyHeader::Bearer,
    // "Tool call id was … but must be a-z, A-Z, 0-9, with a length of 9".
    quirks: Quirks {
        call_ids: IdRule::NineAlphanumerics,
        ..PLAIN
    },
};

pub const GROQ: ChatCompletions = ChatCompletions {
    facts: Facts {
        name: "groq",
        default_base_url: "https://api.groq.com/openai/v1",
        // Groq serves other vendors' open models under their own names: no prefix is Groq's alone.
        model_prefixes: &[],
        key_prefixes: &["gsk_"],
        configured_headers: &[],
        capabilities: HOSTED,
    },
    key_header: KeyHeader::Bearer,
    quirks: PLAIN,
};

/// xAI's reasoning models refuse `stop` (and penalties, which the service never sends).
fn grok_reasoning(model: &str) -> bool {
    let m = model.to_ascii_lowercase();
    ["grok-3-mini", "grok-4", "grok-code"]
        .iter()
        .any(|p| m.starts_with(p))
        && !m.contains("non-reasoning")
}

pub const XAI: ChatCompletions = ChatCompletions {
    facts: Facts {
        name: "xai",
        default_base_url: "https://api.x.ai/v1",
        model_prefixes: &["grok-"],
        key_prefixes: &["xai-"],
        configured_headers: &[],
        capabilities: Capabilities {
            prompt_caching: true,
            reasoning: true,
            ..HOSTED
        },
    },
    key_header: KeyHeader::Bearer,
    quirks: Quirks {
        rejects_stop: grok_reasoning,
        // grok-4 reasons but refuses the parameter; grok-3-mini takes it.
        takes_reasoning_effort: |m| m.to_ascii_lowercase().starts_with("grok-3-mini"),
        ..PLAIN
    },
};

/// Azure OpenAI: each user has a resource of their own, so there is no default (a request without
/// one is a 400); the operator sets `REACTSTEP_AZURE_BASE_URL`, or allows
/// `https://*.openai.azure.com` for requests to name theirs. `modelName` is the deployment.
pub const AZURE: ChatCompletions = ChatCompletions {
    facts: Facts {
        name: "azure",
        default_base_url: "",
        model_prefixes: &[],
        key_prefixes: &[],
        configured_headers: &[],
        capabilities: Capabilities {
            counting: Counting::OpenAiTokenizer,
            prompt_caching: true,
            reasoning: true,
            ..HOSTED
        },
    },
    key_header: KeyHeader::Named("api-key"),
    quirks: Quirks {
        reasoning_model: openai_reasoning,
        takes_reasoning_effort: openai_reasoning,
        efforts: efforts::openai,
        explicit_auto_tool_choice: false,
        strict_tools: true,
        path: PathForm::Azure,
        call_ids: IdRule::AtMost(40),
        ..PLAIN
    },
};

/// OpenAI's open-weight models as Amazon Bedrock names them (`openai.gpt-oss-120b-1:0`): they
/// take `reasoning_effort`; Bedrock's other models on this endpoint are not documented to.
fn bedrock_reasoning_effort(model: &str) -> bool {
    let m = model.to_ascii_lowercase();
    // A cross-Region inference profile puts a geography first (`us.openai.gpt-oss-…`).
    let m = m
        .split_once('.')
        .map_or(m.as_str(), |(head, rest)| match head {
            "us" | "eu" | "apac" | "global" | "jp" | "au" | "ca" | "us-gov" => rest,
            _ => m.as_str(),
        });
    m.starts_with("openai.gpt-oss")
}

/// Amazon Bedrock's OpenAI-compatible Chat Completions, on the Bedrock Runtime endpoint of a
/// Region (`https://bedrock-runtime.<region>.amazonaws.com/openai/v1`), with a Bedrock API key
/// as the bearer token. The default is us-east-1, AWS's first Region; an operator whose users
/// work elsewhere sets `REACTSTEP_BEDROCK_BASE_URL` (a short-term key works only in the Region
/// that made it). Model ids are Bedrock's own (`openai.gpt-oss-120b-1:0`): no name is inferred.
pub const BEDROCK: ChatCompletions = ChatCompletions {
    facts: Facts {
        name: "bedrock",
        default_base_url: "https://bedrock-runtime.us-east-1.amazonaws.com/openai/v1",
        model_prefixes: &[],
        // Long-term keys are `ABSK` + base64 ("BedrockAPIKey-…"); short-term ones are a
        // presigned URL behind `bedrock-api-key-`.
        key_prefixes: &["ABSK", "bedrock-api-key-"],
        configured_headers: &[],
        capabilities: Capabilities {
            reasoning: true,
            ..HOSTED
        },
    },
    key_header: KeyHeader::Bearer,
    quirks: Quirks {
        takes_reasoning_effort: bedrock_reasoning_effort,
        ..PLAIN
    },
};

/// Any other OpenAI-compatible server: vLLM, llama.cpp's server, LM Studio, SGLang.
pub const OPENAI_COMPATIBLE: ChatCompletions = ChatCompletions {
    facts: Facts {
        name: "openai_compatible",
        default_base_url: "http://127.0.0.1:8000/v1",
        model_prefixes: &[],
        key_prefixes: &[],
        configured_headers: &[],
        capabilities: Capabilities {
            native_by_default: false,
            parallel_tool_calls: false,
            requires_key: false,
            retry_timeouts: false,
            ..HOSTED
        },
    },
    key_header: KeyHeader::Bearer,
    // vLLM and SGLang take it; servers that do not know it leave it aside.
    quirks: Quirks {
        takes_reasoning_effort: all,
        ..PLAIN
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grok_reasoning_models_get_no_stop() {
        let stop = |model: &str| {
            let mut r = super::super::tests::request(model);
            r.stop = vec!["\nObservation:".into()];
            serde_json::to_value(XAI.body(&r))
                .unwrap_or_default()
                .get("stop")
                .is_some()
        };
        assert!(!stop("grok-4"));
        assert!(!stop("grok-3-mini"));
        assert!(stop("grok-4-fast-non-reasoning"));
        assert!(stop("grok-3"));
    }

    #[test]
    fn bedrock_sends_reasoning_effort_only_to_gpt_oss() {
        for model in [
            "openai.gpt-oss-120b-1:0",
            "openai.gpt-oss-20b-1:0",
            "us.openai.gpt-oss-120b-1:0",
        ] {
            assert!(bedrock_reasoning_effort(model), "{model}");
        }
        for model in [
            "deepseek.v3-v1:0",
            "qwen.qwen3-32b-v1:0",
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "mistral.gpt-oss-lookalike",
        ] {
            assert!(!bedrock_reasoning_effort(model), "{model}");
        }
    }

    #[test]
    fn openrouter_keeps_openai_rules_for_openai_reasoning_models() {
        let r = super::super::tests::request("openai/o3-mini");
        let v = serde_json::to_value(OPENROUTER.body(&r)).unwrap_or_default();
        assert_eq!(v["max_completion_tokens"], 100);
        let r = super::super::tests::request("anthropic/claude-sonnet-4.5");
        let v = serde_json::to_value(OPENROUTER.body(&r)).unwrap_or_default();
        assert_eq!(v["max_tokens"], 100);
    }
}
