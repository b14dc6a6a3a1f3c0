//! Token counting with the model's own tokenizer where one is public (OpenAI's `o200k_base` and
//! `cl100k_base`), and `o200k_base` plus a safety margin where none is (Claude, local models).
//! The encoder is a linear-time BPE that gives tiktoken's counts: long unbroken runs (base64,
//! minified code) cost no more per byte than prose. Encoders are built once per process.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};

use bpe_openai::byte_pair_encoding::BytePairEncoding;
use foldhash::fast::FixedState;

use super::token_cache;
use crate::llm::{ChatMessage, Counting, Provider};

/// Tokens every message costs besides its content, per OpenAI's cookbook: 3 of framing, and its
/// role, one token in both encodings (`system`, `user`, `assistant`, `tool`). The API's own
/// example, `{"role":"user","content":"Hello!"}`, is 9 prompt tokens: 3 + 1 + 2, and 3 to prime
/// the reply. (Counting 3 a message, a prompt of many turns went over the budget by about one
/// token a message.)
pub const PER_MESSAGE_OVERHEAD: u32 = 4;
/// The framing of a message and of each call it makes: on the Responses API every call is an
/// input item of its own, framed as a message is (counted once a turn, 300 turns of one call each
/// went over the budget by some 550 tokens); other wires frame a call too.
pub fn framing(message: &ChatMessage) -> u32 {
    let calls = u32::try_from(message.calls.len()).unwrap_or(u32::MAX);
    PER_MESSAGE_OVERHEAD.saturating_mul(calls.saturating_add(1))
}

/// Tokens that prime the assistant's reply.
pub const REPLY_PRIMING: u32 = 3;

/// An encoding a client may ask for with `llm_config.tokenizer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    O200kBase,
    Cl100kBase,
}

impl Encoding {
    /// The encoder, built on first use (which blocks while its table is inflated and read: tens
    /// of milliseconds, about a hundred on a busy machine).
    fn tokenizer(self) -> &'static super::encoder_tables::Encoder {
        let tokenizer = match self {
            Self::O200kBase => super::encoder_tables::o200k_base(),
            Self::Cl100kBase => super::encoder_tables::cl100k_base(),
        };
        // Written once: a store on every count would bounce the line between cores.
        let loaded = &LOADED[self as usize];
        if !loaded.load(Ordering::Relaxed) {
            loaded.store(true, Ordering::Release);
        }
        tokenizer
    }

    /// Whether the encoder is built, so that counting with it cannot block.
    pub fn is_loaded(self) -> bool {
        LOADED[self as usize].load(Ordering::Acquire)
    }

    /// Builds the encoder on the CPU pool if it is not built yet, so that the first request
    /// that needs it does not hold an HTTP worker while it is built. The compiled-in tables it
    /// was read from are paged out again afterwards.
    pub async fn load_off_worker(self) {
        if self.is_loaded() {
            return;
        }
        let built = crate::runtime::cpu::run(move || {
            let _ = self.tokenizer();
            crate::runtime::resident::release_compiled_in_data();
        });
        if let Err(e) = built.await {
            // Counting builds it where it runs instead.
            tracing::warn!(error = %e, encoding = self.name(), "building an encoder failed");
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::O200kBase => "o200k_base",
            Self::Cl100kBase => "cl100k_base",
        }
    }
}

/// Which encoders are built, by `Encoding as usize`.
static LOADED: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];

/// Pieces this long or shorter are remembered; longer ones (a base64 run) are rare to repeat.
const MEMO_PIECE_BYTES: usize = 24;
/// Entries each memo holds per thread before it starts over (a few MiB at most).
const MEMO_ENTRIES: usize = 1 << 16;

/// Ways of counting: an encoding, and whether digit runs count one token per digit.
const SCHEMES: usize = 4;

/// Counts of short texts, one table per way of counting (looked up by the bytes themselves,
/// with no key to build).
#[derive(Default)]
struct Memo([HashMap<Box<[u8]>, u32, FixedState>; SCHEMES]);

