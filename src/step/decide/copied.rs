//! An action or answer that copies the prompt instead of using it: the answer format's
//! placeholders, a tool's signature from the tool list. Each would run or return something the
//! model never meant, so it is refused with the reason, even when no tool is known by name.

use serde_json::{Map, Value};

use crate::step::context::prompt::{ARGUMENT_PLACEHOLDER, TOOL_PLACEHOLDER, VALUE_PLACEHOLDER};
use crate::step::tools::{type_name_of, Catalog};

/// Why an action is a copy of the prompt rather than a call, if it is: the format example's
/// placeholders (today's, or the `tool_name(param="value", other_param=2)` small models still
/// reproduce from older prompts) or a tool's signature from the tool list. Either would run
/// something the model never meant, so it is refused even when no tool is known by name.
pub(super) fn copied(
    tool: &str,
    args: &Map<String, Value>,
    raw: &str,
    catalog: &Catalog,
) -> Result<(), String> {
    if let Some(why) = placeholder(tool, args, catalog) {
        return Err(why);
    }
    if signature_in(raw) {
        return Err(signature_reason(tool));
    }
    Ok(())
}

/// Names of the format example, old and new, that are placeholders unless the request
/// declares them.
const EXAMPLE_TOOLS: [&str; 2] = ["tool_name", TOOL_PLACEHOLDER];
const EXAMPLE_ARGUMENTS: [&str; 3] = ["param", "other_param", ARGUMENT_PLACEHOLDER];

/// Why the action repeats the format example's placeholders, if it does.
fn placeholder(tool: &str, args: &Map<String, Value>, catalog: &Catalog) -> Option<String> {
    let example = "the answer format's placeholder";
    if EXAMPLE_TOOLS.contains(&tool) && !catalog.has(tool) {
        return Some(format!(
            "'{tool}' is {example}, not a tool: call one of the tools listed under Tools"
        ));
    }
    if let Some(key) = args
        .keys()
        .find(|k| EXAMPLE_ARGUMENTS.contains(&k.as_str()) && !catalog.declares(tool, k))
    {
        return Some(format!(
            "'{key}' is {example}, not an argument of '{tool}': write only the tool's own arguments"
        ));
    }
    // The example's `<value>` in any case, alone or in a longer value (`<value>/src/app.py`),
    // unless its closing tag is there too (a search for the markup, `<value>.*</value>`).
    if let Some((key, _)) = args.iter().find(|(_, v)| {
        v.as_str().is_some_and(|v| {
            let v = v.to_lowercase();
            v.contains(VALUE_PLACEHOLDER) && !v.contains("</value>")
        })
    }) {
        return Some(format!(
            "the value of '{key}' is {example} '{VALUE_PLACEHOLDER}': write the real value"
        ));
    }
    // `read_file(path="<path>")`: the argument's own name in angle brackets, the example's
    // shape with the name put in.
    let (key, value) = args.iter().find(|(k, v)| {
        v.as_str()
            .and_then(|v| v.strip_prefix('<')?.strip_suffix('>'))
            .is_some_and(|name| {
                name == k.as_str()
                    || k.as_str() == "input" && catalog.declares(tool, name)
                    || describes(name, k)
            })
    })?;
    Some(format!(
        "the value of '{key}' is a placeholder, {value}: write the real value"
    ))
}

/// Whether the words in angle brackets describe the argument `key` rather than being a value
/// of it: words only (letters, digits, spaces, `_`, `-`), more than one of them or the key's
/// own words among them (`<file path>`, `<file_path>`, `<your search query>` for `query`). One
/// word unrelated to the key (`<title>`, `<body>`) is markup a search may look for.
fn describes(inner: &str, key: &str) -> bool {
    const WORDS: [&str; 4] = ["your", "value", "argument", "here"];
    let plain = !inner.is_empty()
        && inner
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, ' ' | '_' | '-'));
    if !plain {
        return false;
    }
    let lower = inner.to_lowercase();
    let words: Vec<&str> = lower
        .split([' ', '_', '-'])
        .filter(|w| !w.is_empty())
        .collect();
    let key = key.to_lowercase();
    let key_words: Vec<&str> = key.split('_').filter(|w| !w.is_empty()).collect();
    words
        .iter()
        .any(|w| WORDS.contains(w) || key_words.contains(w))
        && (words.len() > 1 || inner.contains(' '))
}

pub(super) fn signature_reason(tool: &str) -> String {
    format!(
        "this is the signature of '{tool}' copied from the tool list, not a call: write each \
argument's value, not its type"
    )
}

/// Whether the call's argument list is a signature: some argument written `name: type` or
/// `name?: type` with an unquoted JSON Schema or Python type name (`path: string`,
/// `limit?: integer`, `items: list[str]`, `x: int = 0`).
fn signature_in(raw: &str) -> bool {
    let Some(open) = raw.find('(') else {
        return false;
    };
    let inner = &raw[open + 1..];
    let inner = &inner[..inner.find(')').unwrap_or(inner.len())];
    inner.split(',').any(|piece| {
        let Some((name, ty)) = piece.split_once(':') else {
            return false;
        };
        let name = name.trim().trim_end_matches('?');
        let ty = ty.trim_start();
        let word_len = ty
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(ty.len());
        let (word, after) = (&ty[..word_len], ty[word_len..].trim_start());
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && (type_name_of(word).is_some() || is_generic(word) && after.starts_with('['))
            && after
                .chars()
                .next()
                .is_none_or(|c| matches!(c, '[' | '|' | '=' | '<'))
    })
}

/// Python's `typing` generics, a type only when followed by `[` (`Optional[str]`).
fn is_generic(word: &str) -> bool {
    matches!(
        word,
        "Optional" | "Union" | "List" | "Dict" | "Tuple" | "Sequence" | "Literal"
    )
}

/// Whether every argument that looks like a type name was written as a quoted value of a call
/// (`query="string"`, `code_search('string')`): a real value the model chose, not a signature.
pub(super) fn written_as_values(args: &Map<String, Value>, raw: &str) -> bool {
    let compact: String = raw.chars().filter(|c| !c.is_whitespace()).collect();
    args.iter().all(|(key, value)| {
        let v = value.as_str().unwrap_or_default();
        ["=", "(", ","].iter().any(|before| {
            compact.contains(&format!("{before}\"{v}\""))
                && (*before != "=" || compact.contains(&format!("{key}=\"{v}\"")))
                || compact.contains(&format!("{before}'{v}'"))
        })
    })
}

/// Words in angle brackets, as the answer format writes its placeholders
/// (`<your complete answer to the user>`); a tag such as `<br>` has no space in it.
pub(super) fn is_placeholder(text: &str) -> bool {
    let text = text.trim();
    text.strip_prefix('<')
        .and_then(|t| t.strip_suffix('>'))
        .is_some_and(|inner| inner.contains(' ') && !inner.contains(['<', '>']))
}
