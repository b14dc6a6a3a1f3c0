//! The provider's own count of the prompt, for a model whose tokenizer is not public: an exact
//! count before the call when the approximate one comes near the budget, and a second fit after
//! a refusal as too long that says the prompt's size.

use super::chat_request::{chat_request, prompt_cache};
use super::context::tokens::TokenCounter;
use super::converse::{converse_once, Conversed, Ledger};
use super::decide::Valid;
use super::error::StepError;
use super::fit::{fit_prompt, Built, Shape};
use super::input::StepInput;
use super::live::LiveSender;
use super::parse;
use super::usage::Billed;
use crate::llm::{LlmClients, LlmError};

/// For a provider that counts prompts itself, when the approximate count came within its margin
/// of the budget (the margin may have cost context the model had room for): fits the prompt
/// without the margin and has the provider count it; when that is over the budget, fits once more
/// with the counts scaled by the provider's figure and has that counted. The first prompt whose
/// exact count fits is sent, reported as counted by the provider; when none does, or a count
/// fails, the prompt fitted with the margin is, with a warning.
pub(super) async fn exact_count(
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

/// A first call the provider refused as too long, with the prompt it refused.
pub(super) struct Refusal<'b> {
    pub(super) refused: LlmError,
    pub(super) built: Built,
    pub(super) ledger: Ledger<'b>,
}

impl Refusal<'_> {
    /// The refusal as the step's error: 422 `context_overflow`, with the report of the prompt
    /// that was refused.
    fn into_error(self) -> StepError {
        StepError::from(self.refused)
            .spent(self.ledger.usage)
            .reported(&self.built.prompt.report)
    }
}

/// The window a refusal names, when it is smaller than the request's `tokenLimit` and still
/// leaves room for the prompt beside the reserved output.
fn smaller_window(input: &StepInput, refused: &LlmError) -> Option<u32> {
    let LlmError::ContextTooLong {
        window: Some(window),
        ..
    } = refused
    else {
        return None;
    };
    let window = u32::try_from(*window).ok()?;
    let room = window.checked_sub(input.llm.reserved_output_tokens)?;
    (window < input.llm.token_limit && room >= MIN_PROMPT_ROOM).then_some(window)
}

/// The least room a window must leave for the prompt to be worth fitting again.
const MIN_PROMPT_ROOM: u32 = 256;

/// The approximation margin scaled by the provider's count of the refused prompt, with that
/// count and the service's, when the counter is approximate and the count is plausible.
fn scaled_margin(counter: &TokenCounter, first: &Refusal<'_>) -> Option<(u32, u64, u64)> {
    let used = u64::from(first.built.prompt.report.used);
    let LlmError::ContextTooLong {
        prompt_tokens: Some(reported),
        ..
    } = &first.refused
    else {
        return None;
    };
    let reported = *reported;
    // A count a thousand times the service's is no count of this prompt.
    let plausible = reported > used && used > 0 && reported / used <= 1000;
    if !counter.is_approximate() || !plausible {
        return None;
    }
    // (100 + new) / 100 = (100 + old) / 100 × reported / used, with room to spare.
    let scaled = (100 + u64::from(counter.margin_percent())).saturating_mul(reported) / used
        + REFIT_ROOM_PERCENT;
    let percent = u32::try_from(scaled.saturating_sub(100)).unwrap_or(u32::MAX);
    Some((percent, reported, used))
}

/// Extra percent on top of the ratio the provider's count gave, for what the ratio of one
/// prompt does not say about another.
const REFIT_ROOM_PERCENT: u64 = 3;

/// After a refusal as too long that says the provider's window (smaller than `tokenLimit`: a
/// local server started with a smaller context) or the prompt's size by the provider's count:
/// fits the prompt again into that window, with the service's approximate counts scaled by the
/// provider's, and calls once more. A refusal that says neither is answered as it is.
pub(super) async fn refit<'b>(
    mut input: Box<StepInput>,
    llm: &LlmClients,
    live: Option<&LiveSender>,
    counter: &TokenCounter,
    first: Refusal<'b>,
) -> Result<(Box<StepInput>, Built, (parse::Parsed, Valid), Ledger<'b>), StepError> {
    let window = smaller_window(&input, &first.refused);
    let scaled = scaled_margin(counter, &first);
    if window.is_none() && scaled.is_none() {
        return Err(first.into_error());
    }
    let mut said = Vec::new();
    if let Some(window) = window {
        said.push(format!(
            "the provider's context window is {window} tokens, not llm_config.tokenLimit's {}: the prompt was fitted again into it",
            input.llm.token_limit
        ));
        input.llm.token_limit = window;
    }
    let counter = match scaled {
        Some((percent, reported, used)) => {
            said.push(format!(
                "the provider counted {reported} prompt tokens where the service counted {used} and refused the prompt as too long; it was fitted again with counts scaled by that ratio ({percent} % margin)"
            ));
            counter.with_approximation_margin(percent)
        }
        None => *counter,
    };
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
    let mut warnings = said;
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
