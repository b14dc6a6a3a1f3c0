//! The argument grammar of `tool_name(…)`: keyword and positional arguments; double-, single-
//! and triple-quoted strings with escapes; numbers; `true/false/True/False`; `null/None`; JSON
//! arrays and objects; brackets and quotes inside strings; trailing commas.

use serde_json::{Map, Number, Value};

use std::collections::HashMap;

use super::work;

/// What the scan for a closing bracket meets at one position.
enum Token {
    Open,
    Close,
    /// A string, or any other byte: the scan goes on at this index.
    Skip(usize),
    /// A string that never closes: no bracket after it can close anything.
    Unclosed,
}

fn token(b: &[u8], i: usize) -> Token {
    match b[i] {
        b'"' | b'\'' => string_end(b, i).map_or(Token::Unclosed, Token::Skip),
        b'(' | b'[' | b'{' => Token::Open,
        b')' | b']' | b'}' => Token::Close,
        _ => Token::Skip(i + 1),
    }
}

/// Index just past the `)` that closes the bracket at `open`, or `None` if it never closes.
pub fn closing_bracket(text: &str, open: usize) -> Option<usize> {
    let b = text.as_bytes();
    let mut depth = 0usize;
    let mut i = open;
    while i < b.len() {
        work::add(1);
        match token(b, i) {
            Token::Skip(next) => {
                work::add(next - i);
                i = next;
                continue;
            }
            Token::Unclosed => return None,
            Token::Open => depth += 1,
            Token::Close => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
        }
        i += 1;
    }
    None
}

/// [`closing_bracket`] for many starts in one text, in linear time. Trying each line that opens
/// a `{` with its own scan was quadratic: with every line opening one that never closes, each
/// scan ran to the end of the text (100 KB took 4.8 s). A scan here notes where every bracket
/// it passes closes (or that it never does), and a later scan that meets one of them jumps past
/// it: from any position the scan is the same whatever bracket it started from.
pub struct Closer<'t> {
    b: &'t [u8],
    known: HashMap<usize, Option<usize>>,
    /// Bytes looked at by all scans so far.
    spent: usize,
}

impl<'t> Closer<'t> {
    pub fn new(text: &'t str) -> Self {
        Self {
            b: text.as_bytes(),
            known: HashMap::new(),
            spent: 0,
        }
    }

    pub fn spent(&self) -> usize {
        self.spent
    }

    /// Index just past the bracket that closes the one at `open` (which must open one).
    pub fn close(&mut self, open: usize) -> Option<usize> {
        if let Some(&known) = self.known.get(&open) {
            return known;
        }
        // The brackets this scan has opened and not yet closed, innermost last.
        let mut open_now = Vec::new();
        let found = self.scan(open, &mut open_now);
        // What stops this scan stops every bracket still open in it.
        for o in open_now {
            self.known.insert(o, None);
        }
        found
    }

    fn scan(&mut self, mut i: usize, open_now: &mut Vec<usize>) -> Option<usize> {
        while i < self.b.len() {
            self.spend(1);
            match token(self.b, i) {
                Token::Skip(next) => {
                    self.spend(next - i);
                    i = next;
                    continue;
                }
                Token::Unclosed => {
                    // `string_end` looked to the end for the quote that closes it: spent too, or
                    // a line after line of `{"` scanned the rest of the text each (quadratic).
                    self.spent += self.b.len() - i;
                    return None;
                }
                Token::Open => match self.known.get(&i) {
                    Some(Some(end)) => {
                        i = *end;
                        continue;
                    }
                    Some(None) => return None,
                    None => open_now.push(i),
                },
                Token::Close => {
                    let o = open_now.pop()?;
                    self.known.insert(o, Some(i + 1));
                    if open_now.is_empty() {
                        return Some(i + 1);
                    }
                }
            }
            i += 1;
        }
        None
    }

    fn spend(&mut self, bytes: usize) {
        self.spent += bytes;
        work::add(bytes);
    }
}

/// Index just past the closing quote of the string that opens at `start`.
pub(super) fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let q = b[start];
    if b[start..].starts_with(&[q, q, q]) {
        let body = start + 3;
        let close = b[body..].windows(3).position(|w| w == [q, q, q]);
        work::add(close.unwrap_or(b.len() - body));
        return close.map(|c| body + c + 3);
    }
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            c if c == q => return Some(i + 1),
            _ => i += 1,
        }
    }
    work::add(b.len() - start);
    None
}

