//! Fits the prompt into `tokenLimit − reservedOutputTokens`, never one token over.
//!
//! 1. Mandatory: the instructions and tools, the query, and the latest observation (cut to
//!    `max_observation_tokens`). If these alone do not fit, the step is a context overflow.
//! 2. Then the sources in priority order (by default the conversation, newest turn first, then
//!    explicit files, pinned items, the focused file and search hits). An item that does not fit
//!    whole is cut to what is left, when that is still useful; omitted turns are replaced by one
//!    line (or a summary) in the system prompt.
//!
//! Every piece is tokenised once. The system prompt is joined at seams that no tiktoken
//! pre-token crosses, so its count is the sum of its parts; an item too large to fit is never
//! tokenised in full.

use super::clearing::{self, Cleared, ClearedReport};
use super::items::{ContextItem, ContextReport, ContextSource, Excluded, Fate, ReportItem};
use super::prompt::{
    chat_messages, render_native, render_turn, step_tail, Costed, CONTEXT_HEADING, FILLER_FIRST,
    FILLER_LAST, JOIN,
};
use super::tokens::{self, TokenCounter, PER_MESSAGE_OVERHEAD, REPLY_PRIMING};
use super::truncate::{self, Frame};
use crate::llm::{ChatMessage, ReasoningState, StateOrigin};
use crate::step::history::{Role, Turn};
use crate::step::parse::Tags;

/// The default order in which sources get what the mandatory parts leave.
pub const DEFAULT_ORDER: [ContextSource; 5] = [
    ContextSource::ConversationHistory,
    ContextSource::Explicit,
    ContextSource::Pinned,
    ContextSource::Implicit,
    ContextSource::VectorSearch,
];

const OMISSION_HEADING: &str = "## Earlier conversation\n\n";
/// Stands for an observation too long to cut to a useful size within its limit.
fn too_long_observation(tags: &Tags) -> String {
    format!("{}: [the result was too long to include]", tags.observation)
}

pub struct Candidates<'a> {
    pub head: &'a str,
    /// Within each source, in the order the client gave them (search hits by score).
    pub items: &'a [ContextItem],
    pub unresolved: &'a [Excluded],
    pub history: &'a [Turn],
    pub query: &'a str,
    /// Sources in the order they are served; sources not named follow in the default order.
    pub order: &'a [ContextSource],
    pub max_observation_tokens: u32,
    /// Tokens held for what stands for omitted turns: a one-line marker, or a summary.
    pub omission_reserve: u32,
    /// The ReAct tags turns are rendered with.
    pub tags: &'a Tags,
    /// Tool calls go to the provider as its own structure: turns are rendered natively.
    pub native: bool,
    /// Told after what is new in the step (the last-step notice).
    pub notice: Option<&'a str>,
    /// Who this step's call goes to: a turn's state made elsewhere is not sent (`None`: every
    /// state is).
    pub state_origin: Option<&'a StateOrigin>,
    /// Old tool results sent as placeholders (`react.clear_tool_results`), in history order.
    pub cleared: &'a [Cleared],
}

impl Candidates<'_> {
    /// History turn `i` as the message sent for it.
    fn render(&self, i: usize) -> ChatMessage {
        let placeholder;
        let mut turn = &self.history[i];
        if let Ok(k) = self.cleared.binary_search_by_key(&i, |c| c.turn) {
            placeholder = cleared_turn(turn, &self.cleared[k]);
            turn = &placeholder;
        }
        let mut message = if self.native {
            render_native(turn, self.tags)
        } else {
            render_turn(turn, self.tags)
        };
        if turn
            .reasoning_state
            .as_ref()
            .is_some_and(|s| !belongs(s, self.state_origin))
        {
            message.reasoning = None;
        }
        message
    }
}

/// A cleared result as the turn that stands for it: the placeholder as its content.
fn cleared_turn(turn: &Turn, cleared: &Cleared) -> Turn {
    let mut stand_in = Turn::new(
        Role::ToolObservation,
        cleared.placeholder.clone(),
        String::new(),
    );
    stand_in.tool_call_id = turn.tool_call_id.clone();
    stand_in.is_error = turn.is_error;
    stand_in
}

/// Whether a turn's state may go to the call `to`: a state that names no origin (made before
/// origins were recorded) goes wherever it went then.
pub fn belongs(state: &ReasoningState, to: Option<&StateOrigin>) -> bool {
    match (&state.origin, to) {
        (Some(from), Some(to)) => from == to,
        _ => true,
    }
}

/// Even the mandatory parts exceed the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overflow {
    pub budget: u32,
    pub required: u32,
}

/// The chosen prompt, still open for the line that stands for omitted turns.
#[derive(Debug)]
pub struct Fitted {
    system: String,
    system_tokens: u32,
    pub messages: Vec<ChatMessage>,
    messages_tokens: u32,
    /// Tokens of the history turns sent.
    history_tokens: u32,
    /// The turns before the first of the run kept (the task among them when it is pinned).
    pub omitted_turns: usize,
    /// The task is sent before the run of turns kept, the turns between them left out.
    task_pinned: bool,
    pub dropped_items: usize,
    pub truncated_items: usize,
    omission_reserve: u32,
    budget: u32,
    report_items: Vec<ReportItem>,
    cleared: Option<ClearedReport>,
}

