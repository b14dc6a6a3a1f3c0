//! Reading the model's reply: what it may carry back, why it ended, the step parsed from it
//! and whether that step may be proposed.

use super::decide::{self, Valid};
use super::error::{StepError, StepErrorKind};
use super::history::Turn;
use super::input::StepInput;
use super::parse;
use crate::llm::bounded::{is_call_id, MAX_CALLS_PER_TURN, MAX_REASONING_BYTES};
use crate::llm::wire_names::WireNames;
use crate::llm::{Completion, FinishReason, LlmError, Provider};
use crate::runtime::cpu;

/// What a step returns is a valid next request: the calls past what a turn may hold were
/// dropped when the reply was read, and an id no provider could take back is replaced by one of
/// the service's (a step never answers with a history its next request would be refused for).
/// Calls of a tool renamed on the wire get the name the client gave it back.
pub(super) fn returnable_calls(
    completion: &mut Completion,
    (history, renamed): (&[Turn], &[(String, String)]),
    warnings: &mut Vec<String>,
) {
    if completion.dropped_calls > 0 {
        warnings.push(format!(
            "the model made {} tool calls; a turn holds at most {MAX_CALLS_PER_TURN}, so the first {MAX_CALLS_PER_TURN} are kept and the other {} dropped",
            MAX_CALLS_PER_TURN + completion.dropped_calls,
            completion.dropped_calls
        ));
    }
    WireNames::restore(renamed, &mut completion.calls);
    let (replaced, repeated) = own_ids(completion, history);
    if replaced > 0 {
        warnings.push(format!(
            "{replaced} tool call id(s) from the provider were not 1 to 256 printable ASCII characters and were replaced by the service's own"
        ));
    }
    if repeated > 0 {
        warnings.push(format!(
            "{repeated} tool call id(s) from the provider repeated an id of this turn or of an earlier one and were replaced by the service's own"
        ));
    }
}

/// Gives one of the service's ids to each call whose id no provider could take back, or that
/// repeats another of the turn's or the history's (some servers number each turn's calls from
/// `call_0`: the client could not tell the results apart, and providers refuse a request
/// holding one id twice). The id changes in the turn's reasoning state too (the Responses
/// API's call items, Gemini's signatures), or the next step would find them apart and drop it.
/// Returns how many ids were unreadable, and how many repeated.
fn own_ids(completion: &mut Completion, history: &[Turn]) -> (usize, usize) {
    let (mut replaced, mut repeated) = (0, 0);
    let mut seen = std::collections::HashSet::new();
    let Completion {
        calls, reasoning, ..
    } = completion;
    for (at, call) in calls.iter_mut().enumerate() {
        let Some(id) = call.id.clone() else {
            continue;
        };
        let (first, readable) = (!seen.contains(&id), is_call_id(&id));
        if readable && first && !called_before(history, &id) {
            seen.insert(id);
            continue;
        }
        match readable {
            true => repeated += 1,
            false => replaced += 1,
        }
        let own = crate::llm::call_ids::fresh();
        renamed_in_state(reasoning, at, (&id, &own), first);
        seen.insert(id);
        call.id = Some(own);
    }
    (replaced, repeated)
}

/// The turn's `at`th call now goes by `new` for `old`: in the Responses API's call items (the
/// `at`th is that call's), and, for the first call of that id, in its thought signatures.
fn renamed_in_state(
    state: &mut crate::llm::ReasoningState,
    at: usize,
    (old, new): (&str, &str),
    first: bool,
) {
    let mut items = state
        .items
        .iter_mut()
        .filter(|i| i["type"] == "function_call");
    if let Some(item) = items.nth(at).filter(|i| i["call_id"] == old) {
        item["call_id"] = serde_json::Value::String(new.to_string());
    }
    let signatures = state.thought_signatures.iter_mut();
    for signature in signatures.filter(|s| first && s.call_id == old) {
        signature.call_id = new.to_string();
    }
}

/// Whether a call of the history has the id `id`.
fn called_before(history: &[Turn], id: &str) -> bool {
    history
        .iter()
        .any(|turn| turn.calls().any(|call| call.id.as_deref() == Some(id)))
}

/// A reply whose reasoning must go back with the next request, yet could not fit in one, is no
/// step the loop can go on from: an honest `llm_bad_response` now, not a 413 one step later.
pub(super) fn carriable(completion: &Completion, provider: Provider) -> Result<(), StepError> {
    let bytes = completion.reasoning.counted_len();
    if bytes <= MAX_REASONING_BYTES {
        return Ok(());
    }
    Err(StepError::from(LlmError::BadResponse {
        provider,
        message: format!(
            "the model's reasoning is {bytes} bytes, more than the {MAX_REASONING_BYTES} a step can carry back to it"
        ),
    }))
}

/// Finish reasons by which a provider says the model declined, or its filter stopped the output
/// (OpenAI's and Gemini's `content_filter`, Anthropic's `refusal`, Gemini's own names).
const REFUSALS: [&str; 7] = [
    "content_filter",
    "refusal",
    "safety",
    "recitation",
    "prohibited_content",
    "blocklist",
    "spii",
];

