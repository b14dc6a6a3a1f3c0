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

/// Other words for the final answer's tag; inside an answer they are its text (an FAQ's
/// `Answer:` line).
const ANSWER_ALIAS: &str = "Answer";
const AI_ALIAS: &str = "AI";

/// The tag words to look for, longest first, so that `Action Input` is not read as `Action`;
/// the observation tag, which also counts on a line of its own without its colon; and the
/// final answer's, which also counts as a heading of its own (`**Final Answer**`).
pub struct TagNames(Vec<(String, Tag)>, String, String);

impl TagNames {
    pub fn new(tags: &Tags) -> Self {
        let mut names = vec![
            (format!("{} Input", tags.action), Tag::ActionInput),
            (tags.final_answer.clone(), Tag::FinalAnswer),
            (tags.thought.clone(), Tag::Thought),
            (tags.action.clone(), Tag::Action),
            (tags.observation.clone(), Tag::Observation),
            (ANSWER_ALIAS.to_string(), Tag::FinalAnswer),
            // LangChain's conversational agent answers after `AI:`.
            (AI_ALIAS.to_string(), Tag::FinalAnswer),
        ];
        names.retain(|(name, _)| !name.is_empty());
        names.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
        Self(names, tags.observation.clone(), tags.final_answer.clone())
    }

    /// The tag at the start of `line` and the byte offset of the text after it:
    /// `Thought:`, `**Action:**`, `## Final Answer:`, `Thought 3:`, `> action 2:`, `Thought：`…
    pub fn at(&self, line: &str) -> Option<(Tag, usize)> {
        self.named_at(line).map(|(tag, offset, _)| (tag, offset))
    }

    /// [`Self::at`] inside a final answer, where only what can end one is a tag: an alias of the
    /// answer's tag (`Answer:`) and a decorated `**Observation:**` (the stop sequence would have
    /// caught a plain one) are its text.
    pub fn at_in_answer(&self, line: &str) -> Option<(Tag, usize)> {
        let (tag, offset, name) = self.named_at(line)?;
        // A list item in an answer is its text (`- Action: deploy` in a list of steps).
        if line.trim_start().starts_with("- ") {
            return None;
        }
        let decorated = line.trim_start().starts_with(['*', '#', '>']);
        let alias = name == ANSWER_ALIAS || name == AI_ALIAS;
        // A heading in an answer is its text: the answer's own tag is written with a colon.
        let heading = tag == Tag::FinalAnswer && !line[..offset].contains([':', '：']);
        (!(alias || heading || tag == Tag::Observation && decorated)).then_some((tag, offset))
    }

    fn named_at(&self, line: &str) -> Option<(Tag, usize, &str)> {
        let rest = strip_lead(line);
        for (name, tag) in &self.0 {
            let Some(after) = after_name(rest, name) else {
                continue;
            };
            let mut after_tag = after.trim_start_matches('*');
            // The paper's step number: `Thought 3:`.
            let numbered = after_tag.trim_start_matches(' ');
            let digits = numbered.len()
                - numbered
                    .trim_start_matches(|c: char| c.is_ascii_digit())
                    .len();
            super::work::add(after.len() - numbered.len() + digits + 1);
            if digits > 0 {
                after_tag = numbered[digits..].trim_start_matches('*');
            }
            // Chinese output writes the full-width colon.
            let after_colon = after_tag
                .strip_prefix(':')
                .or_else(|| after_tag.strip_prefix('：'));
            if let Some(after_colon) = after_colon {
                let text = after_colon.trim_start_matches('*');
                super::work::add(after_colon.len() - text.len());
                return Some((*tag, line.len() - text.len(), name.as_str()));
            }
            if *name == self.2 && is_heading(line, after) {
                return Some((*tag, line.len(), name.as_str()));
            }
        }
        // A server that split the stop sequence leaves `Observation` without its colon.
        if self.1.is_empty() {
            return None;
        }
        let bare = after_name(rest, &self.1)?;
        let bare = bare.trim_end_matches(|c: char| c.is_whitespace() || c == '*');
        bare.trim_start_matches(' ')
            .bytes()
            .all(|c| c.is_ascii_digit())
            .then_some((Tag::Observation, line.len(), self.1.as_str()))
    }