impl Memo {
    fn count(&mut self, scheme: usize, bytes: &[u8], count: impl FnOnce() -> usize) -> usize {
        self.get(scheme, bytes).unwrap_or_else(|| {
            let n = count();
            self.insert(scheme, bytes, n);
            n
        })
    }

    fn get(&self, scheme: usize, bytes: &[u8]) -> Option<usize> {
        self.0[scheme].get(bytes).map(|&n| n as usize)
    }

    fn insert(&mut self, scheme: usize, bytes: &[u8], n: usize) {
        let table = &mut self.0[scheme];
        if table.len() >= MEMO_ENTRIES {
            table.clear();
        }
        table.insert(bytes.into(), u32::try_from(n).unwrap_or(u32::MAX));
    }
}

/// The memos of one thread: pre-tokenized pieces (words, mostly), and whole texts too short
/// for the process-wide cache (a history turn, a line of a file being cut).
#[derive(Default)]
struct PieceMemo {
    pieces: Memo,
    texts: Memo,
}

impl PieceMemo {
    fn count(&mut self, encoding: Encoding, bpe: &BytePairEncoding, piece: &[u8]) -> usize {
        if piece.len() > MEMO_PIECE_BYTES {
            return bpe.count(piece);
        }
        self.pieces
            .count(encoding as usize, piece, || bpe.count(piece))
    }
}

thread_local! {
    static PIECES: RefCell<PieceMemo> = RefCell::new(PieceMemo::default());
}

/// Whether the pre-tokenizer of both encodings must cut `text` at byte `at`: right after a
/// `\n`, where the line goes on, after any spaces and tabs, with a printable ASCII character
/// (a `/` only after a space or tab). No pre-token reaches over such a place: a newline ends
/// punctuation runs (`[\r\n/]*` takes no space and no other character), whitespace runs that
/// end in a newline (`\s*[\r\n]+`, which wins over `\s+(?!\S)` where both match, and the
/// run after the cut has no newline), and words and numbers take no newline before them. And
/// the search from a cut depends on nothing before it (no look-behind, no `^`). So the
/// pre-tokens, and the count, of a text are those of its two sides.
fn is_cut(text: &[u8], at: usize) -> bool {
    if at == 0 || at >= text.len() || text[at - 1] != b'\n' {
        return false;
    }
    let indent = text[at..]
        .iter()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count();
    match text.get(at + indent) {
        Some(b'/') => indent > 0,
        Some(&b) => b.is_ascii_graphic(),
        None => false,
    }
}

/// The first and last cuts of a part of a joined text, as `count_joined` uses them: the text
/// before the first goes with the stretch over the join before it (none before the first part),
/// the text after the last with the stretch over the join after it (none after the last part).
/// `None`: the whole part goes with the stretch, when it has no cut, or when those edges would
/// be more than half of it (so that a part is never counted more than once over).
fn edges(part: &str, first: bool, last: bool) -> Option<(usize, usize)> {
    let bytes = part.as_bytes();
    let len = bytes.len();
    let head = if first {
        0
    } else {
        (1..len).find(|&at| is_cut(bytes, at))?
    };
    let tail = if last {
        len
    } else {
        (1..len).rev().find(|&at| is_cut(bytes, at))?
    };
    (head + (len - tail) <= len / 2).then_some((head, tail))
}

/// The parts of `text` between joins of `join_len` bytes at `joins`, or `None` when they do not
/// describe it (out of order, out of bounds, or not on character boundaries).
fn joined_parts(
    text: &str,
    joins: &[usize],
    join_len: usize,
) -> Option<Vec<std::ops::Range<usize>>> {
    if joins.is_empty() {
        return None;
    }
    let mut parts = Vec::with_capacity(joins.len() + 1);
    let mut start = 0;
    for &join in joins {
        let end = join.checked_add(join_len)?;
        if join < start
            || end > text.len()
            || !text.is_char_boundary(join)
            || !text.is_char_boundary(end)
        {
            return None;
        }
        parts.push(start..join);
        start = end;
    }
    parts.push(start..text.len());
    Some(parts)
}

