//! `history_strategy: "summarize"`: turns that do not fit are replaced by a summary made with one
//! extra model call. The response returns it with the number of turns it covers; the client
//! sends it back, and as long as it covers every omitted turn no call is made again, so memory
//! carries across a stateless loop at the cost of one call per growth of the omitted part.

use super::prompt::render_turn;
use super::tokens::{TokenCounter, PER_MESSAGE_OVERHEAD, REPLY_PRIMING};
use super::truncate;
use crate::llm::{ChatMessage, ChatRequest, ChatRole, LlmClients, LlmError, Usage};
use crate::step::history::Turn;
use crate::step::input::{ConversationSummary, StepInput};
use crate::step::parse::Tags;

/// The most a summary may take of the prompt.
const SUMMARY_MAX_TOKENS: u32 = 400;

/// The longest summary a client may send back (`conversation_summary.text`), in characters.
pub const MAX_SUMMARY_CHARS: usize = 100_000;

/// `text`'s first [`MAX_SUMMARY_CHARS`] characters: as much of a summary as a request takes.
pub fn within_summary_bound(text: &str) -> &str {
    match text.char_indices().nth(MAX_SUMMARY_CHARS) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

const INSTRUCTIONS: &str = "You keep the memory of a coding assistant's conversation. Summarise \
the conversation below for the assistant's own later use: the user's goal, each tool that was \
called with what it found, decisions made and questions still open. Keep names, paths and \
numbers exact. Write plain text, no preamble.";

/// Tokens held in the prompt for the summary: a share of the budget, at most 400.
pub fn reserve(budget: u32) -> u32 {
    (budget / 8).min(SUMMARY_MAX_TOKENS)
}

/// The client's summary when it still covers the omitted turns; otherwise a new one, built from
/// the client's summary and the turns it does not cover.
pub async fn summarize(
    llm: &LlmClients,
    input: &StepInput,
    counter: &TokenCounter,
    omitted: usize,
    reserve: u32,
) -> Result<(ConversationSummary, Option<Usage>), LlmError> {
    let previous = input.conversation_summary.as_ref();
    if let Some(previous) = previous.filter(|p| p.turns >= omitted) {
        return Ok((previous.clone(), None));
    }
    let covered = previous.map_or(0, |p| p.turns.min(omitted));
    let mut transcript = String::new();
    if let Some(previous) = previous {
        transcript.push_str("Summary of the conversation before this part:\n");
        transcript.push_str(&previous.text);
        transcript.push_str("\n\n");
    }
    transcript.push_str(&render_transcript(
        &input.history[covered..omitted],
        &input.react.tags,
    ));
    let max_output = reserve.saturating_sub(16).max(16);
    let room = input.llm.token_limit.saturating_sub(
        max_output + counter.count(INSTRUCTIONS) + 2 * PER_MESSAGE_OVERHEAD + REPLY_PRIMING,
    );
    if counter.count_within(&transcript, room).is_none() {
        if let Some(cut) = truncate::head_and_tail(counter, &transcript, room) {
            transcript = cut.text;
        }
    }
    let messages = vec![ChatMessage::text(ChatRole::User, transcript)];
    // No tools, and no reasoning effort: a summary needs no deliberation.
    let request = ChatRequest {
        temperature: input.llm.temperature,
        base_url: input.llm.base_url.clone(),
        context_window: Some(input.llm.token_limit),
        ..ChatRequest::new(
            input.llm.model.clone(),
            INSTRUCTIONS.to_string(),
            messages,
            max_output,
        )
    };
    let completion = llm
        .complete(
            input.llm.provider,
            &request,
            input.key.as_ref(),
            input.deadline,
        )
        .await?;
    let summary = ConversationSummary {
        text: returnable(completion.text.trim(), omitted),
        turns: omitted,
    };
    Ok((summary, completion.usage))
}

/// The summary as the response returns it: what the client sends back must be taken back, so
/// never more than [`MAX_SUMMARY_CHARS`] (a model that ignores the output limit could write
/// more) and never empty (the marker stands in for a model that wrote nothing).
fn returnable(text: &str, omitted: usize) -> String {
    let text = within_summary_bound(text);
    match text.is_empty() {
        true => super::budget::marker_text(omitted),
        false => text.to_string(),
    }
}

fn render_transcript(turns: &[Turn], tags: &Tags) -> String {
    turns
        .iter()
        .map(|t| {
            let m = render_turn(t, tags);
            let who = match m.role {
                ChatRole::User | ChatRole::Tool => "User",
                ChatRole::Assistant => "Assistant",
            };
            format!("{who}: {}\n\n", m.content)
        })
        .collect()
}
