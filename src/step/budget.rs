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

use super::context::{ContextItem, ContextReport, ContextSource, Excluded, Fate, ReportItem};
use super::history::{Role, Turn};
use super::parse::Tags;
use super::prompt::{
    chat_messages, render_native, render_turn, Costed, CONTEXT_HEADING, FILLER_FIRST, FILLER_LAST,
    JOIN,
};
use super::tokens::{TokenCounter, PER_MESSAGE_OVERHEAD, REPLY_PRIMING};
use super::truncate::{self, Frame};
use crate::llm::ChatMessage;

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
}

impl Candidates<'_> {
    /// A history turn as the message sent for it.
    fn render(&self, turn: &Turn) -> ChatMessage {
        if self.native {
            render_native(turn, self.tags)
        } else {
            render_turn(turn, self.tags)
        }
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
    pub omitted_turns: usize,
    pub dropped_items: usize,
    pub truncated_items: usize,
    omission_reserve: u32,
    budget: u32,
    report_items: Vec<ReportItem>,
}

/// The prompt as it is sent, with its exact count.
#[derive(Debug)]
pub struct Prompt {
    pub system: String,
    pub system_tokens: u32,
    pub messages: Vec<ChatMessage>,
    pub report: ContextReport,
}

/// Tokens a marker line of omitted turns can take, at most.
pub fn marker_reserve(counter: &TokenCounter) -> u32 {
    counter.count(&omission_part(&marker_text(usize::MAX))) + 2
}

fn marker_text(turns: usize) -> String {
    format!("[{turns} earlier turns omitted]")
}

fn omission_part(text: &str) -> String {
    format!("{OMISSION_HEADING}{}\n\n", text.trim())
}

