//! Pythonic call lists, as Llama 3.2/3.3 write tool calls and vLLM's `pythonic` tool parser
//! reads them: `[read_file(path='src/app.py'), grep_search(pattern="TODO", max_results=5)]`,
//! alone or on a line after prose, with Python literals as values. Each call in the list is
//! one action, in the order written.

use super::args::{closing_bracket, parse_args, Closer};
use super::decision::{Decision, MAX_CALLS};
use super::work;

const PYTHON_START: &str = "<|python_start|>";

/// Calls found in a list, and where the list starts.
#[derive(Debug)]
pub struct CallList {
    pub start: usize,
    /// Just past the list (the end of the text when it is not closed).
    pub end: usize,
    pub calls: Vec<Decision>,
}

/// The first line that opens a call list (`[name(`), read into its calls.
pub fn find(text: &str) -> Option<CallList> {
    // Lines inside a list that does not read as calls are tried too: the memo keeps that linear.
    let mut closer = Closer::new(text);
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        work::add(line.len());
        let here = line_start;
        line_start += line.len();
        // Llama 4 wraps its list in `<|python_start|>` … `<|python_end|>`.
        let trimmed = line.trim_start();
        let trimmed = trimmed.strip_prefix(PYTHON_START).unwrap_or(trimmed);
        if !opens_a_list(trimmed) {
            continue;
        }
        let open = here + (line.len() - trimmed.len());
        // A list never closed was cut off: its complete calls stand, and the cut one is
        // unreadable (a list with no complete call is only that).
        let Some(end) = closer.close(open) else {
            let mut calls = complete_calls(&text[open + 1..]);
            calls.push(Decision::Unreadable {
                why: "the list of calls is not closed".into(),
                raw_action_string: text[open..].trim().to_string(),
            });
            return Some(CallList {
                start: open,
                end: text.len(),
                calls,
            });
        };
        if let Some(calls) = calls_in(&text[open + 1..end - 1]) {
            return Some(CallList {
                start: open,
                end,
                calls,
            });
        }
    }
    None
}

/// The calls of a list cut off after them: each `name(…)` that closes, up to the first that
/// does not.
fn complete_calls(inner: &str) -> Vec<Decision> {
    let mut end = 0;
    let mut i = 0;
    while let Some(close) = inner[i..]
        .find('(')
        .and_then(|open| closing_bracket(inner, i + open))
    {
        end = close;
        i = close;
        let next = inner[i..].trim_start_matches([' ', '\n', '\t', '\r', ',']);
        if name_len(next) == 0 {
            break;
        }
        i = inner.len() - next.len();
    }
    calls_in(&inner[..end]).unwrap_or_default()
}

/// `[name(` or `[module.name(` at the start of `line`.
pub fn opens_a_list(line: &str) -> bool {
    let Some(rest) = line.strip_prefix('[') else {
        return false;
    };
    let rest = rest.trim_start();
    let name = name_len(rest);
    name > 0 && rest[name..].starts_with('(')
}

fn name_len(text: &str) -> usize {
    let first_ok = text
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_');
    if !first_ok {
        return 0;
    }
    text.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
        .unwrap_or(text.len())
}

/// The calls of a list's inside: `name(args), name(args)`; `None` when anything else is in it.
pub fn calls_in(inner: &str) -> Option<Vec<Decision>> {
    let mut calls = Vec::new();
    let mut i = 0;
    loop {
        i += inner[i..].len()
            - inner[i..]
                .trim_start_matches([' ', '\n', '\t', '\r', ','])
                .len();
        if i == inner.len() {
            return (!calls.is_empty()).then_some(calls);
        }
        let name = name_len(&inner[i..]);
        let open = i + name;
        if name == 0 || !inner[open..].starts_with('(') || calls.len() == MAX_CALLS {
            return None;
        }
        let close = closing_bracket(inner, open)?;
        let raw = inner[i..close].to_string();
        calls.push(match parse_args(&inner[open + 1..close - 1]) {
            Ok(tool_args) => Decision::Action {
                tool_name: inner[i..open].to_string(),
                tool_args,
                raw_action_string: raw,
            },
            Err(why) => Decision::Unreadable {
                why,
                raw_action_string: raw,
            },
        });
        i = close;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn calls(text: &str) -> Vec<(String, Value)> {
        crate::step::parse::as_calls(
            find(text)
                .unwrap_or_else(|| panic!("no list in {text:?}"))
                .calls,
        )
    }

    #[test]
    fn a_list_of_calls_alone_or_after_prose() {
        let list = "[read_file(path='src/app.py'), grep_search(pattern=\"TODO\", max_results=5)]";
        let expected = vec![
            ("read_file".to_string(), json!({"path": "src/app.py"})),
            (
                "grep_search".to_string(),
                json!({"pattern": "TODO", "max_results": 5}),
            ),
        ];
        assert_eq!(calls(list), expected);
        assert_eq!(calls(&format!("I'll look at both.\n{list}")), expected);
    }

    #[test]
    fn python_literals_as_values() {
        assert_eq!(
            calls("[search(q='it\\'s', exact=True, limit=None, opts={'paths': ['a', 'b']})]"),
            vec![(
                "search".to_string(),
                json!({"q": "it's", "exact": true, "limit": null, "opts": {"paths": ["a", "b"]}})
            )]
        );
    }

    #[test]
    fn brackets_that_are_not_calls_are_not_lists() {
        for text in [
            "[1, 2, 3]",
            "[see the docs](http://x)",
            "[a(1) and more]",
            "- [ ] todo(x)",
        ] {
            assert!(find(text).is_none(), "{text}");
        }
    }

    #[test]
    fn an_unclosed_list_keeps_its_complete_calls() {
        let list = find("[read_file(path='a'").unwrap_or_else(|| panic!("no list"));
        assert!(matches!(list.calls[..], [Decision::Unreadable { .. }]));
        let list = find("[read_file(path='a'), code_search(query='lo")
            .unwrap_or_else(|| panic!("no list"));
        assert!(
            matches!(list.calls[0], Decision::Action { ref tool_name, .. } if tool_name == "read_file")
        );
        assert!(matches!(list.calls[1], Decision::Unreadable { .. }));
        assert_eq!(
            calls("<|python_start|>[ls(path=\"t\")]<|python_end|>").len(),
            1
        );
    }
}
