//! Reads the model's raw text into a thought plus either a tool call or a final answer, and says
//! what it assumed in `warnings`. Dialects: the service's own (`Thought:` / `Action:
//! tool(args)` / `Final Answer:`), LangChain's (`Action:` + `Action Input:`), JSON actions bare or
//! fenced, the ReAct paper's numbered steps with `Search[…]` / `Finish[…]`, and `Answer:`.
//! Wrappers are looked through: `<think>` tags, a code fence around everything, markdown bold
//! and headings, any letter case. Anything after an invented observation is discarded; output
//! with no structure at all becomes a direct response with a warning.

mod args;
mod ending;
mod harmony;
mod json;
#[cfg(test)]
mod linear;
pub mod live;
mod markup;
mod pythonic;
pub mod tags;
mod thought;
mod work;

use serde_json::{Map, Value};

pub use args::parse_args;
pub use json::is_final_answer_name;
pub use tags::Tags;
pub use thought::thought_warnings;

use args::closing_bracket;
use tags::{Found, Tag};

#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Action {
        tool_name: String,
        tool_args: Map<String, Value>,
        raw_action_string: String,
    },
    Answer(String),
    /// An action was written but cannot be read: an unclosed call, no tool name, broken JSON.
    Unreadable {
        why: String,
        raw_action_string: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub thought: String,
    pub decision: Decision,
    /// Further calls the model wrote in the same turn, in order (a pythonic list, several
    /// markup blocks): the first is the decision.
    pub also: Vec<Decision>,
    pub warnings: Vec<String>,
    /// False when nothing in the output had the answer format (the direct-response fallback).
    pub structured: bool,
}

/// `None` when the model wrote nothing usable at all.
pub fn parse(raw: &str, tags: &Tags) -> Option<Parsed> {
    // The passes over the whole text made a fixed number of times; the loops count their own.
    work::add(raw.len());
    if let Some(parsed) = harmony::parse(raw) {
        return Some(parsed);
    }
    let mut warnings = Vec::new();
    let (think, text) = split_think(raw);
    let text = ending::strip(text, &tags.observation);
    let text = ending::strip(unfence(text), &tags.observation);
    let (text, found) = before_observation(text, tags, &mut warnings);
    let decisive: Vec<usize> = found
        .iter()
        .enumerate()
        .filter(|(_, f)| matches!(f.tag, Tag::Action | Tag::FinalAnswer))
        .map(|(i, _)| i)
        .collect();
    let limit = decisive
        .first()
        .map_or(text.len(), |&d| found[d].line_start);

    let (thought, mut calls, others) = if let Some(block) = first_block(&text[..limit]) {
        let thought = match block.thought {
            Some(t) => t,
            None => thought_before(
                text,
                &found,
                block.start,
                think.as_deref(),
                tags,
                &mut warnings,
            ),
        };
        (thought, block.calls, decisive.len())
    } else if let Some(&d) = decisive.first() {
        let thought = thought_before(text, &found, limit, think.as_deref(), tags, &mut warnings);
        let decision = match found[d].tag {
            Tag::Action => action(text, &found, d, tags),
            _ => answer(section(text, &found, d), tags),
        };
        (thought, vec![decision], decisive.len() - 1)
    } else {
        return fallback(text, &found, think, tags, warnings);
    };
    if others > 0 {
        warnings.push(format!(
            "the output held {} actions or answers; only the first one written was used",
            others + 1
        ));
    }
    if calls.len() > 1 {
        warnings.push(format!(
            "the model wrote {} tool calls in one turn; the first is proposed",
            calls.len()
        ));
    }
    let decision = answer_if_finish(calls.remove(0));
    Some(Parsed {
        thought,
        decision,
        also: calls,
        warnings,
        structured: true,
    })
}

/// The text up to an observation the model wrote itself (all after it is invented), and the
/// tags before it.
fn before_observation<'t>(
    text: &'t str,
    tags: &Tags,
    warnings: &mut Vec<String>,
) -> (&'t str, Vec<Found>) {
    let mut found = tags::find(text, tags);
    let Some(i) = found.iter().position(|f| f.tag == Tag::Observation) else {
        return (text, found);
    };
    let cut = found[i].line_start;
    found.truncate(i);
    if !text[cut..].trim().is_empty() {
        warnings.push(format!(
            "the model wrote an '{}:' itself; everything from it on was discarded",
            tags.observation
        ));
    }
    (&text[..cut], found)
}

