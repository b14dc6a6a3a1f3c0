//! How much to add to an `o200k_base` count for a model whose tokenizer is not public. Each
//! figure is the worst ratio measured for the model's family on code and prose, rounded up with
//! room to spare; `docs/tokenizer-margin.md` has the measurements and where they come from.
//! An over-count costs a little context; an under-count costs a failed request the user pays
//! for, so a model the table does not know gets the widest margin of its provider.

use crate::llm::Provider;

/// Claude 3 to Claude 4.6: up to 1.30× `o200k_base` on code (published comparisons against
/// gpt-4o), 1.16× on prose.
const CLAUDE_UP_TO_4_6: u32 = 40;
/// Claude Opus 4.7's tokenizer counts up to 1.47× what 4.6 did on English and technical text, so
/// up to about 1.7× `o200k_base`; later models are assumed to count no less.
const CLAUDE_FROM_4_7: u32 = 80;
/// Llama 3, Qwen and DeepSeek tokenizers (100k+ vocabularies): at most 1.11× on any sample.
const LARGE_VOCABULARY: u32 = 20;
/// Gemma: at most 1.27×.
const GEMMA: u32 = 35;
/// The 32k SentencePiece vocabularies (Llama 2, Code Llama, Mistral 7B, Mixtral): at most 1.35×,
/// and the widest measured, so also the margin of an unknown local model.
const SMALL_VOCABULARY: u32 = 45;

/// Gemini: the same SentencePiece vocabulary as Gemma, so Gemma's measured margin.
const GEMINI: u32 = GEMMA;
/// A hosted family whose tokenizer is neither public nor measured here (xAI's Grok): the widest
/// margin, as for an unknown local model.
const UNMEASURED: u32 = SMALL_VOCABULARY;

/// The calibrated margin, in percent, for a model counted approximately. The family comes from
/// the model's name (after a router's `vendor/` prefix), and Anthropic's models are Claude
/// whatever their name.
pub fn percent_for(provider: Provider, model: &str) -> u32 {
    let m = model.to_ascii_lowercase();
    let name = m.rsplit('/').next().unwrap_or(&m);
    if provider == Provider::ANTHROPIC || name.starts_with("claude") {
        return if claude_before_4_7(name) {
            CLAUDE_UP_TO_4_6
        } else {
            CLAUDE_FROM_4_7
        };
    }
    if name.starts_with("gemini") {
        return GEMINI;
    }
    if name.starts_with("grok") {
        return UNMEASURED;
    }
    local_model(&m)
}

/// Whether the model's tokenizer gives each digit its own token, where `o200k_base` groups up to
/// three: Llama 2 and Code Llama, Mistral's families, Qwen, Gemma and Gemini, Phi-3, and any
/// local model the table does not know (the safe reading). Not Claude, Llama 3, DeepSeek or
/// OpenAI's models, which group digits.
pub fn splits_digits(provider: Provider, model: &str) -> bool {
    let m = model.to_ascii_lowercase();
    let name = m.rsplit('/').next().unwrap_or(&m);
    let has = |needles: &[&str]| needles.iter().any(|n| m.contains(n));
    if provider == Provider::ANTHROPIC || name.starts_with("claude") {
        return false;
    }
    if has(&[
        "llama2",
        "llama-2",
        "codellama",
        "code-llama",
        "mistral",
        "mixtral",
        "stral",
        "qwen",
        "qwq",
        "gemma",
        "gemini",
        "phi-3",
        "phi3",
    ]) {
        return true;
    }
    !has(&[
        "llama3", "llama-3", "llama4", "llama-4", "deepseek", "gpt-", "grok", "phi-4", "phi4",
    ])
}

/// Claude models named before the tokenizer changed: `claude-2…`, `claude-instant…`,
/// `claude-3…` (`claude-3-5-sonnet-…`), and `claude-{family}-4[-minor][-date]` with minor ≤ 6.
fn claude_before_4_7(m: &str) -> bool {
    let Some(rest) = m.strip_prefix("claude-") else {
        return false;
    };
    if ["2", "instant", "3"].iter().any(|p| rest.starts_with(p)) {
        return true;
    }
    let mut parts = rest.split(['-', '.', '@']);
    let (Some(family), Some(major)) = (parts.next(), parts.next()) else {
        return false;
    };
    if !["opus", "sonnet", "haiku"].contains(&family) || major != "4" {
        return false;
    }
    match parts.next() {
        // `claude-sonnet-4` or `claude-sonnet-4-20250514`: 4.0.
        None => true,
        Some(date) if date.len() == 8 => true,
        Some(minor) => minor.parse::<u32>().is_ok_and(|minor| minor <= 6),
    }
}

