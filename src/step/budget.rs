//! Fits the prompt into `tokenLimit − reservedOutputTokens`. Basic policy: the instructions, the
//! tools, the query and the latest observation are mandatory; when the rest does not fit, the
//! oldest history turns go first, then context items from the lowest priority up. Every item's
//! fate is reported. The final prompt is counted once more as a whole, so the figure sent
//! upstream is exact (for models with a public tokenizer), never a sum of estimates.

use super::context::{ContextItem, ContextReport, ContextSource, Fate, ReportItem, Unresolved};
use super::history::Turn;
use super::prompt::{chat_messages, render_turn, system_prompt, CONTEXT_HEADING};
use super::tokens::{TokenCounter, REPLY_PRIMING};
use crate::llm::ChatMessage;

/// The prompt chosen for the upstream call.
#[derive(Debug)]
pub struct Fitted {
    pub system: String,
    pub messages: Vec<ChatMessage>,
    pub report: ContextReport,
    pub dropped_turns: usize,
    pub dropped_items: usize,
}

/// Even the mandatory parts exceed the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overflow {
    pub budget: u32,
    pub required: u32,
}

pub struct Candidates<'a> {
    pub head: &'a str,
    pub items: &'a [ContextItem],
    pub unresolved: &'a [Unresolved],
    pub history: &'a [Turn],
    pub query: &'a str,
}

pub fn fit(counter: &TokenCounter, budget: u32, c: &Candidates<'_>) -> Result<Fitted, Overflow> {
    let blocks: Vec<String> = c.items.iter().map(ContextItem::render).collect();
    let block_tokens: Vec<u32> = blocks.iter().map(|b| counter.count(b)).collect();
    let turns: Vec<ChatMessage> = c.history.iter().map(render_turn).collect();
    let turn_tokens: Vec<u32> = turns
        .iter()
        .map(|m| counter.count_message(&m.content))
        .collect();

    // The latest turn is the observation being answered when there is no new query.
    let query = c.query.trim();
    let droppable_turns = if query.is_empty() {
        turns.len().saturating_sub(1)
    } else {
        turns.len()
    };
    let mandatory = REPLY_PRIMING
        + counter.count_message(c.head)
        + if query.is_empty() {
            0
        } else {
            counter.count_message(query)
        }
        + turn_tokens[droppable_turns..].iter().sum::<u32>();
    let heading = counter.count(CONTEXT_HEADING);

    let mut first_turn = 0;
    let mut kept_items = blocks.len();
    let estimate = |first_turn: usize, kept_items: usize| {
        let items: u32 = block_tokens[..kept_items].iter().sum();
        let context = if kept_items > 0 { heading + items } else { 0 };
        mandatory + turn_tokens[first_turn..droppable_turns].iter().sum::<u32>() + context
    };
    let drop_one = |first_turn: &mut usize, kept_items: &mut usize| {
        if *first_turn < droppable_turns {
            *first_turn += 1;
            true
        } else if *kept_items > 0 {
            *kept_items -= 1;
            true
        } else {
            false
        }
    };
    while estimate(first_turn, kept_items) > budget {
        if !drop_one(&mut first_turn, &mut kept_items) {
            return Err(Overflow {
                budget,
                required: mandatory,
            });
        }
    }
    loop {
        let chosen: Vec<&str> = blocks[..kept_items].iter().map(String::as_str).collect();
        let system = system_prompt(c.head, &chosen);
        let messages = chat_messages(turns[first_turn..].to_vec(), query);
        let used = REPLY_PRIMING
            + counter.count_message(&system)
            + messages
                .iter()
                .map(|m| counter.count_message(&m.content))
                .sum::<u32>();
        if used <= budget {
            let report = report(
                counter,
                budget,
                used,
                c,
                &block_tokens,
                &turn_tokens,
                first_turn,
                kept_items,
            );
            return Ok(Fitted {
                system,
                messages,
                report,
                dropped_turns: first_turn,
                dropped_items: blocks.len() - kept_items,
            });
        }
        if !drop_one(&mut first_turn, &mut kept_items) {
            return Err(Overflow {
                budget,
                required: used,
            });
        }
    }
}

