//! Token counting with the model's own tokenizer where one is public (tiktoken encodings for
//! OpenAI models), and a tiktoken encoding plus a safety margin where none is (Claude, local
//! models). Encoders are built once per process and shared.

use tiktoken_rs::{cl100k_base_singleton, o200k_base_singleton, CoreBPE};

use crate::llm::Provider;

/// Tokens the chat format adds around every message (role, separators), per OpenAI's cookbook.
pub const PER_MESSAGE_OVERHEAD: u32 = 3;
/// Tokens that prime the assistant's reply.
pub const REPLY_PRIMING: u32 = 3;
/// Extra share counted for models whose tokenizer is not public: an over-count costs a little
/// context, an under-count costs a failed request.
const APPROXIMATION_MARGIN_PERCENT: u64 = 20;
/// BPE merging is quadratic in the length of one pre-tokenised piece, so an unbroken run (a
/// base64 blob, minified code) is counted in slices of at most this many bytes: linear time,
/// at the price of exactness inside such runs only.
const MAX_RUN_BYTES: usize = 512;

/// A tiktoken encoding a client may ask for with `llm_config.tokenizer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    O200kBase,
    Cl100kBase,
}

impl Encoding {
    fn bpe(self) -> (&'static CoreBPE, &'static str) {
        match self {
            Self::O200kBase => (o200k_base_singleton(), "o200k_base"),
            Self::Cl100kBase => (cl100k_base_singleton(), "cl100k_base"),
        }
    }
}

#[derive(Clone, Copy)]
pub struct TokenCounter {
    bpe: &'static CoreBPE,
    encoding: &'static str,
    margin_percent: u64,
}

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TokenCounter({}, +{}%)",
            self.encoding, self.margin_percent
        )
    }
}

/// Loads every encoder the service uses, so the first request of each model family does not pay
/// for it (about 100-200 ms each).
pub fn warm_up() {
    let _ = (cl100k_base_singleton(), o200k_base_singleton());
}

impl TokenCounter {
    /// The counter for a model, or for the encoding the client named. Models of providers
    /// without a public tokenizer keep the safety margin whatever the encoding.
    pub fn new(provider: Provider, model: &str, chosen: Option<Encoding>) -> Self {
        let counter = Self::for_model(provider, model);
        match chosen {
            Some(encoding) => {
                let (bpe, name) = encoding.bpe();
                Self {
                    bpe,
                    encoding: name,
                    ..counter
                }
            }
            None => counter,
        }
    }

    /// The counter for a model: exact for OpenAI models, approximate for everything else.
    pub fn for_model(provider: Provider, model: &str) -> Self {
        let m = model.to_ascii_lowercase();
        let m = m.strip_prefix("ft:").unwrap_or(&m);
        let cl100k = ["gpt-4-", "gpt-3.5", "gpt-35"]
            .iter()
            .any(|p| m.starts_with(p))
            || m == "gpt-4";
        if provider == Provider::OpenAi && cl100k {
            Self::exact(cl100k_base_singleton(), "cl100k_base")
        } else if provider == Provider::OpenAi {
            // gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o-series, and any newer name: o200k_base.
            Self::exact(o200k_base_singleton(), "o200k_base")
        } else {
            Self {
                bpe: o200k_base_singleton(),
                encoding: "o200k_base",
                margin_percent: APPROXIMATION_MARGIN_PERCENT,
            }
        }
    }

    fn exact(bpe: &'static CoreBPE, encoding: &'static str) -> Self {
        Self {
            bpe,
            encoding,
            margin_percent: 0,
        }
    }

    /// Counts text as the model would see it (special-token text is ordinary text). Exact for
    /// text without runs over [`MAX_RUN_BYTES`] non-whitespace bytes; within such a run each cut
    /// adds one token, so the count can only err upwards.
    pub fn count(&self, text: &str) -> u32 {
        let mut raw = 0u64;
        let mut slice_start = 0;
        let mut run_start = 0;
        for (i, c) in text.char_indices() {
            if c.is_whitespace() {
                run_start = i + c.len_utf8();
            } else if i - run_start >= MAX_RUN_BYTES {
                raw += self.bpe.encode_ordinary(&text[slice_start..i]).len() as u64 + 1;
                slice_start = i;
                run_start = i;
            }
        }
        raw += self.bpe.encode_ordinary(&text[slice_start..]).len() as u64;
        let counted = (raw * (100 + self.margin_percent)).div_ceil(100);
        u32::try_from(counted).unwrap_or(u32::MAX)
    }