/// The prompt as it is sent, with its exact count.
#[derive(Debug)]
pub struct Prompt {
    pub system: String,
    pub system_tokens: u32,
    pub messages: Vec<ChatMessage>,
    pub report: ContextReport,
    /// Tokens before what is new in the step: the system prompt and the history sent.
    pub prefix_tokens: u32,
}

/// Tokens a marker line of omitted turns can take, at most.
pub fn marker_reserve(counter: &TokenCounter) -> u32 {
    counter.count(&omission_part(&marker_text(usize::MAX))) + 2
}

pub(super) fn marker_text(turns: usize) -> String {
    format!("[{turns} earlier turns omitted]")
}

fn omission_part(text: &str) -> String {
    format!("{OMISSION_HEADING}{}\n\n", text.trim())
}

struct Chosen {
    /// In prompt order: the rendered block, its tokens, and the item's index.
    blocks: Vec<(String, u32, usize)>,
    fates: Vec<Option<ReportItem>>,
    turns: KeptTurns,
}

/// The optional turns kept: the oldest one's index, and each turn as sent, oldest first.
struct KeptTurns {
    first: usize,
    sent: Vec<SentTurn>,
    /// Whether the line standing for omitted turns has its room.
    omission_fits: bool,
    /// The task (its index and the turn), sent before the kept turns when it is older than
    /// them.
    task: Option<Task>,
}

/// The task's index and the turn as sent; boxed, as it is rarely there and a turn is large to
/// carry through every fit.
type Task = Box<(usize, SentTurn)>;

/// A turn as it is sent, with its tokens (framing included).
#[derive(Clone)]
struct SentTurn {
    message: ChatMessage,
    tokens: u32,
    /// An observation cut to `max_observation_tokens`.
    cut: bool,
}

/// The items the budget left out: not the duplicates set aside before it (reported beside them).
fn left_out_by_budget(report_items: &[ReportItem], c: &Candidates<'_>) -> usize {
    let duplicates = c
        .unresolved
        .iter()
        .filter(|u| u.fate == Fate::Dropped)
        .count();
    let dropped = report_items
        .iter()
        .filter(|i| i.fate == Fate::Dropped && i.source != ContextSource::ConversationHistory);
    dropped.count().saturating_sub(duplicates)
}

pub fn fit(counter: &TokenCounter, budget: u32, c: &Candidates<'_>) -> Result<Fitted, Overflow> {
    // Joining same-role neighbours can change the count at the seam by a token or two; when it
    // tips the total over, choose again within a limit lowered by the excess.
    let mut limit = budget;
    loop {
        let fitted = fit_within(counter, budget, limit, c)?;
        let used = fitted.used_without_omission() + fitted.held_for_omission();
        if used <= budget {
            return Ok(fitted);
        }
        limit = limit.saturating_sub(used - budget);
    }
}

/// The parts every prompt has, with their counts.
struct Mandatory {
    head_tokens: u32,
    heading_tokens: u32,
    /// The latest turn, when it must be sent (an observation, or the turn there is no query
    /// after).
    latest: Option<SentTurn>,
    /// The task, when the step asks nothing new: the last user turn before the latest (its
    /// index and the turn as sent). However many turns after it are left out, the model is
    /// still told what it is doing.
    task: Option<Task>,
    /// History turns that may be left out.
    optional_turns: usize,
    total: u32,
}

fn mandatory(counter: &TokenCounter, c: &Candidates<'_>) -> Mandatory {
    let query = c.query.trim();
    let head_tokens = counter.count(c.head);
    let heading_tokens = counter.count(CONTEXT_HEADING);
    let query_tokens = if query.is_empty() {
        0
    } else {
        counter.count_message(query)
    };
    let notice_tokens = c.notice.map_or(0, |n| counter.count_message(n));
    let latest_is_mandatory = c
        .history
        .last()
        .is_some_and(|t| t.role == Role::ToolObservation || query.is_empty());
    let optional_turns = c.history.len() - usize::from(latest_is_mandatory);
    let latest = c
        .history
        .last()
        .filter(|_| latest_is_mandatory)
        .and_then(|_| sent_turn(counter, c, c.history.len() - 1, u32::MAX));
    let task = if query.is_empty() {
        task_turn(counter, c, optional_turns)
    } else {
        None
    };
    // The turns that keep roles alternating may be needed whenever there is history.
    let fillers = if c.history.is_empty() {
        0
    } else {
        counter.count_message(FILLER_FIRST) + counter.count_message(FILLER_LAST)
    };
    let total = REPLY_PRIMING
        + PER_MESSAGE_OVERHEAD
        + head_tokens
        + query_tokens
        + notice_tokens
        + latest.as_ref().map_or(0, |t| t.tokens)
        + task.as_ref().map_or(0, |task| task.1.tokens)
        + fillers;
    Mandatory {
        head_tokens,
        heading_tokens,
        latest,
        task,
        optional_turns,
        total,
    }
}