/// Calls or an answer written as a block rather than after a tag: where it starts, its own
/// thought if it carries one, and its decisions in the order written (never empty).
struct Block {
    start: usize,
    thought: Option<String>,
    calls: Vec<Decision>,
}

/// The first block in `text`: tool-call markup, a pythonic call list or a JSON action. Each is
/// looked for only before the one found so far, so one inside another is not taken for it.
fn first_block(text: &str) -> Option<Block> {
    let markup = markup::find(text).map(|m| Block {
        start: m.start,
        thought: None,
        calls: m.calls,
    });
    let before = markup.as_ref().map_or(text.len(), |m| m.start);
    let list = pythonic::find(&text[..before]).map(|l| Block {
        start: l.start,
        thought: None,
        calls: l.calls,
    });
    let before = list.as_ref().map_or(before, |l| l.start);
    let json = json::find(&text[..before]).map(|j| Block {
        start: j.start,
        thought: j.thought,
        calls: vec![j.decision],
    });
    json.or(list).or(markup)
}

/// A final answer, unless its text opens with a tag (`Final Answer: Thought: …`): the model
/// wrote a step inside its answer, and what it meant is for it to say again.
fn answer(text: &str, tags: &Tags) -> Decision {
    match tags::TagNames::new(tags).at(text) {
        Some(_) => Decision::Unreadable {
            why: format!(
                "the '{}:' holds ReAct tags of its own; write either an action or the answer",
                tags.final_answer
            ),
            raw_action_string: text.to_string(),
        },
        None => Decision::Answer(text.to_string()),
    }
}

/// The seed's fallback: no action and no final answer, so the text is the answer.
fn fallback(
    text: &str,
    found: &[Found],
    think: Option<String>,
    tags: &Tags,
    mut warnings: Vec<String>,
) -> Option<Parsed> {
    let thought = found
        .iter()
        .position(|f| f.tag == Tag::Thought)
        .map(|i| section(text, found, i).to_string());
    let answer = if found.is_empty() {
        text.trim().to_string()
    } else {
        thought.clone().unwrap_or_default()
    };
    let answer = if answer.is_empty() {
        think.clone().unwrap_or_default()
    } else {
        answer
    };
    if answer.is_empty() {
        return None;
    }
    warnings.push(format!(
        "the output had no '{}:' or '{}:'; it was taken as a direct response",
        tags.action, tags.final_answer
    ));
    Some(Parsed {
        thought: if found.is_empty() {
            think.unwrap_or_default()
        } else {
            thought.unwrap_or_default()
        },
        decision: Decision::Answer(answer),
        also: Vec::new(),
        warnings,
        structured: false,
    })
}

/// The text of tag `i`, up to the next tag.
fn section<'t>(text: &'t str, found: &[Found], i: usize) -> &'t str {
    let end = found.get(i + 1).map_or(text.len(), |next| next.line_start);
    text[found[i].text_start..end].trim()
}

/// The thought that precedes the decision at `limit`: the thought tag's text, else the untagged
/// text before the decision, else the `<think>` text.
fn thought_before(
    text: &str,
    found: &[Found],
    limit: usize,
    think: Option<&str>,
    tags: &Tags,
    warnings: &mut Vec<String>,
) -> String {
    if let Some(i) = found
        .iter()
        .position(|f| f.tag == Tag::Thought && f.line_start < limit)
    {
        let end = found
            .get(i + 1)
            .map_or(limit, |next| next.line_start.min(limit));
        return text[found[i].text_start..end].trim().to_string();
    }
    let before = text[..limit].trim();
    if !before.is_empty() {
        warnings.push(format!(
            "no '{}:' tag: the text before the action was taken as the thought",
            tags.thought
        ));
        return before.to_string();
    }
    think.unwrap_or_default().to_string()
}

/// `final_answer(...)`, `finish(...)` and the paper's `Finish[...]` end the task.
fn answer_if_finish(decision: Decision) -> Decision {
    match decision {
        Decision::Action {
            tool_name,
            tool_args,
            ..
        } if is_final_answer_name(&tool_name) => Decision::Answer(answer_text(tool_args)),
        other => other,
    }
}

fn answer_text(mut args: Map<String, Value>) -> String {
    for key in [
        "answer",
        "final_answer",
        "input",
        "text",
        "response",
        "output",
        "result",
    ] {
        if let Some(value) = args.remove(key) {
            return json::as_text(&value);
        }
    }
    match args.len() {
        0 => String::new(),
        1 => args.values().next().map(json::as_text).unwrap_or_default(),
        _ => Value::Object(args).to_string(),
    }
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

/// The inside of a code fence that wraps the whole output.
fn unfence(text: &str) -> &str {
    let t = text.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return text;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return text;
    };
    match body.find('\n') {
        Some(nl) => &body[nl + 1..],
        None => text,
    }
}

