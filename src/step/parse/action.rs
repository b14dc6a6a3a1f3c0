//! The action written after an `Action:` tag: `tool(args…)` (possibly spanning lines),
//! `Tool[input]`, a JSON object, or a bare name with LangChain's `Action Input:` or text after
//! it. The name may be quoted, in backticks or bold, or followed by a description in
//! parentheses when its input is on the next line.

use serde_json::{Map, Value};

use super::action_input::plain;
use super::args::{closing_bracket, parse_args, python_literal, single_input};
use super::decision::Decision;
use super::fence::unfence;
use super::tags::{section, Found, Tag, Tags};
use super::{json, work};

/// The action of tag `d`.
pub fn action(text: &str, found: &[Found], d: usize, tags: &Tags) -> Decision {
    let line_start = found[d].line_start;
    let body_start = body_start(text, found[d].text_start);
    let body = &text[body_start..];
    let unreadable = |why: &str, end: usize| Decision::Unreadable {
        why: why.to_string(),
        raw_action_string: clean_raw(&text[line_start..end]),
    };
    let line_end = body.find('\n').map_or(text.len(), |i| body_start + i);

    if body.starts_with('{') {
        return json_action(text, line_start, body_start, unreadable);
    }
    let Some((tool_name, name_end)) = tool_name(body) else {
        return unreadable(&format!("no tool name after '{}:'", tags.action), line_end);
    };
    let name_end = body_start + name_end;
    let open =
        name_end + text[name_end..].len() - text[name_end..].trim_start_matches([' ', '\t']).len();
    let input_follows = found.get(d + 1).is_some_and(|f| f.tag == Tag::ActionInput);
    let read = match text.as_bytes().get(open) {
        // With the input on the next line, what follows the name is a description of it,
        // unless it is a call with arguments of its own that the input does not repeat.
        _ if input_follows => match (
            text.as_bytes().get(open),
            input_below(text, found, d, tool_name),
        ) {
            (Some(b'('), Ok((below, end))) => match call_args(text, open) {
                Ok((own, _)) if is_call_of_its_own(&text[open..], &own) && own != below => Err((
                    "the action's call and its input give different arguments; write one call"
                        .to_string(),
                    end,
                )),
                _ => Ok((below, end)),
            },
            (_, read) => read,
        },
        Some(b'(') => call_args(text, open),
        Some(b'[') => bracket_input(text, open),
        _ => rest_of_line(text, open, line_end, found.get(d + 1), tool_name),
    };
    match read {
        Ok((tool_args, end)) => Decision::Action {
            tool_name: tool_name.to_string(),
            tool_args,
            raw_action_string: clean_raw(&text[line_start..end]),
        },
        Err((why, end)) => Decision::Unreadable {
            why,
            raw_action_string: clean_raw(&text[line_start..end]),
        },
    }
}

/// An action's arguments and where they end, or why they cannot be read and where the action
/// ends.
type Read = Result<(Map<String, Value>, usize), (String, usize)>;

/// LangChain's `Action Input:` after the name, up to the tag after it.
fn input_below(text: &str, found: &[Found], d: usize, tool_name: &str) -> Read {
    let input = section(text, found, d + 1);
    let end = found.get(d + 2).map_or(text.len(), |f| f.line_start);
    match super::action_input::read(input, tool_name) {
        Ok(args) => Ok((args, end)),
        Err(why) => Err((why, end)),
    }
}

/// Whether parentheses after an action's name (`read_file(path="a")`, `read_file("a")`) are
/// arguments rather than a description of the tool (`add (adds two numbers)`): a keyword, or a
/// first value that is quoted or a number.
fn is_call_of_its_own(parenthesized: &str, args: &Map<String, Value>) -> bool {
    let first = parenthesized[1..].trim_start();
    !args.is_empty()
        && (args.keys().any(|k| !k.starts_with("input"))
            || first.starts_with(['"', '\'', '`', '{', '['])
            || first.starts_with(|c: char| c.is_ascii_digit()))
}

/// `tool(args…)`: the arguments in the parentheses that open at `open`.
fn call_args(text: &str, open: usize) -> Read {
    let Some(close) = closing_bracket(text, open) else {
        return Err(("the call's parenthesis is not closed".into(), text.len()));
    };
    match parse_args(&text[open + 1..close - 1]) {
        Ok(args) => Ok((args, close)),
        Err(why) => Err((why, close)),
    }
}

/// `Tool[input]`: the paper's one input, in the brackets that open at `open`.
fn bracket_input(text: &str, open: usize) -> Read {
    let Some(close) = square_close(text, open) else {
        return Err(("the action's bracket is not closed".into(), text.len()));
    };
    let input = text[open + 1..close - 1].trim();
    Ok((single_input(Value::String(input.to_string())), close))
}

