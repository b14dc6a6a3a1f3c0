//! Calls or an answer written as a block rather than after a tag (tool-call markup, a pythonic
//! call list, a JSON action), and whether such a block is the step's decision, something the
//! model quoted, or unclear.

use std::sync::LazyLock;

use aho_corasick::AhoCorasick;

use super::decision::Decision;
use super::tags::{Found, Tag};
use super::{ending, json, markup, pythonic};

/// Calls or an answer written as a block rather than after a tag: where it starts, its own
/// thought if it carries one, and its decisions in the order written (never empty).
pub(super) struct Block {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) thought: Option<String>,
    pub(super) calls: Vec<Decision>,
    /// What the block was, when it is not a form the answer format asks for.
    pub(super) read_as: Option<String>,
}

/// What a block is to the step.
enum Role {
    /// The step's decision.
    Decides,
    /// Something the model quoted: an example, a past step. The tags decide, or nothing does.
    Quoted,
    /// A call written beside a decision of another kind, or between prose that says neither
    /// what it is: which one the model meant is for it to say again.
    Unclear,
}

impl Block {
    /// Whether the block is the step's decision. With an action or answer tag at `limit` after
    /// it, the block decides only when it runs over that tag (the tag is its content); an
    /// `Action:` after it is the call the model means (the block narrated a step), and a final
    /// answer right after it leaves the step unclear. With no tag after it, a block followed by
    /// more prose is quoted when the words before it show an example ("like this:", "e.g."),
    /// decides when they announce a step ("Let me check the config first:"), and is unclear
    /// otherwise.
    fn role(&self, text: &str, limit: usize, found: &[Found]) -> Role {
        let readable = self
            .calls
            .iter()
            .any(|c| !matches!(c, Decision::Unreadable { .. }));
        if limit < text.len() {
            if !readable {
                return Role::Quoted;
            }
            if self.end >= limit {
                return Role::Decides;
            }
            let gap = ending::strip_end_tokens(text[self.end..limit].trim());
            let tag = found.iter().find(|f| f.line_start == limit).map(|f| f.tag);
            return match (gap.is_empty(), tag, intent(&text[..self.start])) {
                (true, Some(Tag::FinalAnswer), Some(false)) => Role::Quoted,
                (true, Some(Tag::FinalAnswer), _) => Role::Unclear,
                _ => Role::Quoted,
            };
        }
        let prose_after =
            !ending::strip_end_tokens(text[self.end.min(text.len())..].trim()).is_empty();
        // A call that opens the output, or with nothing after it, is the step.
        if !prose_after || text[..self.start].trim().is_empty() {
            return Role::Decides;
        }
        match intent(&text[..self.start]) {
            Some(true) => Role::Decides,
            Some(false) => Role::Quoted,
            None => Role::Unclear,
        }
    }
}

/// Words by which a model announces a step it is about to take ("Let me check the config
/// first:"), before a block (`intent`) or at the start of an answer (`announces_a_step`).
pub(super) const STEP: [&str; 9] = [
    "let me",
    "i'll",
    "i will",
    "i am going to",
    "i'm going to",
    "i need to",
    "first,",
    "now i",
    "next i",
];

/// What the words just before a block say it is: a step the model announces (`Some(true)`:
/// "Let me check the config first:"), an example it shows (`Some(false)`: "like this:",
/// "for example", "the JSON below."), or neither.
fn intent(before: &str) -> Option<bool> {
    let before = before.trim_end();
    // The line that introduces the block, before the fence it may be in.
    let mut lines = before.lines().rev().filter(|l| !l.trim().is_empty());
    let mut line = lines.next().unwrap_or_default();
    if line.trim_start().starts_with("```") {
        line = lines.next().unwrap_or_default();
    }
    let line = line.to_lowercase();
    // An example, or a step already taken ("I already ran", "the step before this one was").
    const EXAMPLE: [&str; 18] = [
        "example",
        "e.g.",
        "like this",
        "looks like",
        "such as",
        "as follows",
        "below",
        "format",
        "for instance",
        "would be",
        "shape",
        "syntax",
        "already",
        "before this",
        "previous",
        "earlier",
        "last step",
        "i ran",
    ];
    // One pass of an automaton over the line for each list, not a search per phrase.
    static EXAMPLES: LazyLock<Option<AhoCorasick>> =
        LazyLock::new(|| AhoCorasick::new(EXAMPLE).ok());
    static STEPS: LazyLock<Option<AhoCorasick>> = LazyLock::new(|| AhoCorasick::new(STEP).ok());
    let holds = |phrases: &LazyLock<Option<AhoCorasick>>, list: &[&str]| match phrases.as_ref() {
        Some(automaton) => automaton.is_match(&line),
        None => list.iter().any(|w| line.contains(w)),
    };
    if holds(&EXAMPLES, &EXAMPLE) {
        return Some(false);
    }
    holds(&STEPS, &STEP).then_some(true)
}

/// The block that decides the step, if one does: a quoted one is left to the tags, and an
/// unclear one becomes an unreadable call (a repair round).
pub(super) fn deciding_block(text: &str, limit: usize, found: &[Found]) -> Option<Block> {
    let mut block = first_block(text, limit)?;
    match block.role(text, limit, found) {
        Role::Decides => {}
        Role::Quoted => return None,
        Role::Unclear => {
            block.calls = vec![Decision::Unreadable {
                why: "the output holds a call beside prose or an answer that leaves unclear whether it is meant; write either the call alone or the answer".into(),
                raw_action_string: text[block.start..block.end.min(text.len())].trim().to_string(),
            }];
        }
    }
    Some(block)
}

/// The first block in `text` that starts before `limit` (the first tag of an action or answer):
/// tool-call markup, a pythonic call list or a JSON action. Each is looked for only before the
/// one found so far, so one inside another is not taken for it; a block may run past `limit`,
/// as a file it writes may hold tags of its own.
fn first_block(text: &str, limit: usize) -> Option<Block> {
    let markup = markup::find(text)
        .filter(|m| m.start < limit)
        .map(|m| Block {
            start: m.start,
            end: m.end,
            thought: None,
            calls: m.calls,
            read_as: Some(format!(
                "'{}' tool-call markup the server passed through as text",
                m.opener
            )),
        });
    let limit = markup.as_ref().map_or(limit, |m| m.start);
    let list = pythonic::find(text)
        .filter(|l| l.start < limit)
        .map(|l| Block {
            start: l.start,
            end: l.end,
            thought: None,
            calls: l.calls,
            read_as: Some("a pythonic call list".into()),
        });
    let limit = list.as_ref().map_or(limit, |l| l.start);
    let json = json::find(text).filter(|j| j.start < limit).map(|j| Block {
        start: j.start,
        end: j.end,
        thought: j.thought,
        calls: vec![j.decision],
        read_as: None,
    });
    json.or(list).or(markup)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocks_intent_is_read_from_the_line_before_it() {
        for (before, expected) in [
            ("Here is an Example of the format:\n```", Some(false)),
            ("The step before this one was:", Some(false)),
            ("Let me read the file.", Some(true)),
            ("First, I'll look at it\n\n", Some(true)),
            ("The file:", None),
            ("", None),
        ] {
            assert_eq!(intent(before), expected, "{before:?}");
        }
    }
}