/// Parses the text between the parentheses of a call into a JSON object. Positional arguments
/// are named `input`, `input_2`, … (the parser issue maps them to declared parameter names).
/// No tool takes more; a call with more (`f(1,1,1,…)` half a million times) is not a call a
/// model meant, and would be echoed back, argument by argument, in the response.
pub const MAX_ARGUMENTS: usize = 256;

pub fn parse_args(inner: &str) -> Result<Map<String, Value>, String> {
    work::add(inner.len());
    let mut p = Cursor::new(inner);
    let mut args = Map::new();
    let mut positional = 0;
    let mut equals = false;
    loop {
        p.skip(|c| c.is_ascii_whitespace() || c == b',');
        if p.done() {
            return Ok(args);
        }
        if args.len() == MAX_ARGUMENTS {
            return Err(format!("the call has more than {MAX_ARGUMENTS} arguments"));
        }
        let start = p.i;
        if let Some(key) = p.identifier() {
            p.skip(|c| c.is_ascii_whitespace());
            // `C:\Users\…` is a path, not an argument named C.
            let drive = key.len() == 1 && p.text[p.i..].starts_with(":\\");
            if !drive && (p.peek() == Some(b'=') || p.peek() == Some(b':')) {
                equals |= p.peek() == Some(b'=');
                p.i += 1;
                p.skip(|c| c.is_ascii_whitespace());
                let value = p.value()?;
                if args.insert(key.to_string(), value).is_some() {
                    return Err(format!("the argument '{key}' is given twice"));
                }
                continue;
            }
            p.i = start;
        }
        // A value after a keyword argument (`input="a" and more`) is no argument: Python
        // refuses it, and it would take the place of what the keyword gave. (A signature's
        // `query: str, limit?: int` is told apart later, from its type names.)
        if equals && args.len() > positional {
            return Err("a value follows the keyword arguments".to_string());
        }
        let value = p.value()?;
        positional += 1;
        let name = if positional == 1 {
            "input".to_string()
        } else {
            format!("input_{positional}")
        };
        if args.insert(name, value).is_some() {
            return Err("an argument is given twice".to_string());
        }
    }
}

struct Cursor<'a> {
    text: &'a str,
    i: usize,
    /// Whether a search for the end of a string with unescaped quotes inside found none: it
    /// would find none from later on either, and each search may run to the end.
    no_inner_end: bool,
}

impl<'a> Cursor<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            text,
            i: 0,
            no_inner_end: false,
        }
    }

    fn done(&self) -> bool {
        self.i >= self.text.len()
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.i).copied()
    }

    fn skip(&mut self, pred: impl Fn(u8) -> bool) {
        while self.peek().is_some_and(&pred) {
            self.i += 1;
        }
    }

    /// Passes spaces and a literal's Python comments (`# to the end of the line`): a dict
    /// written over several lines often explains its keys so.
    fn blank(&mut self) {
        loop {
            self.skip(|c| c.is_ascii_whitespace());
            if self.peek() != Some(b'#') {
                return;
            }
            self.skip(|c| c != b'\n');
        }
    }

    fn identifier(&mut self) -> Option<&'a str> {
        let start = self.i;
        if !self
            .peek()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        {
            return None;
        }
        self.skip(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-');
        Some(&self.text[start..self.i])
    }

    fn value(&mut self) -> Result<Value, String> {
        let b = self.text.as_bytes();
        // Python's raw strings keep every backslash: `r'\d+'` is a regex.
        if matches!(self.peek(), Some(b'r' | b'R'))
            && matches!(b.get(self.i + 1), Some(b'"' | b'\''))
        {
            let start = self.i + 1;
            let end = string_end(b, start).ok_or("a string argument is not closed")?;
            self.i = end;
            let q = if b[start..].starts_with(&[b[start]; 3]) {
                3
            } else {
                1
            };
            return Ok(Value::String(self.text[start + q..end - q].to_string()));
        }
        match self.peek() {
            Some(q @ (b'"' | b'\'')) => {
                let start = self.i;
                let triple = b[start..].starts_with(&[q, q, q]);
                let end = string_end(b, start).ok_or("a string argument is not closed")?;
                self.i = end;
                let end = if triple {
                    end
                } else {
                    self.inner_quotes_end(start, end)
                };
                self.i = end;
                let raw = &self.text[start..end];
                let body = &raw[1..raw.len() - 1];
                if triple {
                    Ok(Value::String(raw[3..raw.len() - 3].to_string()))
                } else if end != string_end(b, start).unwrap_or(end) || is_windows_path(body) {
                    // Written as is: quotes inside it unescaped, or a path's backslashes.
                    Ok(Value::String(body.to_string()))
                } else {
                    Ok(Value::String(unescape(body)))
                }
            }
            Some(b'[' | b'{') => {
                let start = self.i;
                let end = closing_bracket(self.text, start).ok_or("a bracket is not closed")?;
                self.i = end;
                let raw = &self.text[start..end];
                Ok(serde_json::from_str(raw)
                    .ok()
                    .or_else(|| python_literal(raw))
                    .unwrap_or_else(|| Value::String(raw.to_string())))
            }
            _ => {
                // Up to a comma outside brackets: an unquoted regex `\d{1,3}` is one value.
                let start = self.i;
                let mut depth = 0usize;
                while let Some(c) = self.peek() {
                    match c {
                        b'(' | b'[' | b'{' => depth += 1,
                        b')' | b']' | b'}' => depth = depth.saturating_sub(1),
                        b',' if depth == 0 => break,
                        _ => {}
                    }
                    self.i += 1;
                }
                Ok(bare(self.text[start..self.i].trim()))
            }
        }
    }
}