/// The action written after tag `d`: `tool(args…)` (possibly spanning lines), `Tool[input]`, a
/// bare name with `Action Input:` or text after it, or a JSON object.
fn action(text: &str, found: &[Found], d: usize, tags: &Tags) -> Decision {
    let line_start = found[d].line_start;
    let mut body_start = found[d].text_start;
    body_start += text[body_start..].len() - text[body_start..].trim_start().len();
    // A fence or inline code around the call.
    if text[body_start..].starts_with("```") {
        body_start = text[body_start..]
            .find('\n')
            .map_or(text.len(), |i| body_start + i + 1);
    }
    body_start += text[body_start..].len()
        - text[body_start..]
            .trim_start_matches([' ', '\t', '`'])
            .len();
    let body = &text[body_start..];
    let unreadable = |why: &str, end: usize| Decision::Unreadable {
        why: why.to_string(),
        raw_action_string: clean_raw(&text[line_start..end]),
    };
    let line_end = body.find('\n').map_or(text.len(), |i| body_start + i);

    if body.starts_with('{') {
        let Some(end) = closing_bracket(text, body_start) else {
            return unreadable("the action's JSON object is not closed", text.len());
        };
        return match serde_json::from_str::<Value>(&text[body_start..end]) {
            Ok(Value::Object(object)) => match json::read(&object, &text[line_start..end]) {
                Some((_, decision)) => decision,
                None => unreadable("the action's JSON names no tool", end),
            },
            _ => unreadable("the action's JSON object is not valid JSON", end),
        };
    }

    let name_len = body
        .find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.')))
        .unwrap_or(body.len());
    let tool_name = &body[..name_len];
    if tool_name.is_empty() {
        return unreadable(&format!("no tool name after '{}:'", tags.action), line_end);
    }
    let after_name = &body[name_len..];
    let gap = after_name.len() - after_name.trim_start_matches([' ', '\t']).len();
    let open = body_start + name_len + gap;
    let (tool_args, end) = match text.as_bytes().get(open) {
        Some(b'(') => {
            let Some(close) = closing_bracket(text, open) else {
                return unreadable("the call's parenthesis is not closed", text.len());
            };
            match parse_args(&text[open + 1..close - 1]) {
                Ok(args) => (args, close),
                Err(why) => return unreadable(&why, close),
            }
        }
        Some(b'[') => {
            let Some(close) = square_close(text, open) else {
                return unreadable("the action's bracket is not closed", text.len());
            };
            let input = text[open + 1..close - 1].trim();
            (single_input(Value::String(input.to_string())), close)
        }
        _ => match found.get(d + 1).filter(|f| f.tag == Tag::ActionInput) {
            Some(_) => {
                let input = section(text, found, d + 1);
                let end = found.get(d + 2).map_or(text.len(), |f| f.line_start);
                (action_input(input), end)
            }
            None => {
                let rest = text[open..line_end].trim().trim_matches('`');
                let args = if rest.is_empty() {
                    Map::new()
                } else {
                    single_input(Value::String(rest.to_string()))
                };
                (args, line_end)
            }
        },
    };
    Decision::Action {
        tool_name: tool_name.to_string(),
        tool_args,
        raw_action_string: clean_raw(&text[line_start..end]),
    }
}

/// LangChain's `Action Input:` text: a JSON object, a JSON string, or plain text.
fn action_input(input: &str) -> Map<String, Value> {
    let input = unfence(input).trim();
    match serde_json::from_str::<Value>(input) {
        Ok(Value::Object(map)) => map,
        Ok(Value::String(s)) => single_input(Value::String(s)),
        _ if input.is_empty() => Map::new(),
        _ => single_input(Value::String(
            input.trim_matches(['"', '\'', '`']).to_string(),
        )),
    }
}

fn single_input(value: Value) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("input".into(), value);
    map
}

