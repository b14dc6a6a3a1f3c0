//! One ReAct step, knowing nothing of HTTP: fit the prompt into the budget, call the model once
//! (or take the client's `mock_response`), parse the output, apply the iteration limit and
//! return the thought, the decision and the updated conversation.

pub mod budget;
pub mod context;
pub mod decide;
mod error;
pub mod history;
mod input;
mod limits;
mod margin;
mod output;
pub mod parse;
pub mod prompt;
pub mod schema_limits;
mod summary;
pub mod token_cache;
pub mod tokens;
pub mod tools;
pub mod truncate;
pub mod workspace;

use crate::llm::bounded::{is_call_id, MAX_CALLS_PER_TURN, MAX_REASONING_BYTES};
use crate::llm::{
    ChatMessage, ChatRequest, Completion, FinishReason, LlmClients, LlmError, Piece, PromptCache,
    Provider, ReasoningState, Usage,
};
use crate::runtime::cpu;
use budget::{Candidates, Overflow};
use context::{ContextItem, ContextReport, ContextSource, Excluded};
pub use decide::Call;
use decide::Valid;
pub use error::StepError;
use history::{timestamp_now, Role, ToolCall, Turn};
pub use input::{ConversationSummary, HistoryStrategy, LlmConfig, StepInput, ToolMode};
pub use output::{Outcome, PromptPreview, StepOutput, Termination};
use tokens::TokenCounter;

/// What a streaming client is told while the step runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Live {
    /// The provider accepted the call: from here on, failures arrive inside the stream.
    Started,
    Thought(String),
    Answer(String),
    /// The output streamed so far was not a valid step (the reason): it is discarded, and a
    /// repair round's output streams next.
    Retry(String),
}

pub type LiveSender = tokio::sync::mpsc::Sender<Live>;

/// Bytes per piece when a `mock_response` is streamed, as a model's tokens arrive; a long one
/// comes in at most [`MOCK_PIECES`] pieces, so that 1 MB is not 125,000 events (500 such streams
/// at once once spent the step deadline on events alone).
const MOCK_PIECE_BYTES: usize = 8;
const MOCK_PIECES: usize = 256;