/// `C:\Users\…` with single backslashes: they separate names, they are not escapes. A path
/// written with its backslashes escaped (`C:\\Users`) is read with its escapes, and so is a
/// string holding an escaped quote (`"a:\""`): no path has a quote in it.
pub(super) fn is_windows_path(body: &str) -> bool {
    let b = body.as_bytes();
    b.len() > 3
        && b[0].is_ascii_alphabetic()
        && b[1] == b':'
        && b[2] == b'\\'
        && !matches!(b[3], b'\\' | b'"' | b'\'')
        && !body.contains("\\\"")
        && !body.contains("\\'")
}

/// How deep a Python literal may nest: deeper text is kept as written.
const MAX_LITERAL_DEPTH: usize = 32;

/// A Python literal as JSON: strings in either quotes (escapes read), `True`/`False`/`None`,
/// numbers, lists, tuples and dicts, trailing commas allowed. `None` when `text` is not one.
pub fn python_literal(text: &str) -> Option<Value> {
    work::add(text.len());
    let mut p = Cursor::new(text);
    let value = p.literal(0)?;
    p.skip(|c| c.is_ascii_whitespace());
    p.done().then_some(value)
}

impl Cursor<'_> {
    /// The end of a string whose first closing quote at `end` is followed by more of a word
    /// (`"grep -rn "TODO" src"`): the model did not escape the quotes inside, and the string
    /// ends at the first later quote that is followed by a comma or the end. `end` when the
    /// string closes where it should, or when no later quote does.
    fn inner_quotes_end(&mut self, start: usize, end: usize) -> usize {
        let b = self.text.as_bytes();
        let q = b[start];
        // A string ends before the end of the arguments or before the next keyword argument:
        // `, "qty": 2` inside a JSON text is not where it ends.
        let ends_here = |i: usize| {
            let after = self.text[i..].trim_start();
            after.is_empty()
                || after.strip_prefix(',').is_some_and(|rest| {
                    let rest = rest.trim_start();
                    let name = rest
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len());
                    rest.is_empty() || name > 0 && rest[name..].trim_start().starts_with('=')
                })
        };
        if self.no_inner_end
            || ends_here(end)
            || !b.get(end).is_some_and(|c| c.is_ascii_alphanumeric())
        {
            return end;
        }
        let mut i = end;
        while let Some(at) = self.text[i..].find(q as char) {
            i += at + 1;
            if ends_here(i) {
                return i;
            }
        }
        work::add(self.text.len() - end);
        self.no_inner_end = true;
        end
    }

    fn literal(&mut self, depth: usize) -> Option<Value> {
        if depth > MAX_LITERAL_DEPTH {
            return None;
        }
        self.blank();
        match self.peek()? {
            b'"' | b'\'' => self.value().ok(),
            open @ (b'[' | b'(') => {
                let close = if open == b'[' { b']' } else { b')' };
                let mut items = Vec::new();
                self.i += 1;
                while !self.closes(close) {
                    items.push(self.literal(depth + 1)?);
                    self.comma_or(close)?;
                }
                Some(Value::Array(items))
            }
            b'{' => {
                let mut map = Map::new();
                self.i += 1;
                while !self.closes(b'}') {
                    let key = match self.literal(depth + 1)? {
                        Value::String(s) => s,
                        Value::Number(n) => n.to_string(),
                        _ => return None,
                    };
                    self.blank();
                    (self.peek()? == b':').then_some(())?;
                    self.i += 1;
                    let value = self.literal(depth + 1)?;
                    // A key written twice: which value was meant is not known.
                    map.insert(key, value).is_none().then_some(())?;
                    self.comma_or(b'}')?;
                }
                Some(Value::Object(map))
            }
            _ => {
                let start = self.i;
                self.skip(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'+' | b'_'));
                match bare(&self.text[start..self.i]) {
                    Value::String(_) => None,
                    value => Some(value),
                }
            }
        }
    }

    /// Whether the next byte (after spaces) is `close`, which is then passed.
    fn closes(&mut self, close: u8) -> bool {
        self.blank();
        let closes = self.peek() == Some(close);
        if closes {
            self.i += 1;
        }
        closes
    }

    /// Passes a comma, or stops before `close`; `None` for anything else.
    fn comma_or(&mut self, close: u8) -> Option<()> {
        self.blank();
        match self.peek()? {
            b',' => {
                self.i += 1;
                Some(())
            }
            c if c == close => Some(()),
            _ => None,
        }
    }
}