/// A reply the model refused, as a failure, while the step has a model left to fall back to
/// (`input.falls_back`). A streamed reply some of which was `shown` to the client stays the
/// answer it was: a fallback is never made once output has been streamed. One of which nothing
/// was shown (a refusal is not streamed, nor is text before any tag) falls back as a whole one.
pub(super) fn refusal(
    completion: &Completion,
    input: &StepInput,
    shown: bool,
) -> Result<(), StepError> {
    let FinishReason::Other(reason) = &completion.finish else {
        return Ok(());
    };
    if !input.falls_back || shown || !declined(&completion.finish) {
        return Ok(());
    }
    Err(StepError::from(LlmError::Refused {
        provider: input.llm.provider,
        reason: reason.clone(),
    }))
}

/// Whether the provider says the model declined, or its filter stopped the output.
pub(super) fn declined(finish: &FinishReason) -> bool {
    match finish {
        FinishReason::Other(reason) => REFUSALS.iter().any(|r| reason.eq_ignore_ascii_case(r)),
        _ => false,
    }
}

/// The verdict, with two outputs that read as a direct response yet are no answer turned into
/// repair rounds: a reply cut at the output limit before it held a complete action or answer
/// (its tail is missing, so taking it as the answer would hand the user half a sentence), and a
/// reply that is only a thought (the model stopped before deciding anything). A cut-off reply
/// that holds a complete action keeps its verdict, with the cut-short warning.
pub(super) fn shortfall(
    parsed: &parse::Parsed,
    verdict: Result<(Valid, Vec<String>), String>,
    cut_off: bool,
    tags: &parse::Tags,
) -> Result<(Valid, Vec<String>), String> {
    // An answer is the last thing written, so a cut one is cut inside; an action whose input
    // was left open is whatever the parser closed, not what the model meant.
    let cut_inside = match &verdict {
        Ok((Valid::Answer(_), _)) => true,
        Ok((Valid::Action { call, .. }, _)) => {
            parsed.open_ended || parse::left_open(&call.raw_action_string)
        }
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

pub(super) fn count_outcome(valid: &Valid, structured: bool) {
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
pub(super) type Reading = (parse::Parsed, Result<(Valid, Vec<String>), String>);

/// Parses and judges an output: linear in its size, yet megabytes of it (or a native call's
/// arguments checked against a schema) would hold a worker for milliseconds, so those are read
/// on the CPU pool. The input goes along and comes back, as the work must own what it reads.
pub(super) async fn read_output(
    input: Box<StepInput>,
    completion: Box<Completion>,
) -> Result<(Box<StepInput>, Box<Completion>, Option<Reading>), StepError> {
    let _traced = crate::telemetry::traces::phase(
        || tracing::trace_span!(target: crate::telemetry::traces::TARGET, "parse"),
    );
    let times = input.timings.clone();
    let _parse = times.timer(crate::telemetry::timing::Phase::Parse);
    if completion.text.len() <= cpu::INLINE_BYTES && completion.calls.is_empty() {
        let reading = read(&input, &completion);
        return Ok((input, completion, reading));
    }
    cpu::run(move || {
        let reading = read(&input, &completion);
        (input, completion, reading)
    })
    .await
    .map_err(|why| StepErrorKind::Internal(why).into())
}

fn read(input: &StepInput, completion: &Completion) -> Option<Reading> {
    let tags = &input.react.tags;
    let native =
        (input.llm.tool_mode).is_native(input.llm.provider, input.tools.callable_natively());
    let in_order = (!native)
        .then(|| stepping_preamble(completion, tags))
        .flatten();
    let text = in_order.as_deref().unwrap_or(&completion.text);
    let mut parsed = decide::native_parsed(text, &completion.calls, tags)
        .or_else(|| parse::parse(text, tags))?;
    // A preamble that acts is no preamble alone: in text mode an action is written, not called.
    let acted = !native
        && matches!(
            parsed.decision,
            parse::Decision::Action { .. } | parse::Decision::Unreadable { .. }
        );
    if native && completion.calls.is_empty() {
        // A call written as text where the provider's tool calling was offered.
        parsed = decide::answer_as_call(parsed, &input.tools, tags);
    }
    if !parsed.structured && !native {
        parsed.warnings.push(parse::unstructured_warning(tags));
    }
    if in_order.is_none() && !completion.preamble.trim().is_empty() {
        let (before, after) = completion.preambles_around_text();
        let (before, after) = (
            preamble_thought(&before, tags),
            preamble_thought(&after, tags),
        );
        parsed.thought = crate::llm::thought_parts([&before, parsed.thought.trim(), &after]);
    }
    let last_step = input.iterations_left == 1;
    parsed = decide::answer_among_calls(parsed, &input.tools, &input.react, last_step);

    let verdict = match completion.preamble_only && completion.calls.is_empty() && !acted {
        true => Err(PREAMBLE_ONLY.to_string()),
        false => judged(&parsed, input, completion),
    };
    Some((parsed, verdict))
}

/// The verdict on `parsed`, its thought checked as the step shows it: a reply whose thought is
/// all reasoning (a summary, thinking, with no text before the call) has one
/// (`finish::with_reasoning`).
fn judged(
    parsed: &parse::Parsed,
    input: &StepInput,
    completion: &Completion,
) -> Result<(Valid, Vec<String>), String> {
    if parsed.thought.trim().is_empty() {
        let reasoned = completion.reasoning.text();
        if !reasoned.trim().is_empty() {
            let shown = parse::Parsed {
                thought: reasoned,
                ..parsed.clone()
            };
            return decide::judge(&shown, &input.tools, &input.react);
        }
    }
    decide::judge(parsed, &input.tools, &input.react)
}

/// In text tool mode, a preamble that is more than plain text (a `commentary` message holding
/// `Thought:`, an `Action:`, a call) begins the step itself: the reply is read in order, the
/// preamble then the text after it, as a chat reply's would be, so its tags are read as tags and
/// what the model wrote past its action (a made-up observation, a refusal) is left out as it is
/// there. `None` for a plain preamble: the thought before the answer. Told apart as the stream
/// tells it (`live::Reading::end_preamble`), so both read one reply alike.
fn stepping_preamble(completion: &Completion, tags: &parse::Tags) -> Option<String> {
    if !completion.calls.is_empty() || completion.preamble.trim().is_empty() {
        return None;
    }
    let mut parser = parse::live::LiveParser::new(tags);
    parser.push(&completion.preamble);
    parser.push(crate::llm::MESSAGES_APART);
    parser.past_plain_text().then(|| completion.in_order())
}

/// What a preamble kept apart from the answer shows as thought: its thought as read (one may
/// hold tags, a `<think>` block, a written call, which are not thought), or all of it when
/// plain. Told alike as it streams (`live::Reading::end_preamble`).
pub(super) fn preamble_thought(preamble: &str, tags: &parse::Tags) -> String {
    let read = parse::parse(preamble, tags).map(|p| p.thought);
    let read = read.filter(|t| !t.trim().is_empty());
    read.unwrap_or_else(|| preamble.trim().to_string())
}

/// Why a reply of a preamble alone is no step: the model said it is not its answer.
pub(super) const PREAMBLE_ONLY: &str = "the model wrote a preamble it marked as commentary and stopped before a tool call or a final answer";

/// The model's output as written: its text, then any native calls.
pub(super) fn raw_output(completion: &Completion) -> String {
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
pub(super) fn finish_reason(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{CallSignature, NativeCall, ReasoningState};
    use serde_json::json;

    fn completion(ids: [&str; 2]) -> Completion {
        let call = |id: &str| NativeCall::new(Some(id.to_string()), "read_file".into(), "{}");
        let item = |id: &str| json!({"type": "function_call", "call_id": id, "name": "read_file"});
        Completion {
            calls: vec![call(ids[0]), call(ids[1])],
            reasoning: ReasoningState {
                items: vec![json!({"type": "reasoning"}), item(ids[0]), item(ids[1])],
                thought_signatures: vec![CallSignature {
                    call_id: ids[0].into(),
                    signature: "sig".into(),
                }],
                ..ReasoningState::default()
            },
            text: String::new(),
            finish: crate::llm::FinishReason::Stop,
            usage: None,
            dropped_calls: 0,
            preamble_only: false,
            preamble: String::new(),
        }
    }

    #[test]
    fn a_replaced_id_is_replaced_in_the_turns_state_too() {
        // The second `call_0` of a turn: its own call item follows it.
        let mut done = completion(["call_0", "call_0"]);
        assert_eq!(own_ids(&mut done, &[]), (0, 1));
        let second = done.calls[1].id.clone().unwrap_or_default();
        assert_ne!(second, "call_0");
        assert_eq!(done.reasoning.items[1]["call_id"], "call_0");
        assert_eq!(done.reasoning.items[2]["call_id"], second.as_str());
        assert_eq!(done.reasoning.signature_of("call_0"), Some("sig"));
        // An id an earlier turn had: the first call's item and signature follow it.
        let earlier: Turn = serde_json::from_value(json!({"role": "assistant", "content": "",
            "toolCall": {"id": "call_0", "name": "read_file", "parameters": {}}}))
        .unwrap_or_else(|e| panic!("{e}"));
        let mut done = completion(["call_0", "call_1"]);
        assert_eq!(own_ids(&mut done, &[earlier]), (0, 1));
        let first = done.calls[0].id.clone().unwrap_or_default();
        assert_eq!(done.reasoning.items[1]["call_id"], first.as_str());
        assert_eq!(done.reasoning.signature_of(&first), Some("sig"));
        assert_eq!(done.calls[1].id.as_deref(), Some("call_1"));
    }
}
