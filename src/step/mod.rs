//! One ReAct step, knowing nothing of HTTP: fit the prompt into the budget, call the model once
//! (or take the client's `mock_response`), parse the output, apply the iteration limit and
//! return the thought, the decision and the updated conversation.
//!
//! The phases, each in its own file: the request arrives as a [`StepInput`] (`input.rs`); the
//! prompt is fitted into the budget (`fit.rs`; a native loop's step keeps to the turn the task
//! began, `one_turn.rs`; from what `context/` builds: the items, the token
//! counts, the prompt's text, the summary of omitted turns) and, for a model whose tokenizer is
//! not public, checked against the provider's own count (`provider_count.rs`); the model is
//! called with it (`chat_request.rs`, `converse.rs`, with `live.rs` streaming to the client and
//! `reply.rs` reading what came back: `parse/` reads the output, `decide.rs` judges it against
//! the tools of `tools/`; the loop guard of `loop_guard.rs` reads the history first, to warn the
//! model in the prompt's tail or refuse a call that goes on with a loop), and what the calls
//! billed is summed (`usage.rs`); the answer is a
//! [`StepOutput`] (`finish.rs`, `output.rs`) or a [`StepError`] (`error.rs`).

mod answer_schema;
mod chat_request;
pub mod context;
mod converse;
pub mod decide;
mod error;
mod evaluation;
mod fallback;
mod finish;
mod fit;
pub mod history;
mod input;
mod limits;
mod live;
mod loop_guard;
mod one_turn;
mod output;
pub mod parse;
mod plan;
mod provider_count;
mod reply;
mod structured;
mod task;
pub mod tools;
mod usage;

// The step's surface for the edge: what a request becomes (the input and its parts), what it
// answers, and how it fails. The edge names nothing deeper (tests/architecture.rs).
pub use answer_schema::AnswerSchema;
pub use context::clearing::ClearToolResults;
pub use context::token_cache::publish_metrics as publish_token_cache_metrics;
pub use context::tokens::{is_warm as encoders_warm, Encoding};
pub use context::{
    dedupe, path_key, same_path, ContextItem, ContextReport, ContextSource, Excluded, Fate,
};
pub use context::{within_summary_bound, MAX_SUMMARY_CHARS};
pub use decide::{Call, ReactSettings};
pub use error::{FailedAttempt, StepError, StepErrorKind};
pub use evaluation::EvaluateAsk;
pub use history::{json_values, timestamp_now, walk_json, ToolCall, Turn};
pub use input::{
    ConversationSummary, Fallback, HistoryStrategy, LlmConfig, StepInput, StepSettings, ToolMode,
};
pub use live::{Live, LiveSender};
pub use loop_guard::{LoopGuard, LoopReport};
pub use output::{ModelUsed, Outcome, PromptPreview, StepOutput, Termination};
pub use parse::Tags;
pub use plan::{PlanAsk, MAX_PLAN_CHARS, MAX_PLAN_STEPS, MAX_PLAN_VALUES};
pub use structured::Structured;
pub use task::Task;
pub use tools::{is_native_tool_name, Catalog, ToolSpec};

use crate::llm::{LlmClients, Usage};
use context::tokens::TokenCounter;
use converse::{converse_once, Conversed};
use finish::{command_step, dry_run, finish_step};
use fit::{fit_prompt, Shape};
use provider_count::{exact_count, refit, Refusal};
use usage::Billed;

/// One step, answered by its deadline whatever the upstream does.
///
/// The input comes boxed: each layer of this future (the span, the deadline, the step) would
/// otherwise keep its own copy of it, about 3 KiB per step waiting on the upstream.
/// The session id is the client's text, logged with every line inside the span: the key is
/// taken out of it (not key shapes: a session id is often a UUID, which is shaped like one).
/// The model is named by the request's span around this one, scrubbed there once.
#[tracing::instrument(name = "react step", skip_all, fields(
    session_id = %input.key.as_ref().map_or_else(|| input.session_id.clone(), |k| k.redact_from_repeated(&input.session_id)),
))]
pub async fn run(
    mut input: Box<StepInput>,
    llm: &LlmClients,
    live: Option<LiveSender>,
) -> Result<StepOutput, StepError> {
    let _in_flight = crate::telemetry::metrics::InFlight::enter();
    let notices = std::mem::take(&mut input.notices);
    let (deadline, reading) = (input.deadline, input.reading);
    let started = std::time::Instant::now();
    let budget = deadline.saturating_duration_since(tokio::time::Instant::now());
    // What the model calls billed, kept outside the step: a step the deadline cuts short
    // still reports the calls it paid for.
    let billed = Billed::default();
    // The models tried, each a whole step (`fallback.rs`), within the one deadline.
    let (tried, spent) = (fallback::Attempts::default(), &billed);
    // Boxed: every step in flight holds this future while it waits on the model.
    let each = Box::pin(fallback::each_model(
        input,
        live,
        spent,
        &tried,
        |input, live| step(input, llm, live, spent),
    ));
    let mut result = tokio::time::timeout_at(deadline, each)
        .await
        .unwrap_or_else(|_| {
            Err(StepError::from(StepErrorKind::Deadline(budget)).spent(billed.get()))
        });
    tried.report(&mut result, &billed);
    if let Ok(output) = &mut result {
        output.warnings.splice(0..0, notices);
        if let Err(failed) = task::read(reading, output) {
            result = Err(failed.spent(output.usage));
        }
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
            if matches!(error.kind, StepErrorKind::InvalidOutput { .. }) {
                Metrics::count(&metrics.parse_outcomes, "invalid", 1);
            }
            count_tokens(metrics, error.usage.as_deref());
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

/// The phases in order: a `/tool` command is answered at once; otherwise the prompt is fitted
/// (a dry run ends there), counted exactly when it is near the budget, and sent; a first call
/// refused as too long is fitted again by the provider's count.
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
    let mut input = input;
    if shape.native() {
        one_turn::keep_one_turn(&mut input);
    }
    let watch = finish::watch(&mut input);
    let fitting = fit_prompt(input, &counter, &shape, keep_context, llm, billed, None);
    let (input, built) = fitting.await?;
    let built = built?;
    if input.dry_run {
        return Ok(finish::watched(dry_run(input, built, &counter), watch));
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
    if let Some(stop) = finish::loop_stop(watch.as_deref(), &conversed.1, &input) {
        return Err(stop.spent(ledger.usage).reported(&built.prompt.report));
    }
    Ok(finish::watched(
        finish_step(input, built, conversed, ledger),
        watch,
    ))
}

/// The counter for the request's model, with the operator's margin when one is set.
fn counter_for(input: &StepInput) -> TokenCounter {
    let counter = TokenCounter::new(input.llm.provider, &input.llm.model, input.llm.tokenizer);
    match input.settings.approximation_margin_percent {
        Some(percent) => counter.with_approximation_margin(percent),
        None => counter,
    }
}
