//! LangChain's `Action Input:` text, in every way models write it: a JSON object (prose or a
//! comment after it, or left unclosed at the end), a Python dict literal, a JSON string, the
//! whole call again (`add(a=1, b=1)` for tool `add`), keyword arguments, markdown bold around
//! it, or plain text. Plain text is kept exactly: quotes are removed only when they wrap all of
//! it, so a SQL identifier keeps its closing quote.

use serde_json::{Map, Value};

use super::args::{
    closing_bracket, is_windows_path, parse_args, python_literal, single_input, string_end,
};
use super::fence::unfence;
use super::work;

/// The arguments `input` gives the tool `tool`, or why it cannot be read: an object that is
/// neither JSON nor a Python dict, or one cut inside a string, is no text to pass on.
pub fn read(input: &str, tool: &str) -> Result<Map<String, Value>, String> {
    let input = leading_fence(input.trim()).unwrap_or(input);
    let fenced = unfence(input).len() != input.len();
    let input = unwrap_emphasis(unfence(input).trim());
    if input.is_empty() {
        return Ok(Map::new());
    }
    // `"{"path": "a"}`: a stray character before the object, as before a JSON call.
    let lead = super::json::stray_lead(input);
    let input = if lead > 0 && looks_like_an_object(&input[lead..]) {
        &input[lead..]
    } else {
        input
    };
    if input.starts_with('{') && looks_like_an_object(input) {
        if let Some(key) = super::json::duplicate_key(input) {
            return Err(format!(
                "the action input gives '{key}' twice; give it once"
            ));
        }
        return object(input).ok_or_else(|| {
            "the action input's object is not closed or not valid JSON".to_string()
        });
    }
    if let Some(args) = repeated_call(input, tool) {
        return Ok(args);
    }
    // A JSON list is a value of its own (the schema says whether the tool takes one); text that
    // looks like keyword arguments (`path: a.py`, `RUST_LOG=debug cargo run`) is left for the
    // schema to tell apart.
    match serde_json::from_str::<Value>(input) {
        Ok(value @ (Value::String(_) | Value::Array(_))) => Ok(single_input(value)),
        // Text over several lines outside a fence or quotes: the input and then chatter, or a
        // multi-line input that needs quoting; the model must say which.
        _ if !fenced && input.contains('\n') => Err(
            "the action input is text over several lines; put it in a JSON object or a code fence"
                .to_string(),
        ),
        _ => Ok(single_input(Value::String(plain(input)?.to_string()))),
    }
}

/// A plain value without its quotes (see [`unquote`]), or why it cannot be read: a quote that
/// opens it and is not balanced after it (`"src/app.py'`, `"echo "hi"`) leaves which quotes
/// are the value's for the model to say.
pub(super) fn plain(input: &str) -> Result<&str, String> {
    let text = unquote(input);
    match text.chars().next() {
        Some(q @ ('"' | '\'' | '`')) if text.matches(q).count() % 2 == 1 => Err(format!(
            "the input opens a {q} quote that nothing closes as its pair; quote the value once, or not at all"
        )),
        _ => Ok(text),
    }
}

/// Whether text that opens with `{` is an object (a key or the end comes next), rather than
/// text such as a shell group `{ cat a; cat b; } | sort`.
fn looks_like_an_object(input: &str) -> bool {
    let inner = input[1..].trim_start();
    let key = inner
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(inner.len());
    inner.is_empty()
        || inner.starts_with(['"', '\'', '}'])
        || key > 0 && inner[key..].trim_start().starts_with(':')
}

