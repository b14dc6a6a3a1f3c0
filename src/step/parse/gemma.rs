//! Gemma's own call syntax, as FunctionGemma (`<start_function_call>`) and Gemma 4
//! (`<|tool_call>`) write it when a server passes it through as text: `call:name{key:value,…}`,
//! with bare keys, strings between a delimiter token (`<escape>`, `<|"|>`) so that they may hold
//! any character, and other values written as JSON writes them (numbers, `true`, `null`, lists,
//! nested objects). Calls follow each other with no separator but their own tokens.

use serde_json::{Map, Number, Value};

use super::decision::{Decision, MAX_CALLS};
use super::work;

/// One Gemma dialect: the tokens around a call and around a string.
struct Dialect {
    open: &'static str,
    close: &'static str,
    quote: &'static str,
}

const FUNCTION_GEMMA: Dialect = Dialect {
    open: "<start_function_call>",
    close: "<end_function_call>",
    quote: "<escape>",
};

const GEMMA_4: Dialect = Dialect {
    open: "<|tool_call>",
    close: "<tool_call|>",
    quote: "<|\"|>",
};

/// Deeper values than any tool takes are refused before they can exhaust the stack.
const MAX_DEPTH: usize = 64;

/// FunctionGemma: `<start_function_call>call:name{key:<escape>text<escape>}<end_function_call>`.
pub fn function_gemma(after_opener: &str) -> Vec<Decision> {
    calls(after_opener, &FUNCTION_GEMMA)
}

/// Gemma 4: `<|tool_call>call:name{key:<|"|>text<|"|>,n:42}<tool_call|>`.
pub fn gemma_4(after_opener: &str) -> Vec<Decision> {
    calls(after_opener, &GEMMA_4)
}

/// The calls of a block, the first one's opener already read: each `call:name{…}`, its closing
/// token, and the next call's opener, until something else follows.
fn calls(after_opener: &str, dialect: &Dialect) -> Vec<Decision> {
    work::add(after_opener.len());
    let mut out = Vec::new();
    let mut rest = after_opener;
    while out.len() < MAX_CALLS {
        let (decision, after) = call(rest.trim_start(), dialect);
        let cut = matches!(decision, Decision::Unreadable { .. });
        out.push(decision);
        let after = after.trim_start();
        let after = after
            .strip_prefix(dialect.close)
            .unwrap_or(after)
            .trim_start();
        match after.strip_prefix(dialect.open) {
            Some(next) if !cut => rest = next,
            _ => break,
        }
    }
    out
}

/// One `call:name{…}` at the start of `text`, and the text after it.
fn call<'t>(text: &'t str, dialect: &Dialect) -> (Decision, &'t str) {
    let unreadable = |why: &str, raw: &str| Decision::Unreadable {
        why: format!("a Gemma call {why}"),
        raw_action_string: format!("{}{}", dialect.open, raw.trim()),
    };
    let Some(body) = text.strip_prefix("call:") else {
        return (unreadable("does not start with 'call:'", text), "");
    };
    let Some(brace) = body.find('{') else {
        return (unreadable("has no arguments", text), "");
    };
    let name = body[..brace].trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return (unreadable("names no tool", text), "");
    }
    let mut reader = Reader {
        text: body,
        at: brace,
        quote: dialect.quote,
    };
    match reader.object(0) {
        Ok(args) => {
            let end = "call:".len() + reader.at;
            let decision = Decision::Action {
                tool_name: name.to_string(),
                tool_args: args,
                raw_action_string: format!("{}{}", dialect.open, &text[..end]),
            };
            (decision, &text[end..])
        }
        Err(why) => (unreadable(&why, text), ""),
    }
}

/// A cursor over a call's arguments; it only moves forward, so reading is linear.
struct Reader<'t> {
    text: &'t str,
    at: usize,
    quote: &'static str,
}

