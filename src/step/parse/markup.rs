//! Tool-call markup a local server passed through as text, because its chat template or tool
//! parser did not catch it: Hermes/Qwen `<tool_call>{…}</tool_call>`, Qwen3-Coder's
//! `<function=name><parameter=key>…`, Mistral's `[TOOL_CALLS]`, Llama 3.1's `<|python_tag|>`,
//! DeepSeek's `<｜tool▁calls▁begin｜>`, Kimi K2's `<|tool_calls_section_begin|>`, MiniMax's
//! `<minimax:tool_call>`, Nemotron's `<TOOLCALL>`, Olmo 3's `<function_calls>` and Gemma's
//! (`gemma.rs`). Each reader sees only the text of its own block, so a text of many blocks is
//! read in one pass.

use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, MatchKind};
use serde_json::{Map, Value};

use super::args::{closing_bracket, parse_args, python_literal};
use super::decision::{Decision, MAX_CALLS};
use super::{gemma, json, work};

/// Calls found in markup, and where the markup starts.
#[derive(Debug)]
pub struct Markup {
    pub start: usize,
    /// Just past the last closing token of a call (the end of the text when none is written).
    pub end: usize,
    /// The opener found, to say in a warning what was read.
    pub opener: &'static str,
    pub calls: Vec<Decision>,
}

type Reader = fn(&str) -> Vec<Decision>;

/// The openers, each with the reader of the text after it (up to the end of the output).
const OPENERS: [(&str, Reader); 20] = [
    ("<tool_call>", hermes),
    ("<minimax:tool_call>", minimax),
    ("<TOOLCALL>", nemotron),
    ("<start_function_call>", gemma::function_gemma),
    ("<|tool_call>", gemma::gemma_4),
    ("<function_call>", function_call),
    ("<function_calls>", function_calls),
    ("✿FUNCTION✿", qwen_agent),
    ("<|tool_call|>", phi4),
    ("functools[", phi4_mini),
    ("```tool_code", gemma),
    ("<function=", qwen3_coder_from_name),
    ("[TOOL_CALLS]", mistral),
    ("<|python_tag|>", llama),
    ("<｜tool▁calls▁begin｜>", deepseek),
    ("<｜tool▁call▁begin｜>", deepseek),
    ("<|tool▁calls▁begin|>", deepseek),
    ("<|tool▁call▁begin|>", deepseek),
    ("<|tool_calls_section_begin|>", kimi),
    ("<|tool_call_begin|>", kimi),
];

/// The tokens that close a call or a block of calls.
const CLOSERS: [&str; 15] = [
    "</tool_call>",
    "</minimax:tool_call>",
    "</TOOLCALL>",
    "<end_function_call>",
    "<tool_call|>",
    "</function_call>",
    "</function_calls>",
    "</function>",
    "<|tool_call_end|>",
    "<|tool_calls_section_end|>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>",
    "<|tool▁call▁end|>",
    "<|tool▁calls▁end|>",
    "</|tool_call|>",
];

/// The first opener in `text`, the longest of those that start there: where it starts, and
/// which of [`OPENERS`] it is. One pass of an automaton over all of them, built once; sixteen
/// substring searches, each set up anew, cost a step more than reading its output.
fn first_opener(text: &str) -> Option<(usize, usize)> {
    static AUTOMATON: LazyLock<Option<AhoCorasick>> = LazyLock::new(|| {
        AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(OPENERS.iter().map(|(opener, _)| opener))
            .ok()
    });
    work::add(text.len());
    match AUTOMATON.as_ref() {
        Some(automaton) => automaton
            .find(text)
            .map(|m| (m.start(), m.pattern().as_usize())),
        None => OPENERS
            .iter()
            .enumerate()
            .filter_map(|(i, (opener, _))| text.find(opener).map(|at| (at, i)))
            .min_by_key(|&(at, i)| (at, std::cmp::Reverse(OPENERS[i].0.len()))),
    }
}

