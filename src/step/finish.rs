//! The step's answer: from a valid output, from a `/tool` command, or a dry run's prompt; and
//! the conversation it hands back.

use super::context::tokens::TokenCounter;
use super::context::ContextReport;
use super::converse::Ledger;
use super::decide::Valid;
use super::error::{StepError, StepErrorKind};
use super::fit::Built;
use super::history::{timestamp_now, Role, ToolCall, Turn};
use super::input::StepInput;
use super::limits;
use super::loop_guard::Finding;
use super::output::{ModelUsed, Outcome, PromptPreview, StepOutput, Termination};
use super::parse;
use crate::llm::ReasoningState;
use serde_json::Value;

/// The prompt a dry run shows, and no call.
pub(super) fn dry_run(input: Box<StepInput>, built: Built, counter: &TokenCounter) -> StepOutput {
    let prompt = built.prompt;
    let plain = (input.llm.provider.api()).tool_results_are_plain_text();
    let preview = PromptPreview {
        system_tokens: prompt.system_tokens,
        messages: as_sent(&prompt.messages, plain)
            .into_iter()
            .map(|m| {
                let tokens = counter.count_chat(&m);
                (m, tokens)
            })
            .collect(),
        system: prompt.system,
    };
    StepOutput {
        session_id: input.session_id,
        thought: String::new(),
        outcome: Outcome::DryRun(preview),
        answer_json: None,
        forced_final: false,
        answer_left_out: false,
        updated_history: input.history,
        iterations_remaining: input.iterations_left,
        usage: None,
        warnings: built.warnings,
        context_report: prompt.report,
        conversation_summary: built.conversation_summary,
        loop_guard: None,
        model_used: None,
        fallback_attempts: Vec::new(),
        structured: None,
    }
}

/// The messages as the wire sends them: where its tool results are `plain` text, a failure is
/// said in the result and the text that continues a turn of results is in the last of them.
fn as_sent(messages: &[crate::llm::ChatMessage], plain: bool) -> Vec<crate::llm::ChatMessage> {
    if !plain {
        return messages.to_vec();
    }
    crate::llm::in_turn_folded(messages)
        .into_iter()
        .map(|(message, appended)| crate::llm::ChatMessage {
            content: crate::llm::with_appended(&message.text_as_sent(), appended).into_owned(),
            // Said in the text now, not counted twice.
            is_error: false,
            ..message.clone()
        })
        .collect()
}

/// The step's answer from a valid output.
pub(super) fn finish_step(
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
        Valid::Action { call, parallel } if input.iterations_left == 1 => {
            last_call(&input, call, parallel, &parsed.thought, &mut warnings)
        }
        valid => Outcome::from(valid),
    };
    let answer_json = answer_json(&input, &outcome, &mut warnings);
    let forced_final = forced(&input, &outcome, &mut warnings);
    let answer_left_out = parsed.answer_left_out && matches!(outcome, Outcome::Action { .. });
    if answer_left_out {
        warnings.push(format!(
            "the output held an answer (a '{}:', or a call of final_answer) after the tool call; the call was taken and the answer left out, as the model wrote it before seeing the tool's result (answer_left_out)",
            input.react.tags.final_answer
        ));
    }
    for warning in &mut warnings {
        *warning = input.without_keys(warning);
    }
    let mut updated_history = updated_history(&mut input, &parsed.thought, &outcome);
    let thought = with_reasoning(&reasoning, parsed.thought);
    if let Some(turn) = updated_history.last_mut().filter(|_| !reasoning.is_empty()) {
        let mut state = reasoning;
        state.origin = Some(input.llm.state_origin());
        turn.reasoning_state = Some(state);
    }
    StepOutput {
        session_id: input.session_id,
        thought,
        outcome,
        answer_json,
        forced_final,
        answer_left_out,
        updated_history,
        iterations_remaining: input.iterations_left - 1,
        model_used: Some(ModelUsed {
            provider: input.llm.provider,
            model: std::mem::take(&mut input.llm.model),
            usage,
        }),
        usage,
        warnings,
        context_report: built.prompt.report,
        conversation_summary: built.conversation_summary,
        loop_guard: None,
        fallback_attempts: Vec::new(),
        structured: None,
    }
}