/// One step, answered by its deadline whatever the upstream does.
///
/// The input comes boxed: each layer of this future (the span, the deadline, the step) would
/// otherwise keep its own copy of it, about 3 KiB per step waiting on the upstream.
/// The session id is the client's text, logged with every line inside the span: the key is
/// taken out of it (not key shapes: a session id is often a UUID, which is shaped like one).
/// The model is named by the request's span around this one, scrubbed there once.
#[tracing::instrument(name = "react step", skip_all, fields(
    session_id = %input.key.as_ref().map_or_else(|| input.session_id.clone(), |k| k.redact_from(&input.session_id)),
))]
pub async fn run(
    mut input: Box<StepInput>,
    llm: &LlmClients,
    live: Option<LiveSender>,
) -> Result<StepOutput, StepError> {
    let _in_flight = crate::telemetry::metrics::InFlight::enter();
    let notices = std::mem::take(&mut input.notices);
    let deadline = input.deadline;
    let started = std::time::Instant::now();
    let budget = deadline.saturating_duration_since(tokio::time::Instant::now());
    // What the model calls billed, kept outside the step: a step the deadline cuts short
    // still reports the calls it paid for.
    let billed = Billed::default();
    let mut result = tokio::time::timeout_at(deadline, step(input, llm, live, &billed))
        .await
        .unwrap_or_else(|_| Err(StepError::Deadline(budget).spent(billed.get())));
    if let Ok(output) = &mut result {
        output.warnings.splice(0..0, notices);
    }
    let metrics = crate::telemetry::metrics::global();
    metrics
        .step_seconds
        .observe(started.elapsed().as_secs_f64());
    use crate::telemetry::metrics::Metrics;
    match &result {
        Ok(output) => {
            count_tokens(metrics, output.usage.as_ref());
            // Summed per fate first: one update of the family per fate, not per item.
            let mut fates: Vec<(&'static str, u64)> = Vec::with_capacity(4);
            for item in &output.context_report.items {
                let fate = item.fate.as_str();
                match fates.iter_mut().find(|(f, _)| *f == fate) {
                    Some((_, n)) => *n += 1,
                    None => fates.push((fate, 1)),
                }
            }
            for (fate, n) in fates {
                Metrics::count(&metrics.context_items, fate, n);
            }
        }
        Err(error) => {
            if matches!(error.cause(), StepError::InvalidOutput { .. }) {
                Metrics::count(&metrics.parse_outcomes, "invalid", 1);
            }
            count_tokens(metrics, error.usage().as_ref());
        }
    }
    result
}

/// Tokens billed, counted whether the step succeeded or not: failed steps are paid for too.
fn count_tokens(metrics: &crate::telemetry::metrics::Metrics, usage: Option<&Usage>) {
    use crate::telemetry::metrics::Metrics;
    if let Some(usage) = usage {
        Metrics::count(&metrics.tokens, "prompt", usage.prompt_tokens);
        Metrics::count(&metrics.tokens, "completion", usage.completion_tokens);
        let cache = &metrics.prompt_cache_tokens;
        Metrics::count(cache, "read", usage.cached_prompt_tokens.unwrap_or(0));
        Metrics::count(
            cache,
            "write",
            usage.cache_creation_prompt_tokens.unwrap_or(0),
        );
    }
}

async fn step(
    input: Box<StepInput>,
    llm: &LlmClients,
    live: Option<LiveSender>,
    billed: &Billed,
) -> Result<StepOutput, StepError> {
    let counter = counter_for(&input);
    counter.encoder().load_off_worker().await;
    if !input.dry_run {
        if let Some(action) = decide::command(&input.user_query, &input.tools) {
            crate::telemetry::metrics::Metrics::count(
                &crate::telemetry::metrics::global().parse_outcomes,
                "command",
                1,
            );
            let budget = input.llm.prompt_budget();
            return Ok(command_step(*input, action, &counter, budget));
        }
    }
    // An approximate count may be corrected by the provider's own (a refused prompt that
    // reports its size): the context is kept for a second fit.
    let keep_context = counter.is_approximate() && !input.dry_run;
    let shape = Shape::of(&input, &counter)?;
    let fitting = fit_prompt(input, &counter, &shape, keep_context, llm, billed, None);
    let (input, built) = fitting.await?;
    let built = built?;
    if input.dry_run {
        return Ok(dry_run(input, built, &counter));
    }
    let (input, built) = Box::pin(exact_count(input, built, &counter, llm, billed)).await?;
    let built = Box::new(built);
    let first = converse_once(input, llm, live.as_ref(), &counter, &shape, built, billed).await?;
    let (input, built, conversed, ledger) = match first {
        Conversed::Done(input, built, parsed, valid, ledger) => {
            (input, built, (parsed, valid), ledger)
        }
        Conversed::TooLong(input, refused, built, ledger) => {
            let refusal = Refusal {
                refused,
                built,
                ledger,
            };
            Box::pin(refit(input, llm, live.as_ref(), &counter, refusal)).await?
        }
    };
    Ok(finish_step(input, built, conversed, ledger))
}

/// The counter for the request's model, with the operator's margin when one is set.
fn counter_for(input: &StepInput) -> TokenCounter {
    let counter = TokenCounter::new(input.llm.provider, &input.llm.model, input.llm.tokenizer);
    match input.approximation_margin_percent {
        Some(percent) => counter.with_approximation_margin(percent),
        None => counter,
    }
}

/// What a prompt is fitted into, for one counter: whether the tools go natively, the budget
/// their definitions leave to the messages, and the room held for omitted turns.
struct Shape {
    native_tools: Vec<crate::llm::ToolSpec>,
    native: bool,
    budget: u32,
    tools_tokens: u32,
    messages_budget: u32,
    omission_reserve: u32,
}

impl Shape {
    fn of(input: &StepInput, counter: &TokenCounter) -> Result<Self, StepError> {
        let budget = input.llm.prompt_budget();
        let omission_reserve = match input.history_strategy {
            HistoryStrategy::Omit => budget::marker_reserve(counter),
            HistoryStrategy::Summarize => {
                summary::reserve(budget).max(budget::marker_reserve(counter))
            }
        };
        let native = input
            .llm
            .tool_mode
            .is_native(input.llm.provider, input.tools.has_declared());
        let native_tools = if native {
            input.tools.specs()
        } else {
            Vec::new()
        };
        // Tool definitions sent beside the messages take their share of the budget first.
        let tools_tokens = native_tools_tokens(counter, &native_tools);
        let Some(messages_budget) = budget.checked_sub(tools_tokens) else {
            return Err(StepError::ContextOverflow(Overflow {
                budget,
                required: tools_tokens,
            }));
        };
        Ok(Self {
            native_tools,
            native,
            budget,
            tools_tokens,
            messages_budget,
            omission_reserve,
        })
    }
}

/// A prompt fitted into the budget, with what fitting it said and spent.
struct Built {
    prompt: budget::Prompt,
    warnings: Vec<String>,
    summary_usage: Option<Usage>,
    conversation_summary: Option<ConversationSummary>,
}

/// A fitted prompt, or why it does not fit, with the input back either way; the outer error is
/// the CPU pool's, which keeps nothing.
type Fitting = Result<(Box<StepInput>, Result<Built, StepError>), StepError>;

/// Fits the prompt (on the CPU pool unless it is small), summarising omitted turns when asked.
async fn fit_prompt(
    input: Box<StepInput>,
    counter: &TokenCounter,
    shape: &Shape,
    keep_context: bool,
    llm: &LlmClients,
    billed: &Billed,
    earlier: Option<ConversationSummary>,
) -> Fitting {
    let traced = crate::telemetry::traces::phase(|| {
        tracing::trace_span!(target: crate::telemetry::traces::TARGET, "context fit",
            budget = i64::from(shape.budget), used = tracing::field::Empty)
    });
    let (input, fitted) = fit_messages(input, counter, shape, keep_context).await?;
    let fitted = match fitted {
        Ok(fitted) => fitted,
        Err(o) => {
            let overflow = Overflow {
                budget: shape.budget,
                required: o.required + shape.tools_tokens,
            };
            return Ok((input, Err(StepError::ContextOverflow(overflow))));
        }
    };
    let mut warnings = budget_warnings(&fitted, &input.unresolved);
    let omitted = Omitted {
        turns: fitted.omitted_turns,
        room: fitted.omission_room(),
        reserve: shape.omission_reserve,
        earlier,
    };
    let summarized = summarize_omitted(llm, &input, counter, omitted, billed, &mut warnings);
    let (summary_usage, conversation_summary) = summarized.await;
    let mut prompt = fitted.finish(
        counter,
        conversation_summary.as_ref().map(|s| s.text.as_str()),
        counter.encoding(),
    );
    prompt.report.budget = shape.budget;
    prompt.report.used += shape.tools_tokens;
    traced.record("used", i64::from(prompt.report.used));
    let built = Built {
        prompt,
        warnings,
        summary_usage,
        conversation_summary,
    };
    Ok((input, Ok(built)))
}

/// Reads the workspace and fits the prompt's messages into the shape's budget, on the CPU pool
/// unless the request is small.
async fn fit_messages(
    input: Box<StepInput>,
    counter: &TokenCounter,
    shape: &Shape,
    keep_context: bool,
) -> Result<(Box<StepInput>, Result<budget::Fitted, Overflow>), StepError> {
    // Tokenising megabytes of context is CPU work: off the async workers, one build per core.
    // Each thread that tokenises keeps its own regex cache (hundreds of KiB), so thousands of
    // steps in flight must not mean thousands of threads.
    let input_size = PromptInput::of(&input);
    let build = {
        let counter = *counter;
        let (native, messages_budget) = (shape.native, shape.messages_budget);
        let omission_reserve = shape.omission_reserve;
        move || {
            let how = BuildHow {
                native,
                messages_budget,
                omission_reserve,
                keep_context,
            };
            build_prompt(input, counter, how)
        }
    };
    // A small request without a workspace to read builds in microseconds once its counts are
    // cached: the hop to the CPU pool (two thread wake-ups) would cost more than the build.
    Ok(if inline_build(&input_size) {
        build()
    } else {
        cpu::run(build).await.map_err(StepError::Internal)?
    })
}

/// The turns a fitted prompt left out, and what may stand for them.
struct Omitted {
    turns: usize,
    /// The room the prompt kept for what stands for them.
    room: u32,
    reserve: u32,
    /// The summary made by an earlier fit of this step, if any.
    earlier: Option<ConversationSummary>,
}

/// The summary that stands for the omitted turns, and what making it billed, when the request
/// asks for one (`history_strategy: "summarize"`); when none can be made the turns are marked,
/// with a warning.
async fn summarize_omitted(
    llm: &LlmClients,
    input: &StepInput,
    counter: &TokenCounter,
    omitted: Omitted,
    billed: &Billed,
    warnings: &mut Vec<String>,
) -> (Option<Usage>, Option<ConversationSummary>) {
    let summarize = omitted.earlier.is_none()
        && omitted.room > 0
        && input.history_strategy == HistoryStrategy::Summarize;
    if !summarize {
        return (None, omitted.earlier);
    }
    if input.mock_response.is_some() || input.dry_run {
        warnings.push("history_strategy summarize makes a model call; with mock_response or dry_run the omitted turns are marked instead".into());
        return (None, None);
    }
    // Boxed, like the streaming calls below: a future holds room for its largest state,
    // and thousands of plain steps wait on the upstream at once.
    let summarize = summary::summarize(llm, input, counter, omitted.turns, omitted.reserve);
    match Box::pin(summarize).await {
        Ok((made, usage)) => {
            billed.add(usage);
            (usage, Some(made))
        }
        Err(e) => {
            warnings.push(format!("the earlier conversation could not be summarised ({e}); the omitted turns are marked instead"));
            (None, None)
        }
    }
}

/// For a provider that counts prompts itself, when the approximate count came within its margin
/// of the budget (the margin may have cost context the model had room for): fits the prompt
/// without the margin and has the provider count it; when that is over the budget, fits once more
/// with the counts scaled by the provider's figure and has that counted. The first prompt whose
/// exact count fits is sent, reported as counted by the provider; when none does, or a count
/// fails, the prompt fitted with the margin is, with a warning.
async fn exact_count(
    input: Box<StepInput>,
    built: Built,
    counter: &TokenCounter,
    llm: &LlmClients,
    billed: &Billed,
) -> Result<(Box<StepInput>, Built), StepError> {
    let provider = input.llm.provider;
    let Some(name) = provider.api().counter_name() else {
        return Ok((input, built));
    };
    let margin = u64::from(counter.margin_percent());
    let budget = u64::from(built.prompt.report.budget);
    let near = u64::from(built.prompt.report.used) * (100 + margin) > budget * 100;
    if !counter.is_approximate() || input.mock_response.is_some() || !near {
        return Ok((input, built));
    }
    let mut input = input;
    let mut percent = 0;
    let mut why = String::new();
    for _ in 0..2 {
        let scaled = counter.with_approximation_margin(percent);
        let (back, verdict) = count_candidate(input, scaled, &built, llm, billed).await?;
        input = back;
        match verdict {
            Verdict::Fits(mut candidate) => {
                candidate.summary_usage = built.summary_usage;
                candidate.prompt.report.counter = name;
                return Ok((input, candidate));
            }
            Verdict::Over(next) => percent = next,
            Verdict::Keep(reason) => {
                why = reason;
                break;
            }
        }
    }
    if why.is_empty() {
        why = "the provider counted the prompt fitted without the margin, and the one fitted by its count, over the budget".into();
    }
    let mut built = built;
    built
        .warnings
        .push(format!("{why}; the approximate count's margin was kept"));
    Ok((input, built))
}

/// What the provider's count of a candidate prompt says.
#[expect(
    clippy::large_enum_variant,
    reason = "returned once and taken apart at once, never held"
)]
enum Verdict {
    /// It fits: the prompt, its report holding the exact count.
    Fits(Built),
    /// It is over the budget: the margin, in percent, that the count says the next fit needs.
    Over(u32),
    /// No count to go by (why): the prompt fitted with the margin stays.
    Keep(String),
}