#[derive(Clone, Copy)]
pub struct TokenCounter {
    encoding: Encoding,
    margin_percent: u32,
    approximate: bool,
    /// The model's tokenizer gives every digit a token of its own (Llama 2, Mistral, Qwen,
    /// Gemma), where the encoding groups up to three: log lines and CSV count far higher.
    single_digits: bool,
}

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TokenCounter({}, +{}%)",
            self.encoding.name(),
            self.margin_percent
        )
    }
}

/// Builds the encoder of every current model (`o200k_base`: GPT-4o and later, and the
/// approximate counts of every other provider). `cl100k_base`, only for GPT-4 and GPT-3.5, is
/// built by the first request that needs it (`Encoding::load_off_worker`): it would hold
/// 16 MiB for the whole life of a service that may never see one of those models.
pub fn warm_up() {
    let _ = Encoding::O200kBase.tokenizer().tokenizer.count("");
}

/// One pass of the encoder over `text`, with no cache and no memo: what counting a text never
/// seen costs at most (the load runner's yardstick for a cold step, `scripts/load.sh sweep`).
pub fn count_uncached(encoding: Encoding, text: &str) -> usize {
    encoding.tokenizer().tokenizer.count(text)
}

/// Whether the encoder of every current model is built (so no request for one waits for it).
pub fn is_warm() -> bool {
    Encoding::O200kBase.is_loaded()
}

/// Whether a model's prompts are counted with OpenAI's own tokenizer: the provider serves OpenAI
/// models, or routes to them (`openai/gpt-4o`).
fn counts_exactly(provider: Provider, model: &str) -> bool {
    match provider.capabilities().counting {
        Counting::OpenAiTokenizer => true,
        Counting::ByModelVendor => model.starts_with("openai/"),
        Counting::Margin => false,
    }
}

impl TokenCounter {
    /// The counter for a model, or for the encoding the client named. Models of providers
    /// without a public tokenizer keep the safety margin whatever the encoding.
    pub fn new(provider: Provider, model: &str, chosen: Option<Encoding>) -> Self {
        let counter = Self::for_model(provider, model);
        match chosen {
            Some(encoding) => Self {
                encoding,
                ..counter
            },
            None => counter,
        }
    }

    /// The same counter with another margin for approximate counts; exact counts keep none.
    pub fn with_approximation_margin(self, percent: u32) -> Self {
        Self {
            margin_percent: if self.approximate { percent } else { 0 },
            ..self
        }
    }

    /// The counter for a model: exact for OpenAI models, approximate for everything else.
    pub fn for_model(provider: Provider, model: &str) -> Self {
        let m = model.to_ascii_lowercase();
        let m = m.strip_prefix("ft:").unwrap_or(&m);
        if !counts_exactly(provider, m) {
            return Self {
                margin_percent: super::margin::percent_for(provider, model),
                single_digits: super::margin::splits_digits(provider, model),
                ..Self::with(Encoding::O200kBase, true)
            };
        }
        let m = m.strip_prefix("openai/").unwrap_or(m);
        let cl100k = ["gpt-4-", "gpt-3.5", "gpt-35"]
            .iter()
            .any(|p| m.starts_with(p))
            || m == "gpt-4";
        if cl100k {
            Self::with(Encoding::Cl100kBase, false)
        } else {
            // gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o-series, and any newer name: o200k_base.
            Self::with(Encoding::O200kBase, false)
        }
    }

    fn with(encoding: Encoding, approximate: bool) -> Self {
        Self {
            encoding,
            margin_percent: 0,
            approximate,
            single_digits: false,
        }
    }