/// What follows a bare tool name on its line (from `open`): an object, one input, or nothing,
/// when the object may be on the lines below.
fn rest_of_line(
    text: &str,
    open: usize,
    line_end: usize,
    next: Option<&Found>,
    tool_name: &str,
) -> Read {
    let rest = text[open..line_end].trim().trim_matches('`');
    // `Action: read_file {"path": "a.py"}`: the object on the same line.
    if rest.starts_with('{') {
        return match super::action_input::read(rest, tool_name) {
            Ok(tool_args) => Ok((tool_args, line_end)),
            Err(why) => Err((why, line_end)),
        };
    }
    // `Action: Search input="Apple Remote"`: the arguments, named and quoted, without the
    // parentheses.
    if let Some(args) = quoted_keywords(rest) {
        return Ok((args, line_end));
    }
    // `Action: read_file src/app.py` gives one input; words after a name
    // (`search files for *.rs`, `run_command to list the files`) are a sentence.
    if rest.contains(char::is_whitespace) {
        return Err((
            format!(
                "after the tool name comes a sentence, not its input: write {tool_name}(arguments)"
            ),
            line_end,
        ));
    }
    if rest.is_empty() {
        // `Action: run-tests` with its JSON input on the next line.
        if let Some((args, end)) = object_below(text, line_end, next) {
            return match args {
                Ok(tool_args) => Ok((tool_args, end)),
                Err(why) => Err((why, end)),
            };
        }
    }
    let args = if rest.is_empty() {
        Map::new()
    } else {
        match plain(rest) {
            Ok(value) => single_input(Value::String(value.to_string())),
            Err(why) => return Err((why, line_end)),
        }
    };
    Ok((args, line_end))
}

/// `name="value", other='value'`: keyword arguments whose every value is a quoted string, the
/// text holding nothing else; `None` for any other text (a command such as `RUST_LOG=debug
/// cargo run` is one input).
fn quoted_keywords(rest: &str) -> Option<Map<String, Value>> {
    let args = parse_args(rest).ok()?;
    let compact: String = rest.chars().filter(|c| !c.is_whitespace()).collect();
    let quoted = |key: &str, value: &Value| {
        value.is_string()
            && ["=\"", "='"]
                .iter()
                .any(|q| compact.contains(&format!("{key}{q}")))
    };
    (!args.is_empty() && args.iter().all(|(k, v)| quoted(k, v))).then_some(args)
}

/// Where the action itself starts: past spaces, a fence line, inline-code marks, quotes and
/// bold around the call or name.
fn body_start(text: &str, mut at: usize) -> usize {
    at += text[at..].len() - text[at..].trim_start().len();
    if text[at..].starts_with("```") {
        at = text[at..].find('\n').map_or(text.len(), |i| at + i + 1);
    }
    // A markdown list of calls (`- read_file(…)`, `1. read_file(…)`): the first item is the
    // action.
    let digits = text[at..].len()
        - text[at..]
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .len();
    if let Some(item) = text[at..].strip_prefix("- ").or_else(|| {
        text[at + digits..]
            .strip_prefix(". ")
            .filter(|_| digits > 0)
    }) {
        at = text.len() - item.len();
    }
    at + text[at..].len()
        - text[at..]
            .trim_start_matches([' ', '\t', '`', '"', '\'', '*', '['])
            .trim_start()
            .len()
}

/// The tool's name at the start of `body` and where it ends (past a closing quote, backtick
/// or bold mark). Names may be in any script: tools are named in Chinese too.
fn tool_name(body: &str) -> Option<(&str, usize)> {
    let len = body
        .find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.')))
        .unwrap_or(body.len());
    let name = body[..len].trim_end_matches('.');
    if name.is_empty() {
        return None;
    }
    let after = &body[name.len()..];
    let closing = after.len() - after.trim_start_matches(['`', '"', '\'', '*', ']']).len();
    Some((name, name.len() + closing))
}

/// Arguments as read, or why they cannot be.
type Arguments = Result<Map<String, Value>, String>;

/// The arguments written as an object on the lines after a bare tool name, up to the next
/// tag, and where they end; `None` when those lines hold no object.
fn object_below(text: &str, line_end: usize, next: Option<&Found>) -> Option<(Arguments, usize)> {
    let end = next.map_or(text.len(), |f| f.line_start);
    let below = text.get(line_end..end)?.trim();
    let object = unfence(below).trim();
    object
        .starts_with('{')
        .then(|| (super::action_input::read(object, ""), end))
}

/// `Action: {…}`: a JSON action after the tag.
fn json_action(
    text: &str,
    line_start: usize,
    body_start: usize,
    unreadable: impl Fn(&str, usize) -> Decision,
) -> Decision {
    let Some(end) = closing_bracket(text, body_start) else {
        return unreadable("the action's JSON object is not closed", text.len());
    };
    let object = serde_json::from_str::<Value>(&text[body_start..end])
        .ok()
        .or_else(|| python_literal(&text[body_start..end]));
    match object {
        Some(Value::Object(object)) => match json::read(&object, &text[line_start..end]) {
            Some((_, decision)) => decision,
            None => unreadable("the action's JSON names no tool", end),
        },
        _ => unreadable("the action's JSON object is not valid JSON", end),
    }
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
