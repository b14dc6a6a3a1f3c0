//! The conversation with the model: one call with the fitted prompt (or the client's
//! `mock_response`), and a repair round after each output that is not a valid step, while any
//! are left.

use super::chat_request::{chat_request, prompt_cache};
use super::context::tokens::{self, TokenCounter};
use super::context::truncate;
use super::decide::{self, Valid};
use super::error::{StepError, StepErrorKind};
use super::fit::{Built, Shape};
use super::input::StepInput;
use super::live::{stream_call, stream_mock, tell, Live, LiveSender};
use super::parse;
use super::reply::{
    carriable, count_outcome, finish_reason, raw_output, read_output, refusal, returnable_calls,
    shortfall,
};
use super::usage::{add_usage, margin_check, own_count, Billed};
use crate::llm::{
    ChatMessage, ChatRequest, Completion, FinishReason, LlmClients, LlmError, ReasoningState, Usage,
};

/// How a conversation with the model ended.
#[expect(
    clippy::large_enum_variant,
    reason = "returned once and taken apart at once, never held"
)]
pub(super) enum Conversed<'b> {
    Done(Box<StepInput>, Built, parse::Parsed, Valid, Ledger<'b>),
    /// The provider refused the prompt as too long on the first call.
    TooLong(Box<StepInput>, LlmError, Built, Ledger<'b>),
}

/// Calls the model with the fitted prompt until its output is a valid step.
pub(super) async fn converse_once<'b>(
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

/// What the step's model calls have added up to so far.
pub(super) struct Ledger<'b> {
    /// Every call's usage, summed: the summary call and the repair rounds included.
    pub(super) usage: Option<Usage>,
    pub(super) warnings: Vec<String>,
    /// Prompt tokens counted against the budget, repair rounds included.
    pub(super) used: u32,
    pub(super) budget: u32,
    pub(super) billed: &'b Billed,
    /// The reasoning behind the output the step answers with.
    pub(super) reasoning: ReasoningState,
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
        let (completion, shown) = match call_model(&input, llm, live, &request).await {
            Err(StepError {
                kind: StepErrorKind::Llm(refused @ LlmError::ContextTooLong { .. }),
                ..
            }) if first => {
                return Ok(Talk::TooLong(input, refused));
            }
            called => called?,
        };
        let mut completion = Box::new(completion);
        let why = {
            bill(&mut completion, &input, counter, ledger, first);
            refusal(&completion, &input, shown)?;
            carriable(&completion, input.llm.provider)?;
            let known = (&input.history[..], &request.renamed_tools[..]);
            returnable_calls(&mut completion, known, &mut ledger.warnings);
            let finish =
                finish_reason(&completion.finish, input.key.as_ref(), &mut ledger.warnings);
            let cut_off = completion.finish == FinishReason::Length;
            let (back, completion, reading) = read_output(input, completion).await?;
            input = back;
            let (parsed, verdict) = reading_or_reasoning(reading, &completion, finish)?;
            let raw_output = raw_output(&completion);
            let why = match shortfall(&parsed, verdict, cut_off, &input.react.tags) {
                Ok((valid, thought_warnings)) => {
                    ledger.warnings.extend(thought_warnings);
                    ledger.reasoning = completion.reasoning;
                    count_outcome(&valid, parsed.structured);
                    return Ok(Talk::Valid(input, parsed, valid));
                }
                // It may quote a schema of the request's, and with it anything the client put
                // there: shown and logged as any other text from the request.
                Err(why) => crate::llm::redact_key_shapes(&input.without_keys(&why)),
            };
            // A mock answers the same whatever it is asked: no repair round for it.
            let room = ledger.budget.saturating_sub(ledger.used);
            let asked_again = repairs_left > 0 && input.mock_response.is_none();
            let how = (&input.react.tags, !request.tools.is_empty());
            let repair = asked_again
                .then(|| repair_round(counter, &raw_output, &why, room, how))
                .flatten();
            let Some((messages, tokens)) = repair else {
                return Err(StepErrorKind::InvalidOutput { why, raw_output }.into());
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

/// What the output says; a reply of reasoning alone (the model stopped inside its thinking: a
/// stop sequence it wrote there, a server that put all of it in `reasoning_content`) is no step
/// but one the model may still write, so it goes to a repair round; a reply of nothing is an
/// error.
fn reading_or_reasoning(
    reading: Option<super::reply::Reading>,
    completion: &Completion,
    finish: String,
) -> Result<super::reply::Reading, StepError> {
    if let Some(reading) = reading {
        return Ok(reading);
    }
    if completion.reasoning.text().trim().is_empty() {
        return Err(StepErrorKind::EmptyOutput(finish).into());
    }
    let nothing = parse::Parsed {
        thought: String::new(),
        decision: parse::Decision::Answer(String::new()),
        also: Vec::new(),
        warnings: Vec::new(),
        structured: false,
        open_ended: false,
        answer_left_out: false,
        call_ids: Vec::new(),
    };
    Ok((nothing, Err(REASONING_ONLY.into())))
}

/// Why a reply of reasoning alone is no step.
const REASONING_ONLY: &str =
    "the output held only reasoning and stopped before a tool call or a final answer";

/// A call's usage into the ledger (the service's own count where the provider gave none), and
/// on the first call, whether the provider's count says the margin was too small.
fn bill(
    completion: &mut Completion,
    input: &StepInput,
    counter: &TokenCounter,
    ledger: &mut Ledger<'_>,
    first: bool,
) {
    if completion.usage.is_none() && input.mock_response.is_none() {
        completion.usage = Some(own_count(counter, ledger.used, completion));
    }
    if first {
        if let Some(warning) = margin_check(counter, ledger.used, completion.usage.as_ref()) {
            ledger.warnings.push(warning);
        }
    }
    ledger.usage = add_usage(ledger.usage, completion.usage);
    ledger.billed.add(completion.usage);
}

/// One call: the client's `mock_response`, the model's whole reply, or its streamed reply; and
/// whether any of it was shown to a streaming client.
async fn call_model(
    input: &StepInput,
    llm: &LlmClients,
    live: Option<&LiveSender>,
    request: &ChatRequest,
) -> Result<(Completion, bool), StepError> {
    let _upstream = input
        .timings
        .timer(crate::telemetry::timing::Phase::Upstream);
    Ok(match (&input.mock_response, live) {
        (Some(text), live) => {
            if let Some(live) = live {
                Box::pin(stream_mock(text, live, &input.react.tags)).await?;
            }
            let mocked = Completion {
                text: text.clone(),
                finish: FinishReason::Stop,
                usage: None,
                calls: Vec::new(),
                dropped_calls: 0,
                reasoning: ReasoningState::default(),
                preamble_only: false,
                preamble: String::new(),
            };
            (mocked, live.is_some())
        }
        (None, None) => {
            let whole = llm.complete(
                input.llm.provider,
                request,
                input.key.as_ref(),
                input.deadline,
            );
            (whole.await?, false)
        }
        (None, Some(live)) => Box::pin(stream_call(llm, input, request, live)).await?,
    })
}

/// The messages of a repair round (in the mode's format: `how` is the tags and whether tools go
/// natively) and their tokens, fitted into `room`: the invalid output is
/// cut to its head and tail when it is long. `None` when not even that fits.
fn repair_round(
    counter: &TokenCounter,
    raw_output: &str,
    why: &str,
    room: u32,
    (tags, native): (&parse::Tags, bool),
) -> Option<([ChatMessage; 2], u32)> {
    let [mut output, feedback] = decide::repair_messages(raw_output, why, tags, native);
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