struct Chosen {
    /// In prompt order: the rendered block, its tokens, and the item's index.
    blocks: Vec<(String, u32, usize)>,
    fates: Vec<Option<ReportItem>>,
    first_kept_turn: usize,
    /// Costs of the kept optional turns, oldest first.
    turn_costs: Vec<u32>,
    /// Whether the line standing for omitted turns has its room.
    omission_fits: bool,
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

/// One choice within `limit`; the report states `budget`.
fn fit_within(
    counter: &TokenCounter,
    budget: u32,
    limit: u32,
    c: &Candidates<'_>,
) -> Result<Fitted, Overflow> {
    let query = c.query.trim();
    let head_tokens = counter.count(c.head);
    let heading_tokens = counter.count(CONTEXT_HEADING);
    let query_tokens = if query.is_empty() {
        0
    } else {
        counter.count_message(query)
    };

    // The latest turn is mandatory when it is an observation, or when there is no query.
    let latest_is_mandatory = c
        .history
        .last()
        .is_some_and(|t| t.role == Role::ToolObservation || query.is_empty());
    let optional_turns = c.history.len() - usize::from(latest_is_mandatory);
    let mut latest = c
        .history
        .get(optional_turns)
        .filter(|_| latest_is_mandatory)
        .map(|t| c.render(t));
    let mut latest_fate = None;
    let mut latest_tokens = 0;
    if let (Some(message), Some(turn)) = (latest.as_mut(), c.history.last()) {
        // Only an observation is cut; any other mandatory turn is counted whole, once.
        let limit = if turn.role == Role::ToolObservation {
            c.max_observation_tokens
        } else {
            u32::MAX
        };
        let tokens = match counter.count_within(&message.counted_text(), limit) {
            Some(tokens) => tokens,
            None => {
                latest_fate = Some(Fate::Truncated);
                match truncate::head_and_tail(counter, &message.content, limit) {
                    Some(cut) => {
                        message.content = cut.text;
                        cut.tokens
                    }
                    None => {
                        message.content = too_long_observation(c.tags);
                        counter.count(&message.content)
                    }
                }
            }
        };
        latest_tokens = tokens + PER_MESSAGE_OVERHEAD;
    }
    // The turns that keep roles alternating may be needed whenever there is history.
    let fillers = if c.history.is_empty() {
        0
    } else {
        counter.count_message(FILLER_FIRST) + counter.count_message(FILLER_LAST)
    };
    let mandatory =
        REPLY_PRIMING + PER_MESSAGE_OVERHEAD + head_tokens + query_tokens + latest_tokens + fillers;
    if mandatory > limit {
        return Err(Overflow {
            budget,
            required: mandatory + (budget - limit),
        });
    }

    let mut room = limit - mandatory;
    let chosen = choose(counter, c, optional_turns, heading_tokens, &mut room);

    // Assemble: the system prompt from parts whose counts are already known, in one allocation
    // of its final size (the step holds it until the model has answered).
    let heading = if chosen.blocks.is_empty() {
        ""
    } else {
        CONTEXT_HEADING
    };
    let length =
        c.head.len() + heading.len() + chosen.blocks.iter().map(|(b, _, _)| b.len()).sum::<usize>();
    let mut system = String::with_capacity(length);
    system.push_str(c.head);
    system.push_str(heading);
    let mut system_tokens = head_tokens;
    if !heading.is_empty() {
        system_tokens += heading_tokens;
    }
    for (block, tokens, _) in &chosen.blocks {
        system.push_str(block);
        system_tokens += tokens;
    }
    let kept = &c.history[chosen.first_kept_turn..optional_turns];
    let mut turns: Vec<Costed> = kept
        .iter()
        .zip(&chosen.turn_costs)
        .map(|(t, &cost)| Costed::known(c.render(t), cost))
        .collect();
    turns.extend(latest.map(|m| Costed::known(m, latest_tokens)));
    let query = (!query.is_empty()).then(|| {
        let message = ChatMessage::text(crate::llm::ChatRole::User, query.to_string());
        Costed::known(message, query_tokens)
    });
    let costed = chat_messages(turns, query, c.native);
    // Merged neighbours and filler turns are the only text counted after assembly.
    let messages_tokens = REPLY_PRIMING
        + costed
            .iter()
            .map(|m| {
                m.tokens.unwrap_or_else(|| {
                    if !m.message.is_plain() {
                        return counter.count_message(&m.message.counted_text());
                    }
                    counter
                        .count_joined(&m.message.content, &m.joins, JOIN.len())
                        .saturating_add(PER_MESSAGE_OVERHEAD)
                })
            })
            .sum::<u32>();
    let messages = costed.into_iter().map(|m| m.message).collect();

    let mut turn_tokens = vec![None; chosen.first_kept_turn];
    turn_tokens.extend(chosen.turn_costs.iter().map(|&t| Some(t)));
    if latest_is_mandatory {
        turn_tokens.push(Some(latest_tokens));
    }
    let report_items = report_items(
        c,
        chosen.fates,
        &turn_tokens,
        chosen.first_kept_turn,
        optional_turns,
        latest_fate,
    );
    let dropped_items = report_items
        .iter()
        .filter(|i| i.fate == Fate::Dropped && i.source != ContextSource::ConversationHistory)
        .count();
    let truncated_items = report_items
        .iter()
        .filter(|i| i.fate == Fate::Truncated)
        .count();
    let fitted = Fitted {
        system,
        system_tokens,
        messages,
        messages_tokens,
        omitted_turns: chosen.first_kept_turn,
        dropped_items,
        truncated_items,
        omission_reserve: if chosen.omission_fits {
            c.omission_reserve
        } else {
            0
        },
        budget,
        report_items,
    };
    Ok(fitted)
}

/// Serves the sources in priority order from `room`, newest turns first.
fn choose(
    counter: &TokenCounter,
    c: &Candidates<'_>,
    optional_turns: usize,
    heading_tokens: u32,
    room: &mut u32,
) -> Chosen {
    let mut order: Vec<ContextSource> = c.order.to_vec();
    for source in DEFAULT_ORDER {
        if !order.contains(&source) {
            order.push(source);
        }
    }
    let mut chosen = Chosen {
        blocks: Vec::new(),
        fates: vec![None; c.items.len()],
        first_kept_turn: optional_turns,
        turn_costs: Vec::new(),
        omission_fits: true,
    };
    let mut heading_paid = false;
    for source in order {
        if source == ContextSource::ConversationHistory {
            (
                chosen.first_kept_turn,
                chosen.turn_costs,
                chosen.omission_fits,
            ) = choose_turns(counter, c, optional_turns, room);
            continue;
        }
        for (i, item) in c
            .items
            .iter()
            .enumerate()
            .filter(|(_, it)| it.source == source)
        {
            let heading = if heading_paid { 0 } else { heading_tokens };
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
            heading_paid = true;
            let why = (item_fate == Fate::Truncated).then_some(
                "cut to fit the token budget: head and tail kept (or the window around the cursor)",
            );
            chosen.fates[i] = Some(fate(item, Some(tokens), item_fate, why.unwrap_or("")));
            chosen.blocks.push((block, tokens, i));
        }
    }
    chosen
}

/// The oldest turn kept: turns are taken newest first while they fit, keeping room for the line
/// that stands for the ones left out.
fn choose_turns(
    counter: &TokenCounter,
    c: &Candidates<'_>,
    optional_turns: usize,
    room: &mut u32,
) -> (usize, Vec<u32>, bool) {
    let mut first = optional_turns;
    let mut used = 0u32;
    let mut costs = Vec::new();
    while first > 0 {
        let message = c.render(&c.history[first - 1]);
        let limit = room.saturating_sub(used);
        match counter.count_within(
            &message.counted_text(),
            limit.saturating_sub(PER_MESSAGE_OVERHEAD),
        ) {
            Some(tokens) if used + tokens + PER_MESSAGE_OVERHEAD <= *room => {
                used += tokens + PER_MESSAGE_OVERHEAD;
                costs.push(tokens + PER_MESSAGE_OVERHEAD);
                first -= 1;
            }
            _ => break,
        }
    }
    // Turns will be left out: make room for the line that says so, when there is any.
    while first > 0 && used + c.omission_reserve > *room {
        match costs.pop() {
            Some(cost) => {
                used -= cost;
                first += 1;
            }
            None => break,
        }
    }
    let omission_fits = first == 0 || used + c.omission_reserve <= *room;
    *room -= used;
    if first > 0 && omission_fits {
        *room -= c.omission_reserve;
    }
    costs.reverse();
    (first, costs, omission_fits)
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
    turn_tokens: &[Option<u32>],
    first_kept_turn: usize,
    optional_turns: usize,
    latest_fate: Option<Fate>,
) -> Vec<ReportItem> {
    let mut items: Vec<ReportItem> = fates.into_iter().flatten().collect();
    for (i, _) in c.history.iter().enumerate() {
        let (fate, reason) = if i < first_kept_turn {
            (
                Fate::Dropped,
                Some(
                    "older than the turns that fit; stood for by the earlier-conversation line"
                        .to_string(),
                ),
            )
        } else if i >= optional_turns && latest_fate == Some(Fate::Truncated) {
            (
                Fate::Truncated,
                Some(format!(
                    "the latest observation is cut to max_observation_tokens ({})",
                    c.max_observation_tokens
                )),
            )
        } else {
            (Fate::Included, None)
        };
        // Dropped turns are not tokenised: their count is not known, and not worth knowing.
        let tokens = turn_tokens.get(i).copied().flatten();
        items.push(ReportItem {
            source: ContextSource::ConversationHistory,
            id: format!("conversation_history[{i}]"),
            tokens,
            fate,
            reason,
        });
    }
    items.extend(c.unresolved.iter().cloned().map(ReportItem::from));
    items
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
            let marker = marker_text(self.omitted_turns);
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
            },
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
}