/// The first markup in `text`, read into its calls (an unreadable call says why).
pub fn find(text: &str) -> Option<Markup> {
    let (start, index) = first_opener(text)?;
    let (opener, reader) = OPENERS[index];
    let body = &text[start + opener.len()..];
    let mut calls = reader(body);
    if calls.is_empty() {
        calls.push(Decision::Unreadable {
            why: format!("the tool-call markup '{opener}' holds no call that can be read"),
            raw_action_string: text[start..].trim().to_string(),
        });
    }
    calls.truncate(MAX_CALLS);
    let end = block_end(text, start);
    Some(Markup {
        start,
        end,
        opener,
        calls,
    })
}

/// Just past the closing token of the block of calls at `start`: the first closer, or the one
/// after the calls that follow it directly (Hermes writes one block per call). The end of the
/// text when no closer is written. Not the last closer anywhere: a closing tag in prose after
/// the block is not part of it.
fn block_end(text: &str, start: usize) -> usize {
    let mut from = start;
    // As many blocks as calls are read, so each search is bounded by as many passes.
    for _ in 0..MAX_CALLS {
        work::add(text.len() - from);
        let Some(end) = CLOSERS
            .iter()
            .filter_map(|c| text[from..].find(c).map(|i| from + i + c.len()))
            .min()
        else {
            return if from == start { text.len() } else { from };
        };
        let mut end = end;
        // Closers of the enclosing blocks (`</function></tool_call>`) belong to it too.
        while let Some(c) = CLOSERS
            .iter()
            .find(|c| text[end..].trim_start().starts_with(**c))
        {
            end = text.len() - text[end..].trim_start().len() + c.len();
        }
        if opener_at(text[end..].trim_start()) != Some(0) {
            return end;
        }
        from = end;
    }
    from
}

/// Whether `text` (a line start or a stretch of a line) holds, or may be the start of, markup.
pub fn opener_at(text: &str) -> Option<usize> {
    first_opener(text).map(|(at, _)| at)
}

/// The longest end of `text` that is the start of an opener, to hold back while streaming.
pub fn opener_prefix_len(text: &str) -> usize {
    super::ending::held_prefix_len(text, OPENERS.iter().map(|(o, _)| *o))
}

/// Text up to the first of `ends` (or all of it), and the text after that end.
fn until<'t>(text: &'t str, ends: &[&str]) -> (&'t str, &'t str) {
    work::add(text.len());
    match ends
        .iter()
        .filter_map(|e| text.find(e).map(|i| (i, e.len())))
        .min()
    {
        Some((i, len)) => (&text[..i], &text[i + len..]),
        None => (text, ""),
    }
}

/// Hermes / Qwen 2.5: `<tool_call>\n{"name": …, "arguments": …}\n</tool_call>`, one per block
/// (the closing tag may be cut by the stop sequence); Qwen3-Coder puts its `<function=…>` form
/// inside the same tags.
fn hermes(body: &str) -> Vec<Decision> {
    let mut calls = Vec::new();
    let mut rest = body;
    while calls.len() < MAX_CALLS {
        let block = rest.trim_start();
        let block = unfence_start(block);
        // A JSON call ends where its object closes: its strings may hold `</tool_call>`.
        let (call, after) = match block.starts_with('{').then(|| closing_bracket(block, 0)) {
            Some(Some(end)) => block.split_at(end),
            _ => until(block, &["</tool_call>", "<tool_call>"]),
        };
        let call = unfence(call.trim());
        if let Some(function) = call.strip_prefix("<function=") {
            calls.extend(qwen3_coder_from_name(function));
        } else if call.contains("<arg_key>") {
            calls.push(glm(call));
        } else if !call.is_empty() || calls.is_empty() {
            calls.push(json_call(call, &format!("<tool_call>{call}</tool_call>")));
        }
        match after.find("<tool_call>") {
            Some(i) => rest = &after[i + "<tool_call>".len()..],
            None => return calls,
        }
    }
    calls
}