/// Fits the prompt with `scaled` and has the provider count it.
async fn count_candidate(
    input: Box<StepInput>,
    scaled: TokenCounter,
    built: &Built,
    llm: &LlmClients,
    billed: &Billed,
) -> Result<(Box<StepInput>, Verdict), StepError> {
    let too_big =
        || Verdict::Keep("by the provider's count the prompt's mandatory parts do not fit".into());
    let Ok(shape) = Shape::of(&input, &scaled) else {
        return Ok((input, too_big()));
    };
    let summary = built.conversation_summary.clone();
    let fitting = fit_prompt(input, &scaled, &shape, true, llm, billed, summary);
    let (input, candidate) = fitting.await?;
    let Ok(mut candidate) = candidate else {
        return Ok((input, too_big()));
    };
    // Copied: this prompt may still be the one sent (a rare path: Claude near its limit).
    let (system, messages) = (
        candidate.prompt.system.clone(),
        candidate.prompt.messages.clone(),
    );
    let cache = prompt_cache(&input, &candidate.prompt, &shape);
    let request = chat_request(&input, system, messages, &shape, cache);
    let key = input.key.as_ref();
    let counted = llm
        .count_tokens(input.llm.provider, &request, key, input.deadline)
        .await;
    let budget = u64::from(shape.budget);
    let used = u64::from(candidate.prompt.report.used).max(1);
    // The service's count without the margin it was fitted with.
    let raw = used * 100 / (100 + u64::from(scaled.margin_percent()));
    let verdict = match counted {
        Ok(None) => Verdict::Keep("the provider has no counter".into()),
        Err(e) => Verdict::Keep(format!("the provider could not count the prompt ({e})")),
        Ok(Some(n)) if n.saturating_mul(2) < raw || n / used > 1000 => Verdict::Keep(format!(
            "the provider's count ({n} tokens) cannot be this prompt's ({raw} by the service's count)"
        )),
        Ok(Some(n)) if n <= budget => {
            let report = &mut candidate.prompt.report;
            report.used = u32::try_from(n).unwrap_or(u32::MAX);
            report.approximate = false;
            report.approximation_margin_percent = 0;
            Verdict::Fits(candidate)
        }
        Ok(Some(n)) => {
            // (100 + p) / 100 = n / raw, and a point to spare.
            let ratio = n.saturating_mul(100).div_ceil(raw.max(1));
            Verdict::Over(u32::try_from(ratio.saturating_sub(100) + 1).unwrap_or(u32::MAX))
        }
    };
    Ok((input, verdict))
}

/// The prompt a dry run shows, and no call.
fn dry_run(input: Box<StepInput>, built: Built, counter: &TokenCounter) -> StepOutput {
    let prompt = built.prompt;
    let preview = PromptPreview {
        system_tokens: prompt.system_tokens,
        messages: prompt
            .messages
            .iter()
            .map(|m| (m.clone(), counter.count_message(&m.counted_text())))
            .collect(),
        system: prompt.system,
    };
    StepOutput {
        session_id: input.session_id,
        thought: String::new(),
        outcome: Outcome::DryRun(preview),
        updated_history: input.history,
        iterations_remaining: input.iterations_left,
        usage: None,
        warnings: built.warnings,
        context_report: prompt.report,
        conversation_summary: built.conversation_summary,
    }
}

/// The chat request for a fitted prompt's system text and messages.
fn chat_request(
    input: &StepInput,
    system: String,
    messages: Vec<ChatMessage>,
    shape: &Shape,
    prompt_cache: Option<PromptCache>,
) -> ChatRequest {
    ChatRequest {
        model: input.llm.model.clone(),
        system,
        messages,
        max_output_tokens: input.llm.reserved_output_tokens,
        temperature: input.llm.temperature,
        stop: vec![prompt::observation_stop(&input.react.tags)],
        tools: shape.native_tools.clone(),
        require_tool: input.react.require_action,
        parallel_tool_calls: input.react.parallel_tool_calls,
        base_url: input.llm.base_url.clone(),
        context_window: Some(input.llm.token_limit),
        reasoning_effort: input.llm.reasoning_effort,
        prompt_cache,
    }
}

/// What the provider needs to cache the prompt's stable part, unless the request turned caching
/// off. The tool definitions come before the system prompt in what providers cache.
fn prompt_cache(input: &StepInput, prompt: &budget::Prompt, shape: &Shape) -> Option<PromptCache> {
    input.llm.prompt_cache.then(|| PromptCache {
        key: prompt_cache_key(&input.session_id),
        system_tokens: shape.tools_tokens + prompt.system_tokens,
        prefix_tokens: shape.tools_tokens + prompt.prefix_tokens,
    })
}