    /// Whether the start of a line, still being written, may yet turn out to be a tag.
    pub fn may_become_tag(&self, partial: &str) -> bool {
        let rest = strip_lead(partial);
        if rest.is_empty() || rest == "-" {
            return true;
        }
        self.0.iter().any(|(name, _)| match after_name(rest, name) {
            // Only stars, a space and digits so far: the colon may still come.
            Some(after) => {
                let rest =
                    after.trim_start_matches(|c: char| c == '*' || c == ' ' || c.is_ascii_digit());
                super::work::add(after.len() - rest.len() + 1);
                rest.is_empty()
            }
            None => {
                rest.len() < name.len()
                    && name
                        .get(..rest.len())
                        .is_some_and(|n| n.eq_ignore_ascii_case(rest))
            }
        })
    }
}

/// Whether `line` is the final answer's tag alone as a markdown heading, without a colon:
/// `**Final Answer**`, `## Final Answer`, as R1, QwQ and Qwen3 close their reasoning before
/// the answer on the next lines. Bold must close; words after the tag make it prose.
fn is_heading(line: &str, after: &str) -> bool {
    let lead = line.trim_start();
    let stars = after.len() - after.trim_start_matches('*').len();
    super::work::add(after.len().min(line.len()));
    after[stars..].trim().is_empty()
        && (lead.starts_with('#') || lead.starts_with("**") && stars >= 2)
}

/// A line without what may decorate a tag before it: spaces, bold, a heading's `#`, a quote's
/// `>` and a list item's `- `.
fn strip_lead(line: &str) -> &str {
    let lead = |c: char| c.is_whitespace() || matches!(c, '*' | '#' | '>');
    let rest = line.trim_start_matches(lead);
    let rest = rest
        .strip_prefix("- ")
        .map_or(rest, |r| r.trim_start_matches(lead));
    super::work::add(line.len() - rest.len() + 1);
    rest
}

/// The text after `name` at the start of `rest`, compared in any letter case.
fn after_name<'r>(rest: &'r str, name: &str) -> Option<&'r str> {
    super::work::add(name.len());
    let head = rest.get(..name.len())?;
    head.eq_ignore_ascii_case(name).then(|| &rest[name.len()..])
}

/// Every tag at a line start, in order. A tag inside a code fence is content (a README quoted
/// in the thought, a file being written), unless no action or answer is written outside the
/// fences: then a fence may wrap the step itself, and only fences inside an action, an answer
/// or a block that may be the action are content.
pub fn find(text: &str, tags: &Tags) -> Vec<Found> {
    let names = TagNames::new(tags);
    let outside = scan(text, &names, true);
    if outside
        .iter()
        .any(|f| matches!(f.tag, Tag::Action | Tag::FinalAnswer))
    {
        return outside;
    }
    scan(text, &names, false)
}

fn scan(text: &str, names: &TagNames, every_fence: bool) -> Vec<Found> {
    let mut found: Vec<Found> = Vec::new();
    let mut line_start = 0;
    let (mut content, mut in_fence) = (every_fence, false);
    for line in text.split_inclusive('\n') {
        super::work::add(line.len());
        let here = line_start;
        line_start += line.len();
        let in_answer = found.last().is_some_and(|f| f.tag == Tag::FinalAnswer);
        let tag = match (in_fence, in_answer) {
            (true, _) => None,
            (false, true) => names.at_in_answer(line),
            (false, false) => names.at(line),
        };
        if let Some((tag, offset)) = tag {
            found.push(Found {
                tag,
                line_start: here,
                text_start: here + offset,
            });
            content |= matches!(tag, Tag::Action | Tag::ActionInput | Tag::FinalAnswer);
        } else if !in_fence && opens_block(line.trim_start()) {
            content = true;
        }
        if content && toggles_fence(line) {
            in_fence = !in_fence;
        }
    }
    found
}

/// Whether a line opens or closes a code fence: it holds an odd number of fence marks, so a
/// fence opened at the end of a call's line (`content="````) counts too.
pub fn toggles_fence(line: &str) -> bool {
    line.matches("```").count() % 2 == 1
}

/// Whether a line opens a block that may be the action: a JSON object, a call list or markup.
pub fn opens_block(line: &str) -> bool {
    line[super::json::stray_lead(line)..].starts_with('{')
        || super::pythonic::opens_a_list(line)
        || super::markup::opener_at(line).is_some()
}