/// GLM-4.5: `<tool_call>name\n<arg_key>key</arg_key>\n<arg_value>value</arg_value>…`. Values
/// are text, typed by the declared schema like Qwen3-Coder's.
fn glm(call: &str) -> Decision {
    let (name, pairs) = call.split_once("<arg_key>").unwrap_or((call, ""));
    let mut args = Map::new();
    for pair in format!("<arg_key>{pairs}").split("<arg_key>").skip(1) {
        let (key, rest) = pair.split_once("</arg_key>").unwrap_or((pair, ""));
        let value = rest.split_once("<arg_value>").map_or("", |(_, v)| {
            v.split("</arg_value>").next().unwrap_or_default()
        });
        if args
            .insert(key.trim().to_string(), Value::String(value.to_string()))
            .is_some()
        {
            return unreadable(
                &format!("the call gives '{}' twice", key.trim()),
                format!("<tool_call>{call}</tool_call>"),
            );
        }
    }
    action(name, args, format!("<tool_call>{call}</tool_call>"))
}

/// Qwen3-Coder: `<function=name>\n<parameter=key>\nvalue\n</parameter>\n</function>`. The
/// values are text; the declared schema turns them into numbers or objects where it says so.
fn qwen3_coder_from_name(after_opener: &str) -> Vec<Decision> {
    work::add(after_opener.len());
    after_opener
        .split("<function=")
        .take(MAX_CALLS)
        .map(|function| {
            let function = function.split("</function>").next().unwrap_or_default();
            let (name, body) = function.split_once('>').unwrap_or((function, ""));
            let raw = format!("<function={name}>{body}</function>");
            qwen3_coder_call(name.trim(), body, raw)
        })
        .collect()
}

fn qwen3_coder_call(name: &str, body: &str, raw: String) -> Decision {
    // Llama 3.1's own form: `<function=name>{"arg": …}</function>`.
    if body.trim_start().starts_with('{') {
        return args_call(name, body.trim(), raw);
    }
    let mut args = Map::new();
    for parameter in body.split("<parameter=").skip(1) {
        let parameter = parameter.split("</parameter>").next().unwrap_or_default();
        let (key, value) = parameter.split_once('>').unwrap_or((parameter, ""));
        let value = value.strip_prefix('\n').unwrap_or(value);
        let value = value.strip_suffix('\n').unwrap_or(value);
        if args
            .insert(key.trim().to_string(), Value::String(value.to_string()))
            .is_some()
        {
            return unreadable(&format!("the call gives '{}' twice", key.trim()), raw);
        }
    }
    action(name, args, raw)
}

/// `<function_call>{"name": …, "arguments": …}</function_call>`, as some fine-tunes write it.
fn function_call(body: &str) -> Vec<Decision> {
    let inner = body.split("</function_call>").next().unwrap_or_default();
    json_calls(inner, "<function_call>")
}

/// `<function_calls>`: Anthropic's legacy XML, passed through by proxies (`<invoke name="x">
/// <parameter name="k">v</parameter></invoke>`), or Olmo 3's calls written as Python, one per
/// line (`code_search(query="login")`).
fn function_calls(body: &str) -> Vec<Decision> {
    let body = body.split("</function_calls>").next().unwrap_or_default();
    if body.trim_start().starts_with('<') {
        return invokes(body);
    }
    super::pythonic::calls_in(body.trim()).unwrap_or_default()
}

/// MiniMax-M2: `<minimax:tool_call>` around the same `<invoke>` XML, each a call.
fn minimax(body: &str) -> Vec<Decision> {
    let body = body
        .split("</minimax:tool_call>")
        .next()
        .unwrap_or_default();
    invokes(body)
}

