//! Old tool results cleared (`react.clear_tool_results`): a long loop's early results stop
//! eating the context and the bill. A result older than the last `keep_last_steps` steps, and at
//! least `min_tokens` long, is sent as a short placeholder naming the tool and the result's
//! size. The line between cleared and kept moves in blocks of steps (the history's block rule),
//! so the prompt's cached prefix changes about once every few steps, not at every one. The
//! client's history is untouched: only what is sent changes.

use serde::Serialize;

use super::tokens::TokenCounter;
use crate::step::history::{Role, Turn};

/// The client's setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClearToolResults {
    pub keep_last_steps: usize,
    pub min_tokens: u32,
    /// Ask the provider to clear instead, where it can (Anthropic's context editing); others
    /// clear here.
    pub server_side: bool,
}

/// Steps the line between cleared and kept results moves by: the history's block.
pub const BLOCK_STEPS: usize = 4;

/// A result sent as a placeholder.
#[derive(Debug, Clone, PartialEq)]
pub struct Cleared {
    /// Its index in the history.
    pub turn: usize,
    pub tool_name: String,
    /// The result's tokens as it would have been sent.
    pub tokens: u32,
    pub placeholder: String,
}

/// What the report says was cleared: the turns, and the tokens their placeholders saved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClearedReport {
    pub turns: Vec<ClearedTurn>,
    pub tokens_saved: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClearedTurn {
    pub turn: usize,
    pub tool_name: String,
    pub tokens: u32,
}

/// The results to send as placeholders, in history order. `rendered` is a result's text as it
/// would be sent.
pub fn cleared(
    history: &[Turn],
    settings: ClearToolResults,
    counter: &TokenCounter,
    rendered: impl Fn(&Turn) -> String,
) -> Vec<Cleared> {
    let Some(line) = clearing_line(history, settings.keep_last_steps) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut tool = "";
    for (i, turn) in history[..line].iter().enumerate() {
        match turn.role {
            Role::Assistant => tool = turn.calls().next().map_or("", |c| c.name.as_str()),
            Role::ToolObservation => {
                let name = answered_tool(history, i, turn).unwrap_or(tool);
                let text = rendered(turn);
                let tokens = counter.count(&text);
                if tokens >= settings.min_tokens.max(1) {
                    let placeholder = placeholder(name, tokens, text.len());
                    if counter.count(&placeholder) < tokens {
                        out.push(Cleared {
                            turn: i,
                            tool_name: name.to_string(),
                            tokens,
                            placeholder,
                        });
                    }
                }
            }
            Role::User => {}
        }
    }
    out
}

/// Where the kept history begins: the start of the step `keep_last_steps` from the end, moved
/// back to a block boundary (a multiple of `BLOCK_STEPS` steps from the history's start) so the
/// line stays put while the loop grows. `None` when nothing is old enough.
fn clearing_line(history: &[Turn], keep_last_steps: usize) -> Option<usize> {
    let steps: Vec<usize> = history
        .iter()
        .enumerate()
        .filter(|(_, t)| t.role == Role::Assistant)
        .map(|(i, _)| i)
        .collect();
    let old = steps.len().checked_sub(keep_last_steps)?;
    let blocked = old / BLOCK_STEPS * BLOCK_STEPS;
    (blocked > 0).then(|| steps[blocked])
}

/// The tool of the call an observation answers, by its id.
fn answered_tool<'a>(history: &'a [Turn], at: usize, turn: &Turn) -> Option<&'a str> {
    let id = turn.tool_call_id.as_deref()?;
    history[..at]
        .iter()
        .rev()
        .flat_map(Turn::calls)
        .find(|c| c.id.as_deref() == Some(id))
        .map(|c| c.name.as_str())
}

fn placeholder(tool: &str, tokens: u32, bytes: usize) -> String {
    let tool = if tool.is_empty() { "a tool" } else { tool };
    format!("[cleared to save room: the result of {tool} ({tokens} tokens, {bytes} bytes) from an earlier step; call it again if it is needed]")
}

/// The report of what was cleared among the turns sent (those from `first` on).
pub fn report(cleared: &[Cleared], first: usize, counter: &TokenCounter) -> Option<ClearedReport> {
    let sent: Vec<&Cleared> = cleared.iter().filter(|c| c.turn >= first).collect();
    if sent.is_empty() {
        return None;
    }
    let tokens_saved = sent
        .iter()
        .map(|c| c.tokens.saturating_sub(counter.count(&c.placeholder)))
        .sum();
    Some(ClearedReport {
        turns: sent
            .into_iter()
            .map(|c| ClearedTurn {
                turn: c.turn,
                tool_name: c.tool_name.clone(),
                tokens: c.tokens,
            })
            .collect(),
        tokens_saved,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::history::ToolCall;

    fn step_turns(n: usize) -> Vec<Turn> {
        let mut turns = vec![Turn::new(Role::User, "task".into(), String::new())];
        for i in 0..n {
            let mut call = Turn::new(Role::Assistant, format!("step {i}"), String::new());
            call.tool_call = Some(ToolCall {
                id: Some(format!("c{i}")),
                name: format!("tool{i}"),
                parameters: serde_json::Map::new(),
            });
            turns.push(call);
            let mut result = Turn::new(Role::ToolObservation, "x".repeat(400), String::new());
            result.tool_call_id = Some(format!("c{i}"));
            turns.push(result);
        }
        turns
    }

    fn counter() -> TokenCounter {
        TokenCounter::new(crate::llm::Provider::OPENAI, "gpt-4o", None)
    }

    fn settings(keep: usize) -> ClearToolResults {
        ClearToolResults {
            keep_last_steps: keep,
            min_tokens: 10,
            server_side: false,
        }
    }

    #[test]
    fn the_line_moves_in_blocks_as_the_loop_grows() {
        let lines: Vec<Option<usize>> = (0..14).map(|n| clearing_line(&step_turns(n), 2)).collect();
        // Nothing until four steps are old; then the line jumps by four steps at a time.
        assert_eq!(&lines[..6], &[None; 6]);
        assert_eq!(lines[6], Some(1 + 4 * 2));
        assert!(lines[6..10].iter().all(|l| *l == lines[6]), "{lines:?}");
        assert_eq!(lines[10], Some(1 + 8 * 2));
    }

    #[test]
    fn old_results_become_placeholders_naming_their_tool_and_size() {
        let history = step_turns(7);
        let cleared = cleared(&history, settings(2), &counter(), |t| t.content.clone());
        let turns: Vec<usize> = cleared.iter().map(|c| c.turn).collect();
        assert_eq!(turns, [2, 4, 6, 8]);
        assert_eq!(cleared[1].tool_name, "tool1");
        assert!(
            cleared[1].placeholder.contains("tool1")
                && cleared[1].placeholder.contains("400 bytes")
        );
        // Short results are kept whatever their age.
        let mut big = settings(2);
        big.min_tokens = 10_000;
        assert!(super::cleared(&history, big, &counter(), |t| t.content.clone()).is_empty());
        let report = report(&cleared, 0, &counter()).unwrap_or_else(|| panic!("a report"));
        assert_eq!(report.turns.len(), 4);
        assert!(report.tokens_saved > 0);
        assert!(super::report(&cleared, 9, &counter()).is_none());
    }
}