/// The session's cache key (a SHA-256 of its id), the same at every step of a loop, so worked
/// out once per worker.
fn prompt_cache_key(session_id: &str) -> String {
    thread_local! {
        static KEYS: std::cell::RefCell<crate::runtime::memo::Memo<String>> =
            const { std::cell::RefCell::new(crate::runtime::memo::Memo::new()) };
    }
    crate::runtime::memo::remembered(&KEYS, &[session_id], || PromptCache::key_for(session_id))
}

/// How a conversation with the model ended.
#[expect(
    clippy::large_enum_variant,
    reason = "returned once and taken apart at once, never held"
)]
enum Conversed<'b> {
    Done(Box<StepInput>, Built, parse::Parsed, Valid, Ledger<'b>),
    /// The provider refused the prompt as too long on the first call.
    TooLong(Box<StepInput>, LlmError, Built, Ledger<'b>),
}

/// Calls the model with the fitted prompt until its output is a valid step.
async fn converse_once<'b>(
    input: Box<StepInput>,
    llm: &LlmClients,
    live: Option<&LiveSender>,
    counter: &TokenCounter,
    shape: &Shape,
    mut built: Box<Built>,
    billed: &'b Billed,
) -> Result<Conversed<'b>, StepError> {
    let mut ledger = Ledger {
        usage: built.summary_usage,
        warnings: std::mem::take(&mut built.warnings),
        used: built.prompt.report.used,
        budget: shape.budget,
        billed,
        reasoning: ReasoningState::default(),
    };
    // The request lives in the call's future only: a local here would keep room for it in
    // this future too, for as long as the model takes (and the prompt is built boxed, for
    // the same reason).
    let talk = {
        // Moved, not copied: after the request, only the prompt's report is read.
        let cache = prompt_cache(&input, &built.prompt, shape);
        let system = std::mem::take(&mut built.prompt.system);
        let messages = std::mem::take(&mut built.prompt.messages);
        let mut request = Box::new(chat_request(&input, system, messages, shape, cache));
        let adjusted = input.llm.provider.api().adjust(&mut request);
        ledger.warnings.extend(adjusted);
        converse(input, llm, live, counter, request, &mut ledger)
    };
    match talk.await {
        Ok(Talk::Valid(input, parsed, valid)) => {
            Ok(Conversed::Done(input, *built, parsed, valid, ledger))
        }
        Ok(Talk::TooLong(input, refused)) => Ok(Conversed::TooLong(input, refused, *built, ledger)),
        // Whatever ended the step, the calls made so far were billed: the error reports them,
        // and the prompt they were made with.
        Err(e) => Err(e.spent(ledger.usage).reported(&built.prompt.report)),
    }
}

/// A first call the provider refused as too long, with the prompt it refused.
struct Refusal<'b> {
    refused: LlmError,
    built: Built,
    ledger: Ledger<'b>,
}

impl Refusal<'_> {
    /// The refusal as the step's error: 422 `context_overflow`, with the report of the prompt
    /// that was refused.
    fn into_error(self) -> StepError {
        StepError::Llm(self.refused)
            .spent(self.ledger.usage)
            .reported(&self.built.prompt.report)
    }
}

/// Extra percent on top of the ratio the provider's count gave, for what the ratio of one
/// prompt does not say about another.
const REFIT_ROOM_PERCENT: u64 = 3;

/// After a refusal as too long that says the prompt's size by the provider's count: fits the
/// prompt again with the service's approximate counts scaled by the provider's, and calls once
/// more. An exact count, or a refusal that names no size, is answered as it is.
async fn refit<'b>(
    input: Box<StepInput>,
    llm: &LlmClients,
    live: Option<&LiveSender>,
    counter: &TokenCounter,
    first: Refusal<'b>,
) -> Result<(Box<StepInput>, Built, (parse::Parsed, Valid), Ledger<'b>), StepError> {
    let used = u64::from(first.built.prompt.report.used);
    let reported = match &first.refused {
        LlmError::ContextTooLong {
            prompt_tokens: Some(n),
            ..
        } => *n,
        _ => 0,
    };
    // A count a thousand times the service's is no count of this prompt.
    let plausible = reported > used && used > 0 && reported / used <= 1000;
    if !counter.is_approximate() || !plausible {
        return Err(first.into_error());
    }
    // (100 + new) / 100 = (100 + old) / 100 × reported / used, with room to spare.
    let scaled = (100 + u64::from(counter.margin_percent())).saturating_mul(reported) / used
        + REFIT_ROOM_PERCENT;
    let percent = u32::try_from(scaled.saturating_sub(100)).unwrap_or(u32::MAX);
    let counter = counter.with_approximation_margin(percent);
    let shape = Shape::of(&input, &counter).map_err(|e| e.reported(&first.built.prompt.report))?;
    let Refusal { built, ledger, .. } = first;
    let fitting = fit_prompt(
        input,
        &counter,
        &shape,
        false,
        llm,
        ledger.billed,
        built.conversation_summary,
    );
    let (input, rebuilt) = fitting.await?;
    let mut rebuilt = rebuilt?;
    rebuilt.summary_usage = ledger.usage;
    // The first prompt's warnings described the prompt that was refused.
    let mut warnings = Vec::new();
    warnings.push(format!(
        "the provider counted {reported} prompt tokens where the service counted {used} and refused the prompt as too long; it was fitted again with counts scaled by that ratio ({percent} % margin)"
    ));
    warnings.append(&mut rebuilt.warnings);
    rebuilt.warnings = warnings;
    let rebuilt = Box::new(rebuilt);
    match converse_once(input, llm, live, &counter, &shape, rebuilt, ledger.billed).await? {
        Conversed::Done(input, built, parsed, valid, ledger) => {
            Ok((input, built, (parsed, valid), ledger))
        }
        Conversed::TooLong(_, refused, built, ledger) => Err(Refusal {
            refused,
            built,
            ledger,
        }
        .into_error()),
    }
}

/// The step's answer from a valid output.
fn finish_step(
    mut input: Box<StepInput>,
    built: Built,
    (parsed, valid): (parse::Parsed, Valid),
    ledger: Ledger<'_>,
) -> StepOutput {
    let Ledger {
        usage,
        mut warnings,
        reasoning,
        ..
    } = ledger;
    warnings.extend(parsed.warnings);
    let outcome = match valid {
        Valid::Action { .. } if input.iterations_left == 1 => {
            warnings.push(
                "the model proposed a tool call on its last step; a summary was returned instead"
                    .into(),
            );
            Outcome::Answer {
                text: limits::summary(&input.history, &parsed.thought),
                termination: Termination::MaxIterations,
            }
        }
        valid => Outcome::from(valid),
    };
    let mut updated_history = updated_history(&mut input, &parsed.thought, &outcome);
    let thought = with_reasoning(&reasoning, parsed.thought);
    if let Some(turn) = updated_history.last_mut().filter(|_| !reasoning.is_empty()) {
        turn.reasoning_state = Some(reasoning);
    }
    StepOutput {
        session_id: input.session_id,
        thought,
        outcome,
        updated_history,
        iterations_remaining: input.iterations_left - 1,
        usage,
        warnings,
        context_report: built.prompt.report,
        conversation_summary: built.conversation_summary,
    }
}