/// `<invoke name="x"><parameter name="k">v</parameter></invoke>`, repeated. Values are text,
/// typed by the declared schema; the line breaks MiniMax writes around one are not part of it.
fn invokes(body: &str) -> Vec<Decision> {
    body.split("<invoke name=\"")
        .skip(1)
        .take(MAX_CALLS)
        .map(|invoke| {
            let invoke = invoke.split("</invoke>").next().unwrap_or_default();
            let raw = format!("<invoke name=\"{invoke}</invoke>");
            let Some((name, params)) = invoke.split_once("\">") else {
                return unreadable("an <invoke> has no name", raw);
            };
            let mut args = Map::new();
            for param in params.split("<parameter name=\"").skip(1) {
                let param = param.split("</parameter>").next().unwrap_or_default();
                let (key, value) = param.split_once("\">").unwrap_or((param, ""));
                let value = value.strip_prefix('\n').unwrap_or(value);
                let value = value.strip_suffix('\n').unwrap_or(value);
                if args
                    .insert(key.to_string(), Value::String(value.to_string()))
                    .is_some()
                {
                    return unreadable(&format!("the call gives '{key}' twice"), raw);
                }
            }
            action(name, args, raw)
        })
        .collect()
}

/// NVIDIA Nemotron: `<TOOLCALL>[{"name": …, "arguments": …}]</TOOLCALL>`.
fn nemotron(body: &str) -> Vec<Decision> {
    let inner = body.split("</TOOLCALL>").next().unwrap_or_default();
    json_calls(inner, "<TOOLCALL>")
}

/// Qwen-Agent's own template: `✿FUNCTION✿: name` then `✿ARGS✿: {…}`.
fn qwen_agent(body: &str) -> Vec<Decision> {
    let body = body.trim_start().trim_start_matches(':');
    let (name, rest) = body.split_once("✿ARGS✿").unwrap_or((body, ""));
    let args = rest.trim_start().trim_start_matches(':').trim();
    let args = args.split("✿RESULT✿").next().unwrap_or_default().trim();
    let raw = format!("✿FUNCTION✿: {}", body.trim());
    let end = if args.starts_with('{') {
        closing_bracket(args, 0).unwrap_or(args.len())
    } else {
        args.len()
    };
    vec![args_call(name.trim(), &args[..end], raw)]
}

/// Phi-4: `<|tool_call|>{"name": …, "arguments": …}</|tool_call|>`.
fn phi4(body: &str) -> Vec<Decision> {
    json_calls(body, "<|tool_call|>")
}

/// Phi-4-mini: `functools[{"name": …, "arguments": …}, …]`.
fn phi4_mini(body: &str) -> Vec<Decision> {
    json_calls(&format!("[{body}"), "functools")
}

/// Gemma: calls written as Python in a ```tool_code fence.
fn gemma(body: &str) -> Vec<Decision> {
    let code = body.split_once('\n').map_or("", |(_, code)| code);
    let code = code.split("```").next().unwrap_or_default();
    super::pythonic::calls_in(code.trim()).unwrap_or_default()
}

/// Mistral: `[TOOL_CALLS][{"name": …, "arguments": …}, …]`, or (tokenizer v11 and later)
/// `[TOOL_CALLS]name[ARGS]{…}` or `[TOOL_CALLS]name[CALL_ID]id[ARGS]{…}`, repeated for each call.
fn mistral(body: &str) -> Vec<Decision> {
    let body = body.trim_start();
    if body.starts_with('[') || body.starts_with('{') {
        return json_calls(body, "[TOOL_CALLS]");
    }
    body.split("[TOOL_CALLS]")
        .take(MAX_CALLS)
        .map(|call| {
            let raw = format!("[TOOL_CALLS]{}", call.trim_end());
            match call.split_once("[ARGS]") {
                // Tokenizer v11 may write the call's id between its name and its arguments.
                Some((name, args)) => {
                    let name = name.split_once("[CALL_ID]").map_or(name, |(name, _)| name);
                    args_call(name.trim(), args.trim(), raw)
                }
                None => unreadable("a [TOOL_CALLS] call has no [ARGS]", raw),
            }
        })
        .collect()
}