/// Index just past the `]` that closes the `[` at `open`. Quotes do not count here: the paper's
/// inputs are plain text, where an apostrophe is just an apostrophe.
fn square_close(text: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, b) in text.bytes().enumerate().skip(open) {
        work::add(1);
        match b {
            b'[' => depth += 1,
            b']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// The action as written, without the fence or inline-code marks around it.
fn clean_raw(raw: &str) -> String {
    let raw = raw.trim();
    let raw = raw.strip_suffix("```").unwrap_or(raw).trim_end();
    raw.strip_suffix('`').unwrap_or(raw).to_string()
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(raw: &str) -> Parsed {
        parse(raw, &Tags::default()).unwrap_or_else(|| panic!("no parse for {raw:?}"))
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

    fn answer_of(p: &Parsed) -> &str {
        match &p.decision {
            Decision::Answer(text) => text,
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    // The service's own dialect.

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
        assert_eq!(answer_of(&p), "Use auth.js.\nIt has login().");
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
    fn a_call_in_inline_code_or_a_fence_is_read() {
        let p = parsed("Thought: look\nAction: `read_file(path=\"a.rs\")`");
        assert_eq!(action_of(&p).1, json!({"path": "a.rs"}));
        assert_eq!(action_of(&p).2, "Action: `read_file(path=\"a.rs\")");
        let p = parsed("Thought: look\nAction:\n```python\nread_file(path=\"a.rs\")\n```");
        assert_eq!(action_of(&p).1, json!({"path": "a.rs"}));
    }

    #[test]
    fn a_tag_inside_a_string_argument_does_not_end_the_call() {
        let p = parsed("Thought: note it\nAction: write_file(path=\"n.md\", content=\"\"\"\nThought: keep\nFinal Answer: no\n\"\"\")");
        let (_, args, _) = action_of(&p);
        assert_eq!(args["content"], "\nThought: keep\nFinal Answer: no\n");
    }

    // LangChain.

    #[test]
    fn langchain_action_input_as_json_or_plain_text() {
        let p = parsed("Thought: I should search the code base.\nAction: code_search\nAction Input: {\"query\": \"session timeout\", \"limit\": 5}");
        let (name, args, raw) = action_of(&p);
        assert_eq!(
            (name, args),
            (
                "code_search",
                json!({"query": "session timeout", "limit": 5})
            )
        );
        assert!(
            raw.starts_with("Action: code_search\nAction Input: {"),
            "{raw}"
        );
        let p = parsed("Thought: read it\nAction: read_file\nAction Input: src/app.py\n");
        assert_eq!(action_of(&p).1, json!({"input": "src/app.py"}));
        let p = parsed("Thought: read it\nAction: read_file\nAction Input: \"src/app.py\"");
        assert_eq!(action_of(&p).1, json!({"input": "src/app.py"}));
    }

    // JSON actions.

    #[test]
    fn a_fenced_json_action_after_a_thought() {
        let p = parsed("Thought: The config loader is the place to look.\n```json\n{\n  \"action\": \"read_file\",\n  \"action_input\": {\"path\": \"src/config.ts\"}\n}\n```");
        assert_eq!(p.thought, "The config loader is the place to look.");
        assert_eq!(action_of(&p).1, json!({"path": "src/config.ts"}));
    }

    #[test]
    fn the_seed_json_form_with_its_own_thought() {
        let p = parsed("{\"thought\": \"Search for the login handler first.\", \"tool_name\": \"code_search\", \"parameters\": {\"query\": \"login handler\"}}");
        assert_eq!(p.thought, "Search for the login handler first.");
        assert_eq!(action_of(&p).0, "code_search");
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    }

    #[test]
    fn a_json_final_answer() {
        let p = parsed("```json\n{\"action\": \"Final Answer\", \"action_input\": \"The timeout is set in settings.py.\"}\n```");
        assert_eq!(answer_of(&p), "The timeout is set in settings.py.");
    }

    #[test]
    fn json_after_the_action_tag() {
        let p = parsed(
            "Thought: t\nAction: {\"tool_name\": \"read_file\", \"parameters\": {\"path\": \"x\"}}",
        );
        assert_eq!(action_of(&p).1, json!({"path": "x"}));
    }

    // The ReAct paper.

    #[test]
    fn numbered_paper_steps_with_bracket_actions() {
        let p = parsed("Thought 3: Apple Remote was designed for Front Row, so I should search Front Row next.\nAction 3: Search[Front Row (software)]\nObservation 3: Front Row is a discontinued media center...");
        assert!(p.thought.starts_with("Apple Remote was designed"));
        let (name, args, raw) = action_of(&p);
        assert_eq!(
            (name, args),
            ("Search", json!({"input": "Front Row (software)"}))
        );
        assert_eq!(raw, "Action 3: Search[Front Row (software)]");
    }

    #[test]
    fn finish_is_the_final_answer() {
        let p = parsed("Thought 4: So the answer is keyboard function keys.\nAction 4: Finish[keyboard function keys]");
        assert_eq!(answer_of(&p), "keyboard function keys");
        let p = parsed("Thought: done\nAction: final_answer(answer=\"It's in auth.js\")");
        assert_eq!(answer_of(&p), "It's in auth.js");
        let p = parsed("Thought: done\nAction: finish(\"ok\")");
        assert_eq!(answer_of(&p), "ok");
    }

    #[test]
    fn an_apostrophe_inside_brackets_is_text() {
        let p = parsed("Thought 1: search\nAction 1: Lookup[Apple's remote]");
        assert_eq!(action_of(&p).1, json!({"input": "Apple's remote"}));
    }

    #[test]
    fn answer_is_a_final_answer_tag() {
        let p = parsed("Thought: easy\nAnswer: 42");
        assert_eq!(answer_of(&p), "42");
    }

    // Wrappers and noise.

    #[test]
    fn think_tags_become_the_thought_when_none_is_written() {
        let p = parsed("<think>The user wants the file.</think>\nAction: read_file(path=\"a.rs\")");
        assert_eq!(p.thought, "The user wants the file.");
        assert_eq!(action_of(&p).1, json!({"path": "a.rs"}));
        let p = parsed("<thinking>\nCheck the tests.\n</thinking>\n\nAction: run_tests()");
        assert_eq!(p.thought, "Check the tests.");
    }

    #[test]
    fn a_lone_closing_think_tag_ends_the_thinking() {
        let p = parsed("Okay, the user wants the router.\n</think>\n\nThought: Open the router.\nAction: read_file(path=\"router.go\")");
        assert_eq!(p.thought, "Open the router.");
    }

    #[test]
    fn a_fence_around_the_whole_output_is_looked_through() {
        let p = parsed("```\nThought: look\nAction: read_file(path=\"a.rs\")\n```");
        assert_eq!(action_of(&p).1, json!({"path": "a.rs"}));
    }

    #[test]
    fn chatter_before_and_after_is_ignored() {
        let p = parsed("Sure! Here is my next step.\n\nThought: Read the handler.\nAction: read_file(path=\"h.js\")\n\nLet me know if you need anything else!");
        assert_eq!(p.thought, "Read the handler.");
        assert_eq!(action_of(&p).1, json!({"path": "h.js"}));
    }

    #[test]
    fn markdown_headings_as_tags() {
        let p = parsed("### Thought\nnot a tag line\n## Thought: real\n## Final Answer: yes");
        assert_eq!(p.thought, "real");
        assert_eq!(answer_of(&p), "yes");
    }

    #[test]
    fn an_invented_observation_and_all_after_it_is_discarded() {
        let p = parsed("Thought: search\nAction: code_search(query=\"x\")\nObservation: found it\nThought: done\nFinal Answer: 42");
        assert_eq!(action_of(&p).0, "code_search");
        assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    }

    #[test]
    fn the_first_of_action_and_answer_wins_with_a_warning() {
        let p = parsed("Thought: t\nFinal Answer: done\nAction: code_search(query=\"x\")");
        assert_eq!(answer_of(&p), "done");
        assert_eq!(p.warnings.len(), 1);
        let p = parsed("Thought: t\nAction: code_search(query=\"x\")\nFinal Answer: done");
        assert_eq!(action_of(&p).0, "code_search");
        assert!(p.warnings[0].contains("only the first"), "{:?}", p.warnings);
    }

    #[test]
    fn a_forgotten_thought_tag_uses_the_text_before_the_action() {
        let p = parsed("I should look at the file.\nAction: read_file(path=\"a.rs\")");
        assert_eq!(p.thought, "I should look at the file.");
        assert_eq!(p.warnings.len(), 1);
    }

    #[test]
    fn untagged_output_falls_back_to_a_direct_response_with_a_warning() {
        let p = parsed("Authentication lives in auth.js.");
        assert_eq!(answer_of(&p), "Authentication lives in auth.js.");
        assert_eq!(p.warnings.len(), 1);
        assert!(!p.structured);
    }

    #[test]
    fn unreadable_actions_say_why() {
        for (raw, why) in [
            ("Thought: t\nAction: code_search(query=\"x\"", "not closed"),
            ("Thought: t\nAction: (query=\"x\")", "no tool name"),
            ("Thought: t\nAction: Search[never closed", "not closed"),
            ("Thought: t\nAction: {\"tool\": ", "not closed"),
        ] {
            match parsed(raw).decision {
                Decision::Unreadable { why: got, .. } => assert!(got.contains(why), "{raw}: {got}"),
                other => panic!("{raw}: {other:?}"),
            }
        }
    }

    #[test]
    fn client_tags_are_the_ones_read() {
        let tags = Tags {
            thought: "Reasoning".into(),
            action: "Tool".into(),
            observation: "Result".into(),
            final_answer: "Reply".into(),
        };
        let p = parse(
            "Reasoning: look\nTool: read_file(path=\"a\")\nResult: x",
            &tags,
        )
        .unwrap();
        assert_eq!(p.thought, "look");
        assert_eq!(action_of(&p).0, "read_file");
        let p = parse("Reasoning: done\nReply: yes", &tags).unwrap();
        assert_eq!(answer_of(&p), "yes");
    }

    // Issue 14, families 1–3 and item 11.

    #[test]
    fn the_start_of_an_observation_tag_left_at_the_end_is_dropped() {
        for tail in [
            "\nObs",
            "\nObserv",
            "\nobservation",
            "\nOBSERVATION",
            "\n**Observation",
        ] {
            let p = parsed(&format!(
                "Thought: t\nAction: read_file\nAction Input: src/app.py{tail}"
            ));
            assert_eq!(action_of(&p).1, json!({"input": "src/app.py"}), "{tail:?}");
            let p = parsed(&format!(
                "Thought: t\nFinal Answer: It is in auth.js.{tail}"
            ));
            assert_eq!(answer_of(&p), "It is in auth.js.", "{tail:?}");
        }
        let p = parsed("Thought: t\nAction: f(x=1)\nObservation\nmade up\nFinal Answer: no");
        assert_eq!(action_of(&p).1, json!({"x": 1}));
    }

    #[test]
    fn stray_end_tokens_never_reach_an_answer_or_argument() {
        for token in ["<|im_end|>", "<|eot_id|>", "</s>", "<|end|>"] {
            let p = parsed(&format!("Thought: t\nFinal Answer: Done.{token}"));
            assert_eq!(answer_of(&p), "Done.", "{token}");
            let p = parsed(&format!(
                "Thought: t\nAction: read_file\nAction Input: a.py\n{token}"
            ));
            assert_eq!(action_of(&p).1, json!({"input": "a.py"}), "{token}");
        }
    }

    #[test]
    fn markup_after_a_thought_is_the_action_and_not_part_of_the_thought() {
        let p = parsed("Thought: I need the file.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.py\"}}\n</tool_call><|im_end|>");
        assert_eq!(p.thought, "I need the file.");
        assert_eq!(action_of(&p).1, json!({"path": "a.py"}));
        let p = parsed("<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.py\"}}\n</tool_call>");
        assert_eq!(p.thought, "");
        let p = parsed("Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.ls:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>");
        assert_eq!(p.thought, "Let me check.");
        assert_eq!(action_of(&p).0, "ls");
    }

    #[test]
    fn every_call_of_a_list_is_kept_in_order() {
        let p = parsed("Thought: both\n[read_file(path='a'), read_file(path='b')]");
        assert_eq!(action_of(&p).1, json!({"path": "a"}));
        assert_eq!(p.also.len(), 1);
        assert!(
            p.warnings.iter().any(|w| w.contains("2 tool calls")),
            "{:?}",
            p.warnings
        );
    }

    #[test]
    fn harmony_messages_are_read() {
        let p = parsed("<|channel|>analysis<|message|>Look first.<|end|><|start|>assistant<|channel|>commentary to=functions.read_file <|constrain|>json<|message|>{\"path\":\"a\"}<|call|>");
        assert_eq!(p.thought, "Look first.");
        assert_eq!(action_of(&p).1, json!({"path": "a"}));
    }

    #[test]
    fn an_answer_that_opens_with_a_tag_is_no_answer() {
        let p = parsed("Final Answer: Thought: I should read it.\n\nAction: read_file(path=\"a\")");
        assert!(
            matches!(p.decision, Decision::Unreadable { .. }),
            "{:?}",
            p.decision
        );
        let p = parsed("Thought: t\nFinal Answer: Action items are listed in TODO.md.");
        assert_eq!(answer_of(&p), "Action items are listed in TODO.md.");
    }

    #[test]
    fn empty_output_is_none() {
        assert!(parse("  \n ", &Tags::default()).is_none());
        assert!(parse("<think></think>", &Tags::default()).is_none());
    }
}