/// `**…**` around the input, or italics (`*…*`, `_…_`) around an object, a quoted string, a
/// path or prose. A bare word in them stays as written: `*test*` is a glob and `__init__` a
/// name as often as they are emphasis.
fn unwrap_emphasis(input: &str) -> &str {
    if let Some(inner) = input.strip_prefix("**").and_then(|i| i.strip_suffix("**")) {
        return inner.trim();
    }
    for mark in ['*', '_'] {
        let Some(inner) = input.strip_prefix(mark).and_then(|i| i.strip_suffix(mark)) else {
            continue;
        };
        let quoted = inner.starts_with('{') || inner.starts_with('"') && inner.ends_with('"');
        let edges_plain = |c: char| c.is_alphanumeric() || matches!(c, '"' | '{' | '}');
        let words = inner.contains(['/', ' '])
            && !inner.contains([mark, '*', '?', '['])
            && inner.starts_with(edges_plain)
            && inner.ends_with(edges_plain);
        if quoted || words {
            return inner.trim();
        }
    }
    input
}

/// The object at the start of `input`, as JSON or a Python dict; what follows it (a comment,
/// prose) is not part of it. An object left unclosed at the end of the output is closed when
/// only closing brackets are missing.
fn object(input: &str) -> Option<Map<String, Value>> {
    let text = match closing_bracket(input, 0) {
        // A second object after it, or a fenced block, is a second input for one call.
        Some(end) if second_input(&input[end..]) => return None,
        Some(end) => input[..end].to_string(),
        None => closed(input)?,
    };
    let text = windows_paths_escaped(&text);
    match serde_json::from_str::<Value>(&text)
        .ok()
        .or_else(|| python_literal(&text))?
    {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

/// Whether what follows an input's object holds another object or a fenced block (a fence
/// that closes the one around the whole input aside).
fn second_input(after: &str) -> bool {
    let after = after.trim();
    let after = after.strip_suffix("```").unwrap_or(after);
    after.contains('{') || after.contains("```")
}

/// `text` with the backslashes of Windows paths written unescaped in its strings
/// (`"C:\temp\notes.txt"`) escaped: JSON would read `\t` and `\n` in them as a tab and a line
/// break, and the path is what the model meant.
fn windows_paths_escaped(text: &str) -> std::borrow::Cow<'_, str> {
    let b = text.as_bytes();
    let single = |i: usize| {
        b.get(i + 2..i + 4) == Some(b":\\")
            && string_end(b, i).is_some_and(|end| is_windows_path(&text[i + 1..end - 1]))
    };
    if !(0..b.len()).any(|i| b[i] == b'"' && single(i)) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut in_path = false;
    let mut in_string = false;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' if !in_string => {
                in_string = true;
                in_path = single(i);
            }
            '"' => in_string = false,
            '\\' if in_path => {
                out.push_str("\\\\");
                continue;
            }
            '\\' if in_string => {
                out.push(c);
                if let Some((_, next)) = chars.next() {
                    out.push(next);
                }
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out.into()
}

/// Whether `raw` leaves a string, brace or bracket open: an action cut off inside its input.
pub fn left_open(raw: &str) -> bool {
    let mut quote = None;
    let mut escaped = false;
    let mut depth = 0usize;
    for c in raw.chars() {
        match (quote, c) {
            (Some(_), _) if escaped => escaped = false,
            (Some(_), '\\') => escaped = true,
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"') => quote = Some(c),
            (None, '{' | '[') => depth += 1,
            (None, '}' | ']') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    work::add(raw.len());
    quote.is_some() || depth > 0
}

/// `input` with the brackets it leaves open closed, when every string in it is closed: a cut
/// inside a string would hand a half value to the tool.
fn closed(input: &str) -> Option<String> {
    work::add(input.len());
    let mut open = Vec::new();
    let mut quote = None;
    let mut escaped = false;
    for c in input.chars() {
        match (quote, c) {
            (Some(_), _) if escaped => escaped = false,
            (Some(_), '\\') => escaped = true,
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '{') => open.push('}'),
            (None, '[') => open.push(']'),
            (None, '}' | ']') => {
                open.pop()?;
            }
            _ => {}
        }
    }
    if quote.is_some() || open.is_empty() {
        return None;
    }
    let mut text = input.trim_end().trim_end_matches(',').to_string();
    text.extend(open.iter().rev());
    Some(text)
}

/// A fenced block that opens the input, when only prose follows it (no second block): the
/// block is the input (a script, a command), the prose the model's chatter about it.
fn leading_fence(input: &str) -> Option<&str> {
    let rest = input.strip_prefix("```")?;
    let opening = rest.find('\n')?;
    let end = 3 + opening + rest[opening..].find("\n```")? + 4;
    let after = &input[end..];
    // The closing fence ends its line: a word after it would open a second block.
    let closing_line = after.split('\n').next().unwrap_or_default();
    (closing_line.trim().is_empty() && !after.contains("```")).then_some(&input[..end])
}

/// `add(a=1, b=1)` as the input of tool `add`: the call written again, also in inline-code
/// marks or with a full stop after it.
fn repeated_call(input: &str, tool: &str) -> Option<Map<String, Value>> {
    let input = input.strip_suffix(['.', ';']).unwrap_or(input);
    let input = match input.strip_prefix('`').and_then(|i| i.strip_suffix('`')) {
        Some(inner) => inner.trim(),
        None => input,
    };
    let rest = input.get(..tool.len())?;
    if !rest.eq_ignore_ascii_case(tool) {
        return None;
    }
    let open = tool.len() + input[tool.len()..].len() - input[tool.len()..].trim_start().len();
    if input.as_bytes().get(open) != Some(&b'(') {
        return None;
    }
    let close = closing_bracket(input, open)?;
    if !input[close..].trim().is_empty() {
        return None;
    }
    parse_args(&input[open + 1..close - 1]).ok()
}

/// Plain text without the quotes around it, when they wrap all of it and nothing inside is
/// the same quote, or without a lone quote that opens it.
pub(super) fn unquote(input: &str) -> &str {
    // Straight quotes, backticks, and the typographic and CJK pairs Chinese output uses.
    const PAIRS: [(char, char); 6] = [
        ('"', '"'),
        ('\'', '\''),
        ('`', '`'),
        ('“', '”'),
        ('‘', '’'),
        ('「', '」'),
    ];
    for (open, close) in PAIRS {
        if let Some(inner) = input.strip_prefix(open).and_then(|i| i.strip_suffix(close)) {
            if !inner.contains(open) && !inner.contains(close) {
                return inner;
            }
        }
    }
    // A quote that opens the text and is never closed (`"src/app.py`) is no part of the
    // value: the model began to quote it and forgot the end. (A cut-off output is refused
    // before this, as an input left open.)
    for quote in ['"', '\'', '`'] {
        if let Some(inner) = input.strip_prefix(quote) {
            let closed_otherwise = inner.trim_end().ends_with(['"', '\'', '`']);
            if !inner.contains(quote) && !inner.trim().is_empty() && !closed_otherwise {
                return inner.trim_start();
            }
        }
    }
    input
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn of(input: &str) -> Value {
        Value::Object(read(input, "code_search").unwrap_or_else(|why| panic!("{input}: {why}")))
    }

    #[test]
    fn objects_with_prose_comments_or_python_syntax() {
        assert_eq!(
            of("{\"query\": \"x\"} I hope this helps"),
            json!({"query": "x"})
        );
        assert_eq!(
            of("{'query': 'x', 'exact': True}  # search it"),
            json!({"query": "x", "exact": true})
        );
        assert_eq!(of("**{\"query\": \"x\"}**"), json!({"query": "x"}));
        assert_eq!(
            of("```json\n{\"query\": \"x\"}\n```"),
            json!({"query": "x"})
        );
    }

    #[test]
    fn an_unclosed_object_is_closed_only_outside_strings() {
        assert_eq!(
            of("{\"query\": \"x\", \"limit\": 5"),
            json!({"query": "x", "limit": 5})
        );
        assert_eq!(
            of("{\"query\": {\"a\": [1, 2"),
            json!({"query": {"a": [1, 2]}})
        );
        assert!(read("{\"query\": \"x", "code_search").is_err());
        assert_eq!(
            of("{ cat a; cat b; } | sort"),
            json!({"input": "{ cat a; cat b; } | sort"})
        );
        assert!(read("{\"query\": \"a\", \"query\": \"b\"}", "code_search").is_err());
    }

    #[test]
    fn the_call_again_is_read_and_keyword_text_left_to_the_schema() {
        assert_eq!(
            of("code_search(query=\"x\", limit=2)"),
            json!({"query": "x", "limit": 2})
        );
        assert_eq!(
            of("query=\"x\", limit=2"),
            json!({"input": "query=\"x\", limit=2"})
        );
        assert_eq!(of("[{\"path\": \"a\"}]"), json!({"input": [{"path": "a"}]}));
        assert_eq!(
            of("python: list comprehension"),
            json!({"input": "python: list comprehension"})
        );
        assert_eq!(of("other_tool(x=1)"), json!({"input": "other_tool(x=1)"}));
    }

    #[test]
    fn plain_text_keeps_every_quote_it_was_written_with() {
        for text in [
            "SELECT \"name\" FROM users WHERE id = 'x'",
            "grep -r \"TODO\" src/",
            "C:\\Users\\me\\file.txt",
            "*test*",
            "__init__",
        ] {
            assert_eq!(of(text), json!({"input": text}), "{text}");
        }
        assert_eq!(of("'src/app.py'"), json!({"input": "src/app.py"}));
        assert_eq!(of("“北京天气”"), json!({"input": "北京天气"}));
        assert_eq!(
            of(r#"{"path": "C:\temp\notes.txt"}"#),
            json!({"path": "C:\\temp\\notes.txt"})
        );
        assert_eq!(
            of(r#"{"path": "C:\\temp\\a.txt", "q": "a\tb"}"#),
            json!({"path": "C:\\temp\\a.txt", "q": "a\tb"})
        );
        // A drive-like start followed by an escaped quote is JSON as written.
        assert_eq!(of(r#"{"a": "a:\""}"#), json!({"a": "a:\""}));
        assert_eq!(of(r#"{"a": "b:\x\"y"}"#), json!({"a": "b:\\x\"y"}));
        assert!(read("cargo test\nI will look at the failures", "run").is_err());
        assert_eq!(
            of("```sh\nmake\nmake test\n```"),
            json!({"input": "make\nmake test"})
        );
        assert!(read("{\"path\": \"a\"}\n{\"path\": \"b\"}", "run").is_err());
        assert_eq!(of("*src/components*"), json!({"input": "src/components"}));
        assert_eq!(of("_how errors map_"), json!({"input": "how errors map"}));
        assert_eq!(of("*/tests/*"), json!({"input": "*/tests/*"}));
        assert_eq!(of("\"say \\\"hi\\\"\""), json!({"input": "say \"hi\""}));
    }

    #[test]
    fn issue_34_inputs_a_small_model_writes() {
        // A lone opening quote is not part of the value; balanced quotes inside are kept.
        assert_eq!(of("\"src/app.py"), json!({"input": "src/app.py"}));
        assert_eq!(of("'SELECT 1"), json!({"input": "SELECT 1"}));
        assert_eq!(of("\"a b\" --flag"), json!({"input": "\"a b\" --flag"}));
        // A fence that opens the input, prose after it; two fences are no one input.
        assert_eq!(
            of("```python\nprint(1)\n```\nThis prints one."),
            json!({"input": "print(1)"})
        );
        assert!(read("```python\na\n```\nor\n```python\nb\n```", "run").is_err());
        // The call again, in inline-code marks or with a full stop.
        assert_eq!(of("`code_search(query=\"x\")`"), json!({"query": "x"}));
        assert_eq!(of("code_search(query=\"x\")."), json!({"query": "x"}));
        // Comments in a dict over several lines.
        assert_eq!(
            of("{\n  \"query\": \"x\",  # what\n  \"limit\": 2  # how many\n}\nDone."),
            json!({"query": "x", "limit": 2})
        );
    }
}
