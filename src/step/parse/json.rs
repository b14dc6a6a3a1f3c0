//! JSON actions, bare or in a ```json fence: LangChain's `{"action", "action_input"}`, the
//! `{"thought", "tool_name", "parameters"}` form of the service's seed, and the
//! `{"name", "arguments"}` form local models use for function calls.

use serde_json::{Map, Value};

use super::args::Closer;
use super::decision::Decision;
use super::work;

/// A JSON action in the text: where it starts (its fence included) and what it says.
#[derive(Debug)]
pub struct JsonAction {
    pub start: usize,
    /// Just past the object, and past the fence that closes right after it.
    pub end: usize,
    pub thought: Option<String>,
    pub decision: Decision,
}

/// How many times over its length the search may look at a text, counting the bytes each
/// candidate is scanned and parsed. The bracket scans are linear (see [`Closer`]), but a JSON
/// object is parsed from each line start inside it, and strings seen from different starts
/// can pair their quotes differently; text built to make that costly is searched only this far.
const LOOKS_PER_BYTE: usize = 8;

/// The first JSON object at a line start (or just inside a fence) that reads as an action or an
/// answer.
pub fn find(text: &str) -> Option<JsonAction> {
    let mut closer = Closer::new(text);
    let mut parsed = 0;
    let budget = text
        .len()
        .saturating_mul(LOOKS_PER_BYTE)
        .saturating_add(1 << 16);
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        work::add(line.len());
        let here = line_start;
        line_start += line.len();
        let trimmed = line.trim_start();
        let lead = stray_lead(trimmed);
        if !trimmed[lead..].starts_with('{') {
            continue;
        }
        if closer.spent() + parsed > budget {
            return None;
        }
        let open = here + (line.len() - trimmed.len()) + lead;
        let Some(end) = closer.close(open) else {
            continue;
        };
        // The object is the call only when its line ends with it (or a closing mark):
        // `\`{…}\` is the call you asked about, but I will not run it` quotes it.
        let line_rest = text[end..].split('\n').next().unwrap_or_default();
        let marks_only = line_rest
            .chars()
            .all(|c| c.is_whitespace() || "`'\".}".contains(c));
        // A special token or a closing tag after it (`<|action_end|>`, `</tool_call>`) ends it.
        let token =
            line_rest.trim_start().starts_with("<|") || line_rest.trim_start().starts_with("</");
        if !marks_only && !token {
            continue;
        }
        let raw = &text[open..end];
        parsed += raw.len();
        work::add(raw.len());
        let Ok(Value::Object(object)) = serde_json::from_str::<Value>(raw) else {
            continue;
        };
        let Some((thought, mut decision)) = read(&object, raw) else {
            continue;
        };
        if let Some(key) = duplicate_key(raw) {
            decision = Decision::Unreadable {
                why: format!("the action gives '{key}' twice; give it once"),
                raw_action_string: raw.trim().to_string(),
            };
        }
        return Some(JsonAction {
            start: fence_start(text, open - lead),
            end: fence_end(text, end),
            thought,
            decision,
        });
    }
    None
}

/// The object as an action or an answer, when it has one of the known shapes; the OpenAI wire
/// shapes some servers pass through as text (`{"tool_calls": [{…}]}`, `{"type": "function",
/// "function": {…}}`) are read as their first call.
pub fn read(object: &Map<String, Value>, raw: &str) -> Option<(Option<String>, Decision)> {
    if let Some(Value::Array(calls)) = object.get("tool_calls") {
        let first = calls.first()?.as_object()?;
        return read(first, raw);
    }
    if let Some(Value::Object(function)) = object.get("function") {
        return read(function, raw);
    }
    read_shape(object, raw)
}

fn read_shape(object: &Map<String, Value>, raw: &str) -> Option<(Option<String>, Decision)> {
    let text = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| object.get(*k).and_then(Value::as_str))
            .map(str::to_string)
    };
    let thought = text(&["thought", "reasoning", "thoughts"]);
    // smolagents' `final_answer` takes `{"answer": …}`: the answer is its text.
    let answer = |value: Option<&Value>| {
        let value = match value {
            Some(Value::Object(args)) if args.len() == 1 => args.values().next(),
            other => other,
        };
        Decision::Answer(value.map(as_text).unwrap_or_default())
    };
    let name = text(&["action", "tool_name", "tool"]).or_else(|| {
        // `name` alone is too common a key; it counts with its arguments beside it.
        text(&["name"]).filter(|_| {
            ["arguments", "parameters", "input"]
                .iter()
                .any(|k| object.contains_key(*k))
        })
    });
    // An empty name names no tool: not an action (a fuzzer found `{"action": ""}`).
    if let Some(name) = name.filter(|n| !n.trim().is_empty()) {
        let input = [
            "action_input",
            "parameters",
            "arguments",
            "args",
            "input",
            "tool_input",
        ]
        .iter()
        .find_map(|k| object.get(*k));
        if is_final_answer_name(&name) {
            return Some((thought, answer(input)));
        }
        let tool_args = match input {
            Some(Value::Object(map)) => map.clone(),
            // Function-call arguments often come as a JSON string.
            Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                Ok(Value::Object(map)) => map,
                _ => single("input", Value::String(s.clone())),
            },
            Some(Value::Null) | None => Map::new(),
            Some(other) => single("input", other.clone()),
        };
        return Some((
            thought,
            Decision::Action {
                tool_name: name,
                tool_args,
                raw_action_string: raw.trim().to_string(),
            },
        ));
    }
    let final_answer = ["final_answer", "answer", "response"]
        .iter()
        .find_map(|k| object.get(*k))?;
    Some((thought, answer(Some(final_answer))))
}