#[expect(
    clippy::too_many_arguments,
    reason = "one call site assembling one report"
)]
fn report(
    counter: &TokenCounter,
    budget: u32,
    used: u32,
    c: &Candidates<'_>,
    block_tokens: &[u32],
    turn_tokens: &[u32],
    first_turn: usize,
    kept_items: usize,
) -> ContextReport {
    let items = c
        .items
        .iter()
        .zip(block_tokens)
        .enumerate()
        .map(|(i, (item, &tokens))| {
            let kept = i < kept_items;
            ReportItem {
                source: item.source,
                id: item.id.clone(),
                tokens: Some(tokens),
                fate: if kept { Fate::Included } else { Fate::Dropped },
                reason: (!kept).then(|| {
                    "did not fit in the token budget; lower-priority context is dropped first"
                        .into()
                }),
            }
        });
    let turns = turn_tokens.iter().enumerate().map(|(i, &tokens)| {
        let kept = i >= first_turn;
        ReportItem {
            source: ContextSource::ConversationHistory,
            id: format!("conversation_history[{i}]"),
            tokens: Some(tokens),
            fate: if kept { Fate::Included } else { Fate::Dropped },
            reason: (!kept).then(|| {
                "did not fit in the token budget; the oldest turns are dropped first".into()
            }),
        }
    });
    let unresolved = c.unresolved.iter().cloned().map(ReportItem::from);
    ContextReport {
        budget,
        used,
        tokenizer: counter.encoding(),
        approximate: counter.is_approximate(),
        items: items.chain(turns).chain(unresolved).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::Provider;
    use crate::step::history::Role;

    fn item(source: ContextSource, id: &str, words: usize) -> ContextItem {
        ContextItem {
            source,
            id: id.into(),
            path: Some(id.into()),
            content: "token ".repeat(words),
            score: None,
            lines: None,
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
                    "word ".repeat(words),
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
    ) -> Result<Fitted, Overflow> {
        let counter = TokenCounter::for_model(Provider::OpenAi, "gpt-4o");
        let c = Candidates {
            head: "You are helpful.",
            items,
            unresolved: &[],
            history,
            query,
        };
        fit(&counter, budget, &c)
    }

    #[test]
    fn everything_fits_in_a_large_budget() {
        let items = [item(ContextSource::Explicit, "a.rs", 50)];
        let fitted = run(10_000, &items, &turns(4, 20), "why?").unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!((fitted.dropped_turns, fitted.dropped_items), (0, 0));
        assert!(fitted.report.used <= 10_000);
        assert!(fitted.system.contains("### explicit context: a.rs"));
    }

    #[test]
    fn oldest_history_goes_before_any_context() {
        let items = [item(ContextSource::Explicit, "a.rs", 100)];
        let history = turns(6, 100);
        let fitted = run(400, &items, &history, "why?").unwrap_or_else(|e| panic!("{e:?}"));
        assert!(fitted.dropped_turns > 0);
        assert_eq!(fitted.dropped_items, 0);
        assert!(fitted.report.used <= 400, "{}", fitted.report.used);
        assert_eq!(fitted.report.items[1].fate, Fate::Dropped);
    }

    #[test]
    fn lowest_priority_context_goes_when_history_is_gone() {
        let items = [
            item(ContextSource::Explicit, "a.rs", 100),
            item(ContextSource::VectorSearch, "b.rs", 100),
        ];
        let fitted = run(200, &items, &[], "why?").unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(fitted.dropped_items, 1);
        assert_eq!(fitted.report.items[0].fate, Fate::Included);
        assert_eq!(fitted.report.items[1].fate, Fate::Dropped);
        assert!(fitted.report.used <= 200);
    }

    #[test]
    fn the_latest_observation_is_kept_when_there_is_no_query() {
        let history = turns(5, 30);
        let fitted = run(60, &[], &history, "").unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(fitted.dropped_turns, 4);
        assert_eq!(
            fitted.messages.last().map(|m| m.content.trim()),
            Some("word ".repeat(30).trim())
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