/// Llama 3.1: `<|python_tag|>{"name": …, "parameters": …}` (several joined by `;`), or a
/// built-in tool's `brave_search.call(query="…")`.
fn llama(body: &str) -> Vec<Decision> {
    let body = body.trim();
    if body.starts_with('{') || body.starts_with('[') {
        return json_calls(body, "<|python_tag|>");
    }
    let raw = format!("<|python_tag|>{body}");
    let Some(open) = body.find('(') else {
        return vec![unreadable("the <|python_tag|> holds no call", raw)];
    };
    let name = body[..open].trim().trim_end_matches(".call");
    match closing_bracket(body, open).map(|close| parse_args(&body[open + 1..close - 1])) {
        Some(Ok(args)) => vec![action(name, args, raw)],
        Some(Err(why)) => vec![unreadable(&why, raw)],
        None => vec![unreadable("the call's parenthesis is not closed", raw)],
    }
}

/// DeepSeek V3: `<｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json\n{…}\n```<｜tool▁call▁end｜>`;
/// V3.1 drops the type: `<｜tool▁call▁begin｜>name<｜tool▁sep｜>{…}<｜tool▁call▁end｜>`.
fn deepseek(body: &str) -> Vec<Decision> {
    const BEGIN: [&str; 2] = ["<｜tool▁call▁begin｜>", "<|tool▁call▁begin|>"];
    const SEP: [&str; 2] = ["<｜tool▁sep｜>", "<|tool▁sep|>"];
    const END: [&str; 4] = [
        "<｜tool▁call▁end｜>",
        "<|tool▁call▁end|>",
        "<｜tool▁calls▁end｜>",
        "<|tool▁calls▁end|>",
    ];
    let mut calls = Vec::new();
    let mut rest = body;
    while calls.len() < MAX_CALLS {
        let (call, after) = until(rest, &END);
        let call = BEGIN
            .iter()
            .find_map(|b| call.trim_start().strip_prefix(b))
            .unwrap_or(call);
        if call.trim().is_empty() {
            break;
        }
        let raw = call.trim().to_string();
        let Some((head, tail)) = SEP.iter().find_map(|s| call.split_once(s)) else {
            calls.push(unreadable("a DeepSeek tool call has no separator", raw));
            break;
        };
        let (name, args) = if head.trim() == "function" {
            let (name, args) = tail.split_once('\n').unwrap_or((tail, ""));
            (name.trim(), unfence(args.trim()))
        } else {
            (head.trim(), unfence(tail.trim()))
        };
        calls.push(args_call(name, args, raw));
        rest = after;
    }
    calls
}

/// Kimi K2: `<|tool_call_begin|>functions.name:0<|tool_call_argument_begin|>{…}<|tool_call_end|>`.
fn kimi(body: &str) -> Vec<Decision> {
    let mut calls = Vec::new();
    let mut rest = body;
    while calls.len() < MAX_CALLS {
        let (call, after) = until(rest, &["<|tool_call_end|>", "<|tool_calls_section_end|>"]);
        let call = call.trim_start();
        let call = call.strip_prefix("<|tool_call_begin|>").unwrap_or(call);
        if call.trim().is_empty() {
            break;
        }
        let raw = call.trim().to_string();
        let Some((id, args)) = call.split_once("<|tool_call_argument_begin|>") else {
            calls.push(unreadable("a Kimi tool call has no arguments", raw));
            break;
        };
        // `functions.read_file:0`: the name between the namespace and the call's index.
        let id = id.trim();
        let name = id.rsplit_once(':').map_or(id, |(name, _)| name);
        calls.push(args_call(name, args.trim(), raw));
        rest = after;
    }
    calls
}