impl Reader<'_> {
    fn skip_space(&mut self) {
        let rest = &self.text[self.at..];
        self.at += rest.len() - rest.trim_start().len();
    }

    fn rest(&self) -> &str {
        &self.text[self.at..]
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        let found = self.rest().starts_with(token);
        if found {
            self.at += token.len();
        }
        found
    }

    /// `{key:value,…}`, the cursor at its `{`.
    fn object(&mut self, depth: usize) -> Result<Map<String, Value>, String> {
        if depth >= MAX_DEPTH {
            return Err(format!(
                "nests its arguments deeper than {MAX_DEPTH} levels"
            ));
        }
        self.eat("{");
        let mut map = Map::new();
        while !self.eat("}") {
            let key = match self.eat(self.quote) {
                true => self.string()?,
                false => self.bare_key()?,
            };
            let value = self.value(depth)?;
            if map.insert(key.clone(), value).is_some() {
                return Err(format!("gives '{key}' twice"));
            }
            if !self.eat(",") && !self.rest().trim_start().starts_with('}') {
                return Err("has arguments that are not closed".into());
            }
        }
        Ok(map)
    }

    /// A key up to its colon, which is read too.
    fn bare_key(&mut self) -> Result<String, String> {
        let rest = self.rest();
        let end = rest
            .find([':', ',', '}', '{'])
            .filter(|&i| rest[i..].starts_with(':'));
        let Some(end) = end else {
            return Err("has an argument with no 'key:'".into());
        };
        let key = rest[..end].trim().to_string();
        self.at += end + 1;
        match key.is_empty() {
            true => Err("has an argument with no name".into()),
            false => Ok(key),
        }
    }

    /// The text up to the closing delimiter (read too); a quoted key's colon after it as well.
    fn string(&mut self) -> Result<String, String> {
        let Some(end) = self.rest().find(self.quote) else {
            return Err("has a string that is not closed".into());
        };
        let text = self.rest()[..end].to_string();
        self.at += end + self.quote.len();
        self.eat(":");
        Ok(text)
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        self.skip_space();
        if self.eat(self.quote) {
            let Some(end) = self.rest().find(self.quote) else {
                return Err("has a string that is not closed".into());
            };
            let text = self.rest()[..end].to_string();
            self.at += end + self.quote.len();
            return Ok(Value::String(text));
        }
        match self.rest().as_bytes().first() {
            Some(b'{') => self.object(depth + 1).map(Value::Object),
            Some(b'[') => self.list(depth + 1),
            _ => self.scalar(),
        }
    }

    /// `[value,…]`, the cursor at its `[`.
    fn list(&mut self, depth: usize) -> Result<Value, String> {
        if depth >= MAX_DEPTH {
            return Err(format!(
                "nests its arguments deeper than {MAX_DEPTH} levels"
            ));
        }
        self.eat("[");
        let mut items = Vec::new();
        while !self.eat("]") {
            items.push(self.value(depth)?);
            if !self.eat(",") && !self.rest().trim_start().starts_with(']') {
                return Err("has a list that is not closed".into());
            }
        }
        Ok(Value::Array(items))
    }

    /// A number, `true`, `false` or `null`, up to the next `,`, `}` or `]`.
    fn scalar(&mut self) -> Result<Value, String> {
        let rest = self.rest();
        let end = rest.find([',', '}', ']']).unwrap_or(rest.len());
        let word = rest[..end].trim();
        let value = match word {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            "null" => Value::Null,
            _ => match word.parse::<i64>() {
                Ok(n) => Value::from(n),
                Err(_) => match word.parse::<f64>().ok().and_then(Number::from_f64) {
                    Some(n) => Value::Number(n),
                    None => {
                        return Err(format!("has a value that is no string or number: {word:?}"))
                    }
                },
            },
        };
        self.at += end;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(decisions: Vec<Decision>) -> Vec<Result<(String, Value), String>> {
        decisions
            .into_iter()
            .map(|d| match d {
                Decision::Action {
                    tool_name,
                    tool_args,
                    ..
                } => Ok((tool_name, Value::Object(tool_args))),
                Decision::Unreadable { why, .. } => Err(why),
                Decision::Answer(a) => Err(format!("an answer: {a}")),
            })
            .collect()
    }

    fn one(name: &str, args: Value) -> Vec<Result<(String, Value), String>> {
        vec![Ok((name.to_string(), args))]
    }

    #[test]
    fn function_gemma_and_gemma_4_calls_are_read() {
        assert_eq!(
            read(function_gemma(
                "call:code_search{query:<escape>login, {x}<escape>}<end_function_call>"
            )),
            one("code_search", json!({"query": "login, {x}"}))
        );
        assert_eq!(
            read(gemma_4(
                "call:grep_search{pattern:<|\"|>a|b<|\"|>,max_results:5,case_sensitive:false}<tool_call|>"
            )),
            one(
                "grep_search",
                json!({"pattern": "a|b", "max_results": 5, "case_sensitive": false})
            )
        );
        let nested = read(gemma_4(
            "call:set{opts:{tabs:[1,2.5,null]},name:<|\"|>x<|\"|>}<tool_call|><|tool_call>call:ls{}<tool_call|>",
        ));
        assert_eq!(
            nested,
            vec![
                Ok((
                    "set".to_string(),
                    json!({"opts": {"tabs": [1, 2.5, null]}, "name": "x"})
                )),
                Ok(("ls".to_string(), json!({}))),
            ]
        );
    }

    #[test]
    fn broken_gemma_calls_are_unreadable() {
        for body in [
            "call:code_search{query:<escape>login}<end_function_call>",
            "call:code_search{query login}",
            "call:code_search{query:<escape>a<escape>",
            "call:{query:<escape>a<escape>}",
            "code_search{query:<escape>a<escape>}",
            "call:code_search{query:login}",
            "call:f{a:<escape>1<escape>,a:<escape>2<escape>}",
        ] {
            let got = read(function_gemma(body));
            assert!(got.iter().all(Result::is_err), "{body}: {got:?}");
        }
        let deep = format!("call:f{{a:{}1{}}}", "[".repeat(200), "]".repeat(200));
        assert!(read(gemma_4(&deep))[0]
            .as_ref()
            .is_err_and(|why| why.contains("deeper")));
    }
}
