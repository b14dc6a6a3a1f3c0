//! Reads the model's raw text into a thought plus either a tool call or a final answer, and says
//! what it assumed in `warnings`. Covers the service's own format (`Thought:` / `Action:
//! tool(args)` / `Final Answer:`), `<think>` wrappers, markdown-bold tags, any letter case and
//! invented observations; anything else becomes a direct response with a warning.

mod args;

use serde_json::{Map, Value};

pub use args::parse_args;

#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Action {
        tool_name: String,
        tool_args: Map<String, Value>,
        raw_action_string: String,
    },
    Answer(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub thought: String,
    pub decision: Decision,
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tag {
    Thought,
    Action,
    FinalAnswer,
    Observation,
}

/// A tag found at the start of a line: where the line starts and where its text begins.
#[derive(Debug, Clone, Copy)]
struct Found {
    tag: Tag,
    line_start: usize,
    text_start: usize,
}

/// `None` when the model wrote nothing usable at all.
pub fn parse(raw: &str) -> Option<Parsed> {
    let mut warnings = Vec::new();
    let (think, text) = split_think(raw);
    let mut tags = find_tags(text);
    let text = match tags.iter().position(|f| f.tag == Tag::Observation) {
        Some(i) => {
            let cut = tags[i].line_start;
            tags.truncate(i);
            if !text[cut..].trim().is_empty() {
                warnings.push(
                    "the model wrote an Observation itself; everything from it on was discarded"
                        .into(),
                );
            }
            &text[..cut]
        }
        None => text,
    };
    let section = |i: usize| {
        let end = tags.get(i + 1).map_or(text.len(), |next| next.line_start);
        text[tags[i].text_start..end].trim()
    };

    let decisive = tags
        .iter()
        .position(|f| matches!(f.tag, Tag::Action | Tag::FinalAnswer));
    let thought = match tags.iter().position(|f| f.tag == Tag::Thought) {
        Some(i) if decisive.is_none_or(|d| i < d) => section(i).to_string(),
        _ => {
            let before = decisive.map_or("", |d| text[..tags[d].line_start].trim());
            if !before.is_empty() {
                warnings.push(
                    "no 'Thought:' tag: the text before the action was taken as the thought".into(),
                );
                before.to_string()
            } else {
                think.clone().unwrap_or_default()
            }
        }
    };

    let Some(d) = decisive else {
        // No action and no final answer: the seed's fallback, the whole text is the answer.
        let answer = if tags.is_empty() { text.trim() } else { "" };
        let answer = if answer.is_empty() {
            thought.as_str()
        } else {
            answer
        };
        if answer.is_empty() {
            return None;
        }
        warnings.push(
            "the output had no 'Action:' or 'Final Answer:'; it was taken as a direct response"
                .into(),
        );
        return Some(Parsed {
            thought: if tags.is_empty() {
                think.unwrap_or_default()
            } else {
                thought.clone()
            },
            decision: Decision::Answer(answer.to_string()),
            warnings,
        });
    };
    let later = tags[d + 1..]
        .iter()
        .filter(|f| matches!(f.tag, Tag::Action | Tag::FinalAnswer))
        .count();
    if later > 0 {
        warnings.push(format!(
            "the output held {} actions or answers; only the first one written was used",
            later + 1
        ));
    }
    let decision = match tags[d].tag {
        Tag::Action => match action(text, tags[d]) {
            Ok(decision) => decision,
            Err(why) => {
                warnings.push(format!("the action could not be read ({why}); the output was taken as a direct response"));
                Decision::Answer(text.trim().to_string())
            }
        },
        _ => Decision::Answer(section(d).to_string()),
    };
    if thought.is_empty() && matches!(decision, Decision::Action { .. }) {
        warnings.push("the model gave no thought before its action".into());
    }
    Some(Parsed {
        thought,
        decision,
        warnings,
    })
}

/// Separates `<think>…</think>` (or `<thinking>`) from the rest. Some local models omit the
/// opening tag, so a lone closing tag ends the thinking too.
fn split_think(raw: &str) -> (Option<String>, &str) {
    for (open, close) in [("<think>", "</think>"), ("<thinking>", "</thinking>")] {
        if let Some(end) = raw.find(close) {
            let inner = &raw[..end];
            let inner = inner.find(open).map_or(inner, |s| &inner[s + open.len()..]);
            return (Some(inner.trim().to_string()), &raw[end + close.len()..]);
        }
    }
    (None, raw)
}

fn find_tags(text: &str) -> Vec<Found> {
    let mut found = Vec::new();
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        if let Some((tag, offset)) = tag_at(line) {
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

/// Recognises `Thought:`, `**Action:**`, `## Final Answer:` … at the start of a line, in any
/// case; returns the tag and the byte offset of the text after it.
fn tag_at(line: &str) -> Option<(Tag, usize)> {
    let rest = line.trim_start_matches(|c: char| c.is_whitespace() || c == '*' || c == '#');
    let lead = line.len() - rest.len();
    for (name, tag) in [
        ("thought", Tag::Thought),
        ("action", Tag::Action),
        ("final answer", Tag::FinalAnswer),
        ("observation", Tag::Observation),
    ] {
        let Some(head) = rest.get(..name.len()) else {
            continue;
        };
        if !head.eq_ignore_ascii_case(name) {
            continue;
        }
        let after = &rest[name.len()..];
        let stars = after.len() - after.trim_start_matches('*').len();
        if after[stars..].starts_with(':') {
            let after_colon = &after[stars + 1..];
            let closing = after_colon.len() - after_colon.trim_start_matches('*').len();
            return Some((tag, lead + name.len() + stars + 1 + closing));
        }
    }
    None
}

/// `tool_name(args…)`, possibly spanning lines, or a bare `tool_name`.
fn action(text: &str, found: Found) -> Result<Decision, String> {
    let body_start = found.text_start
        + (text[found.text_start..].len() - text[found.text_start..].trim_start().len());
    let body = text[body_start..].trim_start_matches('`');
    let body_start = text.len() - body.len();
    let name_len = body
        .find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.')))
        .unwrap_or(body.len());
    let tool_name = &body[..name_len];
    if tool_name.is_empty() {
        return Err("no tool name after 'Action:'".into());
    }
    let after_name = &body[name_len..];
    let (tool_args, end) = if after_name.trim_start_matches([' ', '\t']).starts_with('(') {
        let open = body_start
            + name_len
            + (after_name.len() - after_name.trim_start_matches([' ', '\t']).len());
        let close =
            args::closing_bracket(text, open).ok_or("the call's parenthesis is not closed")?;
        (parse_args(&text[open + 1..close - 1])?, close)
    } else {
        let line_end = text[body_start..]
            .find('\n')
            .map_or(text.len(), |i| body_start + i);
        let rest = text[body_start + name_len..line_end]
            .trim()
            .trim_matches('`');
        let mut args = Map::new();
        if !rest.is_empty() {
            args.insert("input".into(), Value::String(rest.to_string()));
        }
        (args, line_end)
    };
    let raw = text[found.line_start..end].trim();
    let raw = raw.strip_suffix('`').unwrap_or(raw);
    Ok(Decision::Action {
        tool_name: tool_name.to_string(),
        tool_args,
        raw_action_string: raw.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(raw: &str) -> Parsed {
        parse(raw).unwrap_or_else(|| panic!("no parse for {raw:?}"))
    }

    fn action_of(p: &Parsed) -> (&str, Value, &str) {
        match &p.decision {
            Decision::Action {
                tool_name,
                tool_args,
                raw_action_string,
            } => (
                tool_name,
                Value::Object(tool_args.clone()),
                raw_action_string,
            ),
            other => panic!("expected an action, got {other:?}"),
        }
    }

    #[test]
    fn the_seed_format_gives_thought_and_action() {
        let p = parsed("Thought: I need to search for authentication code.\nAction: code_search(query=\"authentication login\")");
        assert_eq!(p.thought, "I need to search for authentication code.");
        let (name, args, raw) = action_of(&p);
        assert_eq!(
            (name, args),
            ("code_search", json!({"query": "authentication login"}))
        );
        assert_eq!(raw, "Action: code_search(query=\"authentication login\")");
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    }

    #[test]
    fn a_final_answer_is_a_direct_response() {
        let p = parsed("Thought: I know it now.\nFinal Answer: Use auth.js.\nIt has login().");
        assert_eq!(p.thought, "I know it now.");
        assert_eq!(
            p.decision,
            Decision::Answer("Use auth.js.\nIt has login().".into())
        );
    }

    #[test]
    fn an_invented_observation_and_all_after_it_is_discarded() {
        let p = parsed("Thought: search\nAction: code_search(query=\"x\")\nObservation: found it\nThought: done\nFinal Answer: 42");
        assert_eq!(action_of(&p).0, "code_search");
        assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    }

    #[test]
    fn untagged_output_falls_back_to_a_direct_response_with_a_warning() {
        let p = parsed("Authentication lives in auth.js.");
        assert_eq!(
            p.decision,
            Decision::Answer("Authentication lives in auth.js.".into())
        );
        assert_eq!(p.warnings.len(), 1);
    }

    #[test]
    fn think_tags_become_the_thought_when_none_is_written() {
        let p = parsed("<think>The user wants the file.</think>\nAction: read_file(path=\"a.rs\")");
        assert_eq!(p.thought, "The user wants the file.");
        assert_eq!(action_of(&p).1, json!({"path": "a.rs"}));
    }

    #[test]
    fn bold_tags_in_any_case_and_multi_line_calls_are_read() {
        let p = parsed("**thought:** write it\n**ACTION:** write_file(path=\"a.py\", content=\"\"\"x = 1\ny = 2\n\"\"\")\n");
        assert_eq!(p.thought, "write it");
        let (_, args, raw) = action_of(&p);
        assert_eq!(args, json!({"path": "a.py", "content": "x = 1\ny = 2\n"}));
        assert!(raw.starts_with("**ACTION:** write_file(") && raw.ends_with("\"\"\")"));
    }

    #[test]
    fn the_first_of_action_and_answer_wins_with_a_warning() {
        let p = parsed("Thought: t\nFinal Answer: done\nAction: code_search(query=\"x\")");
        assert_eq!(p.decision, Decision::Answer("done".into()));
        assert_eq!(p.warnings.len(), 1);
    }

    #[test]
    fn a_forgotten_thought_tag_uses_the_text_before_the_action() {
        let p = parsed("I should look at the file.\nAction: read_file(path=\"a.rs\")");
        assert_eq!(p.thought, "I should look at the file.");
        assert_eq!(p.warnings.len(), 1);
    }

    #[test]
    fn an_unclosed_call_falls_back_with_a_warning() {
        let p = parsed("Thought: t\nAction: code_search(query=\"x\"");
        assert!(matches!(p.decision, Decision::Answer(_)));
        assert!(p.warnings[0].contains("not closed"), "{:?}", p.warnings);
    }

    #[test]
    fn empty_output_is_none() {
        assert!(parse("  \n ").is_none());
        assert!(parse("<think></think>").is_none());
    }
}