/// The step's thought: what the model reasoned (thinking, `reasoning_content`), then what it
/// wrote as its thought when that says more.
fn with_reasoning(reasoning: &ReasoningState, written: String) -> String {
    let reasoned = reasoning.text();
    if reasoned.is_empty() || reasoned.trim() == written.trim() {
        return written;
    }
    if written.trim().is_empty() {
        return reasoned;
    }
    format!("{reasoned}\n\n{}", written.trim())
}

/// The usage of the calls a step has made so far, where the deadline that stops the step
/// cannot drop it.
#[derive(Default)]
struct Billed(std::sync::Mutex<Option<Usage>>);

impl Billed {
    fn add(&self, usage: Option<Usage>) {
        if let Ok(mut sum) = self.0.lock() {
            *sum = add_usage(*sum, usage);
        }
    }

    fn get(&self) -> Option<Usage> {
        self.0.lock().ok().and_then(|sum| *sum)
    }
}

/// What decides where a prompt is built: how much text it tokenizes, and whether it reads files.
struct PromptInput {
    bytes: usize,
    reads_files: bool,
}

impl PromptInput {
    fn of(input: &StepInput) -> Self {
        let context: usize = input.context.iter().map(|i| i.content.len()).sum();
        let history: usize = input.history.iter().map(|t| t.content.len()).sum();
        Self {
            bytes: context + history + input.tools_segment.len() + input.user_query.len(),
            reads_files: input.workspace.is_some(),
        }
    }
}

/// Prompts under this many bytes of text are built on the HTTP worker: at most a millisecond or
/// two when nothing is cached, microseconds when it is.
const INLINE_PROMPT_BYTES: usize = 32 * 1024;

fn inline_build(size: &PromptInput) -> bool {
    !size.reads_files && size.bytes <= INLINE_PROMPT_BYTES
}

/// Reads the workspace's files into the input, then fits the prompt into the budget. The input
/// goes along and comes back: the build may run on the CPU pool, which must own what it reads.
/// How one build fits the prompt.
struct BuildHow {
    native: bool,
    messages_budget: u32,
    omission_reserve: u32,
    /// The context stays in the input for a second fit.
    keep_context: bool,
}

fn build_prompt(
    mut input: Box<StepInput>,
    counter: TokenCounter,
    how: BuildHow,
) -> (Box<StepInput>, Result<budget::Fitted, budget::Overflow>) {
    // Taken: a second fit must not read the files again.
    if let Some(ws) = input.workspace.take() {
        resolve_from_workspace(&ws, &mut input);
    }
    let head = system_head(&input.tools_segment, &input.react.tags, how.native);
    let candidates = Candidates {
        head: &head,
        items: &input.context,
        unresolved: &input.unresolved,
        history: &input.history,
        query: &input.user_query,
        order: &input.context_order,
        max_observation_tokens: input.max_observation_tokens,
        omission_reserve: how.omission_reserve,
        tags: &input.react.tags,
        native: how.native,
        notice: (input.iterations_left == 1).then_some(prompt::LAST_STEP),
    };
    let fitted = budget::fit(&counter, how.messages_budget, &candidates);
    // The prompt now holds what fitted; unless it may be fitted again, the step need not keep
    // the context (up to the body limit) a second time while it waits on the model.
    if !how.keep_context {
        input.context = Vec::new();
        input.tools_segment = String::new();
    }
    (input, fitted)
}

/// The system prompt's head: the same at every step of a loop, so worked out once per worker.
fn system_head(tools_segment: &str, tags: &parse::Tags, native: bool) -> std::sync::Arc<str> {
    thread_local! {
        static HEADS: std::cell::RefCell<crate::runtime::memo::Memo<std::sync::Arc<str>>> =
            const { std::cell::RefCell::new(crate::runtime::memo::Memo::new()) };
    }
    let key = [
        tools_segment,
        &tags.thought,
        &tags.action,
        &tags.observation,
        &tags.final_answer,
        if native { "native" } else { "text" },
    ];
    crate::runtime::memo::remembered(&HEADS, &key, || {
        prompt::system_head(tools_segment, tags, native).into()
    })
}

/// What the step's model calls have added up to so far.
struct Ledger<'b> {
    /// Every call's usage, summed: the summary call and the repair rounds included.
    usage: Option<Usage>,
    warnings: Vec<String>,
    /// Prompt tokens counted against the budget, repair rounds included.
    used: u32,
    budget: u32,
    billed: &'b Billed,
    /// The reasoning behind the output the step answers with.
    reasoning: ReasoningState,
}

/// How a conversation with the model ended, when it did not fail.
#[expect(
    clippy::large_enum_variant,
    reason = "returned once and taken apart at once, never held"
)]
enum Talk {
    Valid(Box<StepInput>, parse::Parsed, Valid),
    /// The first call was refused as too long: the prompt may be fitted again.
    TooLong(Box<StepInput>, LlmError),
}

/// Asks the model (or takes the mock) until its output is a valid step, with a repair round
/// after each invalid one while any are left. Every call's usage goes into the ledger before
/// anything can fail, so an error still reports what was spent.
async fn converse(
    mut input: Box<StepInput>,
    llm: &LlmClients,
    live: Option<&LiveSender>,
    counter: &TokenCounter,
    mut request: Box<ChatRequest>,
    ledger: &mut Ledger<'_>,
) -> Result<Talk, StepError> {
    let mut repairs_left = input.react.max_repair_attempts;
    loop {
        let first = repairs_left == input.react.max_repair_attempts;
        // Boxed at once, and what is read from it kept in the block below: a local that is
        // borrowed keeps its room in the future through every later call.
        let mut completion = Box::new(match call_model(&input, llm, live, &request).await {
            Err(StepError::Llm(refused @ LlmError::ContextTooLong { .. })) if first => {
                return Ok(Talk::TooLong(input, refused));
            }
            called => called?,
        });
        let why = {
            if completion.usage.is_none() && input.mock_response.is_none() {
                completion.usage = Some(own_count(counter, ledger.used, &completion));
            }
            if first {
                if let Some(warning) = margin_check(counter, ledger.used, completion.usage.as_ref())
                {
                    ledger.warnings.push(warning);
                }
            }
            ledger.usage = add_usage(ledger.usage, completion.usage);
            ledger.billed.add(completion.usage);
            carriable(&completion, input.llm.provider)?;
            returnable_calls(&mut completion, &mut ledger.warnings);
            let finish =
                finish_reason(&completion.finish, input.key.as_ref(), &mut ledger.warnings);
            let cut_off = completion.finish == FinishReason::Length;
            let (back, completion, reading) = read_output(input, completion).await?;
            input = back;
            let (parsed, verdict) = reading.ok_or(StepError::EmptyOutput(finish))?;
            let raw_output = raw_output(&completion);
            let why = match shortfall(&parsed, verdict, cut_off, &input.react.tags) {
                Ok((valid, thought_warnings)) => {
                    ledger.warnings.extend(thought_warnings);
                    ledger.reasoning = completion.reasoning;
                    count_outcome(&valid, parsed.structured);
                    return Ok(Talk::Valid(input, parsed, valid));
                }
                Err(why) => why,
            };
            // A mock answers the same whatever it is asked: no repair round for it.
            let room = ledger.budget.saturating_sub(ledger.used);
            let repair = (repairs_left > 0 && input.mock_response.is_none())
                .then(|| repair_round(counter, &raw_output, &why, room, &input.react.tags))
                .flatten();
            let Some((messages, tokens)) = repair else {
                return Err(StepError::InvalidOutput { why, raw_output });
            };
            ledger.warnings.push(format!(
                "the model's output was not a valid step ({why}); it was asked again"
            ));
            request.messages.extend(messages);
            ledger.used += tokens;
            repairs_left -= 1;
            crate::telemetry::metrics::Metrics::count(
                &crate::telemetry::metrics::global().parse_outcomes,
                "repair",
                1,
            );
            why
        };
        if let Some(live) = live {
            Box::pin(tell(live, Live::Retry(why))).await?;
        }
    }
}