/// Local models by the family their name gives (Ollama tags such as `llama3.1:8b`,
/// `qwen2.5-coder:7b`, or a path such as `meta-llama/Llama-3.1-8B-Instruct`).
fn local_model(m: &str) -> u32 {
    let has = |needles: &[&str]| needles.iter().any(|n| m.contains(n));
    if has(&[
        "llama2",
        "llama-2",
        "codellama",
        "code-llama",
        "mistral",
        "mixtral",
    ]) {
        // Mistral's newer models (Nemo, Small 3, Codestral 2501…) use a large vocabulary, but
        // their names do not say so reliably; the small-vocabulary margin is the safe reading.
        SMALL_VOCABULARY
    } else if has(&["gemma"]) {
        GEMMA
    } else if has(&["llama3", "llama-3", "llama4", "llama-4", "qwen", "deepseek"]) {
        LARGE_VOCABULARY
    } else {
        SMALL_VOCABULARY
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosted_vendors_models_get_their_familys_margin() {
        let by_name = |provider: &str, model: &str| {
            let provider = Provider::named(provider).unwrap_or(Provider::OLLAMA);
            percent_for(provider, model)
        };
        assert_eq!(by_name("gemini", "gemini-2.5-flash"), GEMINI);
        assert_eq!(by_name("deepseek", "deepseek-chat"), LARGE_VOCABULARY);
        assert_eq!(by_name("mistral", "mistral-large-latest"), SMALL_VOCABULARY);
        assert_eq!(by_name("mistral", "codestral-latest"), SMALL_VOCABULARY);
        assert_eq!(by_name("xai", "grok-4"), UNMEASURED);
        assert_eq!(by_name("groq", "llama-3.3-70b-versatile"), LARGE_VOCABULARY);
        assert_eq!(
            by_name("openrouter", "anthropic/claude-sonnet-4.5"),
            CLAUDE_UP_TO_4_6
        );
        assert_eq!(
            by_name("openrouter", "anthropic/claude-opus-4.7"),
            CLAUDE_FROM_4_7
        );
        assert_eq!(by_name("openrouter", "qwen/qwen3-coder"), LARGE_VOCABULARY);
    }

    #[test]
    fn families_that_split_digits_are_known_by_name() {
        for model in [
            "qwen2.5-coder:7b",
            "Qwen/Qwen3-8B",
            "mistral:7b",
            "codestral-latest",
            "gemma3:4b",
            "gemini-2.5-pro",
            "llama2:13b",
            "some-unknown-model",
        ] {
            assert!(splits_digits(Provider::OLLAMA, model), "{model}");
        }
        for model in [
            "llama3.1:8b",
            "deepseek-r1:7b",
            "meta-llama/Llama-3.3-70B",
            "grok-4",
        ] {
            assert!(!splits_digits(Provider::OLLAMA, model), "{model}");
        }
        assert!(!splits_digits(Provider::ANTHROPIC, "claude-sonnet-4-5"));
    }

    #[test]
    fn claude_models_before_the_new_tokenizer_get_the_smaller_margin() {
        for model in [
            "claude-3-5-sonnet-20241022",
            "claude-3-7-sonnet-latest",
            "claude-3-haiku-20240307",
            "claude-2.1",
            "claude-instant-1.2",
            "claude-sonnet-4-20250514",
            "claude-opus-4-1-20250805",
            "claude-sonnet-4-5",
            "claude-haiku-4-5-20251001",
            "CLAUDE-OPUS-4-6",
            "claude-sonnet-4@20250514",
        ] {
            assert_eq!(
                percent_for(Provider::ANTHROPIC, model),
                CLAUDE_UP_TO_4_6,
                "{model}"
            );
        }
    }

    #[test]
    fn newer_and_unknown_claude_models_get_the_wider_margin() {
        for model in [
            "claude-opus-4-7",
            "claude-opus-4-7-20260416",
            "claude-sonnet-4-8",
            "claude-opus-5",
            "claude-sonnet-5-0",
            "claude-next",
            "my-proxy-alias",
        ] {
            assert_eq!(
                percent_for(Provider::ANTHROPIC, model),
                CLAUDE_FROM_4_7,
                "{model}"
            );
        }
    }

    #[test]
    fn local_models_get_their_family_margin() {
        let cases = [
            ("llama3.1:8b", LARGE_VOCABULARY),
            ("meta-llama/Llama-3.1-8B-Instruct", LARGE_VOCABULARY),
            ("qwen2.5-coder:7b", LARGE_VOCABULARY),
            ("deepseek-coder-v2:16b", LARGE_VOCABULARY),
            ("gemma3:12b", GEMMA),
            ("llama2:13b", SMALL_VOCABULARY),
            ("codellama:7b-instruct", SMALL_VOCABULARY),
            ("mistral:7b", SMALL_VOCABULARY),
            ("mixtral:8x7b", SMALL_VOCABULARY),
            ("some-finetune:latest", SMALL_VOCABULARY),
        ];
        for (model, margin) in cases {
            assert_eq!(percent_for(Provider::OLLAMA, model), margin, "{model}");
        }
    }
}