/// An unquoted value: a literal or number when it is one, otherwise the text itself.
fn bare(token: &str) -> Value {
    match token {
        "true" | "True" => return Value::Bool(true),
        "false" | "False" => return Value::Bool(false),
        "null" | "None" => return Value::Null,
        _ => {}
    }
    if let Ok(n) = token.parse::<i64>() {
        return Value::Number(n.into());
    }
    token
        .parse::<f64>()
        .ok()
        .filter(|f| f.is_finite() && token.bytes().any(|c| c.is_ascii_digit()))
        .and_then(Number::from_f64)
        .map(Value::Number)
        .unwrap_or_else(|| Value::String(token.to_string()))
}

/// The escapes models mean (`\n \t \r \" \' \\ \/ \uXXXX`); any other (a Windows path's `\d`
/// or `\f`) is kept as written.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(q @ ('"' | '\'' | '\\' | '/')) => out.push(q),
            Some('u') => {
                let hex: String = chars.clone().take(4).collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(ch) if hex.len() == 4 => {
                        out.push(ch);
                        chars.nth(3);
                    }
                    _ => out.push_str("\\u"),
                }
            }
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// One input, not named by the model: `{"input": value}`.
pub fn single_input(value: Value) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("input".into(), value);
    map
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_call_with_more_arguments_than_any_tool_takes_is_refused() {
        let many = vec!["1"; MAX_ARGUMENTS + 1].join(",");
        let refused = parse_args(&many);
        assert!(
            matches!(&refused, Err(why) if why.contains("more than 256 arguments")),
            "{refused:?}"
        );
        let enough = vec!["1"; MAX_ARGUMENTS].join(",");
        assert_eq!(parse_args(&enough).map(|a| a.len()), Ok(MAX_ARGUMENTS));
    }

    use super::*;
    use serde_json::json;

    fn args(s: &str) -> Value {
        Value::Object(parse_args(s).unwrap_or_else(|e| panic!("{s}: {e}")))
    }

    #[test]
    fn keyword_arguments_of_every_type() {
        assert_eq!(
            args(r#"query="auth login", n=2, ratio=0.5, flag=true, off=False, none=None"#),
            json!({"query": "auth login", "n": 2, "ratio": 0.5, "flag": true, "off": false, "none": null})
        );
    }

    #[test]
    fn single_quotes_escapes_and_brackets_inside_strings() {
        assert_eq!(
            args(r#"path='src/a (copy).js', text="say \"hi\"\n", pat='[a-z]+'"#),
            json!({"path": "src/a (copy).js", "text": "say \"hi\"\n", "pat": "[a-z]+"})
        );
    }

    #[test]
    fn triple_quoted_multi_line_strings_are_kept_verbatim() {
        assert_eq!(
            args("path=\"a.py\", content=\"\"\"def f():\n    return \"x\"\n\"\"\""),
            json!({"path": "a.py", "content": "def f():\n    return \"x\"\n"})
        );
    }

    #[test]
    fn json_arrays_objects_positional_and_trailing_commas() {
        assert_eq!(
            args(r#""main.rs", files=["a", "b"], opts={"deep": true},"#),
            json!({"input": "main.rs", "files": ["a", "b"], "opts": {"deep": true}})
        );
    }

    #[test]
    fn windows_paths_keep_their_backslashes() {
        assert_eq!(
            args(r#"path="C:\dir\file.txt""#),
            json!({"path": "C:\\dir\\file.txt"})
        );
        assert_eq!(
            args(r#"path="C:\Users\dev\new\table.py""#),
            json!({"path": "C:\\Users\\dev\\new\\table.py"})
        );
        // An escaped quote after a drive-like start is an escape, not a path.
        assert_eq!(args(r#"a="a:\"""#), json!({"a": "a:\""}));
        assert_eq!(args(r#"a="b:\x\"y""#), json!({"a": "b:\\x\"y"}));
    }

    #[test]
    fn quotes_left_unescaped_inside_a_string_stay_in_it() {
        assert_eq!(
            args(r#"command="grep -rn "TODO" src", n=1"#),
            json!({"command": "grep -rn \"TODO\" src", "n": 1})
        );
        assert_eq!(args(r#"a="x", b="y""#), json!({"a": "x", "b": "y"}));
        assert_eq!(
            args(r#"url="u", body="{"name": "W", "qty": 2}""#),
            json!({"url": "u", "body": "{\"name\": \"W\", \"qty\": 2}"})
        );
        assert!(parse_args(r#"path="a", path="b""#).is_err());
        assert_eq!(python_literal("{'a': 1, 'a': 2}"), None);
    }

    #[test]
    fn python_literals_nested_with_single_quotes() {
        assert_eq!(
            args(r#"opts={'deep': True, 'skip': None, 'globs': ['*.rs', "it's"], 'n': (1, 2),}"#),
            json!({"opts": {"deep": true, "skip": null, "globs": ["*.rs", "it's"], "n": [1, 2]}})
        );
        assert_eq!(
            python_literal(r"{'re': '\d+\.\w'}"),
            Some(json!({"re": "\\d+\\.\\w"}))
        );
        assert_eq!(python_literal("{'a': open('x')}"), None);
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(python_literal(&deep), None);
    }

    #[test]
    fn unquoted_values_keep_their_brackets_and_drive_letters() {
        assert_eq!(
            args(r"\d{1,3}\.\d{1,3}"),
            json!({"input": "\\d{1,3}\\.\\d{1,3}"})
        );
        assert_eq!(
            args(r"C:\Users\dev\app.py"),
            json!({"input": "C:\\Users\\dev\\app.py"})
        );
    }

    #[test]
    fn raw_strings_keep_their_backslashes() {
        assert_eq!(
            args(r#"pattern=r'\d+\.\d+', other=R"a\"b""#),
            json!({"pattern": "\\d+\\.\\d+", "other": "a\\\"b"})
        );
        assert_eq!(args("x=rate"), json!({"x": "rate"}));
    }

    #[test]
    fn unclosed_strings_are_an_error() {
        assert!(parse_args(r#"query="oops"#).is_err());
    }

    #[test]
    fn the_closing_bracket_skips_quoted_parentheses() {
        let text = r#"f(a=")", b=(1)) tail"#;
        assert_eq!(closing_bracket(text, 1), Some(text.len() - 5));
        assert_eq!(closing_bracket("f(a=1", 1), None);
    }

    proptest::proptest! {
        /// The memo changes nothing: from every bracket, in the order `json::find` asks, the
        /// close is the one a scan of its own finds.
        #[test]
        fn the_closer_finds_what_a_scan_of_its_own_finds(text in "[{}()\\[\\]\"'\\\\a\n]{0,80}") {
            let mut closer = Closer::new(&text);
            for (open, b) in text.bytes().enumerate() {
                if matches!(b, b'{' | b'(' | b'[') {
                    proptest::prop_assert_eq!(closer.close(open), closing_bracket(&text, open));
                }
            }
        }
    }

    #[test]
    fn lines_that_open_and_never_close_are_scanned_once() {
        let text = "{ x\n".repeat(10_000);
        let mut closer = Closer::new(&text);
        for open in (0..text.len()).step_by(4) {
            assert_eq!(closer.close(open), None);
        }
        assert!(closer.spent() <= 2 * text.len(), "{}", closer.spent());
    }
}