/// The last user turn with something in it among the first `optional_turns`: a loop's task,
/// sent once as its query and carried in the history after that.
fn task_turn(counter: &TokenCounter, c: &Candidates<'_>, optional_turns: usize) -> Option<Task> {
    let at = c.history[..optional_turns]
        .iter()
        .rposition(|t| t.role == Role::User && !t.content.trim().is_empty())?;
    sent_turn(counter, c, at, u32::MAX).map(|turn| Box::new((at, turn)))
}

/// One choice within `limit`; the report states `budget`.
fn fit_within(
    counter: &TokenCounter,
    budget: u32,
    limit: u32,
    c: &Candidates<'_>,
) -> Result<Fitted, Overflow> {
    let mut must = mandatory(counter, c);
    if must.total > limit {
        return Err(Overflow {
            budget,
            required: must.total + (budget - limit),
        });
    }
    let mut room = limit - must.total;
    let chosen = choose(counter, c, &must, &mut room);
    let latest = must.latest.take();

    // What persists across a loop's steps goes in the system prompt; what changes goes last.
    let (stable, changing): (Vec<_>, Vec<_>) = chosen
        .blocks
        .iter()
        .partition(|(_, _, i)| c.items[*i].source.persists());
    let (system, system_tokens) =
        system_prompt(c.head, must.head_tokens, must.heading_tokens, &stable);
    let changing: Vec<&str> = changing.iter().map(|(b, _, _)| b.as_str()).collect();
    let tail = step_tail(&changing, c.query.trim(), c.notice);

    let mut turns: Vec<Costed> = Vec::with_capacity(chosen.turns.sent.len() + 2);
    // Sized once: a fate for every turn.
    let mut turn_fates: Vec<(Option<u32>, bool)> = Vec::with_capacity(c.history.len());
    turn_fates.resize(chosen.turns.first, (None, false));
    let task_pinned = chosen.turns.task.is_some();
    let mut history_tokens = 0;
    if let Some(pinned) = chosen.turns.task {
        let (at, task) = *pinned;
        turn_fates[at] = (Some(task.tokens), task.cut);
        history_tokens += task.tokens;
        turns.push(Costed::known(task.message, task.tokens));
    }
    for sent in chosen.turns.sent.into_iter().chain(latest) {
        turn_fates.push((Some(sent.tokens), sent.cut));
        history_tokens += sent.tokens;
        turns.push(Costed::known(sent.message, sent.tokens));
    }
    let costed = chat_messages(turns, tail, c.native);
    let messages_tokens = REPLY_PRIMING + messages_count(counter, &costed);
    let messages = costed.into_iter().map(|m| m.message).collect();

    let report_items = report_items(c, chosen.fates, &turn_fates, chosen.turns.first);
    let dropped_items = left_out_by_budget(&report_items, c);
    let truncated_items = report_items
        .iter()
        .filter(|i| i.fate == Fate::Truncated)
        .count();
    Ok(Fitted {
        system,
        system_tokens,
        messages,
        messages_tokens,
        history_tokens,
        omitted_turns: chosen.turns.first,
        task_pinned,
        dropped_items,
        truncated_items,
        omission_reserve: if chosen.turns.omission_fits {
            c.omission_reserve
        } else {
            0
        },
        budget,
        report_items,
        cleared: clearing::report(c.cleared, chosen.turns.first, counter),
    })
}

/// The system prompt from parts whose counts are already known, in one allocation of its final
/// size (the step holds it until the model has answered).
fn system_prompt(
    head: &str,
    head_tokens: u32,
    heading_tokens: u32,
    blocks: &[&(String, u32, usize)],
) -> (String, u32) {
    let heading = if blocks.is_empty() {
        ""
    } else {
        CONTEXT_HEADING
    };
    let length = head.len() + heading.len() + blocks.iter().map(|(b, _, _)| b.len()).sum::<usize>();
    let mut system = String::with_capacity(length);
    system.push_str(head);
    system.push_str(heading);
    let mut tokens = head_tokens;
    if !heading.is_empty() {
        tokens += heading_tokens;
    }
    for (block, block_tokens, _) in blocks {
        system.push_str(block);
        tokens += block_tokens;
    }
    (system, tokens)
}

/// The messages' tokens: known counts as they are; merged, filler and tail messages counted
/// now (a merged message from its parts' counts).
fn messages_count(counter: &TokenCounter, costed: &[Costed]) -> u32 {
    costed
        .iter()
        .map(|m| {
            m.tokens.unwrap_or_else(|| {
                if !m.message.is_plain() {
                    return counter.count_chat(&m.message);
                }
                counter
                    .count_joined(&m.message.content, &m.joins, JOIN.len())
                    .saturating_add(PER_MESSAGE_OVERHEAD)
            })
        })
        .sum()
}

