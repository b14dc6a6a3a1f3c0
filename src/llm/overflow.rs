//! A provider's refusal of a prompt as longer than the model's window, and the sizes it names.
//! Each API words it its own way; what they share is that most say how many tokens the prompt
//! was by their count, which lets the step fit again with its own count corrected.

/// What a refusal said about the sizes, when it said them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// The prompt as the provider counted it.
    pub prompt_tokens: Option<u64>,
    /// The model's context window.
    pub window: Option<u64>,
}

/// Error codes that mean the prompt was too long.
const CODES: &[&str] = &["context_length_exceeded", "exceed_context_size_error"];

/// Words that mean it, lower case.
const PHRASES: &[&str] = &[
    "maximum context length",
    "context_length_exceeded",
    "prompt is too long",
    "exceeds the available context size",
    "context size has been exceeded",
    "exceeds the context window",
    "input is too long",
];

/// The sizes named in a refusal that says the prompt is too long; `None` for any other refusal.
pub fn read(message: &str, code: Option<&str>, body: &[u8]) -> Option<Sizes> {
    let lower = message.to_ascii_lowercase();
    let says_so =
        code.is_some_and(|c| CODES.contains(&c)) || PHRASES.iter().any(|p| lower.contains(p));
    if !says_so {
        return None;
    }
    // llama.cpp's server names both in fields of its error object.
    let fields: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let field = |name: &str| {
        fields.as_ref().and_then(|v| {
            v.get("error")
                .and_then(|e| e.get(name))
                .and_then(serde_json::Value::as_u64)
        })
    };
    let prompt_tokens = field("n_prompt_tokens")
        // vLLM and OpenAI: "… you requested 2478 tokens (1478 in the messages, 1000 in the completion)".
        .or_else(|| number_before(&lower, " in the messages"))
        // OpenAI, older: "However, your messages resulted in 10254 tokens."
        .or_else(|| number_after(&lower, "resulted in "))
        // vLLM: "… and your request has 1600 input tokens".
        .or_else(|| number_after(&lower, "your request has "))
        // Anthropic: "prompt is too long: 208310 tokens > 200000 maximum".
        .or_else(|| number_after(&lower, "prompt is too long: "));
    let window = field("n_ctx")
        .or_else(|| number_after(&lower, "maximum context length is "))
        .or_else(|| number_after(&lower, "available context size ("))
        .or_else(|| number_after(&lower, "tokens > "));
    Some(Sizes {
        prompt_tokens,
        window,
    })
}

/// The number that starts right after the first `phrase` in `text`.
fn number_after(text: &str, phrase: &str) -> Option<u64> {
    let start = text.find(phrase)? + phrase.len();
    digits(text[start..].chars())
}

/// The number that ends right before the first `phrase` in `text`.
fn number_before(text: &str, phrase: &str) -> Option<u64> {
    let end = text.find(phrase)?;
    let reversed: String = text[..end]
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .collect();
    digits(reversed.chars().rev())
}

/// A run of digits (thousands separated by commas or not) at the start.
fn digits(chars: impl Iterator<Item = char>) -> Option<u64> {
    let run: String = chars
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(char::is_ascii_digit)
        .collect();
    run.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(message: &str) -> Option<Sizes> {
        read(message, None, b"")
    }

    #[test]
    fn each_providers_wording_is_read_with_its_sizes() {
        assert_eq!(
            sizes("This model's maximum context length is 2048 tokens. However, you requested 2478 tokens (1478 in the messages, 1000 in the completion). Please reduce the length of the messages or completion."),
            Some(Sizes { prompt_tokens: Some(1478), window: Some(2048) })
        );
        assert_eq!(
            sizes("This model's maximum context length is 8192 tokens. However, your messages resulted in 10,254 tokens. Please reduce the length of the messages."),
            Some(Sizes { prompt_tokens: Some(10254), window: Some(8192) })
        );
        assert_eq!(
            sizes("'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's maximum context length is 2048 tokens and your request has 1600 input tokens (1000 > 2048 - 1600)."),
            Some(Sizes { prompt_tokens: Some(1600), window: Some(2048) })
        );
        assert_eq!(
            sizes("prompt is too long: 208310 tokens > 200000 maximum"),
            Some(Sizes {
                prompt_tokens: Some(208_310),
                window: Some(200_000)
            })
        );
        let llama = br#"{"error":{"code":400,"message":"the request exceeds the available context size (2048 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":2478,"n_ctx":2048}}"#;
        assert_eq!(
            read(
                "the request exceeds the available context size (2048 tokens), try increasing it",
                Some("exceed_context_size_error"),
                llama
            ),
            Some(Sizes {
                prompt_tokens: Some(2478),
                window: Some(2048)
            })
        );
        assert_eq!(
            sizes("Context size has been exceeded."),
            Some(Sizes {
                prompt_tokens: None,
                window: None
            })
        );
        assert_eq!(
            read("too long", Some("context_length_exceeded"), b""),
            Some(Sizes {
                prompt_tokens: None,
                window: None
            })
        );
    }

    #[test]
    fn other_refusals_are_not_read_as_too_long() {
        for message in [
            "Invalid value for 'temperature': must be at most 2.",
            "model \"llama9\" not found, try pulling it first",
            "messages: roles must alternate",
            "max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens",
        ] {
            assert_eq!(sizes(message), None, "{message}");
        }
    }
}
