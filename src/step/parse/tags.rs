//! The section tags of ReAct text (`Thought:`, `Action:`, `Action Input:`, `Final Answer:`,
//! `Observation:`), as the client named them, found at line starts the way models write them:
//! any letter case, markdown bold or headings, and the ReAct paper's step numbers
//! (`Thought 3:`).

use serde::Deserialize;

/// The tag words; the prompt the service writes uses the same ones it parses.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Tags {
    pub thought: String,
    pub action: String,
    pub observation: String,
    pub final_answer: String,
}

impl Default for Tags {
    fn default() -> Self {
        Self {
            thought: "Thought".into(),
            action: "Action".into(),
            observation: "Observation".into(),
            final_answer: "Final Answer".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    Thought,
    Action,
    /// LangChain's `Action Input:` after a bare tool name.
    ActionInput,
    FinalAnswer,
    Observation,
}

/// A tag found at the start of a line: where the line starts and where its text begins.
#[derive(Debug, Clone, Copy)]
pub struct Found {
    pub tag: Tag,
    pub line_start: usize,
    pub text_start: usize,
}

/// Every tag at a line start, in order.
pub fn find(text: &str, tags: &Tags) -> Vec<Found> {
    let action_input = format!("{} Input", tags.action);
    // Longer names first, so that `Action Input` is not read as `Action`.
    let mut names: Vec<(&str, Tag)> = vec![
        (&action_input, Tag::ActionInput),
        (&tags.final_answer, Tag::FinalAnswer),
        (&tags.thought, Tag::Thought),
        (&tags.action, Tag::Action),
        (&tags.observation, Tag::Observation),
        ("Answer", Tag::FinalAnswer),
    ];
    names.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    let mut found = Vec::new();
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        if let Some((tag, offset)) = tag_at(line, &names) {
            found.push(Found {
                tag,
                line_start,
                text_start: line_start + offset,
            });
        }
        line_start += line.len();
    }
    found
}

/// The tag at the start of `line` and the byte offset of the text after it:
/// `Thought:`, `**Action:**`, `## Final Answer:`, `Thought 3:`, `> action 2:` …
fn tag_at(line: &str, names: &[(&str, Tag)]) -> Option<(Tag, usize)> {
    let rest = line.trim_start_matches(|c: char| c.is_whitespace() || matches!(c, '*' | '#' | '>'));
    for &(name, tag) in names {
        let Some(head) = rest.get(..name.len()) else {
            continue;
        };
        if name.is_empty() || !head.eq_ignore_ascii_case(name) {
            continue;
        }
        let after = &rest[name.len()..];
        let mut rest_after = after.trim_start_matches('*');
        // The paper's step number: `Thought 3:`.
        let numbered = rest_after.trim_start_matches(' ');
        let digits = numbered.len()
            - numbered
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .len();
        if digits > 0 {
            rest_after = numbered[digits..].trim_start_matches('*');
        }
        if let Some(after_colon) = rest_after.strip_prefix(':') {
            let text = after_colon.trim_start_matches('*');
            return Some((tag, line.len() - text.len()));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags_of(text: &str) -> Vec<Tag> {
        find(text, &Tags::default()).iter().map(|f| f.tag).collect()
    }

    #[test]
    fn tags_are_found_in_every_way_models_write_them() {
        let text = "Thought: a\n**Action:** b\n## Final Answer: c\nthought 3: d\n**Action 12:** e\nAction Input: {}\nanswer: f\n> Observation: g\n";
        assert_eq!(
            tags_of(text),
            [
                Tag::Thought,
                Tag::Action,
                Tag::FinalAnswer,
                Tag::Thought,
                Tag::Action,
                Tag::ActionInput,
                Tag::FinalAnswer,
                Tag::Observation
            ]
        );
    }

    #[test]
    fn words_that_only_begin_like_a_tag_are_not_tags() {
        assert!(tags_of("Actions: none\nThoughtful: no\nAction Items: x\n").is_empty());
    }

    #[test]
    fn the_text_starts_after_the_colon_and_closing_stars() {
        let text = "**Thought 2:** find it";
        let found = find(text, &Tags::default());
        assert_eq!(&text[found[0].text_start..], " find it");
    }

    #[test]
    fn client_tags_replace_the_defaults() {
        let tags = Tags {
            thought: "Reasoning".into(),
            action: "Tool".into(),
            observation: "Result".into(),
            final_answer: "Done".into(),
        };
        let found: Vec<Tag> = find(
            "Reasoning: r\nTool: t\nTool Input: i\nDone: d\nResult: x\nThought: no\n",
            &tags,
        )
        .iter()
        .map(|f| f.tag)
        .collect();
        assert_eq!(
            found,
            [
                Tag::Thought,
                Tag::Action,
                Tag::ActionInput,
                Tag::FinalAnswer,
                Tag::Observation
            ]
        );
    }
}