/// Serves the sources in priority order from `room`, newest turns first.
fn choose(counter: &TokenCounter, c: &Candidates<'_>, must: &Mandatory, room: &mut u32) -> Chosen {
    let mut order: Vec<ContextSource> = Vec::with_capacity(c.order.len() + DEFAULT_ORDER.len());
    order.extend_from_slice(c.order);
    for source in DEFAULT_ORDER {
        if !order.contains(&source) {
            order.push(source);
        }
    }
    let mut chosen = Chosen {
        blocks: Vec::with_capacity(c.items.len()),
        fates: vec![None; c.items.len()],
        turns: KeptTurns {
            first: must.optional_turns,
            sent: Vec::new(),
            omission_fits: true,
            task: None,
        },
    };
    // The heading is paid once in each place items go: the system prompt and the step's tail.
    let mut heading_paid = [false; 2];
    for source in order {
        if source == ContextSource::ConversationHistory {
            chosen.turns = choose_turns(counter, c, must, room);
            continue;
        }
        let place = usize::from(!source.persists());
        for (i, item) in c
            .items
            .iter()
            .enumerate()
            .filter(|(_, it)| it.source == source)
        {
            let heading = if heading_paid[place] {
                0
            } else {
                must.heading_tokens
            };
            let Some(available) = room.checked_sub(heading) else {
                chosen.fates[i] = Some(fate(
                    item,
                    None,
                    Fate::Dropped,
                    "no room was left in the token budget",
                ));
                continue;
            };
            let block = item.render();
            let (block, tokens, item_fate) = match counter.count_within(&block, available) {
                Some(tokens) => (block, tokens, Fate::Included),
                None => match cut_item(counter, item, available) {
                    Some((block, tokens)) => (block, tokens, Fate::Truncated),
                    None => {
                        chosen.fates[i] = Some(fate(
                            item,
                            None,
                            Fate::Dropped,
                            "did not fit in what was left of the token budget",
                        ));
                        continue;
                    }
                },
            };
            *room -= tokens + heading;
            heading_paid[place] = true;
            let why = (item_fate == Fate::Truncated).then_some(
                "cut to fit the token budget: head and tail kept (or the window around the cursor)",
            );
            chosen.fates[i] = Some(fate(item, Some(tokens), item_fate, why.unwrap_or("")));
            chosen.blocks.push((block, tokens, i));
        }
    }
    chosen
}

/// A turn as it is sent, if it fits in `limit` tokens (framing included). An observation is
/// cut to `max_observation_tokens` whether or not it is the latest, the same way at every step,
/// so that what an earlier step sent is sent again unchanged (a prompt cache's prefix).
fn sent_turn(
    counter: &TokenCounter,
    c: &Candidates<'_>,
    at: usize,
    limit: u32,
) -> Option<SentTurn> {
    let turn = &c.history[at];
    let mut message = c.render(at);
    // The framing counts against the limit too: even an empty turn may not fit.
    let framing = tokens::framing(&message);
    let limit = limit.checked_sub(framing)?;
    if turn.role != Role::ToolObservation {
        let tokens = counter.count_within(&message.counted_text(), limit)?;
        return Some(SentTurn {
            message,
            tokens: tokens + framing,
            cut: false,
        });
    }
    let max = c.max_observation_tokens;
    let (tokens, cut) = match counter.count_within(&message.counted_text(), max) {
        Some(tokens) => (tokens, false),
        None => match truncate::head_and_tail(counter, &message.content, max) {
            Some(cut) => {
                message.content = cut.text;
                (cut.tokens, true)
            }
            None => {
                message.content = too_long_observation(c.tags);
                (counter.count(&message.content), true)
            }
        },
    };
    (tokens <= limit).then_some(SentTurn {
        message,
        tokens: tokens + framing,
        cut,
    })
}

/// The optional turns kept: taken newest first while they fit, keeping room for the line that
/// stands for the ones left out. When some are left out, they are left out up to the start of
/// a block of `BLOCK_STEPS` steps (`block_start`): the kept history's start then stays put
/// while the history grows, and the prompt's prefix with it. The task (`Mandatory::task`) is
/// paid for already: kept in its place when the kept turns reach it, else sent before them.
fn choose_turns(
    counter: &TokenCounter,
    c: &Candidates<'_>,
    must: &Mandatory,
    room: &mut u32,
) -> KeptTurns {
    let optional_turns = must.optional_turns;
    let task_at = must.task.as_ref().map(|task| task.0);
    let cost = |at: usize, turn: &SentTurn| if Some(at) == task_at { 0 } else { turn.tokens };
    let mut first = optional_turns;
    let mut used = 0u32;
    // Newest first until the end.
    let mut sent: Vec<SentTurn> = Vec::with_capacity(optional_turns);
    while first > 0 {
        let at = first - 1;
        let turn = match &must.task {
            Some(task) if task.0 == at => Some(task.1.clone()),
            _ => sent_turn(counter, c, at, room.saturating_sub(used)),
        };
        let Some(turn) = turn else { break };
        used += cost(at, &turn);
        sent.push(turn);
        first -= 1;
    }
    if first > 0 {
        // Turns are left out: room for the line that says so.
        while first < optional_turns && used + c.omission_reserve > *room {
            if let Some(turn) = sent.pop() {
                used -= cost(first, &turn);
            }
            first += 1;
        }
        let to = block_start(&c.history[..optional_turns], first);
        while first < to {
            if let Some(turn) = sent.pop() {
                used -= cost(first, &turn);
            }
            first += 1;
        }
    }
    let omission_fits = first == 0 || used + c.omission_reserve <= *room;
    *room -= used;
    if first > 0 && omission_fits {
        *room -= c.omission_reserve;
    }
    sent.reverse();
    KeptTurns {
        first,
        sent,
        omission_fits,
        task: must.task.clone().filter(|task| task.0 < first),
    }
}