/// What a step returns is a valid next request: the calls past what a turn may hold were
/// dropped when the reply was read, and an id no provider could take back is replaced by one of
/// the service's (a step never answers with a history its next request would be refused for).
fn returnable_calls(completion: &mut Completion, warnings: &mut Vec<String>) {
    if completion.dropped_calls > 0 {
        warnings.push(format!(
            "the model made {} tool calls; a turn holds at most {MAX_CALLS_PER_TURN}, so the first {MAX_CALLS_PER_TURN} are kept and the other {} dropped",
            MAX_CALLS_PER_TURN + completion.dropped_calls,
            completion.dropped_calls
        ));
    }
    let mut replaced = 0;
    for call in &mut completion.calls {
        if call.id.as_deref().is_some_and(|id| !is_call_id(id)) {
            call.id = None;
            replaced += 1;
        }
    }
    if replaced > 0 {
        warnings.push(format!(
            "{replaced} tool call id(s) from the provider were not 1 to 256 printable ASCII characters and were replaced by the service's own"
        ));
    }
}

/// A reply whose reasoning must go back with the next request, yet could not fit in one, is no
/// step the loop can go on from: an honest `llm_bad_response` now, not a 413 one step later.
fn carriable(completion: &Completion, provider: Provider) -> Result<(), StepError> {
    let bytes = completion.reasoning.counted_len();
    if bytes <= MAX_REASONING_BYTES {
        return Ok(());
    }
    Err(StepError::Llm(LlmError::BadResponse {
        provider,
        message: format!(
            "the model's reasoning is {bytes} bytes, more than the {MAX_REASONING_BYTES} a step can carry back to it"
        ),
    }))
}

/// One call: the client's `mock_response`, the model's whole reply, or its streamed reply.
async fn call_model(
    input: &StepInput,
    llm: &LlmClients,
    live: Option<&LiveSender>,
    request: &ChatRequest,
) -> Result<Completion, StepError> {
    Ok(match (&input.mock_response, live) {
        (Some(text), live) => {
            if let Some(live) = live {
                Box::pin(stream_mock(text, live, &input.react.tags)).await?;
            }
            Completion {
                text: text.clone(),
                finish: FinishReason::Stop,
                usage: None,
                calls: Vec::new(),
                dropped_calls: 0,
                reasoning: ReasoningState::default(),
            }
        }
        (None, None) => {
            llm.complete(
                input.llm.provider,
                request,
                input.key.as_ref(),
                input.deadline,
            )
            .await?
        }
        (None, Some(live)) => Box::pin(stream_call(llm, input, request, live)).await?,
    })
}

/// The verdict, with two outputs that read as a direct response yet are no answer turned into
/// repair rounds: a reply cut at the output limit before it held a complete action or answer
/// (its tail is missing, so taking it as the answer would hand the user half a sentence), and a
/// reply that is only a thought (the model stopped before deciding anything). A cut-off reply
/// that holds a complete action keeps its verdict, with the cut-short warning.
fn shortfall(
    parsed: &parse::Parsed,
    verdict: Result<(Valid, Vec<String>), String>,
    cut_off: bool,
    tags: &parse::Tags,
) -> Result<(Valid, Vec<String>), String> {
    // An answer is the last thing written, so a cut one is cut inside; an action whose input
    // was left open is whatever the parser closed, not what the model meant.
    let cut_inside = match &verdict {
        Ok((Valid::Answer(_), _)) => true,
        Ok((
            Valid::Action {
                raw_action_string, ..
            },
            _,
        )) => parsed.open_ended || parse::left_open(raw_action_string),
        Err(_) => true,
    };
    if cut_off && (cut_inside || !parsed.structured) {
        return Err(format!(
            "the previous answer was cut off at the output limit (reservedOutputTokens) before it held a complete '{}:' or '{}:'; answer again, shorter",
            tags.action, tags.final_answer
        ));
    }
    let thought_only = !parsed.structured
        && !parsed.thought.trim().is_empty()
        && matches!(&parsed.decision, parse::Decision::Answer(a) if a.trim() == parsed.thought.trim());
    if thought_only {
        return Err(format!(
            "the output held only a '{}:', with no '{}:' and no '{}:'; decide: call a tool or answer",
            tags.thought, tags.action, tags.final_answer
        ));
    }
    verdict
}

fn count_outcome(valid: &Valid, structured: bool) {
    let outcome = match (valid, structured) {
        (Valid::Action { .. }, _) => "action",
        (Valid::Answer(_), true) => "answer",
        (Valid::Answer(_), false) => "unstructured",
    };
    crate::telemetry::metrics::Metrics::count(
        &crate::telemetry::metrics::global().parse_outcomes,
        outcome,
        1,
    );
}

/// What an output says: the step read from it, and whether that step may be proposed.
type Reading = (parse::Parsed, Result<(Valid, Vec<String>), String>);

/// Parses and judges an output: linear in its size, yet megabytes of it (or a native call's
/// arguments checked against a schema) would hold a worker for milliseconds, so those are read
/// on the CPU pool. The input goes along and comes back, as the work must own what it reads.
async fn read_output(
    input: Box<StepInput>,
    completion: Box<Completion>,
) -> Result<(Box<StepInput>, Box<Completion>, Option<Reading>), StepError> {
    let _traced = crate::telemetry::traces::phase(
        || tracing::trace_span!(target: crate::telemetry::traces::TARGET, "parse"),
    );
    if completion.text.len() <= cpu::INLINE_BYTES && completion.calls.is_empty() {
        let reading = read(&input, &completion);
        return Ok((input, completion, reading));
    }
    cpu::run(move || {
        let reading = read(&input, &completion);
        (input, completion, reading)
    })
    .await
    .map_err(StepError::Internal)
}