    /// Counts text as the model would see it (special-token text is ordinary text).
    pub fn count(&self, text: &str) -> u32 {
        let raw = self.cached(text, usize::MAX, || self.count_pieces(text, usize::MAX));
        self.with_margin(raw.unwrap_or(usize::MAX))
    }

    /// The count of `text`, or `None` as soon as it is known to exceed `limit`: text too long to
    /// fit is never tokenised in full, only up to about `limit` tokens.
    pub fn count_within(&self, text: &str, limit: u32) -> Option<u32> {
        // ceil(raw * k / 100) <= limit  <=>  raw <= limit * 100 / k (rounded down).
        let raw_limit = u64::from(limit) * 100 / (100 + u64::from(self.margin_percent));
        let raw_limit = usize::try_from(raw_limit).unwrap_or(usize::MAX);
        let raw = self.cached(text, raw_limit, || self.count_pieces(text, raw_limit))?;
        (raw <= raw_limit).then(|| self.with_margin(raw))
    }

    /// The raw count of `text` from the process-wide cache, or from `count` (`None`: over
    /// `limit`, not counted in full). A cached count may exceed the caller's limit.
    fn cached(
        &self,
        text: &str,
        limit: usize,
        count: impl FnOnce() -> Option<usize>,
    ) -> Option<usize> {
        if text.len() < token_cache::MIN_CACHED_BYTES {
            return Some(self.count_short(text));
        }
        let Some(cache) = token_cache::global() else {
            return count();
        };
        let limit = u32::try_from(limit).unwrap_or(u32::MAX);
        let counted = cache.count_with(self.scheme() as u8, text, limit, || {
            count().map(|n| u32::try_from(n).unwrap_or(u32::MAX))
        })?;
        Some(counted as usize)
    }

    /// A text too short for the process-wide cache, counted whole once per thread and then
    /// remembered. Counting borrows the thread's memo itself, so the entry is written after.
    fn count_short(&self, text: &str) -> usize {
        let bytes = text.as_bytes();
        if let Some(n) = PIECES.with(|memo| memo.borrow().texts.get(self.scheme(), bytes)) {
            return n;
        }
        let n = self.count_pieces(text, usize::MAX).unwrap_or(usize::MAX);
        PIECES.with(|memo| memo.borrow_mut().texts.insert(self.scheme(), bytes, n));
        n
    }