/// A JSON array of calls or one call object (several objects may follow each other, joined by
/// `;` or `,`), each `{"name": …, "arguments"|"parameters": …}`.
fn json_calls(body: &str, opener: &str) -> Vec<Decision> {
    let body = body.trim();
    let Some(end) = closing_bracket(body, 0) else {
        return vec![unreadable(
            "the call's JSON is not closed",
            format!("{opener}{body}"),
        )];
    };
    match serde_json::from_str::<Value>(&body[..end]) {
        Ok(Value::Array(items)) => items
            .iter()
            .take(MAX_CALLS)
            .map(|item| object_call(item, format!("{opener}{item}")))
            .collect(),
        Ok(object @ Value::Object(_)) => {
            let mut calls = vec![object_call(&object, format!("{opener}{}", &body[..end]))];
            let next = body[end..].trim_start_matches([';', ',', ' ', '\n']);
            if next.starts_with('{') && calls.len() < MAX_CALLS {
                calls.extend(json_calls(next, opener));
            }
            calls
        }
        _ => vec![unreadable(
            "the call's JSON is not valid",
            format!("{opener}{body}"),
        )],
    }
}

/// The first JSON object of `inner`; prose after it is not part of the call.
fn json_call(inner: &str, raw: &str) -> Decision {
    let object = match inner
        .starts_with('{')
        .then(|| closing_bracket(inner, 0))
        .flatten()
    {
        Some(end) => &inner[..end],
        None => inner,
    };
    // Small models write the object as a Python dict (`'name'`, `True`).
    match serde_json::from_str::<Value>(object)
        .ok()
        .or_else(|| python_literal(object))
    {
        Some(value) => object_call(&value, raw.trim().to_string()),
        None => unreadable("the call's JSON is not valid", raw.trim().to_string()),
    }
}

fn object_call(value: &Value, raw: String) -> Decision {
    let read = value.as_object().and_then(|o| json::read(o, &raw));
    match read {
        Some((
            _,
            Decision::Action {
                tool_name,
                tool_args,
                ..
            },
        )) => action(&tool_name, tool_args, raw),
        Some((_, decision)) => decision,
        None => unreadable("the call names no tool", raw),
    }
}

/// A call whose arguments are a JSON object (or nothing).
fn args_call(name: &str, args: &str, raw: String) -> Decision {
    if args.is_empty() {
        return action(name, Map::new(), raw);
    }
    if let Some(key) = json::duplicate_key(args) {
        return unreadable(&format!("the call gives '{key}' twice"), raw);
    }
    match serde_json::from_str::<Value>(args) {
        Ok(Value::Object(map)) => action(name, map, raw),
        _ => unreadable("the call's arguments are not a JSON object", raw),
    }
}

fn action(name: &str, tool_args: Map<String, Value>, raw: String) -> Decision {
    let name = name.trim();
    let name = name.strip_prefix("functions.").unwrap_or(name);
    if name.is_empty() {
        return unreadable("the call names no tool", raw);
    }
    Decision::Action {
        tool_name: name.to_string(),
        tool_args,
        raw_action_string: raw,
    }
}

fn unreadable(why: &str, raw: String) -> Decision {
    Decision::Unreadable {
        why: why.to_string(),
        raw_action_string: raw,
    }
}

/// `text` past a fence line that opens it (```json), if one does.
fn unfence_start(text: &str) -> &str {
    match text.strip_prefix("```") {
        Some(rest) => rest
            .split_once('\n')
            .map_or(text, |(_, body)| body.trim_start()),
        None => text,
    }
}

