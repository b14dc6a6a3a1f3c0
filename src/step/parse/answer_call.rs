//! A final answer that is itself a call: what a model asked through the provider's tool
//! calling writes after `Final Answer:` when it means to act, and the bare `name(…)` form a
//! small model writes there.

use super::decision::{Decision, Parsed};
use super::tags::{self, Tag, Tags};
use super::{args, markup, parse};

/// A final answer that is itself a tool call: a model asked through the provider's tool
/// calling (which shows it no `Action:` format) that writes its call after `Final Answer:`, as
/// JSON (`{"name": …, "arguments": …}`, with the doubled braces a chat template leaves, or in
/// `<tools>…</tools>`), as tool-call markup, or as an `Action:` line. Only an answer that is a
/// call from its first character to its last is one: prose that mentions a tool stays prose.
/// The call, read as the text mode reads a call; `None` when it is no call.
pub fn call_in_answer(answer: &str, tags: &Tags) -> Option<Parsed> {
    let text = answer.trim();
    let text = text
        .strip_prefix("<tools>")
        .and_then(|t| t.strip_suffix("</tools>"))
        .map_or(text, str::trim);
    let undoubled;
    let text = if text.starts_with("{{") && text.ends_with("}}") {
        undoubled = text.replace("{{", "{").replace("}}", "}");
        undoubled.as_str()
    } else {
        text
    };
    let labelled;
    let text = match bare_call(text) {
        Some(_) => {
            labelled = format!("{}: {}", tags.action, text.trim_matches('`'));
            labelled.as_str()
        }
        None => text,
    };
    let is_call = (text.starts_with('{') && text.ends_with('}'))
        || markup::opener_at(text) == Some(0)
        || matches!(tags::TagNames::new(tags).at(text), Some((Tag::Action, _)));
    if !is_call {
        return None;
    }
    let parsed = parse(text, tags)?;
    matches!(parsed.decision, Decision::Action { .. }).then_some(parsed)
}

/// The name of the call `name(…)` that `text` is from its first character to its last (in
/// backticks or not), with no label before it: `read_file(path="config.py")`, as a real 0.5B
/// model wrote after `Final Answer:`. Whether the name is a tool is the caller's to ask.
pub fn bare_call(text: &str) -> Option<&str> {
    let text = text.trim();
    let text = match text.strip_prefix('`').and_then(|t| t.strip_suffix('`')) {
        Some(inner) if !inner.contains('`') => inner.trim(),
        _ => text,
    };
    let name = &text[..call_name_len(text)];
    // One call: its parenthesis closes at the text's end (`f(x) and g(y)` is two).
    let one_call = !name.is_empty()
        && text[name.len()..].starts_with('(')
        && args::closing_bracket(text, name.len()) == Some(text.len());
    (one_call && !text.contains('\n')).then_some(name)
}

/// The length of the name a call may open `text` with (`read_file`, `tools.search`,
/// `grep-search`): a letter or `_`, then letters, digits, `_`, `-` and `.`; 0 when none.
pub(super) fn call_name_len(text: &str) -> usize {
    if !text.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        return 0;
    }
    text.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
        .unwrap_or(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(answer: &str) -> Option<(String, String)> {
        let parsed = call_in_answer(answer, &Tags::default())?;
        match parsed.decision {
            Decision::Action {
                tool_name,
                tool_args,
                ..
            } => Some((tool_name, serde_json::Value::Object(tool_args).to_string())),
            _ => None,
        }
    }

    #[test]
    fn each_way_of_writing_a_call_as_the_answer_is_read() {
        let grep = Some((
            "grep_search".to_string(),
            r#"{"pattern":"login"}"#.to_string(),
        ));
        for answer in [
            r#"{"name": "grep_search", "arguments": {"pattern": "login"}}"#,
            r#"{"name": "grep_search", "parameters": {"pattern": "login"}}"#,
            r#" {{"name": "grep_search", "arguments": {{"pattern": "login"}}}} "#,
            r#"<tools>{"name": "grep_search", "arguments": {"pattern": "login"}}</tools>"#,
            "<tools>\n{{\"name\": \"grep_search\", \"arguments\": {{\"pattern\": \"login\"}}}}\n</tools>",
            "<tool_call>\n{\"name\": \"grep_search\", \"arguments\": {\"pattern\": \"login\"}}\n</tool_call>",
            "Action: grep_search(pattern=\"login\")",
            "grep_search(pattern=\"login\")",
            "`grep_search(pattern=\"login\")`",
        ] {
            assert_eq!(call(answer), grep, "{answer}");
        }
        // Two calls are no one call: which one the model meant is for it to say.
        for two in [
            "grep_search(pattern=\"a\") and read_file(path=\"b\")",
            "grep_search(pattern=\"a\"), then grep_search(pattern=\"b\")",
        ] {
            assert_eq!(call(two), None, "{two}");
        }
        assert_eq!(
            bare_call("grep_search(pattern=\"a)\")"),
            Some("grep_search")
        );
        assert_eq!(bare_call("f(g(x))"), Some("f"));
        assert_eq!(bare_call("f(x) + g(y)"), None);
        assert_eq!(bare_call("f(\"unclosed)"), None);
    }

    #[test]
    fn prose_and_other_json_are_no_call() {
        for answer in [
            "Use grep_search with {\"pattern\": \"login\"} to find it.",
            "{\"name\": \"grep_search\", \"arguments\": {\"pattern\": \"login\"}} finds it.",
            "{\"status\": \"ok\"}",
            "{{ template }}",
            "<tools>none</tools>",
            "The answer is 4.",
            "",
        ] {
            assert_eq!(call(answer), None, "{answer}");
        }
    }
}