    /// The count of `text`, or `None` as soon as it is known to exceed `limit`: text too long to
    /// fit is never tokenised in full. It is read in slices that start at a line whose first
    /// character is not whitespace; no tiktoken pre-token spans such a start, so the sum of the
    /// slices is the count of the whole.
    pub fn count_within(&self, text: &str, limit: u32) -> Option<u32> {
        // Slices track the room left (a few bytes per token), so an item that cannot fit costs
        // about the room it was offered, not the whole item.
        const MIN_SLICE_BYTES: usize = 256;
        const MAX_SLICE_BYTES: usize = 8 * 1024;
        let mut total = 0u32;
        let mut start = 0;
        while start < text.len() {
            let left = limit.saturating_sub(total) as usize;
            let slice = (left * 3).clamp(MIN_SLICE_BYTES, MAX_SLICE_BYTES);
            let end = next_seam(text, start + slice);
            total = total.saturating_add(self.count(&text[start..end]));
            if total > limit {
                return None;
            }
            start = end;
        }
        Some(total)
    }

    /// A message's tokens including the chat framing around it.
    pub fn count_message(&self, text: &str) -> u32 {
        self.count(text).saturating_add(PER_MESSAGE_OVERHEAD)
    }

    pub fn encoding(&self) -> &'static str {
        self.encoding
    }

    pub fn is_approximate(&self) -> bool {
        self.margin_percent > 0
    }
}

/// The first position at or after `from` that starts a line beginning with non-whitespace, or
/// the end of the text.
fn next_seam(text: &str, from: usize) -> usize {
    let bytes = text.as_bytes();
    let mut i = from;
    while i < bytes.len() {
        if bytes[i - 1] == b'\n' && !bytes[i].is_ascii_whitespace() {
            return i;
        }
        i += 1;
    }
    text.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_models_get_their_own_encoding() {
        let enc = |m| TokenCounter::for_model(Provider::OpenAi, m).encoding();
        assert_eq!(enc("gpt-4"), "cl100k_base");
        assert_eq!(enc("gpt-4-turbo"), "cl100k_base");
        assert_eq!(enc("gpt-3.5-turbo"), "cl100k_base");
        assert_eq!(enc("gpt-4o"), "o200k_base");
        assert_eq!(enc("gpt-4.1-mini"), "o200k_base");
        assert_eq!(enc("o3-mini"), "o200k_base");
        assert!(!TokenCounter::for_model(Provider::OpenAi, "gpt-4o").is_approximate());
    }

    #[test]
    fn models_without_a_public_tokenizer_are_over_counted() {
        let exact = TokenCounter::for_model(Provider::OpenAi, "gpt-4o");
        let approx = TokenCounter::for_model(Provider::Anthropic, "claude-sonnet-4-5");
        let text = "fn main() { println!(\"hello, world\"); }\n".repeat(20);
        assert!(approx.is_approximate());
        assert!(approx.count(&text) > exact.count(&text));
    }

    #[test]
    fn ordinary_text_is_counted_exactly() {
        let counter = TokenCounter::for_model(Provider::OpenAi, "gpt-4o");
        let text = "fn main() {\n    let greeting = \"héllo, wörld\";\n}\n".repeat(200);
        let exact = o200k_base_singleton().encode_ordinary(&text).len();
        assert_eq!(counter.count(&text) as usize, exact);
    }

    #[test]
    fn long_unbroken_runs_are_never_under_counted() {
        let counter = TokenCounter::for_model(Provider::OpenAi, "gpt-4o");
        let blobs = [
            "a".repeat(5000),
            (0..5000)
                .map(|i| char::from(b'A' + (i * 7919 % 26) as u8))
                .collect::<String>(),
            "é".repeat(3000),
            format!(
                "data:image/png;base64,{}",
                "iVBORw0KGgoAAAANSUhEUg+/=".repeat(200)
            ),
        ];
        for blob in blobs {
            let exact = o200k_base_singleton().encode_ordinary(&blob).len();
            let counted = counter.count(&blob) as usize;
            assert!(counted >= exact, "{counted} < {exact}");
            assert!(
                counted <= exact + exact / 5 + 20,
                "{counted} is far above {exact}"
            );
        }
    }

    #[test]
    fn counting_within_a_limit_is_exact_or_stops_early() {
        let counter = TokenCounter::for_model(Provider::OpenAi, "gpt-4o");
        let text = "impl Foo {\n    fn bar(&self) -> u32 {\n        42\n    }\n}\n\n// done.\n"
            .repeat(2000);
        let whole = counter.count(&text);
        assert_eq!(counter.count_within(&text, u32::MAX), Some(whole));
        assert_eq!(counter.count_within(&text, whole), Some(whole));
        assert_eq!(counter.count_within(&text, whole - 1), None);
    }

    #[test]
    fn a_named_encoding_overrides_the_model_default() {
        let counter = TokenCounter::new(Provider::OpenAi, "gpt-4o", Some(Encoding::Cl100kBase));
        assert_eq!(counter.encoding(), "cl100k_base");
        let claude = TokenCounter::new(Provider::Anthropic, "claude-x", Some(Encoding::Cl100kBase));
        assert!(claude.is_approximate());
    }

    #[test]
    fn special_token_text_is_counted_as_plain_text() {
        let counter = TokenCounter::for_model(Provider::OpenAi, "gpt-4o");
        assert!(counter.count("<|endoftext|>") > 1);
    }
}