/// The inside of a ```json fence around `text`, or `text`.
fn unfence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let body = rest.split_once('\n').map_or("", |(_, body)| body);
    body.trim_end().strip_suffix("```").unwrap_or(body).trim()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::Strategy as _;
    use serde_json::json;

    proptest::proptest! {
        /// The automaton finds what searching for each opener and taking the leftmost (the
        /// longest of those starting there) finds: texts of openers, their halves and overlaps
        /// (`<function=` inside `<function_call>`'s neighbours, `<|tool_call|>` and
        /// `<|tool_call_begin|>`), and filler.
        #[test]
        fn the_first_opener_is_the_leftmost_longest(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    (0..OPENERS.len()).prop_map(|i| OPENERS[i].0.to_string()),
                    (0..OPENERS.len(), 1usize..6).prop_map(|(i, cut)| {
                        let o = OPENERS[i].0;
                        o.chars().take(o.chars().count().saturating_sub(cut)).collect()
                    }),
                    proptest::sample::select(vec!["x", " ", "<", "|", "_", "function", "tool", "\n"])
                        .prop_map(str::to_string),
                ],
                0..12,
            )
        ) {
            let text = parts.concat();
            let naive = OPENERS
                .iter()
                .enumerate()
                .filter_map(|(i, (opener, _))| text.find(opener).map(|at| (at, i)))
                .min_by_key(|&(at, i)| (at, std::cmp::Reverse(OPENERS[i].0.len())));
            proptest::prop_assert_eq!(first_opener(&text), naive);
        }
    }

    fn calls(text: &str) -> Vec<(String, Value)> {
        crate::step::parse::as_calls(
            find(text)
                .unwrap_or_else(|| panic!("no markup in {text:?}"))
                .calls,
        )
    }

    fn one(name: &str, args: Value) -> Vec<(String, Value)> {
        vec![(name.to_string(), args)]
    }

    #[test]
    fn hermes_blocks_one_or_several() {
        assert_eq!(
            calls("<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.py\"}}\n</tool_call>"),
            one("read_file", json!({"path": "a.py"}))
        );
        let two = calls("<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": 1}}\n</tool_call>");
        assert_eq!(two.len(), 2);
        assert_eq!(two[1], ("b".to_string(), json!({"x": 1})));
        // The closing tag cut by the stop sequence.
        assert_eq!(
            calls("<tool_call>\n{\"name\": \"a\", \"arguments\": {\"q\": \"x\"}}"),
            one("a", json!({"q": "x"}))
        );
    }

    #[test]
    fn qwen3_coder_parameters_are_text() {
        let text = "<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/a.py\n</parameter>\n<parameter=content>\ndef f():\n    return 1\n\n</parameter>\n</function>\n</tool_call>";
        assert_eq!(
            calls(text),
            one(
                "write_file",
                json!({"path": "src/a.py", "content": "def f():\n    return 1\n"})
            )
        );
        assert_eq!(
            calls("<function=grep>\n<parameter=limit>\n5\n</parameter>\n</function>"),
            one("grep", json!({"limit": "5"}))
        );
    }

    #[test]
    fn mistral_both_forms() {
        assert_eq!(
            calls("[TOOL_CALLS][{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}, {\"name\": \"b\", \"arguments\": {}}]").len(),
            2
        );
        assert_eq!(
            calls("[TOOL_CALLS]read_file[ARGS]{\"path\": \"a\"}"),
            one("read_file", json!({"path": "a"}))
        );
        assert_eq!(
            calls("[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[ARGS]{\"x\": 2}")[1],
            ("b".to_string(), json!({"x": 2}))
        );
    }

    #[test]
    fn llama_python_tag_json_or_builtin_call() {
        assert_eq!(
            calls("<|python_tag|>{\"name\": \"code_search\", \"parameters\": {\"query\": \"x\"}}<|eom_id|>"),
            one("code_search", json!({"query": "x"}))
        );
        assert_eq!(
            calls("<|python_tag|>brave_search.call(query=\"rust\")"),
            one("brave_search", json!({"query": "rust"}))
        );
    }

    #[test]
    fn deepseek_v3_and_v3_1() {
        assert_eq!(
            calls("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>read_file\n```json\n{\"path\": \"a\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
            one("read_file", json!({"path": "a"}))
        );
        assert_eq!(
            calls("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>read_file<｜tool▁sep｜>{\"path\": \"b\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>ls<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
            vec![("read_file".to_string(), json!({"path": "b"})), ("ls".to_string(), json!({}))]
        );
    }

    #[test]
    fn kimi_k2_sections() {
        assert_eq!(
            calls("<|tool_calls_section_begin|><|tool_call_begin|>functions.read_file:0<|tool_call_argument_begin|>{\"path\": \"a\"}<|tool_call_end|><|tool_calls_section_end|>"),
            one("read_file", json!({"path": "a"}))
        );
    }

    #[test]
    fn minimax_nemotron_olmo_and_mistral_v11_ids() {
        let minimax = "<minimax:tool_call>\n<invoke name=\"code_search\">\n<parameter name=\"query\">login</parameter>\n</invoke>\n<invoke name=\"read_file\">\n<parameter name=\"path\">\na.py\n</parameter>\n</invoke>\n</minimax:tool_call>";
        assert_eq!(
            calls(minimax),
            vec![
                ("code_search".to_string(), json!({"query": "login"})),
                ("read_file".to_string(), json!({"path": "a.py"}))
            ]
        );
        assert_eq!(
            calls("<TOOLCALL>[{\"name\":\"code_search\",\"arguments\":{\"query\":\"login\"}}]</TOOLCALL>"),
            one("code_search", json!({"query": "login"}))
        );
        assert_eq!(
            calls("[TOOL_CALLS]code_search[CALL_ID]a1B2c3D4e[ARGS]{\"query\":\"login\"}"),
            one("code_search", json!({"query": "login"}))
        );
        assert_eq!(
            calls("<function_calls>\ncode_search(query=\"login\", limit=null)\nread_file(path='a.py')\n</function_calls>"),
            vec![
                ("code_search".to_string(), json!({"query": "login", "limit": null})),
                ("read_file".to_string(), json!({"path": "a.py"}))
            ]
        );
        // Anthropic's XML under the same tag is still read as such.
        assert_eq!(
            calls("<function_calls><invoke name=\"ls\"><parameter name=\"path\">src</parameter></invoke></function_calls>"),
            one("ls", json!({"path": "src"}))
        );
    }

    #[test]
    fn broken_markup_is_unreadable_not_a_guess() {
        for text in [
            "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"q\": \n</tool_call>",
            "<tool_call></tool_call>",
            "[TOOL_CALLS]read_file{\"path\": 1}",
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.a:0<|tool_call_end|>",
            "<minimax:tool_call>\n<invoke>\n</invoke>\n</minimax:tool_call>",
            "<TOOLCALL>[{\"name\": \"a\", \"arguments\": {\"q\": }]</TOOLCALL>",
            "<TOOLCALL>[{\"name\": \"a\"",
            "[TOOL_CALLS][CALL_ID]a1B2c3D4e[ARGS]{}",
            "[TOOL_CALLS]a[CALL_ID]a1B2c3D4e[ARGS]{\"q\": ",
            "<function_calls>I will search for login.</function_calls>",
            "<function_calls>code_search(query=\"login\"</function_calls>",
            "<start_function_call>call:code_search{query:<escape>login}<end_function_call>",
            "<|tool_call>call:code_search{query:login}<tool_call|>",
        ] {
            let markup = find(text).unwrap_or_else(|| panic!("{text}"));
            assert!(
                matches!(markup.calls[0], Decision::Unreadable { .. }),
                "{text}: {:?}",
                markup.calls
            );
        }
    }

    #[test]
    fn the_held_back_tail_is_the_start_of_an_opener() {
        assert_eq!(opener_prefix_len("I'll look <tool_"), "<tool_".len());
        assert_eq!(opener_prefix_len("text [TOOL"), "[TOOL".len());
        assert_eq!(opener_prefix_len("plain text"), 0);
        assert_eq!(opener_at("a <tool_call> b"), Some(2));
    }
}