    /// The count of `text`, piece by piece as the pre-tokenizer cuts it, or `None` once it
    /// exceeds `limit`. Short pieces (words, mostly) are counted through a per-thread memo: the
    /// encoder's set-up for each costs more than its counting.
    fn count_pieces(&self, text: &str, limit: usize) -> Option<usize> {
        // No normalisation: neither encoding asks for NFC, so bpe-openai's is a no-op.
        let encoder = self.encoding.tokenizer();
        let bpe = encoder.bpe();
        let mut total = 0usize;
        PIECES.with(|memo| {
            let mut memo = memo.borrow_mut();
            let over = encoder.split(text, |piece| {
                let bytes = piece.as_bytes();
                // The pre-tokenizer cuts digit runs into pieces of at most three.
                total += if self.single_digits && bytes.iter().all(u8::is_ascii_digit) {
                    bytes.len()
                } else {
                    memo.count(self.encoding, bpe, bytes)
                };
                if total > limit {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            });
            over.is_none().then_some(total)
        })
    }

    /// Which table of counts this counter's raw counts belong to.
    fn scheme(&self) -> usize {
        self.encoding as usize + 2 * usize::from(self.single_digits)
    }

    /// The count of `text`, made of parts joined by `join_len` bytes starting at each of
    /// `joins` (ascending): what `count(text)` gives, mostly from the parts' own counts (known
    /// from the cache when they were counted before) and the few lines around each join.
    ///
    /// It rests on where the pre-tokenizer must cut: right after a `\n` followed by an ASCII
    /// letter or digit (`is_cut`), whatever comes before or after. There, a text's count is the
    /// sum of the counts of its two sides, so each part is split at its first and last such
    /// place; the inner spans keep the part's count minus its edges, and each stretch from the
    /// last cut of one part to the first cut of the next (joins included) is counted as it is.
    pub fn count_joined(&self, text: &str, joins: &[usize], join_len: usize) -> u32 {
        let Some(parts) = joined_parts(text, joins, join_len) else {
            return self.count(text);
        };
        let raw = |t: &str| {
            self.cached(t, usize::MAX, || self.count_pieces(t, usize::MAX))
                .unwrap_or(usize::MAX)
        };
        let last = parts.len() - 1;
        let mut total = 0usize;
        // The start of the stretch carried over the joins, in `text`.
        let mut stretch = 0;
        for (i, part) in parts.iter().enumerate() {
            let p = &text[part.clone()];
            let Some((head, tail)) = edges(p, i == 0, i == last) else {
                // No cut inside worth using: the whole part goes with the stretch.
                continue;
            };
            total = total.saturating_add(raw(&text[stretch..part.start + head]));
            if head < tail {
                // raw(p) = raw(p[..head]) + raw(p[head..tail]) + raw(p[tail..]).
                let inner = raw(p)
                    .saturating_sub(raw(&p[..head]))
                    .saturating_sub(raw(&p[tail..]));
                total = total.saturating_add(inner);
            }
            stretch = part.start + tail;
        }
        total = total.saturating_add(raw(&text[stretch..]));
        self.with_margin(total)
    }

    fn with_margin(&self, raw: usize) -> u32 {
        let raw = raw as u64;
        let counted = (raw * (100 + u64::from(self.margin_percent))).div_ceil(100);
        u32::try_from(counted).unwrap_or(u32::MAX)
    }

    /// A message's tokens including the chat framing around it.
    pub fn count_message(&self, text: &str) -> u32 {
        self.count(text).saturating_add(PER_MESSAGE_OVERHEAD)
    }

    /// A chat message's tokens: its counted text, its framing and each call's.
    pub fn count_chat(&self, message: &ChatMessage) -> u32 {
        self.count(&message.counted_text())
            .saturating_add(framing(message))
    }

    pub fn encoding(&self) -> &'static str {
        self.encoding.name()
    }

    /// The encoding counted with.
    pub fn encoder(&self) -> Encoding {
        self.encoding
    }

