//! serde's data errors made fit to show: the value a message quotes (a key pasted into the
//! wrong field, say) is dropped, and the service's own type names are said as the contract says
//! them.

/// A serde data error's message without the value it quotes: `invalid type: string "…",
/// expected u32` becomes `invalid type: string, expected u32`, and `unknown variant \`…\`,
/// expected one of …` becomes `unknown variant, expected one of …`. What was expected comes
/// from the type, never from the input, and stays. A message of any other form (a custom one)
/// is replaced by `invalid value`, since there is no telling what it quotes.
pub fn serde_message(message: &str) -> String {
    let cut = [", expected ", ", there are no "]
        .iter()
        .filter_map(|tail| message.rfind(tail))
        .max();
    let (what, tail) = match cut {
        Some(i) => message.split_at(i),
        None => (message, ""),
    };
    let what = if let Some(v) = what.strip_prefix("invalid type: ") {
        format!("invalid type: {}", kind(v))
    } else if let Some(v) = what.strip_prefix("invalid value: ") {
        format!("invalid value: {}", kind(v))
    } else if what.starts_with("unknown variant ") {
        "unknown variant".into()
    } else if what.starts_with("unknown field ") {
        "unknown field".into()
    } else if ["invalid length ", "missing field `", "duplicate field `"]
        .iter()
        .any(|p| what.starts_with(p))
    {
        // A length, or a field name the type declares: nothing the client typed in.
        what.to_string()
    } else {
        return "invalid value".into();
    };
    // A number serde_json read as a float where an integer belongs: 1.5, but also 2^64 and
    // -0, which no integer type holds. Saying "floating point" of 18446744073709551616 misleads.
    let what = what.replace(
        "invalid type: floating point",
        "invalid value: a number that is not a whole number in range",
    );
    format!("{what}{}", objects_named_as_such(tail))
}

/// `, expected struct LlmConfigDto` (serde names the Rust type; a tagged enum's too) as the
/// contract says it: `, expected an object`.
fn objects_named_as_such(tail: &str) -> std::borrow::Cow<'_, str> {
    const NAMES: [&str; 2] = ["expected struct ", "expected internally tagged enum "];
    let Some((at, said)) = NAMES
        .iter()
        .find_map(|said| tail.find(said).map(|at| (at, *said)))
    else {
        return tail.into();
    };
    let after = &tail[at + said.len()..];
    let name_end = after
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(after.len());
    let rest = &after[name_end..];
    // `with 15 elements`: the length serde would read from an array, which is no object's.
    let rest = match rest.strip_prefix(" with ") {
        Some(more) => more
            .split_once(" element")
            .map_or(rest, |(_, r)| r.strip_prefix('s').unwrap_or(r)),
        None => rest,
    };
    format!("{}expected an object{rest}", &tail[..at]).into()
}

/// The kind of a value serde quotes (`string "…"`, `integer \`5\``, `null`), without the value.
fn kind(unexpected: &str) -> &'static str {
    const KINDS: [&str; 17] = [
        "string",
        "integer",
        "floating point",
        "boolean",
        "character",
        "null",
        "map",
        "sequence",
        "unit value",
        "byte array",
        "Option value",
        "unit variant",
        "newtype struct",
        "newtype variant",
        "tuple variant",
        "struct variant",
        "enum",
    ];
    let head = unexpected
        .split(['"', '`'])
        .next()
        .unwrap_or_default()
        .trim();
    KINDS
        .iter()
        .find(|k| **k == head)
        .copied()
        .unwrap_or("a value")
}

/// A JSON decoding error as text fit to show: data errors without the value they quote; syntax
/// errors name a position, never content.
pub fn json_error(err: &serde_json::Error) -> String {
    match err.classify() {
        serde_json::error::Category::Data => serde_message(&err.to_string()),
        _ => err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_messages_lose_their_values() {
        for (raw, clean) in [
            (
                "invalid type: string \"sk-proj-x\", expected u32",
                "invalid type: string, expected u32",
            ),
            (
                "unknown variant `sk-proj-x`, expected one of `openai`, `anthropic`, `ollama`",
                "unknown variant, expected one of `openai`, `anthropic`, `ollama`",
            ),
            (
                "invalid value: integer `-1`, expected u32",
                "invalid value: integer, expected u32",
            ),
            (
                "invalid type: string \"a, expected b\", expected u32",
                "invalid type: string, expected u32",
            ),
            (
                "invalid type: null, expected a string",
                "invalid type: null, expected a string",
            ),
            (
                "unknown field `sk-x`, there are no fields",
                "unknown field, there are no fields",
            ),
            ("missing field `modelName`", "missing field `modelName`"),
            (
                "invalid type: sequence, expected struct LlmConfigDto",
                "invalid type: sequence, expected an object",
            ),
            (
                "invalid length 2, expected struct InlineFile with 3 elements",
                "invalid length 2, expected an object",
            ),
            (
                "invalid type: sequence, expected internally tagged enum ThinkingBlock",
                "invalid type: sequence, expected an object",
            ),
            (
                "invalid type: floating point `18446744073709552000`, expected u32",
                "invalid value: a number that is not a whole number in range, expected u32",
            ),
            ("sk-proj-x is not a key", "invalid value"),
        ] {
            assert_eq!(serde_message(raw), clean, "{raw}");
        }
    }
}