/// Steps of a loop (assistant turns) in a block of history left out together. A loop adds a
/// step at a time, so the kept history's start moves about once every this many steps; four,
/// as the first move after the history first overflows may come up to a step early.
const BLOCK_STEPS: usize = 4;

/// Where the kept history starts when turns before `first` must be left out: the first block
/// start at or after it. A block starts at every `BLOCK_STEPS`-th assistant turn, counted from
/// the history's first turn (so a call stays with its result); a history only grows at its end,
/// so the starts stay where they are from step to step. `first` itself when no block starts
/// after it.
fn block_start(history: &[Turn], first: usize) -> usize {
    let mut steps = 0;
    for (i, turn) in history.iter().enumerate() {
        if turn.role != Role::Assistant {
            continue;
        }
        if steps > 0 && steps % BLOCK_STEPS == 0 && i >= first {
            return i;
        }
        steps += 1;
    }
    first
}

/// The item cut to `available` tokens (block framing included), if that is still useful.
fn cut_item(counter: &TokenCounter, item: &ContextItem, available: u32) -> Option<(String, u32)> {
    let wrap = |content: &str| item.render_with(content);
    // A little over the empty block's count: the fence can grow with the cut's backticks.
    let frame = Frame {
        tokens: counter.count(&wrap("")) + 8,
        wrap: &wrap,
    };
    let center = item.cursor_line.map(|l| l.saturating_sub(1) as usize);
    let cut = truncate::window(counter, &item.content, center, available, Some(frame))?;
    Some((cut.text, cut.tokens))
}

fn fate(item: &ContextItem, tokens: Option<u32>, fate: Fate, reason: &str) -> ReportItem {
    ReportItem {
        source: item.source,
        id: item.id.clone(),
        tokens,
        fate,
        reason: (!reason.is_empty()).then(|| reason.to_string()),
    }
}

fn report_items(
    c: &Candidates<'_>,
    fates: Vec<Option<ReportItem>>,
    turn_fates: &[(Option<u32>, bool)],
    first_kept_turn: usize,
) -> Vec<ReportItem> {
    let mut items: Vec<ReportItem> =
        Vec::with_capacity(fates.len() + c.history.len() + c.unresolved.len());
    items.extend(fates.into_iter().flatten());
    for (i, _) in c.history.iter().enumerate() {
        // Dropped turns are not tokenised: their count is not known, and not worth knowing.
        let (tokens, cut) = turn_fates.get(i).copied().unwrap_or((None, false));
        // The task is kept before the run of turns when it is older than them.
        let (fate, reason) = if i < first_kept_turn && tokens.is_none() {
            (
                Fate::Dropped,
                Some(
                    "older than the turns kept (turns are left out in blocks, so the prompt's start stays the same for several steps); stood for by the earlier-conversation line"
                        .to_string(),
                ),
            )
        } else if cut {
            (
                Fate::Truncated,
                Some(format!(
                    "the observation is cut to max_observation_tokens ({})",
                    c.max_observation_tokens
                )),
            )
        } else {
            (Fate::Included, None)
        };
        items.push(ReportItem {
            source: ContextSource::ConversationHistory,
            id: history_id(i),
            tokens,
            fate,
            reason,
        });
    }
    items.extend(c.unresolved.iter().cloned().map(ReportItem::from));
    items
}

/// `conversation_history[i]`, the report's name for a turn (one of these per turn per step).
fn history_id(i: usize) -> String {
    use std::fmt::Write;
    let mut id = String::with_capacity(32);
    id.push_str("conversation_history[");
    // Writing into a String does not fail.
    let _ = write!(id, "{i}]");
    id
}

impl Fitted {
    fn used_without_omission(&self) -> u32 {
        PER_MESSAGE_OVERHEAD + self.system_tokens + self.messages_tokens
    }

    /// Tokens held for the line standing for omitted turns: 0 when none are omitted or when
    /// not even that line had room.
    pub fn omission_room(&self) -> u32 {
        self.held_for_omission()
    }

    /// The turns left out of the prompt: those before the run kept, but the task.
    pub fn left_out(&self) -> usize {
        self.omitted_turns - usize::from(self.task_pinned)
    }

    fn held_for_omission(&self) -> u32 {
        if self.omitted_turns > 0 {
            self.omission_reserve
        } else {
            0
        }
    }