fn read(input: &StepInput, completion: &Completion) -> Option<Reading> {
    let tags = &input.react.tags;
    let parsed = decide::native_parsed(&completion.text, &completion.calls, tags)
        .or_else(|| parse::parse(&completion.text, tags))?;
    let verdict = decide::judge(&parsed, &input.tools, &input.react);
    Some((parsed, verdict))
}

/// A `/tool …` query that names a known tool: proposed as it is, without a prompt or a model.
fn command_step(
    mut input: StepInput,
    action: Valid,
    counter: &TokenCounter,
    budget: u32,
) -> StepOutput {
    let outcome = Outcome::from(action);
    let updated_history = updated_history(&mut input, "", &outcome);
    StepOutput {
        session_id: input.session_id,
        thought: String::new(),
        outcome,
        updated_history,
        iterations_remaining: input.iterations_left - 1,
        usage: None,
        warnings: vec![
            "the query is a command for a known tool: it was proposed as written, without a model call".into(),
        ],
        context_report: ContextReport {
            budget,
            used: 0,
            tokenizer: counter.encoding(),
            counter: counter.name(),
            approximate: counter.is_approximate(),
            approximation_margin_percent: counter.margin_percent(),
            items: Vec::new(),
        },
        conversation_summary: None,
    }
}

/// The call with the answer streamed: thought and answer text go to the client as they form.
async fn stream_call(
    llm: &LlmClients,
    input: &StepInput,
    request: &ChatRequest,
    live: &LiveSender,
) -> Result<Completion, StepError> {
    let key = input.key.as_ref();
    let mut stream = llm
        .stream(input.llm.provider, request, key, input.deadline)
        .await?;
    tell(live, Live::Started).await?;
    let mut parser = parse::live::LiveParser::new(&input.react.tags);
    // Reasoning streams as thought; the written thought follows it after a blank line, as the
    // step's `thought` joins them.
    let mut reasoned = false;
    while let Some(piece) = stream.next_piece(key).await? {
        match piece {
            Piece::Reasoning(text) => {
                reasoned = true;
                tell(live, Live::Thought(text)).await?;
            }
            Piece::Text(text) => {
                for delta in parser.push(&text) {
                    if std::mem::take(&mut reasoned)
                        && matches!(delta, parse::live::LiveDelta::Thought(_))
                    {
                        tell(live, Live::Thought("\n\n".into())).await?;
                    }
                    tell(live, delta.into()).await?;
                }
            }
        }
    }
    for delta in parser.finish() {
        tell(live, delta.into()).await?;
    }
    Ok(stream.finish()?)
}

/// A `mock_response` streamed in small pieces, as a model would write it.
async fn stream_mock(text: &str, live: &LiveSender, tags: &parse::Tags) -> Result<(), StepError> {
    tell(live, Live::Started).await?;
    let mut parser = parse::live::LiveParser::new(tags);
    let mut rest = text;
    let piece = MOCK_PIECE_BYTES.max(text.len().div_ceil(MOCK_PIECES));
    while !rest.is_empty() {
        let mut cut = piece.min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        for delta in parser.push(&rest[..cut]) {
            tell(live, delta.into()).await?;
        }
        rest = &rest[cut..];
    }
    for delta in parser.finish() {
        tell(live, delta.into()).await?;
    }
    Ok(())
}

/// Sends to the streaming client; a client that has gone away ends the step.
async fn tell(live: &LiveSender, event: Live) -> Result<(), StepError> {
    live.send(event).await.map_err(|_| StepError::ClientGone)
}

impl From<parse::live::LiveDelta> for Live {
    fn from(delta: parse::live::LiveDelta) -> Self {
        match delta {
            parse::live::LiveDelta::Thought(t) => Self::Thought(t),
            parse::live::LiveDelta::Answer(a) => Self::Answer(a),
        }
    }
}

/// Tokens the tool definitions sent through native tool calling take. Providers render them into
/// the prompt in their own way, which is not published: the JSON of each definition plus a few
/// tokens of framing is the estimate.
fn native_tools_tokens(counter: &TokenCounter, tools: &[crate::llm::ToolSpec]) -> u32 {
    const PER_TOOL_FRAMING: u32 = 10;
    tools
        .iter()
        .map(|t| {
            counter.count(&t.name)
                + counter.count(&t.description)
                + counter.count(&t.parameters.to_string())
                + PER_TOOL_FRAMING
        })
        .sum()
}

/// The model's output as written: its text, then any native calls.
fn raw_output(completion: &Completion) -> String {
    let mut out = completion.text.clone();
    for call in &completion.calls {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&decide::render_native(call));
    }
    out
}

/// Longest finish reason passed on: providers' are single words.
const MAX_FINISH_REASON_CHARS: usize = 64;

/// The provider's reason for ending the output, with a warning when it was cut short. An
/// unknown reason is the upstream's text, so it is scrubbed like its error messages: it reaches
/// the response, the warnings and, through an empty-output error, the log.
fn finish_reason(
    finish: &FinishReason,
    key: Option<&crate::llm::ApiKey>,
    warnings: &mut Vec<String>,
) -> String {
    match finish {
        FinishReason::Stop => "stop".to_string(),
        FinishReason::Length => {
            warnings.push("the output reached reservedOutputTokens and may be cut short".into());
            "length".to_string()
        }
        FinishReason::Other(other) => {
            let other = crate::llm::scrub_upstream(other, key, MAX_FINISH_REASON_CHARS);
            warnings.push(format!("the provider ended the output early: {other}"));
            other
        }
    }
}

/// The messages of a repair round and their tokens, fitted into `room`: the invalid output is
/// cut to its head and tail when it is long. `None` when not even that fits.
fn repair_round(
    counter: &TokenCounter,
    raw_output: &str,
    why: &str,
    room: u32,
    tags: &parse::Tags,
) -> Option<([ChatMessage; 2], u32)> {
    let [mut output, feedback] = decide::repair_messages(raw_output, why, tags);
    let feedback_tokens = counter.count_message(&feedback.content);
    let output_room = room
        .checked_sub(feedback_tokens)?
        .checked_sub(tokens::PER_MESSAGE_OVERHEAD)?;
    let output_tokens = match counter.count_within(&output.content, output_room) {
        Some(tokens) => tokens,
        None => {
            let cut = truncate::head_and_tail(counter, &output.content, output_room)?;
            output.content = cut.text;
            cut.tokens
        }
    };
    let tokens = output_tokens + tokens::PER_MESSAGE_OVERHEAD + feedback_tokens;
    Some(([output, feedback], tokens))
}