    /// What the report says counted: the encoding, or `approximation` when it stands in.
    pub fn name(&self) -> &'static str {
        if self.approximate {
            "approximation"
        } else {
            self.encoding.name()
        }
    }

    pub fn is_approximate(&self) -> bool {
        self.approximate
    }

    /// The percent added to approximate counts (0 for exact ones).
    pub fn margin_percent(&self) -> u32 {
        self.margin_percent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_call_of_a_message_is_framed_as_a_message_is() {
        let counter = TokenCounter::for_model(Provider::OPENAI, "gpt-4o");
        let mut turn = ChatMessage::text(crate::llm::ChatRole::Assistant, "Reading.".into());
        let bare = counter.count_chat(&turn);
        assert_eq!(bare, counter.count("Reading.") + PER_MESSAGE_OVERHEAD);
        let call = |id: &str| crate::llm::ToolUse {
            id: id.into(),
            name: "read_file".into(),
            arguments: serde_json::Map::new(),
        };
        turn.calls = vec![call("call_1"), call("call_2")];
        // On the Responses API each call is an input item of its own.
        let framed = counter.count(&turn.counted_text()) + 3 * PER_MESSAGE_OVERHEAD;
        assert_eq!(counter.count_chat(&turn), framed);
        assert!(turn.counted_text().contains("call_1 read_file{}"));
    }

    #[test]
    fn a_message_costs_its_framing_and_its_role_as_openai_counts_it() {
        // The API reference's example: {"role":"user","content":"Hello!"} is 9 prompt tokens.
        let counter = TokenCounter::for_model(Provider::OPENAI, "gpt-4o");
        assert_eq!(
            counter.count("Hello!") + PER_MESSAGE_OVERHEAD + REPLY_PRIMING,
            9
        );
    }

    #[test]
    fn digits_count_one_token_each_for_models_that_split_them() {
        let qwen = TokenCounter::for_model(Provider::OLLAMA, "qwen2.5-coder:7b")
            .with_approximation_margin(0);
        let llama3 =
            TokenCounter::for_model(Provider::OLLAMA, "llama3.1:8b").with_approximation_margin(0);
        assert_eq!(llama3.count("1234567890"), 4, "o200k groups three digits");
        assert_eq!(qwen.count("1234567890"), 10);
        assert_eq!(
            qwen.count("build 42 failed"),
            llama3.count("build 42 failed") + 1
        );
        // Long enough for the process-wide cache: each way of counting keeps its own entry.
        let log: String = (0..40)
            .map(|i| format!("2025-03-01 12:{i:02}:07 status=5{i:02} took 0.{i:04}s\n"))
            .collect();
        let grouped = llama3.count(&log);
        let single = qwen.count(&log);
        assert!(single > grouped * 13 / 10, "{single} vs {grouped}");
        assert_eq!(qwen.count(&log), single);
        assert_eq!(llama3.count(&log), grouped);
        assert_eq!(qwen.count_within(&log, single), Some(single));
        assert_eq!(qwen.count_within(&log, single - 1), None);
        let gpt = TokenCounter::for_model(Provider::OPENAI, "gpt-4o");
        assert_eq!(gpt.count(&log), grouped, "exact counts are untouched");
    }

    #[test]
    fn openai_models_get_their_own_encoding() {
        let enc = |m| TokenCounter::for_model(Provider::OPENAI, m).encoding();
        assert_eq!(enc("gpt-4"), "cl100k_base");
        assert_eq!(enc("gpt-4-turbo"), "cl100k_base");
        assert_eq!(enc("gpt-3.5-turbo"), "cl100k_base");
        assert_eq!(enc("gpt-4o"), "o200k_base");
        assert_eq!(enc("gpt-4.1-mini"), "o200k_base");
        assert_eq!(enc("o3-mini"), "o200k_base");
        assert!(!TokenCounter::for_model(Provider::OPENAI, "gpt-4o").is_approximate());
    }

    #[test]
    fn models_without_a_public_tokenizer_are_over_counted() {
        let exact = TokenCounter::for_model(Provider::OPENAI, "gpt-4o");
        let approx = TokenCounter::for_model(Provider::ANTHROPIC, "claude-sonnet-4-5");
        let text = "fn main() { println!(\"hello, world\"); }\n".repeat(20);
        assert!(approx.is_approximate());
        assert!(approx.count(&text) > exact.count(&text));
    }

    /// tiktoken is the reference the counts must equal.
    fn reference(encoding: Encoding, text: &str) -> usize {
        let bpe = match encoding {
            Encoding::O200kBase => tiktoken_rs::o200k_base_singleton(),
            Encoding::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
        };
        bpe.encode_ordinary(text).len()
    }

    #[test]
    fn ordinary_text_is_counted_as_tiktoken_counts_it() {
        let text =
            "fn main() {\n    let greeting = \"héllo, wörld\";\n}\n\n\t  // 日本語 ok?  \r\n"
                .repeat(200);
        for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
            let counter = TokenCounter::new(Provider::OPENAI, "gpt-4o", Some(encoding));
            assert_eq!(counter.count(&text) as usize, reference(encoding, &text));
        }
    }

    #[test]
    fn long_unbroken_runs_are_counted_exactly() {
        let counter = TokenCounter::for_model(Provider::OPENAI, "gpt-4o");
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
            assert_eq!(
                counter.count(&blob) as usize,
                reference(Encoding::O200kBase, &blob)
            );
        }
    }

    #[test]
    fn counting_within_a_limit_is_exact_or_stops_early() {
        let counter = TokenCounter::for_model(Provider::OPENAI, "gpt-4o");
        let text = "impl Foo {\n    fn bar(&self) -> u32 {\n        42\n    }\n}\n\n// done.\n"
            .repeat(2000);
        let whole = counter.count(&text);
        assert_eq!(counter.count_within(&text, u32::MAX), Some(whole));
        assert_eq!(counter.count_within(&text, whole), Some(whole));
        assert_eq!(counter.count_within(&text, whole - 1), None);
        assert_eq!(counter.count_within(&text, 0), None);
        assert_eq!(counter.count_within("", 0), Some(0));
    }

    #[test]
    fn an_operator_margin_applies_to_approximate_counts_only() {
        let text = "let x = compute(a, b) + 1;\n".repeat(100);
        let raw = TokenCounter::for_model(Provider::OPENAI, "gpt-4o").count(&text);
        let claude = TokenCounter::for_model(Provider::ANTHROPIC, "claude-sonnet-4-5");
        assert_eq!(
            claude.with_approximation_margin(50).count(&text),
            raw * 3 / 2
        );
        assert_eq!(claude.with_approximation_margin(0).count(&text), raw);
        assert!(claude.with_approximation_margin(0).is_approximate());
        let gpt = TokenCounter::for_model(Provider::OPENAI, "gpt-4o").with_approximation_margin(50);
        assert_eq!(gpt.count(&text), raw);
    }

    #[test]
    fn counting_within_a_limit_respects_the_margin() {
        let counter = TokenCounter::for_model(Provider::ANTHROPIC, "claude-sonnet-4-5");
        let text = "let x = compute(a, b) + 1;\n".repeat(300);
        let whole = counter.count(&text);
        assert_eq!(counter.count_within(&text, whole), Some(whole));
        assert_eq!(counter.count_within(&text, whole - 1), None);
    }

    #[test]
    fn a_named_encoding_overrides_the_model_default() {
        let counter = TokenCounter::new(Provider::OPENAI, "gpt-4o", Some(Encoding::Cl100kBase));
        assert_eq!(counter.encoding(), "cl100k_base");
        let claude = TokenCounter::new(Provider::ANTHROPIC, "claude-x", Some(Encoding::Cl100kBase));
        assert!(claude.is_approximate());
    }

    #[test]
    fn special_token_text_is_counted_as_plain_text() {
        let counter = TokenCounter::for_model(Provider::OPENAI, "gpt-4o");
        assert!(counter.count("<|endoftext|>") > 1);
    }

    #[test]
    fn joins_that_do_not_describe_the_text_are_counted_whole() {
        let counter = TokenCounter::for_model(Provider::OPENAI, "gpt-4o");
        let text = "fn a() {}\n\nlet b = 1;\n\nÉté";
        let whole = counter.count(text);
        for joins in [vec![], vec![30], vec![11, 9], vec![24], vec![usize::MAX]] {
            assert_eq!(counter.count_joined(text, &joins, 2), whole, "{joins:?}");
        }
        assert_eq!(counter.count_joined(text, &[9, 21], 2), whole);
    }

    proptest::proptest! {
        /// A count from the cache or the piece memo is what counting afresh gives: the first
        /// call fills them, the second reads them, and the tokenizer itself is the reference.
        #[test]
        fn remembered_counts_are_the_counts(
            parts in proptest::collection::vec("([a-zA-Z]{1,8}|[0-9]{1,5}|[ \t\n]{1,3}|[.,;(){}\"-]{1,2}|[éß日本Ω]{1,2})*", 1..6),
            limit in 0u32..400,
        ) {
            // Long enough for the process-wide cache, and short enough to count every piece.
            let text = parts.join(" ").repeat(8);
            for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
                let counter = TokenCounter::new(Provider::OPENAI, "gpt-4o", Some(encoding));
                let fresh = encoding.tokenizer().tokenizer.count(text.as_str());
                proptest::prop_assert_eq!(counter.count(&text) as usize, fresh);
                proptest::prop_assert_eq!(counter.count(&text) as usize, fresh);
                let within = (fresh <= limit as usize).then_some(fresh as u32);
                proptest::prop_assert_eq!(counter.count_within(&text, limit), within);
            }
        }

        /// What `count_joined` rests on: at every cut (`is_cut`) a text's count is the sum of
        /// its two sides' counts, for each encoding, whatever surrounds the cut.
        #[test]
        fn a_text_counts_as_its_two_sides_at_every_cut(
            text in "([a-zA-Z]{1,6}|[0-9]{1,4}|'(s|t|re|ll|d|S)|[ \t\r\n]{1,4}|\n[ \t]{0,3}[a-z0-9/}'(]|[.,:;(){}\"!?/\\_+=<>-]{1,3}|[éßÆ日本語Ωж]{1,2}|[\u{a0}\u{2003}\u{85}]|\u{1F600}|\u{301})*"
        ) {
            for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
                let tokenizer = &encoding.tokenizer().tokenizer;
                let whole = tokenizer.count(text.as_str());
                for at in (1..text.len()).filter(|&at| is_cut(text.as_bytes(), at)) {
                    let sides = tokenizer.count(&text[..at]) + tokenizer.count(&text[at..]);
                    proptest::prop_assert_eq!(sides, whole, "cut at {} of {:?}", at, text);
                }
            }
        }

        /// A message merged from parts counts what counting it afresh gives, exact counters and
        /// approximate ones alike, with the parts counted before (as the budget does) or not.
        #[test]
        fn a_joined_text_counts_as_counting_it_afresh(
            parts in proptest::collection::vec("([a-zA-Z]{1,6}|[0-9]{1,4}|[ \t\n]{1,3}|\n[ \t]{0,2}[a-zA-Z0-9/}]|[.,;(){}\"/-]{1,2}|[éß日本Ω\u{a0}]{1,2})*", 2..5),
            repeat in 1usize..40,
            join in "(\n\n| |\n|)",
            counted_before in proptest::bool::ANY,
        ) {
            // Long parts too, for the process-wide cache and for cuts far from the joins.
            let parts: Vec<String> = parts.iter().enumerate()
                .map(|(i, p)| if i % 2 == 0 { p.repeat(repeat) } else { p.clone() })
                .collect();
            let mut text = String::new();
            let mut joins = Vec::new();
            for (i, part) in parts.iter().enumerate() {
                if i > 0 {
                    joins.push(text.len());
                    text.push_str(&join);
                }
                text.push_str(part);
            }
            for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
                let exact = TokenCounter::new(Provider::OPENAI, "gpt-4o", Some(encoding));
                let approximate = TokenCounter::new(Provider::ANTHROPIC, "claude-x", Some(encoding));
                let fresh = encoding.tokenizer().tokenizer.count(text.as_str());
                for counter in [exact, approximate] {
                    if counted_before {
                        for part in &parts {
                            counter.count(part);
                        }
                    }
                    proptest::prop_assert_eq!(
                        counter.count_joined(&text, &joins, join.len()),
                        counter.with_margin(fresh)
                    );
                }
            }
        }

        // Mixed scripts, case changes, contractions, digit runs and every kind of whitespace:
        // the places where pre-tokenisers disagree if they disagree anywhere.
        #[test]
        fn counts_equal_tiktoken_on_any_text(
            text in "([a-zA-Z]{1,8}|[0-9]{1,5}|'(s|t|re|ll|d|S|LL)|[ \t\r\n]{1,4}|[.,:;(){}\"!?/\\_+=<>-]{1,3}|[éßÆ日本語Ωж]{1,3}|\u{1F600}|\u{301})*"
        ) {
            for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
                let counter = TokenCounter::new(Provider::OPENAI, "gpt-4o", Some(encoding));
                proptest::prop_assert_eq!(counter.count(&text) as usize, reference(encoding, &text));
            }
        }
    }
}