/// The text of tag `i`, up to the next tag.
pub fn section<'t>(text: &'t str, found: &[Found], i: usize) -> &'t str {
    let end = found.get(i + 1).map_or(text.len(), |next| next.line_start);
    text[found[i].text_start..end].trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags_of(text: &str) -> Vec<Tag> {
        find(text, &Tags::default()).iter().map(|f| f.tag).collect()
    }

    #[test]
    fn tags_are_found_in_every_way_models_write_them() {
        let text = "Thought: a\n**Action:** b\n## Final Answer: c\nthought 3: d\n**Action 12:** e\nAction Input: {}\n> Observation: g\nanswer: f\nThought： h\n";
        assert_eq!(
            tags_of(text),
            [
                Tag::Thought,
                Tag::Action,
                Tag::FinalAnswer,
                Tag::Thought,
                Tag::Action,
                Tag::ActionInput,
                Tag::Observation,
                Tag::FinalAnswer,
                Tag::Thought
            ]
        );
    }

    #[test]
    fn inside_an_answer_its_aliases_and_a_decorated_observation_are_text() {
        let text =
            "Final Answer: FAQ\nAnswer: run it\n**Observation:** it works\nObservation: made up\n";
        assert_eq!(tags_of(text), [Tag::FinalAnswer, Tag::Observation]);
    }

    #[test]
    fn a_fence_in_the_thought_is_content_when_the_step_is_written_outside_it() {
        let text = "Thought: the README says\n```\nAction: deploy()\n```\nAction: read_file()\n";
        let found = find(text, &Tags::default());
        assert_eq!(
            found.iter().map(|f| f.tag).collect::<Vec<_>>(),
            [Tag::Thought, Tag::Action]
        );
        assert!(text[found[1].text_start..].starts_with(" read_file"));
    }

    #[test]
    fn the_answers_tag_as_a_heading_of_its_own_is_a_tag() {
        for line in [
            "**Final Answer**\n",
            "## Final Answer\n",
            "### final answer",
            "  **Final Answer** \r\n",
            "### **Final Answer**\n",
        ] {
            assert_eq!(
                tags_of(&format!("{line}\n42")),
                [Tag::FinalAnswer],
                "{line:?}"
            );
        }
        let text = "**Final Answer**\n\nIt is 42.";
        let found = find(text, &Tags::default());
        assert_eq!(section(text, &found, 0), "It is 42.");
        for prose in [
            "The **final answer** is 42.\n",
            "**Final Answer** is below.\n",
            "**Final Answer\n",
            "Final Answer\n",
            "- **Final Answer**\n",
            "## Final Answer Format\n",
            "### Thought\n",
            "## Answer\n",
        ] {
            assert!(tags_of(prose).is_empty(), "{prose:?}");
        }
        // Inside an answer, a heading is its text.
        assert_eq!(
            tags_of("Final Answer: the report\n## Final Answer\nfour"),
            [Tag::FinalAnswer]
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
    fn a_line_start_may_still_become_a_tag() {
        let names = TagNames::new(&Tags::default());
        for partial in [
            "",
            "  ",
            "**",
            "Th",
            "thought",
            "Thought 1",
            "**Action*",
            "Final Ans",
            "## obs",
        ] {
            assert!(names.may_become_tag(partial), "{partial:?}");
        }
        for partial in ["The", "Thoughts", "Action-", "Final Answers", "I think"] {
            assert!(!names.may_become_tag(partial), "{partial:?}");
        }
    }

    #[test]
    fn tags_inside_a_fence_of_an_action_or_answer_are_content() {
        let text = "Thought: t\nAction: write_file(content=\"```\nThought: x\nObservation: y\n```\")\nObservation: real\n";
        assert_eq!(tags_of(text), [Tag::Thought, Tag::Action, Tag::Observation]);
        let text = "Final Answer: use\n```\nAction: f()\n```\nThought: after";
        assert_eq!(tags_of(text), [Tag::FinalAnswer, Tag::Thought]);
        // Before any action, a fence may wrap the step itself.
        let text = "Here it is:\n```\nThought: t\nAction: f()\n```";
        assert_eq!(tags_of(text), [Tag::Thought, Tag::Action]);
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