/// An approximate count that came out below the provider's own count of the same prompt means
/// the margin is too small for this model: the client is told, and the operator too.
fn margin_check(counter: &TokenCounter, used: u32, usage: Option<&Usage>) -> Option<String> {
    let upstream = usage?.prompt_tokens;
    if !counter.is_approximate() || upstream <= u64::from(used) {
        return None;
    }
    tracing::warn!(
        counted = used,
        upstream,
        "the provider counted more prompt tokens than the approximate count; raise REACTSTEP_APPROXIMATION_MARGIN_PERCENT"
    );
    Some(format!(
        "the provider counted {upstream} prompt tokens where the approximate count was {used}: this model's prompts may need a larger margin"
    ))
}

/// Reads the items that arrived without content from the workspace; what cannot be read stays
/// unresolved with the reason.
fn resolve_from_workspace(ws: &workspace::Workspace, input: &mut StepInput) {
    let project = input.project_id.clone();
    let mut still = Vec::new();
    for mut ex in std::mem::take(&mut input.unresolved) {
        let read = match (ex.fate, ex.source) {
            (context::Fate::Unresolved, ContextSource::Pinned) => {
                ws.read_pinned(project.as_deref(), &ex.id)
            }
            (context::Fate::Unresolved, ContextSource::Explicit | ContextSource::Implicit) => {
                ws.read(project.as_deref(), &ex.id)
            }
            _ => {
                still.push(ex);
                continue;
            }
        };
        match read {
            Ok(content) => input.context.push(ContextItem {
                source: ex.source,
                path: (ex.source != ContextSource::Pinned).then(|| ex.id.clone()),
                id: ex.id,
                content,
                score: None,
                lines: None,
                cursor_line: ex.cursor_line,
            }),
            Err(why) => {
                ex.reason = format!("not read from the workspace: {why}");
                still.push(ex);
            }
        }
    }
    let (items, duplicates) = context::dedupe(std::mem::take(&mut input.context));
    input.context = items;
    still.extend(duplicates);
    input.unresolved = still;
}

/// Both calls of a step are billed to the user: report their sum.
/// The usage of a call the provider reported none for: the prompt as counted against the budget
/// and the output as the same counter reads it, marked approximate.
fn own_count(counter: &TokenCounter, prompt: u32, completion: &Completion) -> Usage {
    let calls: u32 = completion
        .calls
        .iter()
        .map(|c| {
            let arguments = match &c.arguments {
                Ok(map) => serde_json::Value::Object(map.clone()).to_string(),
                Err(text) => text.clone(),
            };
            counter.count(&c.name) + counter.count(&arguments)
        })
        .sum();
    Usage {
        prompt_tokens: prompt.into(),
        completion_tokens: u64::from(counter.count(&completion.text) + calls),
        approximate: true,
        ..Usage::default()
    }
}

/// A sum of figures either call may have left out.
fn add_some(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
        (a, b) => a.or(b),
    }
}

fn add_usage(a: Option<Usage>, b: Option<Usage>) -> Option<Usage> {
    match (a, b) {
        (Some(a), Some(b)) => Some(Usage {
            prompt_tokens: a.prompt_tokens.saturating_add(b.prompt_tokens),
            completion_tokens: a.completion_tokens.saturating_add(b.completion_tokens),
            approximate: a.approximate || b.approximate,
            cached_prompt_tokens: add_some(a.cached_prompt_tokens, b.cached_prompt_tokens),
            cache_creation_prompt_tokens: add_some(
                a.cache_creation_prompt_tokens,
                b.cache_creation_prompt_tokens,
            ),
            reasoning_tokens: add_some(a.reasoning_tokens, b.reasoning_tokens),
        }),
        (a, b) => a.or(b),
    }
}

fn budget_warnings(fitted: &budget::Fitted, excluded: &[Excluded]) -> Vec<String> {
    let mut warnings = Vec::new();
    if fitted.omitted_turns > 0 {
        warnings.push(format!(
            "{} oldest conversation turn(s) did not fit in the token budget and were left out of the prompt (see context_report)",
            fitted.omitted_turns
        ));
    }
    if fitted.truncated_items > 0 {
        warnings.push(format!(
            "{} item(s) were cut to fit the token budget (see context_report)",
            fitted.truncated_items
        ));
    }
    if fitted.dropped_items > 0 {
        warnings.push(format!(
            "{} context item(s) did not fit in the token budget and were left out of the prompt (see context_report)",
            fitted.dropped_items
        ));
    }
    let unresolved = excluded
        .iter()
        .filter(|e| e.fate == context::Fate::Unresolved)
        .count();
    if unresolved > 0 {
        warnings.push(format!(
            "{unresolved} context item(s) could not be resolved and were not used (see context_report)"
        ));
    }
    warnings
}

/// The input history, the user's turn (when there was a query) and the assistant's turn.
/// The input's history is taken, not copied: the step needs it no more.
fn updated_history(input: &mut StepInput, thought: &str, outcome: &Outcome) -> Vec<Turn> {
    let mut turns = std::mem::take(&mut input.history);
    if !input.user_query.trim().is_empty() {
        turns.push(Turn::new(
            Role::User,
            input.user_query.clone(),
            input.received_at.clone(),
        ));
    }
    let mut assistant = Turn::new(Role::Assistant, thought.to_string(), timestamp_now());
    match outcome {
        Outcome::Action {
            tool_name,
            tool_args,
            tool_call_id,
            parallel,
            ..
        } => {
            let first = ToolCall {
                id: Some(tool_call_id.clone()),
                name: tool_name.clone(),
                parameters: tool_args.clone(),
            };
            if !parallel.is_empty() {
                assistant.tool_calls.push(first.clone());
                assistant
                    .tool_calls
                    .extend(parallel.iter().map(|c| ToolCall {
                        id: c.tool_call_id.clone(),
                        name: c.tool_name.clone(),
                        parameters: c.tool_args.clone(),
                    }));
            }
            assistant.tool_call = Some(first);
        }
        Outcome::DryRun(_) => {}
        Outcome::Answer { text, .. } => {
            assistant.content = text.clone();
            assistant.thought = Some(thought.to_string()).filter(|t| !t.is_empty());
        }
    }
    turns.push(assistant);
    turns
}

#[cfg(test)]
mod remembered_tests {
    use super::*;

    #[test]
    fn a_remembered_cache_key_is_the_sessions_own() {
        for _ in 0..2 {
            for session in ["s-1", "s-2", "", "s-1 "] {
                assert_eq!(prompt_cache_key(session), PromptCache::key_for(session));
            }
        }
    }

    #[test]
    fn a_remembered_head_is_the_one_its_inputs_make() {
        let tags = parse::Tags::default();
        let other = parse::Tags {
            action: "Act".into(),
            ..parse::Tags::default()
        };
        let tools = "- read_file: reads a file\n- run_tests(path): runs them";
        // Each input changed alone, each asked twice: always what building it again gives.
        for _ in 0..2 {
            for (segment, tags, native) in [
                (tools, &tags, false),
                (tools, &tags, true),
                (tools, &other, false),
                ("- read_files: reads files", &tags, false),
                ("", &tags, false),
            ] {
                assert_eq!(
                    &*system_head(segment, tags, native),
                    prompt::system_head(segment, tags, native)
                );
            }
        }
    }
}