/// The outcome of calls proposed on the last step: a call of the client's answer tool
/// (`react.answer_tool`), wherever it stands in the turn, proposed alone; any other, the step
/// limit's summary.
fn last_call(
    input: &StepInput,
    call: super::decide::Call,
    parallel: Vec<super::decide::Call>,
    thought: &str,
    warnings: &mut Vec<String>,
) -> Outcome {
    let answer_tool = input.react.answer_tool.as_deref();
    let answer = std::iter::once(call)
        .chain(parallel)
        .find(|c| Some(c.tool_name.as_str()) == answer_tool);
    match answer {
        Some(call) => {
            warnings.push(format!(
                "the model answered through '{}' (react.answer_tool) on its last step: the call is proposed, not summarised, and any other call of the turn left out",
                call.tool_name
            ));
            Outcome::from(Valid::Action {
                call,
                parallel: Vec::new(),
            })
        }
        None => {
            warnings.push(
                "the model proposed a tool call on its last step; a summary was returned instead"
                    .into(),
            );
            Outcome::Answer {
                text: limits::summary(&input.history, thought),
                termination: Termination::MaxIterations,
            }
        }
    }
}

/// Whether the answer is one the last step asked for: the prompt told the model not to call a
/// tool and to answer now, so the answer may be made up to obey. Said in a warning too.
fn forced(input: &StepInput, outcome: &Outcome, warnings: &mut Vec<String>) -> bool {
    let forced = input.iterations_left == 1
        && matches!(
            outcome,
            Outcome::Answer {
                termination: Termination::Success,
                ..
            }
        );
    if forced {
        warnings.push("the answer was given on the loop's last step, where the model was told to answer without another tool call: it may be a guess rather than a finding (forced_final)".into());
    }
    forced
}

/// The final answer's JSON, when a schema asked for it: the answer was checked against it,
/// unless the step was cut short at its last iteration (then a warning says it is a summary).
fn answer_json(input: &StepInput, outcome: &Outcome, warnings: &mut Vec<String>) -> Option<Value> {
    input.react.final_answer.as_ref()?;
    match outcome {
        Outcome::Answer {
            text,
            termination: Termination::Success,
        } => serde_json::from_str(text).ok(),
        Outcome::Answer { .. } => {
            warnings.push("the answer is a summary of a loop stopped at its last iteration, not the JSON final_answer_schema asks for".into());
            None
        }
        _ => None,
    }
}

/// What the loop guard finds in the history, with what it tells the model set in the input.
/// Boxed: the step's future holds it while the model answers, and it is rarely there. Nothing on
/// the last step: its prompt tells the model to answer in place of the guard's notice, and a
/// call proposed there is summarised, never run.
pub(super) fn watch(input: &mut StepInput) -> Option<Box<Finding>> {
    if input.iterations_left == 1 {
        return None;
    }
    let guard = input.react.loop_guard?;
    let found = guard.watch(&input.history, &input.user_query)?;
    let native =
        (input.llm.tool_mode).is_native(input.llm.provider, input.tools.callable_natively());
    let renamed = match native {
        true => super::fit::sent_names(input),
        false => Default::default(),
    };
    input.loop_notice = Some(found.notice(&input.react.tags, &renamed));
    Some(Box::new(found))
}

/// The answer with the loop guard's report and warning, when it warned.
pub(super) fn watched(mut output: StepOutput, found: Option<Box<Finding>>) -> StepOutput {
    if let Some(found) = found {
        output.warnings.push(found.warning());
        output.loop_guard = Some(found.report);
    }
    output
}

/// The step's failure when the calls it proposes go on with a loop the guard stops. A final
/// answer never does; nor does a call on the last step, which becomes the summary.
pub(super) fn loop_stop(
    found: Option<&Finding>,
    valid: &Valid,
    input: &StepInput,
) -> Option<StepError> {
    let Valid::Action { call, parallel } = valid else {
        return None;
    };
    if input.iterations_left == 1 {
        return None;
    }
    let calls = std::iter::once(call)
        .chain(parallel)
        .map(|c| (c.tool_name.as_str(), &c.tool_args));
    let report = found?.stops(calls)?;
    Some(StepErrorKind::LoopDetected(Box::new(report)).into())
}

/// The step's thought: what the model reasoned (thinking, `reasoning_content`), then what it
/// wrote as its thought when that says more, then what it reasoned once it had begun writing.
fn with_reasoning(reasoning: &ReasoningState, written: String) -> String {
    let reasoned = reasoning.text();
    if reasoned.is_empty() || reasoned.trim() == written.trim() {
        return written;
    }
    let (before, after) = reasoning.text_around_writing();
    crate::llm::thought_parts([before.as_str(), written.trim(), after.as_str()])
}

/// A `/tool …` query that names a known tool: proposed as it is, without a prompt or a model.
pub(super) fn command_step(
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
        answer_json: None,
        forced_final: false,
        answer_left_out: false,
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
            cleared_tool_results: None,
        },
        conversation_summary: None,
        loop_guard: None,
        model_used: None,
        fallback_attempts: Vec::new(),
        structured: None,
    }
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