/// A key written twice in one object of a JSON text (`{"path": "a", "path": "b"}`): a parser
/// keeps one of them silently, and which one the model meant is not known.
pub fn duplicate_key(text: &str) -> Option<String> {
    work::add(text.len());
    let mut objects: Vec<Option<std::collections::HashSet<&str>>> = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let start = i + 1;
                i = start;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                let key = text.get(start..i.min(b.len()))?;
                let is_key = text[(i + 1).min(text.len())..]
                    .trim_start()
                    .starts_with(':');
                if let (true, Some(Some(keys))) = (is_key, objects.last_mut()) {
                    if !keys.insert(key) {
                        return Some(key.to_string());
                    }
                }
            }
            b'{' => objects.push(Some(std::collections::HashSet::new())),
            b'[' => objects.push(None),
            b'}' | b']' => {
                objects.pop();
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Names models use for "this is the answer" when they write it as an action.
pub fn is_final_answer_name(name: &str) -> bool {
    let n = name.trim().to_ascii_lowercase().replace([' ', '-'], "_");
    matches!(n.as_str(), "final_answer" | "finish")
}

/// A value as answer text: strings as they are, anything else as JSON.
pub fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn single(key: &str, value: Value) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert(key.into(), value);
    map
}

/// Just past the fence that closes right after the object, or the object's own end.
fn fence_end(text: &str, end: usize) -> usize {
    let after = &text[end..];
    let rest = after.trim_start();
    match rest.strip_prefix("```") {
        Some(past) => text.len() - past.len(),
        None => end,
    }
}

/// The length of a stray character a small model left before the `{` that opens its JSON
/// call at a line start (a backtick, a quote or a full stop), or 0.
pub fn stray_lead(line: &str) -> usize {
    match line.as_bytes() {
        [b'`' | b'"' | b'\'' | b'.', b'{', ..] => 1,
        _ => 0,
    }
}

/// Where the fence that opens just before the object starts, or the object's own start.
fn fence_start(text: &str, start: usize) -> usize {
    let before = text[..start].trim_end();
    let line = before.rfind('\n').map_or(0, |i| i + 1);
    if before[line..].trim_start().starts_with("```") {
        line
    } else {
        start
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod tests {
    use super::*;
    use serde_json::json;

    fn action(text: &str) -> (Option<String>, String, Value) {
        let found = find(text).unwrap_or_else(|| panic!("no JSON action in {text:?}"));
        match found.decision {
            Decision::Action {
                tool_name,
                tool_args,
                ..
            } => (found.thought, tool_name, Value::Object(tool_args)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn langchain_json_actions() {
        let (_, name, args) = action("```json\n{\n  \"action\": \"code_search\",\n  \"action_input\": {\"query\": \"login\"}\n}\n```");
        assert_eq!(
            (name.as_str(), args),
            ("code_search", json!({"query": "login"}))
        );
        let (_, name, args) = action("{\"action\": \"read_file\", \"action_input\": \"src/a.rs\"}");
        assert_eq!(
            (name.as_str(), args),
            ("read_file", json!({"input": "src/a.rs"}))
        );
    }

    #[test]
    fn the_seed_form_carries_its_thought() {
        let (thought, name, args) = action("{\"thought\": \"Find the login code.\", \"tool_name\": \"code_search\", \"parameters\": {\"query\": \"login\"}}");
        assert_eq!(thought.as_deref(), Some("Find the login code."));
        assert_eq!(
            (name.as_str(), args),
            ("code_search", json!({"query": "login"}))
        );
    }

    #[test]
    fn function_call_json_with_string_arguments() {
        let (_, name, args) =
            action("{\"name\": \"read_file\", \"arguments\": \"{\\\"path\\\": \\\"a.rs\\\"}\"}");
        assert_eq!(
            (name.as_str(), args),
            ("read_file", json!({"path": "a.rs"}))
        );
    }

    #[test]
    fn a_final_answer_action_is_an_answer() {
        let found = find("{\"action\": \"Final Answer\", \"action_input\": \"It is in auth.js.\"}")
            .unwrap();
        assert_eq!(found.decision, Decision::Answer("It is in auth.js.".into()));
    }

    #[test]
    fn objects_of_other_shapes_are_not_actions() {
        assert!(find("{\"action\": \"\"}").is_none());
        assert!(find("{\"tool_name\": \"  \", \"parameters\": {}}").is_none());
        assert!(find("{\"name\": \"Bob\", \"age\": 3}").is_none());
        assert!(find("config = {\"action\": 1}").is_none());
        assert!(find("{ not json }").is_none());
    }

    #[test]
    fn a_key_written_twice_is_found_at_any_depth() {
        assert_eq!(
            duplicate_key(r#"{"path": "a", "path": "b"}"#).as_deref(),
            Some("path")
        );
        assert_eq!(
            duplicate_key(r#"{"a": {"x": 1, "x": 2}}"#).as_deref(),
            Some("x")
        );
        assert_eq!(
            duplicate_key(r#"{"a": [{"x": 1}, {"x": 2}], "b": "x: \"x\""}"#),
            None
        );
    }

    #[test]
    fn a_fenced_object_starts_at_its_fence() {
        let text = "Thought: t\n```json\n{\"action\": \"a\", \"action_input\": {}}\n```\ntrailing";
        assert_eq!(find(text).unwrap().start, "Thought: t\n".len());
    }
}