    /// Completes the system prompt with the line that stands for omitted turns: `summary` when
    /// given (cut to the room held for it), otherwise `[k earlier turns omitted]`.
    pub fn finish(
        mut self,
        counter: &TokenCounter,
        summary: Option<&str>,
        tokenizer: &'static str,
    ) -> Prompt {
        if self.omitted_turns > 0 && self.omission_reserve > 0 {
            let marker = marker_text(self.left_out());
            let mut part = omission_part(summary.unwrap_or(&marker));
            let mut tokens = counter.count(&part);
            if tokens > self.omission_reserve {
                let room = self
                    .omission_reserve
                    .saturating_sub(counter.count(OMISSION_HEADING) + 2);
                part = match summary.and_then(|s| truncate::head_and_tail(counter, s, room)) {
                    Some(cut) => omission_part(&cut.text),
                    None => omission_part(&marker),
                };
                tokens = counter.count(&part);
            }
            self.system.push_str(&part);
            self.system_tokens += tokens;
        }
        let used = PER_MESSAGE_OVERHEAD + self.system_tokens + self.messages_tokens;
        Prompt {
            system: self.system,
            system_tokens: self.system_tokens,
            messages: self.messages,
            report: ContextReport {
                budget: self.budget,
                used,
                tokenizer,
                counter: counter.name(),
                approximate: counter.is_approximate(),
                approximation_margin_percent: counter.margin_percent(),
                items: self.report_items,
                cleared_tool_results: self.cleared,
            },
            prefix_tokens: PER_MESSAGE_OVERHEAD + self.system_tokens + self.history_tokens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::Provider;

    fn counter() -> TokenCounter {
        TokenCounter::for_model(Provider::OPENAI, "gpt-4o")
    }

    fn item(source: ContextSource, id: &str, lines: usize) -> ContextItem {
        ContextItem {
            source,
            id: id.into(),
            path: Some(id.into()),
            content: (0..lines)
                .map(|i| format!("let value_{i} = {i};\n"))
                .collect(),
            score: None,
            lines: None,
            cursor_line: None,
        }
    }

    fn turns(n: usize, words: usize) -> Vec<Turn> {
        (0..n)
            .map(|i| {
                let role = if i % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                };
                Turn::new(
                    role,
                    format!("turn{i} {}", "word ".repeat(words)),
                    "2024-01-01T00:00:00.000Z".into(),
                )
            })
            .collect()
    }

    fn run(
        budget: u32,
        items: &[ContextItem],
        history: &[Turn],
        query: &str,
    ) -> Result<Prompt, Overflow> {
        let counter = counter();
        let c = Candidates {
            head: "You are helpful.\n\n",
            items,
            unresolved: &[],
            history,
            query,
            order: &DEFAULT_ORDER,
            max_observation_tokens: 2000,
            omission_reserve: marker_reserve(&counter),
            tags: &Tags::default(),
            native: false,
            state_origin: None,
            cleared: &[],
            notice: None,
        };
        fit(&counter, budget, &c).map(|f| f.finish(&counter, None, "o200k_base"))
    }

    fn exact(p: &Prompt) -> u32 {
        let c = counter();
        REPLY_PRIMING
            + c.count_message(&p.system)
            + p.messages
                .iter()
                .map(|m| c.count_message(&m.content))
                .sum::<u32>()
    }

    fn fate_of(p: &Prompt, id: &str) -> Fate {
        p.report
            .items
            .iter()
            .find(|i| i.id == id)
            .map(|i| i.fate)
            .unwrap_or_else(|| panic!("{id} not reported"))
    }

    #[test]
    fn everything_fits_in_a_large_budget_and_the_count_is_exact() {
        let items = [
            item(ContextSource::Explicit, "a.rs", 30),
            item(ContextSource::VectorSearch, "b.rs", 10),
        ];
        let p = run(10_000, &items, &turns(4, 20), "why?").unwrap_or_else(|e| panic!("{e:?}"));
        assert!(p.report.items.iter().all(|i| i.fate == Fate::Included));
        assert_eq!(p.report.used, exact(&p));
        assert_eq!(
            p.system_tokens,
            counter().count(&p.system),
            "the sum of the parts is the whole"
        );
    }

    #[test]
    fn history_is_served_before_context_and_newest_first() {
        let items = [item(ContextSource::Explicit, "a.rs", 60)];
        let history = turns(6, 100);
        let p = run(500, &items, &history, "why?").unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(fate_of(&p, "conversation_history[5]"), Fate::Included);
        assert_eq!(fate_of(&p, "conversation_history[0]"), Fate::Dropped);
        assert!(p.system.contains("earlier turns omitted]"));
        assert!(p.report.used <= 500 && p.report.used == exact(&p));
    }

    #[test]
    fn an_item_that_partly_fits_is_cut_not_dropped() {
        let items = [item(ContextSource::Explicit, "big.rs", 2000)];
        let p = run(1500, &items, &[], "why?").unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(fate_of(&p, "big.rs"), Fate::Truncated);
        assert!(
            p.system.contains("let value_0 = 0;") && p.system.contains("let value_1999 = 1999;")
        );
        assert!(p.report.used <= 1500 && p.report.used == exact(&p));
    }

    #[test]
    fn context_priority_puts_search_hits_before_history() {
        let items = [item(ContextSource::VectorSearch, "hit.rs", 60)];
        let history = turns(6, 80);
        let counter = counter();
        let c = Candidates {
            head: "You are helpful.\n\n",
            items: &items,
            unresolved: &[],
            history: &history,
            query: "q",
            order: &[ContextSource::VectorSearch],
            max_observation_tokens: 2000,
            omission_reserve: marker_reserve(&counter),
            tags: &Tags::default(),
            native: false,
            state_origin: None,
            cleared: &[],
            notice: None,
        };
        let p = fit(&counter, 700, &c)
            .unwrap_or_else(|e| panic!("{e:?}"))
            .finish(&counter, None, "o200k_base");
        assert_eq!(fate_of(&p, "hit.rs"), Fate::Included);
        assert_eq!(fate_of(&p, "conversation_history[0]"), Fate::Dropped);
    }

    #[test]
    fn the_latest_observation_is_mandatory_and_cut_to_its_own_limit() {
        let mut history = turns(2, 10);
        history.push(Turn::new(
            Role::ToolObservation,
            "row\n".repeat(5000),
            "2024-01-01T00:00:00.000Z".into(),
        ));
        let counter = counter();
        let c = Candidates {
            head: "h\n\n",
            items: &[],
            unresolved: &[],
            history: &history,
            query: "",
            order: &DEFAULT_ORDER,
            max_observation_tokens: 300,
            omission_reserve: marker_reserve(&counter),
            tags: &Tags::default(),
            native: false,
            state_origin: None,
            cleared: &[],
            notice: None,
        };
        let p = fit(&counter, 2000, &c)
            .unwrap_or_else(|e| panic!("{e:?}"))
            .finish(&counter, None, "o200k_base");
        assert_eq!(fate_of(&p, "conversation_history[2]"), Fate::Truncated);
        let last = p
            .messages
            .last()
            .map(|m| counter.count(&m.content))
            .unwrap_or(0);
        assert!(last <= 300, "{last}");
    }

    #[test]
    fn a_summary_replaces_the_marker_within_the_reserve() {
        let history = turns(8, 80);
        let counter = counter();
        let c = Candidates {
            head: "h\n\n",
            items: &[],
            unresolved: &[],
            history: &history,
            query: "q",
            order: &DEFAULT_ORDER,
            max_observation_tokens: 2000,
            omission_reserve: 120,
            tags: &Tags::default(),
            native: false,
            state_origin: None,
            cleared: &[],
            notice: None,
        };
        let fitted = fit(&counter, 500, &c).unwrap_or_else(|e| panic!("{e:?}"));
        assert!(fitted.omitted_turns > 0);
        let long_summary = "The user asked about auth; we found login() in auth.js. ".repeat(40);
        let p = fitted.finish(&counter, Some(&long_summary), "o200k_base");
        assert!(p.system.contains("## Earlier conversation\n\n"));
        assert!(
            p.system.contains("we found login() in auth.js"),
            "the summary, cut to its reserve"
        );
        assert!(!p.system.contains("earlier turns omitted]"));
        assert!(
            p.report.used <= 500 && p.report.used == exact(&p),
            "{}",
            p.report.used
        );
    }

    #[test]
    fn an_oversized_mandatory_part_is_an_overflow_with_numbers() {
        let query = "word ".repeat(500);
        let Err(overflow) = run(100, &[], &[], &query) else {
            panic!("must overflow")
        };
        assert_eq!(overflow.budget, 100);
        assert!(overflow.required > 500);
    }

    /// A loop's history after `steps` steps: the question, then a call and its result per step.
    fn loop_history(steps: usize, result_lines: usize) -> Vec<Turn> {
        let stamp = || "2024-01-01T00:00:00.000Z".to_string();
        let mut history = vec![Turn::new(
            Role::User,
            "Why does a.js throw?".into(),
            stamp(),
        )];
        for step in 0..steps {
            history.push(Turn::new(
                Role::Assistant,
                format!("Thought: look at part {step}\nAction: read_file(path=\"p{step}.js\")"),
                stamp(),
            ));
            history.push(Turn::new(
                Role::ToolObservation,
                (0..result_lines)
                    .map(|l| format!("const v{step}_{l} = {l};\n"))
                    .collect(),
                stamp(),
            ));
        }
        history
    }

    fn loop_candidates<'a>(
        history: &'a [Turn],
        items: &'a [ContextItem],
        tags: &'a Tags,
    ) -> Candidates<'a> {
        Candidates {
            head: "You are helpful.\n\n",
            items,
            unresolved: &[],
            history,
            query: "",
            order: &DEFAULT_ORDER,
            max_observation_tokens: 400,
            omission_reserve: 30,
            tags,
            native: false,
            state_origin: None,
            cleared: &[],
            notice: None,
        }
    }

    #[test]
    fn a_growing_history_loses_turns_in_blocks_not_one_per_step() {
        let counter = counter();
        let mut starts = Vec::new();
        for steps in 1..=30 {
            let history = loop_history(steps, 40);
            let fitted = fit(
                &counter,
                4000,
                &loop_candidates(&history, &[], &Tags::default()),
            )
            .unwrap_or_else(|e| panic!("{e:?}"));
            starts.push(fitted.omitted_turns);
        }
        let changes: Vec<usize> = starts
            .windows(2)
            .enumerate()
            .filter(|(_, w)| w[0] != w[1])
            .map(|(i, _)| i + 1)
            .collect();
        assert!(changes.len() >= 2, "the history did overflow: {starts:?}");
        assert!(
            changes.windows(2).all(|w| w[1] - w[0] >= 3),
            "the kept history's start moved more often than every third step: {starts:?}"
        );
        for steps in 1..=30 {
            let history = loop_history(steps, 40);
            let first = starts[steps - 1];
            assert!(
                first == 0 || history[first].role != Role::ToolObservation,
                "a kept history never opens with a result whose call is left out"
            );
        }
    }

    /// A loop's task is its one user turn, sent once as the query: however many steps after it
    /// are left out, it is sent first, and counted as kept, not among the turns left out.
    #[test]
    fn the_task_is_kept_however_much_of_the_loop_after_it_is_left_out() {
        let (counter, tags) = (counter(), Tags::default());
        for native in [false, true] {
            for steps in [12, 30] {
                let history = loop_history(steps, 40);
                let candidates = Candidates {
                    native,
                    ..loop_candidates(&history, &[], &tags)
                };
                let fitted = fit(&counter, 4000, &candidates).unwrap_or_else(|e| panic!("{e:?}"));
                assert!(fitted.omitted_turns > 2, "the history did overflow");
                assert_eq!(fitted.left_out(), fitted.omitted_turns - 1);
                assert_eq!(fitted.messages[0].content, "Why does a.js throw?");
                let prompt = fitted.finish(&counter, None, "o200k_base");
                assert_eq!(fate_of(&prompt, "conversation_history[0]"), Fate::Included);
                assert_eq!(fate_of(&prompt, "conversation_history[1]"), Fate::Dropped);
                assert!(prompt.report.used <= 4000, "{}", prompt.report.used);
                assert_eq!(exact(&prompt), prompt.report.used);
            }
        }
    }

    #[test]
    fn block_starts_stay_where_they_are_as_the_history_grows() {
        let long = loop_history(20, 30);
        for steps in 1..20 {
            let short = &long[..=2 * steps];
            for first in 1..short.len() {
                let start = block_start(short, first);
                if start < short.len() && start != first {
                    assert_eq!(block_start(&long, first), start, "{steps} {first}");
                }
            }
        }
    }

    #[test]
    fn an_observation_is_sent_the_same_when_it_is_no_longer_the_latest() {
        let counter = counter();
        let history = loop_history(3, 300);
        let sent = |turns: &[Turn]| {
            fit(
                &counter,
                100_000,
                &loop_candidates(turns, &[], &Tags::default()),
            )
            .unwrap_or_else(|e| panic!("{e:?}"))
            .messages
        };
        let before = sent(&history[..5]);
        let after = sent(&history);
        let observation = |m: &[ChatMessage]| m[2].content.split(JOIN).next().map(str::to_string);
        assert!(
            counter.count(&history[4].content) > 400,
            "the result is long"
        );
        assert_eq!(observation(&before), observation(&after));
        assert!(
            after[2].content.len() < history[4].content.len(),
            "the older observation is cut too"
        );
    }

    #[test]
    fn what_changes_each_step_comes_after_the_history_and_the_notice_last() {
        let counter = counter();
        let history = loop_history(2, 5);
        let items = [
            item(ContextSource::VectorSearch, "hit.rs", 5),
            item(ContextSource::Explicit, "kept.rs", 5),
            item(ContextSource::Implicit, "focused.rs", 5),
        ];
        let tags = Tags::default();
        let mut c = loop_candidates(&history, &items, &tags);
        c.notice = Some(super::super::prompt::LAST_STEP);
        let p = fit(&counter, 100_000, &c)
            .unwrap_or_else(|e| panic!("{e:?}"))
            .finish(&counter, None, "o200k_base");
        assert!(p.system.contains("kept.rs") && !p.system.contains("focused.rs"));
        let last = &p.messages[p.messages.len() - 1].content;
        let at = |needle: &str| last.find(needle).unwrap_or_else(|| panic!("{needle}"));
        assert!(
            at("const v1_4") < at("focused.rs"),
            "after the latest observation"
        );
        assert!(at("focused.rs") < at("hit.rs"));
        assert!(last.ends_with(super::super::prompt::LAST_STEP));
        assert_eq!(p.report.used, exact(&p));
    }

    #[test]
    fn a_room_smaller_than_a_turns_framing_leaves_the_turn_out() {
        let counter = counter();
        let stamp = || "2024-01-01T00:00:00.000Z".to_string();
        let history: Vec<Turn> = (0..6)
            .map(|i| {
                let role = if i % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                };
                Turn::new(role, String::new(), stamp())
            })
            .collect();
        let tags = Tags::default();
        let mut c = loop_candidates(&history, &[], &tags);
        c.query = "q";
        for budget in 0..200 {
            if let Ok(fitted) = fit(&counter, budget, &c) {
                let p = fitted.finish(&counter, None, "o200k_base");
                assert!(p.report.used <= budget, "{budget}: {}", p.report.used);
            }
        }
    }
}
